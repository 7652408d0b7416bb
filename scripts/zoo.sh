#!/usr/bin/env bash
# Model zoo: small hand-built ONNX models (real-model conventions, data-dependent shapes and
# runtime parameters, onnxruntime com.microsoft contrib ops, onnxruntime quantization-tool output)
# with onnxruntime (pinned below) reference outputs, written to OUTDIR (default <repo>/build/zoo).
# Layout: see the docstring of zoo.py.
# Idempotent: does nothing when OUTDIR's stamp matches this script, its Python half and the pins.
#
#   scripts/zoo.sh [OUTDIR]
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
outdir=${1:-$repo_root/build/zoo}
venv=$repo_root/build/venv-ort
pins="onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6"
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
rm -rf "$outdir.tmp"
"$venv/bin/python" "$script_dir/zoo.py" "$outdir.tmp"
echo "$stamp" >"$outdir.tmp/stamp.txt"
rm -rf "$outdir"
mv "$outdir.tmp" "$outdir"
