#!/usr/bin/env bash
# Objects against the JIT, per model: `kiln compile` time, object size, stripped size of the
# linked C example (examples/aot-c), and one-thread latency of the object (`--runtime static`
# and `--runtime none`) beside the JIT's (`kiln bench --threads 1`), in one run. Prints a
# Markdown table; the CPU model heads it.
#
#   scripts/aot-bench.sh [RUNS] [MODEL.onnx...]      (default: 50 runs, ../shared/models/*.onnx)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-50}
shift || true
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    models=("$repo"/../shared/models/*.onnx)
fi
cargo build --release --quiet -p kiln-cli -p kiln-runtime --manifest-path "$repo/Cargo.toml"
kiln=$repo/target/release/kiln
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KILN_RUNTIME_LIB=$repo/target/release/libkiln_runtime.a

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; one thread; $runs runs each"
echo
echo "| model | compile s (static / none) | object MB | linked, stripped MB (static / none) | JIT ms | static ms | none ms | static ÷ JIT |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for model in "${models[@]}"; do
    name=$(basename "$model" .onnx | tr -c 'A-Za-z0-9_\n' _)
    declare -A ms=() secs=() stripped=()
    for runtime in static none; do
        out=$work/$runtime
        mkdir -p "$out"
        line=$("$kiln" compile "$model" -o "$out" --name "$name" --runtime "$runtime" | sed -n 1p)
        secs[$runtime]=$(sed -n 's/.*compiled in \([0-9.]*\) s/\1/p' <<<"$line")
        make -s -C "$repo/examples/aot-c" MODEL="$name" DIR="$out" RUNTIME="$runtime"
        strip -o "$out/$name.stripped" "$out/$name"
        stripped[$runtime]=$(awk -v b="$(stat -c %s "$out/$name.stripped")" 'BEGIN { printf "%.1f", b / 1e6 }')
        ms[$runtime]=$("$out/$name" -n "$runs" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
    done
    object_mb=$(awk -v b="$(stat -c %s "$work/static/$name.o")" 'BEGIN { printf "%.1f", b / 1e6 }')
    jit=$("$kiln" bench "$model" --threads 1 --iters "$runs" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
    ratio=$(awk -v a="${ms[static]}" -v b="$jit" 'BEGIN { printf "%.3f", a / b }')
    echo "| $name | ${secs[static]} / ${secs[none]} | $object_mb | ${stripped[static]} / ${stripped[none]} | $jit | ${ms[static]} | ${ms[none]} | $ratio |"
    rm -rf "$work/static" "$work/none"
done
