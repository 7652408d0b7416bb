#!/usr/bin/env bash
# Builds the Python bindings (python/) into a venv and runs their tests, which compare kiln
# with onnxruntime on the shared models.
#
#   scripts/python-test.sh [PYTEST_ARGS...]
#
# - venv at <repo>/build/venv-py (made with $PYTHON, default python3 >= 3.11), pins below
#   installed with pip (a no-op once they are there).
# - `pip install ./python` with the pinned maturin (no build isolation, so nothing unpinned is
#   fetched). The release build goes to $CARGO_TARGET_DIR, default <repo>/target, where
#   `cargo run --release -p kiln-cli` leaves kiln's dependencies (cranelift, egg) built.
# - Shared models: $KILN_SHARED_MODELS, default <repo>/../shared/models.
# Works from any cwd; only crates.io and PyPI need to be reachable.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
venv=$repo_root/build/venv-py
python=${PYTHON:-python3}
pins=(maturin==1.16.0 pytest==9.2.0 numpy==2.4.6 onnxruntime==1.31.1 onnx==1.23.2)

log() { echo "python-test: $*"; }

mkdir -p "$repo_root/build"
# One build and one venv at a time.
exec 9>"$repo_root/build/.python-test.lock"
flock 9

if ! [[ -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || { echo "python-test: $python is $("$python" --version 2>&1); need Python >= 3.11" >&2; exit 1; }
    log "creating $venv with $("$python" --version 2>&1)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"

t0=$SECONDS
log "building and installing ./python"
# maturin's build hooks run the `maturin` binary from PATH.
export PATH=$venv/bin:$PATH
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo_root/target} \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --no-deps --force-reinstall "$repo_root/python"
log "installed in $((SECONDS - t0)) s"

# From the repository root: with python/ as the working directory, `import kiln` would find
# the sources (python/kiln) before the installed package.
cd "$repo_root"
exec "$venv/bin/pytest" python/tests "$@"
