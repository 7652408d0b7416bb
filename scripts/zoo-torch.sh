#!/usr/bin/env bash
# Exporter zoo: torchvision and Hugging Face models (random weights) exported by PyTorch's two ONNX
# exporters (TorchScript: dynamo=False; torch.export: dynamo=True), with onnxruntime (pinned below)
# reference outputs, written to OUTDIR (default <repo>/build/zoo-torch), in the layout of
# scripts/zoo.sh. Cases and layout: see the docstring of zoo_torch.py.
# A case that fails to export or to check is listed in OUTDIR/failed.txt and left out; the others
# are kept (delete OUTDIR to try again). Fails only when no case is produced.
# Idempotent: does nothing when OUTDIR's stamp matches this script (and so the pins) and its
# Python half.
# The venv (<repo>/build/venv-torch, ~6 GB) gets PyPI's torch, the CUDA build: it does not
# import without the nvidia-* wheels (~2.2 GB download) even though only the CPU is used. It is
# deleted once the zoo is written, unless KILN_KEEP_VENV=1 (for work on zoo_torch.py).
#
#   scripts/zoo-torch.sh [OUTDIR]
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
outdir=${1:-$repo_root/build/zoo-torch}
venv=$repo_root/build/venv-torch
# The exporters and what decides their output (onnxscript's optimizer and IR, sympy's names of
# symbolic dims), the model code, onnxruntime for the references. torch pins its nvidia-* wheels.
pins="torch==2.15.0 torchvision==0.29.2 transformers==5.24.0 onnxscript==0.7.2 onnx-ir==1.1.0
      onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 ml-dtypes==0.6.0 protobuf==7.36.2
      sympy==1.14.0 mpmath==1.3.0 safetensors==0.8.0 tokenizers==0.23.3 huggingface-hub==2.4.0"
stamp=$(cat "$script_dir/zoo_torch.py" "$script_dir/zoo-torch.sh" | sha256sum | cut -d' ' -f1)

if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    echo "torch model zoo up to date: $outdir"
    exit 0
fi
mkdir -p "$repo_root/build"
exec 9>"$repo_root/build/.zoo-torch.lock"
flock 9
if [[ -f $outdir/stamp.txt && $(cat "$outdir/stamp.txt") == "$stamp" ]]; then
    echo "torch model zoo up to date: $outdir"
    exit 0
fi
if [[ ! -x $venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir $pins
rm -rf "$outdir.tmp"
"$venv/bin/python" "$script_dir/zoo_torch.py" "$outdir.tmp"
echo "$stamp" >"$outdir.tmp/stamp.txt"
rm -rf "$outdir"
mv "$outdir.tmp" "$outdir"
if [[ ${KILN_KEEP_VENV:-0} != 1 ]]; then
    rm -rf "$venv"
fi
