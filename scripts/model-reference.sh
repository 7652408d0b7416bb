#!/usr/bin/env bash
# Reference outputs of the shared benchmark models from onnxruntime (pinned below), written to
# OUTDIR (default <repo>/build/model-reference). Idempotent: does nothing when OUTDIR's stamp
# matches this script, its Python half and the pins.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
outdir=${1:-$repo_root/build/model-reference}
models=${KILN_SHARED_MODELS:-$repo_root/../shared/models}
venv=$repo_root/build/venv-ort
pins="onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6"
stamp=$(cat "$script_dir/model_reference.py" "$0" | sha256sum | cut -d' ' -f1)

if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    echo "model reference up to date: $outdir"
    exit 0
fi
mkdir -p "$repo_root/build"
exec 9>"$repo_root/build/.model-reference.lock"
flock 9
if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    exit 0
fi
if [[ ! -x $venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check $pins
rm -rf "$outdir.tmp"
"$venv/bin/python" "$script_dir/model_reference.py" "$models" "$outdir.tmp"
echo "$stamp" >"$outdir.tmp/stamp.txt"
rm -rf "$outdir"
mv "$outdir.tmp" "$outdir"
