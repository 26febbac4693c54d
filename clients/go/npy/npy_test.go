package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

func roundTrip(t *testing.T, a *Array) *Array {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, a); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%64 != len(a.Data)%64 && a.DType != wire.BF16 {
		t.Fatalf("header not padded to 64: %d bytes", buf.Len()-len(a.Data))
	}
	b, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTripEveryDType(t *testing.T) {
	for _, d := range wire.DTypes {
		for _, shape := range [][]uint64{{}, {3}, {2, 0}, {2, 3}, {1, 1, 1, 1, 1, 1, 1, 2}} {
			n, _ := d.ByteLen(shape)
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i*7) & 0x3f // no NaN patterns, bools 0/1 after masking below
			}
			if d == wire.Bool {
				for i := range data {
					data[i] &= 1
				}
			}
			b := roundTrip(t, &Array{DType: d, Shape: shape, Data: data})
			if d == wire.BF16 {
				// Written as f32, exactly.
				if b.DType != wire.F32 || len(b.Data) != 2*len(data) {
					t.Fatalf("bf16: %s %d bytes", b.DType, len(b.Data))
				}
				for i := 0; i < len(data)/2; i++ {
					if binary.LittleEndian.Uint32(b.Data[4*i:]) != uint32(binary.LittleEndian.Uint16(data[2*i:]))<<16 {
						t.Fatal("bf16 widening")
					}
				}
				continue
			}
			if b.DType != d || fmt.Sprint(b.Shape) != fmt.Sprint(shape) || !bytes.Equal(b.Data, data) {
				t.Fatalf("%s %v: got %s %v", d, shape, b.DType, b.Shape)
			}
		}
	}
}

func file(descr string, fortran bool, shape string, data []byte) []byte {
	f := "False"
	if fortran {
		f = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, f, shape)
	var b bytes.Buffer
	b.WriteString(magic + "\x01\x00")
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(dict)+1))
	b.WriteString(dict + "\n")
	b.Write(data)
	return b.Bytes()
}

func TestBigEndianAndFortranAreConverted(t *testing.T) {
	be := make([]byte, 8)
	binary.BigEndian.PutUint32(be, math.Float32bits(1.5))
	binary.BigEndian.PutUint32(be[4:], math.Float32bits(-2))
	a, err := Read(bytes.NewReader(file(">f4", false, "(2,)", be)))
	if err != nil || math.Float32frombits(binary.LittleEndian.Uint32(a.Data)) != 1.5 || math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4:])) != -2 {
		t.Fatal(a, err)
	}
	// [[1 2 3] [4 5 6]] in column-major order is 1 4 2 5 3 6.
	a, err = Read(bytes.NewReader(file("|u1", true, "(2, 3)", []byte{1, 4, 2, 5, 3, 6})))
	if err != nil || !bytes.Equal(a.Data, []byte{1, 2, 3, 4, 5, 6}) {
		t.Fatal(a, err)
	}
	// 2x3x2 in column-major order.
	f := []byte{0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}
	a, err = Read(bytes.NewReader(file("|i1", true, "(2, 3, 2)", f)))
	if err != nil || !bytes.Equal(a.Data, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) {
		t.Fatal(a.Data, err)
	}
}

func TestBadFiles(t *testing.T) {
	good := file("<f4", false, "(2,)", make([]byte, 8))
	cases := map[string][]byte{
		"empty":           {},
		"no magic":        []byte("NUMPY\x01\x00"),
		"version 9":       append([]byte(magic+"\x09\x00"), good[8:]...),
		"short data":      good[:len(good)-1],
		"trailing":        append(append([]byte(nil), good...), 0),
		"complex":         file("<c8", false, "(1,)", make([]byte, 8)),
		"string":          file("<U3", false, "(1,)", make([]byte, 12)),
		"structured":      []byte(strings.Replace(string(file("<f4", false, "(1,)", make([]byte, 4))), "'<f4'", "[('a', '<f4')]", 1)),
		"not a tuple":     file("<f4", false, "[2]", make([]byte, 8)),
		"(2) not a tuple": file("<f4", false, "(2)", make([]byte, 8)),
		"rank 9":          file("|u1", false, "(1, 1, 1, 1, 1, 1, 1, 1, 1)", []byte{0}),
		"huge":            file("<f8", false, "(100000, 100000)", nil),
		"negative":        file("<f4", false, "(-1,)", nil),
		"unknown key":     []byte(strings.Replace(string(good), "'shape'", "'shapes'", 1)),
		"no fortran":      []byte(strings.Replace(string(good), "'fortran_order': False, ", "", 1)),
		"bad bool":        []byte(strings.Replace(string(good), "False", "false", 1)),
	}
	for name, b := range cases {
		if _, err := Read(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Read(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
}

// python returns an interpreter with numpy: $SLUICE_PYTHON, the worktree's
// .cache/venv*/bin/python, or python3. The test is skipped (saying so)
// when none has numpy.
func python(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("SLUICE_PYTHON")}
	venvs, _ := filepath.Glob("../../../.cache/venv*/bin/python")
	cands = append(cands, venvs...)
	cands = append(cands, "python3")
	for _, p := range cands {
		if p != "" && exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with numpy (set SLUICE_PYTHON): the numpy cross-check did not run")
	return ""
}

// Files numpy writes read back as the same arrays; files this package
// writes load in numpy as the same arrays.
func TestAgainstNumpy(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	script := `
import sys, numpy as np
d = sys.argv[1]
arrays = {
  'f4': np.arange(12, dtype='<f4').reshape(3, 4) / 8,
  'f8_scalar': np.array(2.5, dtype='<f8'),
  'f2': np.array([1, -2, 0.5, 65504], dtype='<f2'),
  'i8': np.array([[-(2**63), 0, 2**63 - 1]], dtype='<i8'),
  'u1': np.arange(5, dtype='u1'),
  'b1': np.array([True, False, True]),
  'i4_empty': np.zeros((2, 0), dtype='<i4'),
  'f4_fortran': np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)),
  'f4_big_endian': np.arange(4, dtype='>f4'),
  'u8': np.array([2**64 - 1], dtype='<u8'),
}
for k, a in arrays.items():
    c = a.astype(a.dtype.newbyteorder('<')).copy(order='C')
    np.save(f'{d}/{k}.npy', a)
    np.save(f'{d}/{k}.c.npy', c)
    c.tofile(f'{d}/{k}.raw')
    open(f'{d}/{k}.shape', 'w').write(','.join(map(str, a.shape)))
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.raw"))
	if len(names) != 10 {
		t.Fatalf("%d arrays", len(names))
	}
	for _, raw := range names {
		base := strings.TrimSuffix(raw, ".raw")
		want, _ := os.ReadFile(raw)
		shape, _ := os.ReadFile(base + ".shape")
		a, err := ReadFile(base + ".npy")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Data, want) || strings.Trim(strings.ReplaceAll(fmt.Sprint(a.Shape), " ", ","), "[]") != string(shape) {
			t.Fatalf("%s: %s %v, want shape %s", base, a.DType, a.Shape, shape)
		}
		// Written back by this package, numpy reads the same array, and
		// the C-order file numpy wrote is byte-identical to ours.
		out := base + ".go.npy"
		if err := WriteFile(out, a); err != nil {
			t.Fatal(err)
		}
		theirs, _ := os.ReadFile(base + ".c.npy")
		ours, _ := os.ReadFile(out)
		if !bytes.Equal(theirs, ours) {
			t.Errorf("%s: our file differs from numpy's:\n%q\n%q", base, ours[:min(len(ours), 128)], theirs[:min(len(theirs), 128)])
		}
	}
	check := `
import sys, glob, numpy as np
for f in glob.glob(sys.argv[1] + '/*.go.npy'):
    a, b = np.load(f), np.load(f.replace('.go.npy', '.npy'))
    assert a.dtype == b.dtype.newbyteorder('<') and a.shape == b.shape and (np.array_equal(a, b, equal_nan=True)), f
print('ok')
`
	if out, err := exec.Command(py, "-c", check, dir).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("numpy check: %v\n%s", err, out)
	}
}
