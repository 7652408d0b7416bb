#!/usr/bin/env python3
"""Generate the official ONNX backend node test suite into OUTDIR.

Layout (the same as onnx's own `backend-test-tools generate-data` writes for
its test cases, minus the `node/` level):

    OUTDIR/NAME/model.onnx
    OUTDIR/NAME/test_data_set_N/input_K.pb
    OUTDIR/NAME/test_data_set_N/output_K.pb
    OUTDIR/cases.txt    every NAME, sorted, one per line
    OUTDIR/stamp.txt    key=value lines: onnx, numpy, cases, generator

The .pb files are serialized exactly as onnx/backend/test/cmd_tools.py does it:
TensorProto (numpy_helper.from_array, or the TensorProto itself if the case
gives one), SequenceProto (from_list), MapProto (from_dict) and OptionalProto
(from_optional), chosen by the type of the graph input/output at that position.

The suite is built in a temporary sibling directory and renamed into place.
Normally run through scripts/gen-node-suite.sh, which sets up the pinned venv.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.node import collect_testcases

STAMP_NAME = "stamp.txt"
CASES_NAME = "cases.txt"
SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(SCRIPT_DIR, "requirements-nodesuite.txt")


def generator_id() -> str:
    """sha256 of this script followed by the pins file.

    gen-node-suite.sh computes the same value (`cat A B | sha256sum`) to decide
    whether an existing suite is stale.
    """
    h = hashlib.sha256()
    for path in (os.path.abspath(__file__), REQUIREMENTS):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def serialize(value, value_info: onnx.ValueInfoProto) -> bytes:
    """Serialize one input/output value like onnx's cmd_tools.generate_data."""
    t = value_info.type
    name = value_info.name
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    assert t.HasField("tensor_type"), f"{name}: unsupported type {t}"
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def write_file(path: str, data: bytes) -> int:
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def disk_usage(root: str) -> int:
    """Bytes allocated on disk under root (files and directories), like du."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        total += os.lstat(dirpath).st_blocks * 512
        for name in filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def write_case(case, case_dir: str) -> tuple[int, int]:
    """Write one case; returns (files, bytes)."""
    assert case.model is not None and case.data_sets, case.name
    os.mkdir(case_dir)
    files = 1
    size = write_file(os.path.join(case_dir, "model.onnx"), case.model.SerializeToString())
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        ds_dir = os.path.join(case_dir, f"test_data_set_{i}")
        os.mkdir(ds_dir)
        for j, value in enumerate(inputs):
            size += write_file(os.path.join(ds_dir, f"input_{j}.pb"), serialize(value, graph.input[j]))
            files += 1
        for j, value in enumerate(outputs):
            size += write_file(os.path.join(ds_dir, f"output_{j}.pb"), serialize(value, graph.output[j]))
            files += 1
    return files, size


def looks_like_suite(path: str) -> bool:
    entries = os.listdir(path)
    return not entries or STAMP_NAME in entries or CASES_NAME in entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="output directory (replaced as a whole)")
    args = ap.parse_args()

    t0 = time.monotonic()
    out = os.path.abspath(args.outdir)
    if os.path.exists(out) and not (os.path.isdir(out) and looks_like_suite(out)):
        print(
            f"error: {out} exists and does not look like a node suite "
            f"(no {STAMP_NAME} or {CASES_NAME}); refusing to replace it",
            file=sys.stderr,
        )
        return 2
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)

    # Many cases draw random inputs without seeding; seed once so the suite is
    # reproducible byte for byte (expected outputs are computed from the inputs,
    # so any seed gives a valid suite).
    np.random.seed(0)
    with warnings.catch_warnings():
        # Some cases deliberately divide by zero etc.; keep the output quiet.
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)

    names = [c.name for c in cases]
    dupes = sorted(n for n, k in collections.Counter(names).items() if k > 1)
    if dupes:
        print(f"error: duplicate case names: {dupes[:10]}", file=sys.stderr)
        return 1

    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.tmp-", dir=parent)
    try:
        files = size = 0
        for case in cases:
            assert os.sep not in case.name and case.name not in (".", ".."), case.name
            f, s = write_case(case, os.path.join(tmp, case.name))
            files += f
            size += s
        with open(os.path.join(tmp, CASES_NAME), "w") as f:
            f.write("".join(n + "\n" for n in sorted(names)))
        with open(os.path.join(tmp, STAMP_NAME), "w") as f:
            f.write(
                f"onnx={onnx.__version__}\n"
                f"numpy={np.__version__}\n"
                f"cases={len(cases)}\n"
                f"generator={generator_id()}\n"
            )
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700

        # Swap into place: the old suite (if any) is renamed away first, so OUTDIR
        # is only ever missing for the instant between the two renames.
        old = None
        if os.path.exists(out):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old-", dir=parent)
            os.rename(out, os.path.join(old, "suite"))
        os.rename(tmp, out)
        tmp = None
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    dt = time.monotonic() - t0
    print(
        f"generated {len(cases)} node test cases, {files} files, "
        f"{size / 1e6:.1f} MB of data, {disk_usage(out) / 2**20:.0f} MiB on disk, in {out} "
        f"[onnx {onnx.__version__}, numpy {np.__version__}] in {dt:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
