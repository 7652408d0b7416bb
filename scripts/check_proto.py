#!/usr/bin/env python3
"""Check that proto/onnx.proto is wire-compatible with the official ONNX schema.

Compares our schema, as compiled by the kiln-onnx build (protox), against the
FileDescriptor shipped in the installed `onnx` Python package
(onnx.onnx_ml_pb2.DESCRIPTOR): every message, field (name, number, label,
type, type name, oneof, packed, default), reserved range/name, and enum value.
Exits non-zero on any difference.

Usage:
    pip install onnx==1.23.2          # e.g. into build/venv
    python scripts/check_proto.py     # builds and exports our descriptor via cargo
    python scripts/check_proto.py --fds PATH   # use an already exported descriptor set

Our descriptor set is exported by the kiln-onnx test `export_descriptor_set`
when KILN_ONNX_FDS_OUT names an output file.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_official():
    try:
        from google.protobuf import descriptor_pb2
        import onnx
        from onnx import onnx_ml_pb2
    except ImportError as e:
        sys.exit(f"check_proto: cannot import onnx/protobuf ({e}); run `pip install onnx==1.23.2`")
    fdp = descriptor_pb2.FileDescriptorProto()
    onnx_ml_pb2.DESCRIPTOR.CopyToProto(fdp)
    return fdp, onnx.__version__


def export_ours(out):
    env = dict(os.environ, KILN_ONNX_FDS_OUT=str(out))
    cmd = ["cargo", "test", "-q", "--release", "-p", "kiln-onnx", "--test", "load", "export_descriptor_set"]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    if not Path(out).exists():
        sys.exit(f"check_proto: `{' '.join(cmd)}` did not write {out}")


def load_ours(path):
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet.FromString(Path(path).read_bytes())
    files = [f for f in fds.file if f.package == "onnx"]
    if len(files) != 1:
        sys.exit(f"check_proto: expected one file with package onnx in {path}, found {len(files)}")
    return files[0]


def collect(fdp):
    """Flattens a FileDescriptorProto into {full name: message} and {full name: enum}."""
    messages, enums = {}, {}

    def walk(msgs, en, prefix):
        for e in en:
            enums[prefix + e.name] = e
        for m in msgs:
            name = prefix + m.name
            messages[name] = m
            walk(m.nested_type, m.enum_type, name + ".")

    walk(fdp.message_type, fdp.enum_type, "." + fdp.package + ".")
    return messages, enums


def field_sig(m, f):
    oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
    packed = f.options.packed if f.options.HasField("packed") else None
    return {
        "number": f.number,
        "label": f.label,
        "type": f.type,
        "type_name": f.type_name,
        "oneof": oneof,
        "packed": packed,
        "default": f.default_value if f.HasField("default_value") else None,
        "extendee": f.extendee,
        "proto3_optional": f.proto3_optional,
    }


def compare(ours, official):
    errors = []
    counts = {"messages": 0, "fields": 0, "enums": 0, "enum values": 0}
    syntax = lambda f: f.syntax or "proto2"  # noqa: E731
    if ours.package != official.package:
        errors.append(f"package: ours {ours.package!r}, official {official.package!r}")
    if syntax(ours) != syntax(official):
        errors.append(f"syntax: ours {syntax(ours)!r}, official {syntax(official)!r}")

    om, oe = collect(ours)
    fm, fe = collect(official)
    for name in sorted(set(om) | set(fm)):
        if name not in om:
            errors.append(f"message {name}: missing in ours")
            continue
        if name not in fm:
            errors.append(f"message {name}: not in official schema")
            continue
        a, b = om[name], fm[name]
        counts["messages"] += 1
        af = {f.name: field_sig(a, f) for f in a.field}
        bf = {f.name: field_sig(b, f) for f in b.field}
        for fname in sorted(set(af) | set(bf)):
            if fname not in af:
                errors.append(f"{name}.{fname}: missing in ours")
            elif fname not in bf:
                errors.append(f"{name}.{fname}: not in official schema")
            elif af[fname] != bf[fname]:
                diff = {k: (af[fname][k], bf[fname][k]) for k in af[fname] if af[fname][k] != bf[fname][k]}
                errors.append(f"{name}.{fname}: differs (ours, official): {diff}")
            else:
                counts["fields"] += 1
        ar = sorted((r.start, r.end) for r in a.reserved_range)
        br = sorted((r.start, r.end) for r in b.reserved_range)
        if ar != br:
            errors.append(f"{name}: reserved ranges ours {ar}, official {br}")
        if sorted(a.reserved_name) != sorted(b.reserved_name):
            errors.append(f"{name}: reserved names ours {sorted(a.reserved_name)}, official {sorted(b.reserved_name)}")
        if [o.name for o in a.oneof_decl] != [o.name for o in b.oneof_decl]:
            errors.append(f"{name}: oneofs ours {[o.name for o in a.oneof_decl]}, official {[o.name for o in b.oneof_decl]}")

    for name in sorted(set(oe) | set(fe)):
        if name not in oe:
            errors.append(f"enum {name}: missing in ours")
            continue
        if name not in fe:
            errors.append(f"enum {name}: not in official schema")
            continue
        counts["enums"] += 1
        av = {v.name: v.number for v in oe[name].value}
        bv = {v.name: v.number for v in fe[name].value}
        for vname in sorted(set(av) | set(bv)):
            if av.get(vname) != bv.get(vname):
                errors.append(f"enum {name}.{vname}: ours {av.get(vname)}, official {bv.get(vname)}")
            else:
                counts["enum values"] += 1
    return errors, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fds", help="our exported FileDescriptorSet (default: export it via cargo test)")
    args = ap.parse_args()

    official, version = load_official()
    if args.fds:
        ours = load_ours(args.fds)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "onnx_fds.bin"
            export_ours(out)
            ours = load_ours(out)

    errors, counts = compare(ours, official)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    if errors:
        for e in errors:
            print(f"MISMATCH {e}")
        print(f"check_proto: {len(errors)} mismatches against onnx {version} ({summary} match)")
        sys.exit(1)
    print(f"check_proto: proto/onnx.proto matches onnx {version} ({official.name}): {summary}")


if __name__ == "__main__":
    main()
