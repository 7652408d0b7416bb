#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer, AddressSanitizer; the nightly toolchain): targets
# `import` (any bytes as an ONNX model), `text` (the two IR text parsers) and `compile`
# (small generated graphs, compiled code against the reference evaluator).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#
# Each target starts from fuzz/corpus/<target> (committed, minimized) plus seeds made here from
# the node suite (build/node-suite) and the IR file tests, and writes new inputs to
# build/fuzz/corpus/<target>. A crash leaves its input in fuzz/artifacts/<target>/ and fails the
# script; reproduce with `cargo +nightly fuzz run <target> <file>`. Longer runs: pass more
# seconds, and `cargo +nightly fuzz cmin <target> build/fuzz/corpus/<target>` before
# committing what they found to fuzz/corpus.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$script_dir")
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(import text compile)

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.1
fi
cd "$repo_root"
work=build/fuzz/corpus
mkdir -p "$work"

# Seeds: small node-suite models for `import`; tensor-IR (prefix byte 0) and loop-IR (1) file
# tests for `text`.
if [[ -d build/node-suite && ! -d $work/import ]]; then
    mkdir -p "$work/import"
    find build/node-suite -name model.onnx -size -4k | while read -r m; do
        cp "$m" "$work/import/$(basename "$(dirname "$m")").onnx"
    done
fi
if [[ ! -d $work/text ]]; then
    mkdir -p "$work/text"
    find tests crates -name '*.tir' | while read -r f; do
        { printf '\0'; cat "$f"; } >"$work/text/tir-$(basename "$f")"
    done
    find tests crates -name '*.loops' | while read -r f; do
        { printf '\1'; cat "$f"; } >"$work/text/loops-$(basename "$f")"
    done
fi

for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "fuzz/corpus/$t"
    echo "fuzz $t for ${seconds}s"
    # -rss_limit_mb: compiling a generated graph maps code; the default 2 GB is ample.
    # -a: debug assertions and overflow checks, so a wrapping size computation is a crash.
    cargo +nightly fuzz run --release -a "$t" "$work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -max_len=65536 -timeout=30 -print_final_stats=1 2>&1 |
        grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)|ERROR|panicked|SUMMARY" || true
    if compgen -G "fuzz/artifacts/$t/*" >/dev/null; then
        echo "fuzz $t: crash inputs in fuzz/artifacts/$t" >&2
        exit 1
    fi
done
