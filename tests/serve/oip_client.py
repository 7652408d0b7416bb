"""An independent Open Inference Protocol V2 client (Triton's `tritonclient[http]`) against a
running `kiln serve`: metadata, inference with binary and with JSON tensors compared with
onnxruntime, errors that name the field, dynamic batching, and a graceful stop.

Usage:
  python oip_client.py make-batch-model OUT.onnx
  python oip_client.py check-example --url HOST:PORT --model NAME=PATH   (examples/service)
  python oip_client.py check --url HOST:PORT --model NAME=PATH... [--batch-model NAME=PATH]
                             [--max-body-bytes N] [--stop-pid PID --stop-model NAME]
Exit status 0 when every check passes; each failure is printed.
"""
import argparse
import http.client
import json
import os
import signal
import sys
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def make_batch_model(path):
    """[batch, 16] float -> relu(x @ W + b) [batch, 8] and a row sum [batch]: a model whose
    leading dim is symbolic, for dynamic batching."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["s"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "batched", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch"])], [w, b, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def inputs_for(path, rng, batch=1):
    """Seeded inputs for a model: floats from a normal distribution, token ids in 0..8192."""
    model = onnx.load(path, load_external_data=False)
    feeds = {}
    for inp in model.graph.input:
        t = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 8192, size=shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(size=shape).astype(np.float32)
    return feeds


def close(name, got, want, quantized):
    """Agreement with onnxruntime: rtol 1e-3 and atol 1e-4 of the output's scale, as the
    models test holds; a quantizing model may move one int8 step (5% of scale) where a sum
    in another order lands next to a rounding boundary."""
    scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bound = (0.05 * scale) if quantized else (1e-4 * scale + 1e-3 * np.abs(want))
    ok = got.shape == want.shape and bool(np.all(err <= bound))
    check(ok, f"{name}: shape {got.shape} vs {want.shape}, largest |difference| {err.max() if err.size else 0:.3g} (scale {scale:.3g})")
    return err.max() / scale if err.size else 0.0


def infer(client, name, feeds, binary, outputs=None):
    ins = []
    for k, v in feeds.items():
        i = triton.InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
        i.set_data_from_numpy(v, binary_data=binary)
        ins.append(i)
    outs = [triton.InferRequestedOutput(o, binary_data=binary) for o in outputs] if outputs else None
    return client.infer(name, ins, outputs=outs)


def check_model(client, name, path):
    meta = client.get_model_metadata(name)
    model = onnx.load(path, load_external_data=False)
    check([i["name"] for i in meta["inputs"]] == [i.name for i in model.graph.input], f"{name}: metadata inputs {meta['inputs']}")
    check([o["name"] for o in meta["outputs"]] == [o.name for o in model.graph.output], f"{name}: metadata outputs {meta['outputs']}")
    check(client.is_model_ready(name), f"{name}: not ready")
    feeds = inputs_for(path, np.random.default_rng(0))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    names = [o["name"] for o in meta["outputs"]]
    quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    worst = 0.0
    for binary in (True, False):
        result = infer(client, name, feeds, binary, names)
        for o, w in zip(names, want):
            worst = max(worst, close(f"{name} {o} ({'binary' if binary else 'JSON'})", result.as_numpy(o), w, quantized))
    print(f"{name}: matches onnxruntime (binary and JSON), largest |difference| / scale {worst:.2e}", flush=True)


def expect_error(what, status, words, call):
    try:
        call()
    except InferenceServerException as e:
        msg = e.message()
        check(str(status) in str(e.status()) and all(w in msg for w in words), f"{what}: got {e.status()} {msg!r}, wanted {status} naming {words}")
        print(f"{what}: {e.status()} {msg}", flush=True)
        return
    check(False, f"{what}: no error")


def raw_post(url, path, body, headers=None):
    conn = http.client.HTTPConnection(url, timeout=60)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered before reading the whole body (413): read the answer
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def check_errors(client, url, name, path, max_body):
    feeds = inputs_for(path, np.random.default_rng(1))
    (k, v), = list(feeds.items())[:1]
    expect_error("unknown model", 404, ["no model \"nope\""], lambda: infer(client, "nope", feeds, True))
    expect_error("unknown input", 400, ["\"bogus\"", "no such input"], lambda: infer(client, name, {"bogus": v}, True))
    expect_error("missing input", 400, [f"input \"{k}\" is missing"], lambda: infer(client, name, {}, True))
    expect_error("wrong datatype", 400, [k], lambda: infer(client, name, {k: v.astype(np.float64)}, True))
    expect_error("wrong shape", 400, [k, "dim"], lambda: infer(client, name, {k: np.concatenate([v, v])}, True))
    expect_error("unknown output", 400, ["\"ghost\"", "no such output"], lambda: infer(client, name, feeds, True, ["ghost"]))
    status, body = raw_post(url, f"/v2/models/{name}/infer", b"{\"inputs\": [{\"name\": \"x\", \"shape\": [1]}]}")
    msg = json.loads(body).get("error", "")
    check(status == 400 and "datatype" in msg, f"missing field: {status} {msg!r}")
    print(f"missing field: {status} {msg}")
    status, body = raw_post(url, f"/v2/models/{name}/infer", b"x" * (max_body + 1))
    check(status == 413 and "limit" in json.loads(body).get("error", ""), f"body over the limit: {status} {body[:200]!r}")
    print(f"body over the limit: {status} {json.loads(body)['error']}")


def check_batching(client, url, name, path):
    """Concurrent batch-1 requests to a batchable model: each answer is its own rows."""
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    # Requests of 1 to 3 rows, and two of none (nothing to pad a batch with).
    xs = [rng.standard_normal((0 if i in (5, 23) else 1 + i % 3, 16)).astype(np.float32) for i in range(24)]
    results = [None] * len(xs)

    def one(i):
        c = triton.InferenceServerClient(url)
        results[i] = infer(c, name, {"x": xs[i]}, i % 2 == 0, ["y", "s"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        want = sess.run(None, {"x": x})
        close(f"batched request {i} y", results[i].as_numpy("y"), want[0], False)
        close(f"batched request {i} s", results[i].as_numpy("s"), want[1], False)
    conn = http.client.HTTPConnection(url)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    batches = [l for l in metrics.splitlines() if l.startswith(f'kiln_batches_total{{model="{name}"}}')]
    n = int(batches[0].split()[-1]) if batches else 0
    check(n > 0, f"no batched run for {name}: {batches}")
    print(f"batching: {len(xs)} concurrent requests answered with their own rows, {n} batched runs", flush=True)


def runs_in_progress(url):
    conn = http.client.HTTPConnection(url, timeout=60)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    conn.close()
    line = next(l for l in metrics.splitlines() if l.startswith("kiln_runs_in_progress "))
    return int(line.split()[-1])


def check_stop(url, pid, name, path):
    """SIGTERM while a request runs: the request still gets its answer, then the server stops.
    SIGTERM goes only once /metrics shows the run in progress (a loaded machine may take long
    to send the request); a request answered before that was seen is sent again."""
    feeds = inputs_for(path, np.random.default_rng(2))
    for _ in range(50):
        answer = {}

        def one():
            try:
                answer["r"] = infer(triton.InferenceServerClient(url, network_timeout=120), name, feeds, True)
            except Exception as e:  # noqa: BLE001 - reported below
                answer["e"] = e

        t = threading.Thread(target=one)
        t.start()
        while t.is_alive() and runs_in_progress(url) == 0:
            pass
        if t.is_alive():
            os.kill(pid, signal.SIGTERM)
            t.join()
            check("r" in answer, f"the request in flight at SIGTERM failed: {answer.get('e')!r}")
            print("stop: the request in flight at SIGTERM was answered", flush=True)
            return
        t.join()
        check("r" in answer, f"{name}: a request before the stop failed: {answer.get('e')!r}")
    check(False, "stop: no run was seen in progress in 50 requests")


def check_example(url, name, path):
    """examples/service's /predict, by plain JSON over http.client."""
    feeds = inputs_for(path, np.random.default_rng(0))
    body = json.dumps({"inputs": {k: {"shape": list(v.shape), "data": v.ravel().tolist()} for k, v in feeds.items()}})
    status, data = raw_post(url, "/predict", body.encode(), {"Content-Type": "application/json"})
    check(status == 200, f"{name}: /predict answered {status} {data[:300]!r}")
    if status != 200:
        return
    got = json.loads(data)["outputs"]
    model = onnx.load(path, load_external_data=False)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    worst = 0.0
    for o, w in zip(model.graph.output, want):
        g = np.array(got[o.name]["data"], dtype=np.float64).reshape(got[o.name]["shape"])
        worst = max(worst, close(f"{name} {o.name} (example service)", g.astype(w.dtype), w, quantized))
    print(f"{name}: the example service matches onnxruntime, largest |difference| / scale {worst:.2e}", flush=True)
    status, data = raw_post(url, "/predict", b'{"inputs": {}}', {"Content-Type": "application/json"})
    msg = json.loads(data).get("error", "")
    check(status == 400 and "is missing" in msg, f"{name}: a request without inputs: {status} {msg!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("args", nargs="*")
    p.add_argument("--url")
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--batch-model")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20)
    p.add_argument("--stop-pid", type=int)
    p.add_argument("--stop-model")
    a = p.parse_args()
    if a.cmd == "make-batch-model":
        make_batch_model(a.args[0])
        return 0
    if a.cmd == "check-example":
        for m in a.model:
            check_example(a.url, *m.split("=", 1))
        print(f"{len(FAILURES)} failures")
        return 1 if FAILURES else 0
    client = triton.InferenceServerClient(a.url, network_timeout=300)
    for _ in range(600):
        try:
            if client.is_server_ready():
                break
        except Exception:  # noqa: BLE001 - the server is still starting
            pass
        time.sleep(0.1)
    check(client.is_server_live(), "server not live")
    check(client.is_server_ready(), "server not ready")
    models = dict(m.split("=", 1) for m in a.model)
    for name, path in models.items():
        check_model(client, name, path)
    static = [(n, p) for n, p in models.items() if all(d.HasField("dim_value") for i in onnx.load(p, load_external_data=False).graph.input for d in i.type.tensor_type.shape.dim)]
    if static:
        # A model without symbolic dims, so that doubling an input's rows is a wrong shape.
        check_errors(client, a.url, *static[0], a.max_body_bytes)
    if a.batch_model:
        name, path = a.batch_model.split("=", 1)
        check_batching(client, a.url, name, path)
    if a.stop_pid:
        check_stop(a.url, a.stop_pid, a.stop_model, models[a.stop_model])
    print(f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
