"""Small models built around one op that real models lean on, for `scripts/bench.sh`: ops the
shared models do not exercise, where a slow lowering would go unseen (ConvTranspose decoders).

    build/venv-ort/bin/python scripts/op_models.py OUTDIR

(the venv `scripts/bench.sh` installs), then `bash scripts/bench.sh OUTDIR/*.onnx`.
Weights are seeded random normals; inputs come from the harness.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_transpose_stack(name, layers, shape, rng):
    """ConvTranspose layers (in, out, kernel, stride, pad), each but the last followed by Relu."""
    nodes, inits, cur = [], [], "x"
    for i, (cin, cout, k, s, p) in enumerate(layers):
        w = (rng.standard_normal((cin, cout, k, k)) * 0.05).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("ConvTranspose", [cur, f"w{i}", f"b{i}"], [f"y{i}"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4))
        cur = f"y{i}"
        if i + 1 < len(layers):
            nodes.append(helper.make_node("Relu", [cur], [f"r{i}"]))
            cur = f"r{i}"
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(cur, TensorProto.FLOAT, ["n", "c", "h", "w"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def single(name, op, shape, inits=(), inputs=(), **attrs):
    """One node `op` on input `x` of `shape` (then `inputs`, named initializers)."""
    node = helper.make_node(op, ["x", *inputs], ["y"], **attrs)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/op-models")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    models = {
        # A U-Net decoder's up-convolutions: 2x2, stride 2.
        "unet_up": conv_transpose_stack("unet_up", [(512, 256, 2, 2, 0), (256, 128, 2, 2, 0), (128, 64, 2, 2, 0)], [1, 512, 16, 16], rng),
        # A DCGAN generator: 4x4, stride 2, pad 1.
        "dcgan_gen": conv_transpose_stack("dcgan_gen", [(256, 128, 4, 2, 1), (128, 64, 4, 2, 1), (64, 3, 4, 2, 1)], [1, 256, 8, 8], rng),
    }
    c = 64
    scale, bias = numpy_helper.from_array(np.ones(c, np.float32), "scale"), numpy_helper.from_array(np.zeros(c, np.float32), "bias")
    pads = numpy_helper.from_array(np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64), "pads")
    models |= {
        # PyTorch's GroupNorm and InstanceNorm export: normalization over each channel's plane.
        "instance_norm": single("instance_norm", "InstanceNormalization", [1, c, 128, 128], [scale, bias], ["scale", "bias"]),
        # Super-resolution's pixel shuffle.
        "depth_to_space": single("depth_to_space", "DepthToSpace", [1, 256, 128, 128], blocksize=2, mode="CRD"),
        # Style transfer's reflection padding.
        "pad_reflect": single("pad_reflect", "Pad", [1, c, 256, 256], [pads], ["pads"], mode="reflect"),
    }
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    conv_w = numpy_helper.from_array((rng.standard_normal((384, 384, 3)) * 0.05).astype(np.float32), "w")
    models |= {
        # FPN and YOLO upsampling.
        "resize_nearest": single("resize_nearest", "Resize", [1, 256, 64, 64], [scales], ["", "scales"], mode="nearest"),
        # A speech encoder's 1-D convolution.
        "conv1d": single("conv1d", "Conv", [1, 384, 1500], [conv_w], ["w"], pads=[1, 1]),
    }
    for name, model in models.items():
        onnx.save(model, out / f"{name}.onnx")
        print(out / f"{name}.onnx")


if __name__ == "__main__":
    main()
