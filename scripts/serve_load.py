"""A bounded load test of a running `kiln serve`: CLIENTS threads, each with a keep-alive
connection, send REQUESTS inference requests each (binary tensors, as Triton's clients send
them) for one model with seeded random inputs. Prints requests, errors, p50/p99 latency,
throughput, and the server's resident memory after the first 1000 requests and at the end.

Usage: python serve_load.py --url HOST:PORT --model NAME=PATH --pid SERVER_PID
                            [--clients 8] [--requests 2000] [--rows 1]
"""
import argparse
import http.client
import json
import sys
import threading
import time

import numpy as np
import onnx


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def body_for(path, rows, rng):
    model = onnx.load(path, load_external_data=False)
    header = {"inputs": [], "parameters": {"binary_data_output": True}}
    blobs = []
    for inp in model.graph.input:
        t = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else rows for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            x, dt = rng.integers(0, 8192, size=shape, dtype=np.int64), "INT64"
        else:
            x, dt = rng.standard_normal(size=shape).astype(np.float32), "FP32"
        blobs.append(x.tobytes())
        header["inputs"].append({"name": inp.name, "shape": shape, "datatype": dt, "parameters": {"binary_data_size": len(blobs[-1])}})
    js = json.dumps(header).encode()
    return js + b"".join(blobs), {"Inference-Header-Content-Length": str(len(js)), "Content-Type": "application/octet-stream"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rows", type=int, default=1)
    a = p.parse_args()
    name, path = a.model.split("=", 1)
    body, headers = body_for(path, a.rows, np.random.default_rng(0))
    latencies, errors = [], []
    done = [0]
    lock = threading.Lock()
    rss = {}

    def client():
        conn = http.client.HTTPConnection(a.url, timeout=120)
        for _ in range(a.requests):
            t0 = time.perf_counter()
            try:
                conn.request("POST", f"/v2/models/{name}/infer", body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException) as e:
                ok, r = False, e
                conn = http.client.HTTPConnection(a.url, timeout=120)
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                if not ok:
                    errors.append(getattr(r, "status", repr(r)))
                done[0] += 1
                if done[0] == 1000:
                    rss["first"] = rss_mib(a.pid)

    rss["start"] = rss_mib(a.pid)
    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rss["end"] = rss_mib(a.pid)
    lat = np.array(latencies) * 1e3
    n = len(latencies)
    print(f"model={name} clients={a.clients} requests={n} errors={len(errors)} "
          f"p50_ms={np.percentile(lat, 50):.2f} p99_ms={np.percentile(lat, 99):.2f} "
          f"throughput_rps={n / wall:.1f} rows_per_s={n * a.rows / wall:.1f} "
          f"rss_mib_start={rss['start']:.1f} rss_mib_after_1000={rss.get('first', float('nan')):.1f} rss_mib_end={rss['end']:.1f}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
