"""onnxruntime's time per node of a model, for side-by-side reading with `kiln bench --kernels`.

Runs the model on seeded random inputs (numpy seed 0; int64 inputs uniform in 0..8192, as
`model_reference.py` makes them) with onnxruntime's profiler on, and prints each node's median
kernel time over the runs, largest first, then the totals per operator type.

Usage (with the venv of scripts/model-reference.sh):
    build/venv-ort/bin/python scripts/ort_profile.py MODEL.onnx [--threads N] [--runs N] [--top N]

Node names are onnxruntime's after its own fusions (`node_Conv_816_token_117` is the QLinearConv
that replaced `node_Conv_816` and its QDQ pairs); kiln's kernels carry the ONNX names they
compute in `loc(...)`, which `kiln dump --stage schedule` prints.
"""
import argparse
import collections
import json
import os
import statistics
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    model = onnx.load(args.model, load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 8192, size=shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(size=shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
        for _ in range(args.runs):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    times = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[(e["name"][: -len("_kernel_time")], e["args"].get("op_name", "?"))].append(e["dur"])
    rows = sorted(((statistics.median(v) / 1000, name, op) for (name, op), v in times.items()), reverse=True)
    print(f"// onnxruntime {ort.__version__}, {args.threads} thread(s), median over {args.runs} runs: "
          f"{len(rows)} nodes, {sum(r[0] for r in rows):.3f} ms (sum of medians)")
    for ms, name, op in rows[: args.top]:
        print(f"{name:56s} {op:24s} {ms:8.3f}")
    per_op = collections.defaultdict(lambda: [0.0, 0])
    for ms, _, op in rows:
        per_op[op][0] += ms
        per_op[op][1] += 1
    print("// per operator type")
    for op, (ms, n) in sorted(per_op.items(), key=lambda kv: -kv[1][0]):
        print(f"{op:24s} {ms:8.3f} ms  x{n}")


if __name__ == "__main__":
    main()
