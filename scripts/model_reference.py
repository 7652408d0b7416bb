"""Writes reference outputs for the shared benchmark models with onnxruntime.

For each model in MODELS (all nine in MODELS_DIR) this makes fixed random
inputs (numpy seed 0; int64 token ids uniform in 0..8192) and runs onnxruntime on one thread,
writing OUTDIR/NAME/input_K.pb and OUTDIR/NAME/output_K.pb as ONNX TensorProtos.

Usage: python model_reference.py MODELS_DIR OUTDIR
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

MODELS = [
    "mlp",
    "resnet50",
    "mobilenet_v2",
    "bert_mini",
    "mobilenet_v3_large",
    "gru_tagger",
    "llama_tiny",
    "audio_encoder",
    "mobilenet_v2_qdq",
]
NP_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
}


def make_input(rng, elem_type, shape):
    if elem_type == onnx.TensorProto.INT64:
        return rng.integers(0, 8192, size=shape, dtype=np.int64)
    return rng.standard_normal(size=shape).astype(NP_TYPES[elem_type])


def main(models_dir, outdir):
    for name in MODELS:
        path = os.path.join(models_dir, name + ".onnx")
        model = onnx.load(path, load_external_data=False)
        rng = np.random.default_rng(0)
        feeds = {}
        for inp in model.graph.input:
            t = inp.type.tensor_type
            shape = [d.dim_value for d in t.shape.dim]
            feeds[inp.name] = make_input(rng, t.elem_type, shape)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        case = os.path.join(outdir, name)
        os.makedirs(case, exist_ok=True)
        for k, inp in enumerate(model.graph.input):
            with open(os.path.join(case, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(feeds[inp.name], inp.name).SerializeToString())
        for k, (o, v) in enumerate(zip(model.graph.output, outs)):
            with open(os.path.join(case, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, o.name).SerializeToString())
        print(f"{name}: {len(feeds)} inputs, {len(outs)} outputs written to {case}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
