#!/usr/bin/env bash
# Generate the official ONNX backend node test suite (onnx pinned in
# scripts/requirements-nodesuite.txt) into OUTDIR.
#
#   scripts/gen-node-suite.sh [OUTDIR]     default OUTDIR: <repo>/build/node-suite
#
# - Python venv at <repo>/build/venv (made with $PYTHON, default python3 >= 3.11),
#   pins installed only when an installed version differs from the pins file.
# - Does nothing (one line of output) when OUTDIR/stamp.txt matches the pinned
#   onnx version and this generator, and the case count matches what is on disk.
# Layout: see tests/node-suite/README.md. Works from any cwd.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
reqs=$script_dir/requirements-nodesuite.txt
gen=$script_dir/gen_node_suite.py
venv=$repo_root/build/venv
venv_py=$venv/bin/python
outdir=${1:-$repo_root/build/node-suite}
python=${PYTHON:-python3}

die() { echo "gen-node-suite: error: $*" >&2; exit 1; }
log() { echo "gen-node-suite: $*"; }

[[ $# -le 1 ]] || die "usage: $0 [OUTDIR]"
onnx_pin=$(sed -n 's/^onnx==\([^[:space:]#]*\).*/\1/p' "$reqs")
[[ -n $onnx_pin ]] || die "no onnx==VERSION pin in $reqs"
# Must match generator_id() in gen_node_suite.py.
gen_id=$(cat "$gen" "$reqs" | sha256sum | cut -d' ' -f1)

stamp_value() { sed -n "s/^$1=//p" "$outdir/stamp.txt"; }

suite_up_to_date() {
    [[ -f $outdir/stamp.txt && -f $outdir/cases.txt ]] || return 1
    local onnx cases gid listed present
    onnx=$(stamp_value onnx)
    cases=$(stamp_value cases)
    gid=$(stamp_value generator)
    [[ $onnx == "$onnx_pin" && $gid == "$gen_id" && $cases =~ ^[0-9]+$ ]] || return 1
    listed=$(wc -l <"$outdir/cases.txt")
    present=$(find "$outdir" -mindepth 2 -maxdepth 2 -name model.onnx | wc -l)
    [[ $listed -eq $cases && $present -eq $cases ]] || return 1
    up_to_date_cases=$cases
}

report_up_to_date() {
    echo "node suite up to date: $outdir ($up_to_date_cases cases, onnx $onnx_pin)"
}

if suite_up_to_date; then
    report_up_to_date
    exit 0
fi

# Serialize concurrent runs (venv + output dir), then look again.
mkdir -p "$repo_root/build"
exec 9>"$repo_root/build/.gen-node-suite.lock"
flock 9
if suite_up_to_date; then
    report_up_to_date
    exit 0
fi

# Prints one line per installed package whose version differs from its pin.
venv_mismatches() {
    "$venv_py" - "$reqs" <<'EOF'
import sys
import importlib.metadata as md
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have != want:
        print(f"{name}: pinned {want}, installed {have}")
EOF
}

t0=$SECONDS
if [[ -x $venv_py ]] && "$venv_py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    mismatches=$(venv_mismatches)
else
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$python is $("$python" --version 2>&1); need Python >= 3.11 (numpy pin)"
    log "creating venv $venv with $("$python" --version 2>&1)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    mismatches=missing
fi
if [[ -n $mismatches ]]; then
    log "installing pins from $reqs into $venv"
    "$venv_py" -m pip install --disable-pip-version-check --quiet -r "$reqs"
    mismatches=$(venv_mismatches)
    [[ -z $mismatches ]] || die "venv still differs from pins after pip install: $mismatches"
    log "venv ready in $((SECONDS - t0)) s"
fi

PYTHONHASHSEED=0 "$venv_py" "$gen" "$outdir"
suite_up_to_date || die "generated suite in $outdir fails its own stamp check"
