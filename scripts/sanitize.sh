#!/usr/bin/env bash
# Memory-safety checks of the runtime and of generated code:
#  1. the runtime's tests (every micro-kernel against its reference, on every instruction set
#     this CPU has) under AddressSanitizer (nightly -Zsanitizer=address);
#  2. the ONNX node suite (every case, about 2 minutes; or the cases whose names contain one of
#     the FILTERs) compiled and run by `kiln conformance` under valgrind memcheck, which also
#     watches the JIT-compiled code (ASan cannot: Cranelift does not instrument it).
# Prints each tool's summary and fails on any error it reports.
#
#   scripts/sanitize.sh [FILTER...]
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$(dirname "$script_dir")"
filters=("$@")
[[ ${#filters[@]} -gt 0 ]] || filters=(test_)

if ! command -v valgrind >/dev/null; then
    if command -v apt-get >/dev/null; then
        { apt-get update -qq && apt-get install -y -qq valgrind; } >/dev/null
    else
        echo "sanitize.sh: valgrind is not installed" >&2
        exit 1
    fi
fi

echo "== AddressSanitizer: cargo test -p kiln-runtime"
host=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address" ASAN_OPTIONS="detect_leaks=1" \
    cargo +nightly test -p kiln-runtime --lib --tests --no-fail-fast --target "$host" --target-dir build/asan-target 2>&1 |
    grep -E "^test result|ERROR: AddressSanitizer|SUMMARY" | sort | uniq -c

echo "== valgrind memcheck: kiln conformance on the node suite"
cargo build --release -p kiln-cli 2>/dev/null
[[ -d build/node-suite ]] || bash scripts/gen-node-suite.sh
status=0
for f in "${filters[@]}"; do
    log=build/valgrind-$f.log
    # One intra-op thread: the pool's workers would only multiply valgrind's time.
    rc=0
    KILN_THREADS=1 valgrind --tool=memcheck --error-exitcode=99 --smc-check=all --errors-for-leak-kinds=none \
        --log-file="$log" target/release/kiln conformance build/node-suite --filter "$f" --report "build/valgrind-$f.tsv" >/dev/null 2>&1 || rc=$?
    # Exit 99 is memcheck's; 1 is a conformance failure (cases that fail without valgrind too).
    [[ $rc -eq 99 ]] && status=1
    cases=$(($(wc -l <"build/valgrind-$f.tsv") - 1))
    echo "$f: $cases cases, $(grep -E 'ERROR SUMMARY' "$log" | sed 's/^==[0-9]*== //')"
done
exit $status
