#!/usr/bin/env bash
# The Python environment of the serving tests (build/venv-serve): Triton's HTTP client, an
# independent Open Inference Protocol client, and onnxruntime for reference outputs. Pinned;
# idempotent (a stamp records the pins). Prints the venv's python.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
venv=$repo_root/build/venv-serve
pins="tritonclient[http]==2.73.0 onnxruntime==1.31.1 onnx==1.23.2 numpy==2.4.6"

mkdir -p "$repo_root/build"
exec 9>"$repo_root/build/.venv-serve.lock"
flock 9
if [[ ! -f $venv/stamp.txt || $(cat "$venv/stamp.txt") != "$pins" ]]; then
    [[ -x $venv/bin/python ]] || "${PYTHON:-python3}" -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
    echo "$pins" >"$venv/stamp.txt"
fi
echo "$venv/bin/python"
