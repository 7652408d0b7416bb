"""Writes a BERT-style encoder with bert_mini's sizes (vocab 8192, d 256, 4 heads, 4 post-norm
layers, seq 128, GELU, a 2-way head on the first token) whose batch dim is symbolic, built with
onnx.helper (random weights, seed 0). The shared bert_mini.onnx has its batch of 1 baked into
its Reshapes; this one batches, for measuring dynamic batching in `kiln serve`.

Usage: python make_encoder.py OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, D, HEADS, LAYERS, SEQ, FFN = 8192, 256, 4, 4, 128, 1024


def main(out):
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def w(name, *shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, value, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def n(op, ins, outs=None, **attrs):
        outs = outs or [f"{op.lower()}_{len(nodes)}"]
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0]

    def norm(x, p):
        return n("LayerNormalization", [x, c(p + ".g", np.ones(D, np.float32), np.float32), c(p + ".b", np.zeros(D, np.float32), np.float32)], axis=-1, epsilon=1e-5)

    def linear(x, p, i, o):
        return n("Add", [n("MatMul", [x, w(p + ".w", i, o)]), w(p + ".b", o)])

    c("heads_shape", [0, 0, HEADS, D // HEADS])
    c("model_shape", [0, 0, D])
    c("scale", 1.0 / np.sqrt(D // HEADS), np.float32)
    c("half", 0.5, np.float32)
    c("one", 1.0, np.float32)
    c("rsqrt2", 1.0 / np.sqrt(2.0), np.float32)
    c("first", 0)
    h = n("Add", [n("Gather", [w("tok", VOCAB, D), "ids"]), w("pos", 1, SEQ, D)])
    h = norm(h, "emb")
    for l in range(LAYERS):
        p = f"l{l}"
        qkv = [n("Reshape", [linear(h, f"{p}.{k}", D, D), "heads_shape"]) for k in "qkv"]
        q = n("Transpose", [qkv[0]], perm=[0, 2, 1, 3])
        k = n("Transpose", [qkv[1]], perm=[0, 2, 3, 1])
        v = n("Transpose", [qkv[2]], perm=[0, 2, 1, 3])
        att = n("Softmax", [n("Mul", [n("MatMul", [q, k]), "scale"])], axis=-1)
        ctx = n("Reshape", [n("Transpose", [n("MatMul", [att, v])], perm=[0, 2, 1, 3]), "model_shape"])
        h = norm(n("Add", [h, linear(ctx, f"{p}.o", D, D)]), f"{p}.n1")
        f = linear(h, f"{p}.up", D, FFN)
        gelu = n("Mul", [n("Mul", [f, "half"]), n("Add", ["one", n("Erf", [n("Mul", [f, "rsqrt2"])])])])
        h = norm(n("Add", [h, linear(gelu, f"{p}.down", FFN, D)]), f"{p}.n2")
    cls = n("Gather", [h, "first"], axis=1)
    n("Add", [n("MatMul", [cls, w("head.w", D, 2)]), w("head.b", 2)], ["logits"])
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", SEQ])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main(sys.argv[1])
