"""Every dtype of the wire table round-trips through the appliance's echo
model: arrays, scalars (rank 0), empty shapes; inputs read in place, outputs
viewed in place (and what is copied when that cannot be, counted)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY

# Wire name -> numpy dtype. bf16 comes from ml_dtypes (installed in the
# test environment; the case without it is tested below).
NUMPY = {
    "f32": np.float32,
    "u8": np.uint8,
    "i8": np.int8,
    "u16": np.uint16,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
    "f16": np.float16,
    "f64": np.float64,
    "u32": np.uint32,
    "u64": np.uint64,
    "bf16": ml_dtypes.bfloat16,
}


def test_the_table_covers_the_wire() -> None:
    assert sorted(NUMPY) == sorted(sluice.DTYPES)


def sample(name: str, shape: tuple, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(NUMPY[name])
    n = int(np.prod(shape)) if shape else 1
    if name == "bool":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    else:
        a = (rng.standard_normal(n) * 100).astype(dt)
    return a.reshape(shape)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", sorted(NUMPY))
@pytest.mark.parametrize("shape", [(5,), (2, 3), (1, 2, 1, 3), (), (0,), (3, 0, 2)])
def test_round_trip(client: sluice.Client, name: str, shape: tuple) -> None:
    x = sample(name, shape)
    before = client.stats()
    out = client.infer("echo", "1", {"t": x})
    assert list(out) == ["t"]
    y = out["t"]
    assert same(x, y), (x, y)
    after = client.stats()
    assert after["inputs_copied"] == before["inputs_copied"], "contiguous input read in place"
    assert after["outputs_viewed"] == before["outputs_viewed"] + 1
    assert after["outputs_copied"] == before["outputs_copied"]


def test_every_dtype_in_one_request(client: sluice.Client) -> None:
    xs = {f"in_{n}": sample(n, (2, 2), seed=i) for i, n in enumerate(sorted(NUMPY))}
    out = client.infer("echo", "1", xs)
    assert list(out) == list(xs), "outputs in wire order"
    for k, x in xs.items():
        assert same(x, out[k]), k


def test_numpy_scalars_are_rank_0(client: sluice.Client) -> None:
    for name, t in NUMPY.items():
        s = t(1) if name != "bool" else np.bool_(True)
        y = client.infer("echo", "1", {"s": s})["s"]
        assert y.shape == () and y.dtype == np.dtype(t) and y == s, name


def test_rank_8_is_the_limit(client: sluice.Client) -> None:
    x = np.arange(2**8, dtype=np.int32).reshape((2,) * 8)
    assert same(client.infer("echo", "1", {"x": x})["x"], x)
    with pytest.raises(sluice.InvalidRequestError) as e:
        client.infer("echo", "1", {"x": x.reshape((2,) * 7 + (1, 2))})
    assert e.value.wire_error == "BadRank"


def test_outputs_are_writable_views_that_outlive_the_client(appliance) -> None:
    c = sluice.Client(appliance.data, tenant=1, key=DEMO_KEY)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = c.infer("echo", "1", {"a": x, "b": x + 1})
    a, b = out["a"], out["b"]
    # Both view one frame: the answer's buffer, held by numpy as the base.
    assert type(a.base).__name__ == "OutputArray" and type(b.base).__name__ == "OutputArray"
    assert a.flags.writeable and a.flags.aligned and a.flags.c_contiguous
    c.close()
    del out, c
    gc.collect()
    a += 1  # the frame is still alive and writable
    np.testing.assert_array_equal(a, x + 1)
    np.testing.assert_array_equal(b, x + 1)


def test_non_contiguous_and_swapped_inputs_are_copied_once_and_counted(client: sluice.Client) -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = base[:, ::2]
    swapped = base.astype(">f4")
    fortran = np.asfortranarray(base)
    before = client.stats()
    out = client.infer("echo", "1", {"s": strided, "w": swapped, "f": fortran})
    after = client.stats()
    np.testing.assert_array_equal(out["s"], strided)
    np.testing.assert_array_equal(out["w"], base)
    assert out["w"].dtype == np.float32, "sent in wire (little-endian) order"
    np.testing.assert_array_equal(out["f"], base)
    assert after["inputs_copied"] - before["inputs_copied"] == 3
    assert after["input_bytes_copied"] - before["input_bytes_copied"] == strided.nbytes + 2 * base.nbytes


def test_lists_and_python_numbers_are_converted_and_counted(client: sluice.Client) -> None:
    before = client.stats()["inputs_copied"]
    out = client.infer("echo", "1", {"l": [[1, 2], [3, 4]], "f": 2.5})
    np.testing.assert_array_equal(out["l"], np.array([[1, 2], [3, 4]]))
    assert out["f"].dtype == np.float64 and out["f"] == 2.5
    assert client.stats()["inputs_copied"] - before == 2


def test_raw_sends_bytes_under_a_named_dtype(client: sluice.Client) -> None:
    bits = np.array([0x3F80, 0x4000, 0xC040], np.uint16)  # 1.0, 2.0, -3.0 in bf16
    y = client.infer("echo", "1", {"b": sluice.Raw(bits, "bf16")})["b"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), [1.0, 2.0, -3.0])
    with pytest.raises(sluice.InvalidRequestError, match="2-byte elements"):
        client.infer("echo", "1", {"b": sluice.Raw(bits.astype(np.uint32), "bf16")})


@pytest.mark.parametrize(
    "bad",
    [np.zeros(2, np.complex64), np.array(["a", "b"]), np.array([object()]), np.zeros(2, "datetime64[s]"),
     np.zeros(2, ml_dtypes.float8_e4m3fn)],
    ids=["complex64", "str", "object", "datetime64", "float8"],
)
def test_dtypes_outside_the_table_are_refused(client: sluice.Client, bad: np.ndarray) -> None:
    with pytest.raises(sluice.InvalidRequestError, match="not in the wire table"):
        client.infer("echo", "1", {"x": bad})


def test_bf16_without_ml_dtypes(appliance) -> None:
    """Without ml_dtypes a bf16 output arrives as float32: one copy, counted."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["ml_dtypes"] = None  # as if not installed
        import numpy as np, sluice
        c = sluice.Client({appliance.data!r}, tenant=1, key={DEMO_KEY!r})
        bits = np.array([0x3F80, 0xBF00, 0x0000], np.uint16)  # 1.0, -0.5, 0.0
        y = c.infer("echo", "1", {{"b": sluice.Raw(bits, "bf16")}})["b"]
        assert y.dtype == np.float32, y.dtype
        assert y.tolist() == [1.0, -0.5, 0.0], y
        s = c.stats()
        assert s["outputs_copied"] == 1 and s["output_bytes_copied"] == 12, s
        try:
            c.infer("echo", "1", {{"v": np.zeros(2, "V2")}})
        except sluice.InvalidRequestError as e:
            assert "not in the wire table" in str(e)
        else:
            raise AssertionError("a void dtype was sent")
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
