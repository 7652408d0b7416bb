#!/usr/bin/env bash
# The serving load test: `kiln serve` (release) on loopback, 8 clients x 2000 requests each
# (scripts/serve_load.py) for bert_mini (shared), and for a BERT of bert_mini's sizes whose
# batch dim is symbolic (scripts/make_encoder.py) without and with dynamic batching.
#   scripts/serve-load.sh [CLIENTS] [REQUESTS]
set -euo pipefail
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$(dirname "$script_dir")"
clients=${1:-8}
requests=${2:-2000}
models=${KILN_SHARED_MODELS:-../shared/models}
python=$(bash scripts/serve-venv.sh)
cargo build --release -p kiln-cli 2>/dev/null
mkdir -p build/serve
[[ -f build/serve/encoder.onnx ]] || "$python" scripts/make_encoder.py build/serve/encoder.onnx
lscpu | sed -n 's/^Model name: *//p'

run() { # LABEL NAME PATH [serve flags...]
    local label=$1 name=$2 path=$3
    shift 3
    target/release/kiln serve --model "$name=$path" --address 127.0.0.1:0 "$@" >build/serve/out.txt 2>build/serve/err.txt &
    local pid=$!
    for _ in $(seq 100); do grep -q listening build/serve/out.txt 2>/dev/null && break; sleep 0.1; done
    local url
    url=$(sed -n 's|.*http://||p' build/serve/out.txt)
    for _ in $(seq 300); do curl -sf "http://$url/v2/health/ready" >/dev/null && break; sleep 0.1; done
    echo -n "$label: "
    "$python" scripts/serve_load.py --url "$url" --model "$name=$path" --pid "$pid" --clients "$clients" --requests "$requests" || true
    kill -TERM "$pid"
    wait "$pid" || true
}

run "bert_mini" bert_mini "$models/bert_mini.onnx"
run "encoder, no batching" encoder build/serve/encoder.onnx --input-shape ids=1x128
run "encoder, batching 2 ms / 8" encoder build/serve/encoder.onnx --input-shape ids=1x128 --batch-window-ms 2 --max-batch 8 --batch encoder
run "mlp" mlp "$models/mlp.onnx"
