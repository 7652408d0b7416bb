#!/usr/bin/env bash
# kiln against onnxruntime and tract on the same models, inputs and thread count, in one run.
#
#   scripts/bench.sh [--threads N] [--iters N] [--rounds N] [--warmup N] [--turn-warmup N] [--seed N]
#                    [--engines kiln,onnxruntime,tract] [--no-gemm] [--base REV]
#                    [--input-shape NAME=D,D,..]... [--bind SYM=N]... [--int-max INPUT=N]...
#                    [MODEL.onnx...]
#
# --base REV also builds kiln-bench at git revision REV (in a worktree under build/, sharing
# target/) and runs its kiln as the engine `kiln-base`: before and after in one run.
#
# Default models: every .onnx file in ../shared/models (or $KILN_SHARED_MODELS). Installs onnxruntime 1.31.1 into build/venv-ort if missing (the same
# venv and pins as scripts/model-reference.sh), builds kiln-bench in release mode, and runs it
# with ORT_DYLIB_PATH pointing at the wheel's libonnxruntime.so. Prints the exact command line.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
models_dir=${KILN_SHARED_MODELS:-$repo_root/../shared/models}
if [[ -d $models_dir ]]; then
    models_dir=$(cd "$models_dir" && pwd)
fi
venv=$repo_root/build/venv-ort
pins="onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6"

find_dylib() {
    compgen -G "$venv/lib/python*/site-packages/onnxruntime/capi/libonnxruntime.so.*" | head -n 1 || true
}

if [[ -z ${ORT_DYLIB_PATH:-} ]]; then
    dylib=$(find_dylib)
    if [[ -z $dylib || ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import onnxruntime, sys; sys.exit(onnxruntime.__version__ != "1.31.1")' 2>/dev/null; then
        echo "installing onnxruntime into $venv" >&2
        mkdir -p "$repo_root/build"
        # The same lock as scripts/model-reference.sh: both install into this venv.
        exec 9>"$repo_root/build/.model-reference.lock"
        flock 9
        if [[ ! -x $venv/bin/python ]]; then
            "${PYTHON:-python3}" -m venv "$venv"
        fi
        # shellcheck disable=SC2086
        "$venv/bin/pip" install --quiet --disable-pip-version-check $pins
        flock -u 9
        dylib=$(find_dylib)
    fi
    if [[ -z $dylib ]]; then
        echo "bench.sh: no libonnxruntime.so.* under $venv" >&2
        exit 1
    fi
    export ORT_DYLIB_PATH=$dylib
fi

args=()
base=""
while (($#)); do
    if [[ $1 == --base ]]; then
        base=${2:?--base needs a revision}
        shift 2
    else
        args+=("$1")
        shift
    fi
done

if [[ -n $base ]]; then
    base_src=$repo_root/build/base-src
    base_bin=$repo_root/build/kiln-bench-base
    git -C "$repo_root" worktree remove --force "$base_src" 2>/dev/null || rm -rf "$base_src"
    git -C "$repo_root" worktree add --detach --quiet "$base_src" "$base"
    (cd "$base_src" && CARGO_TARGET_DIR="$repo_root/target" cargo build --release --quiet --manifest-path benches/Cargo.toml)
    cp "$repo_root/target/release/kiln-bench" "$base_bin"
    git -C "$repo_root" worktree remove --force "$base_src"
    args=(--base-bin "$base_bin" "${args[@]}")
fi

(cd "$repo_root" && CARGO_TARGET_DIR="$repo_root/target" cargo build --release --quiet --manifest-path benches/Cargo.toml)

cmd=("$repo_root/target/release/kiln-bench" "${args[@]}")
echo "\$ ORT_DYLIB_PATH=$ORT_DYLIB_PATH ${cmd[*]}"
exec "${cmd[@]}"
