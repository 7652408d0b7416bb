"""Writes examples/models/tiny_cnn.onnx: a small conv net (Conv, Relu, MaxPool, Flatten, Gemm,
Softmax) with a symbolic batch dim and seeded random weights, used as kiln's bundled default.

Run with the node-suite venv: build/venv/bin/python scripts/make_tiny_model.py
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def weight(name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


nodes = [
    helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    helper.make_node("Flatten", ["r2"], ["f"], name="flatten", axis=1),
    helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
]
inits = [
    weight("conv1.weight", 8, 1, 3, 3),
    weight("conv1.bias", 8),
    weight("conv2.weight", 16, 8, 3, 3),
    weight("conv2.bias", 16),
    weight("fc.weight", 10, 16 * 4 * 4),
    weight("fc.bias", 10),
]
graph = helper.make_graph(
    nodes,
    "tiny_cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 16, 16])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
    inits,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="kiln")
model.ir_version = 10
onnx.checker.check_model(model, full_check=True)
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "models", "tiny_cnn.onnx")
onnx.save(model, out)
print(f"wrote {out} ({os.path.getsize(out)} bytes)")
