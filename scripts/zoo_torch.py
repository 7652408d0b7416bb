"""Generates the torch exporter zoo: torchvision and Hugging Face models exported by PyTorch's two
ONNX exporters, with onnxruntime reference outputs.

Every model is exported twice: by the TorchScript exporter (torch.onnx.export(dynamo=False),
opset 17, dynamic_axes) into case <model>_ts, and by the torch.export-based exporter
(dynamo=True, the exporter's default opset and optimizer, dynamic_shapes with named dims) into
case <model>_dynamo. Both cases of a model share its weights and data sets.

    tv_resnet18                  torchvision classifier, x [batch, 3, height, width] -> logits
    tv_mobilenet_v3_small        (HardSwish, HardSigmoid, squeeze-excitation)
    tv_lraspp_mobilenet_v3_large torchvision segmentation, x [batch, 3, height, width] -> out
                                 [batch, 21, height, width] (Resize to sizes taken from shapes)
    tv_ssdlite320_mobilenet_v3_large       torchvision detectors with their in-graph
    tv_fasterrcnn_mobilenet_v3_large_320_fpn  pre- and post-processing (resize, anchors, box
                                 decoding, per-class NMS, RoIAlign for Faster R-CNN): one image
                                 x [3, height, width] -> boxes [K, 4], scores [K], labels [K]
                                 (int64); K (data-dependent, at most 100) is 100 in every data set
    hf_bert                      BertModel (input_ids, attention_mask, token_type_ids) ->
                                 last_hidden_state, pooler_output
    hf_gpt2                      GPT2LMHeadModel, causal (input_ids, attention_mask) -> logits
    hf_t5                        T5ForConditionalGeneration (input_ids, attention_mask,
                                 decoder_input_ids) -> logits

Only PyPI is reachable, so nothing is downloaded: torchvision models have weights=None, Hugging
Face models are built from tiny configs (hidden 64, 2 layers, 4 heads, vocab 1000) without a
cache (use_cache=False). Random-init torchvision models are degenerate (mobilenet_v3 logits
~1e-9, SSD scores all 1/91, no Faster R-CNN box over its threshold), so reinit() redraws their
parameters and calibrate_bn() recomputes BatchNorm statistics from random images. The dynamo
exporter cannot export torchvision's batched_nms (a Python branch on a data-dependent size), so
the dynamo detection cases use patch_batched_nms(). Weights and data come from torch and numpy
generators seeded per model (crc32 of its name), with one torch thread, so the output is the
same on every run on a given machine (BatchNorm calibration runs convolutions in float32),
except that the dynamo exporter keeps its node metadata_props (namespace, FX node, stack trace
with the absolute paths and line numbers of this file and the venv): those models' bytes change
with the checkout's path and with edits here, their graphs and data sets do not.

Layout of OUTDIR (that of scripts/zoo.sh):

    cases.txt                          case names, one per line, sorted
    failed.txt                         cases that failed to export or to check, "case: reason"
                                       (empty when none did); they have no directory
    <case>/model.onnx                  the model (one file, no external data)
    <case>/test_data_set_K/input_J.pb  TensorProto of graph input J (graph input order), K = 0, 1
    <case>/test_data_set_K/output_J.pb TensorProto of graph output J (graph output order)

No case has a tolerance.txt. Data sets: images of uniform noise in [0, 1) at 1x3x224x224 and
2x3x160x192 (classification, segmentation), 3x320x320 and 3x240x360 (detection); token ids in
[3, 1000) at batch 1 x 8 and batch 3 x 19, rows 1 and 2 of the batch-3 set padded at the end
(5 and 10 tokens of id 0, mask 0); BERT's token types 0 then 1 (a sentence pair); T5's decoder
ids 3 and 7 long, starting with its decoder_start_token_id 0.

References come from onnxruntime (CPUExecutionProvider, one intra-op thread, default graph
optimizations) on the exported model, and each must match (shapes, dtypes, integers exactly,
floats within rtol 1e-3 + atol 1e-4, kiln's default comparison) the PyTorch module's own output,
so a broken export fails here, and onnxruntime without graph optimizations (rtol 1e-4, atol 1e-5).
Detections come sorted by score, and a consumer compares them element-wise, so a detector's data
set must not depend on float rounding: reinit() shifts BatchNorm biases so the random network is
not chaotic (implementation differences then move scores by ~5e-6 relative rather than ~5e-5),
and each data set is the first of several seeded images whose 101 best detections (PyTorch,
detections_per_img raised by one) have scores at least 5e-5 apart (relative), and whose
onnxruntime output keeps its labels and order under two perturbations of the image by 1e-6.

Usage: python zoo_torch.py OUTDIR                 every case, each in a subprocess
       python zoo_torch.py --case CASE OUTDIR     one case, into OUTDIR/CASE
"""
import json
import os
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np

EXPORTERS = ("ts", "dynamo")
TS_OPSET = 17
TOL_TORCH = (1e-3, 1e-4)  # ORT vs PyTorch: kiln's default comparison
TOL_NOOPT = (1e-4, 1e-5)  # ORT vs ORT without graph optimizations (zoo.py's)
DETECTIONS = 100  # detections_per_img of both detectors
MIN_SCORE_GAP = 5e-5  # relative gap between consecutive detection scores
PERTURB = 1e-6  # amplitude of the image perturbations of the detection stability check
CANDIDATES = 16  # images tried per detection data set


def seed_of(name):
    return zlib.crc32(name.encode())


def rng_for(name):
    return np.random.default_rng(seed_of(name))


# ---------------------------------------------------------------------------------------------
# Models. A builder returns a Spec; its module takes the inputs positionally.


class Spec:
    """module: eval-mode torch module; inputs: [(name, {axis: dim name})]; outputs: [(name,
    {axis: dim name})] (TorchScript's dynamic_axes of the outputs); example: export arguments
    (numpy); datasets: [tuple of numpy arrays]; detector: the torchvision detector inside
    `module` (its detections_per_img is raised for the score-gap check), else None."""

    def __init__(self, module, inputs, outputs, example, datasets, detector=None):
        self.module = module
        self.inputs = inputs
        self.outputs = outputs
        self.example = example
        self.datasets = datasets
        self.detector = detector


def reinit(m, gen, bn_shift=0.0):
    """Redraws every conv/linear/BatchNorm parameter so a random-init torchvision model is not
    degenerate: weights N(0, 1/fan_in), small biases, BatchNorm scales in [0.5, 1.5]. Detectors:
    box-regression weights x0.01 (boxes near their anchors rather than pushed off the image and
    dropped), Faster R-CNN's class logits x3 (scores over its 0.05 threshold). bn_shift adds
    bn_shift * scale to each BatchNorm bias: most activations then fall where ReLU / HardSwish
    are (nearly) linear and the network stops amplifying rounding differences."""
    import math

    import torch
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * math.sqrt(1.0 / fan_in))
                if mod.bias is not None:
                    mod.bias.copy_((torch.rand(mod.bias.shape, generator=gen) - 0.5) * 0.2)
            elif isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                n = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(n, generator=gen))
                mod.bias.copy_(torch.randn(n, generator=gen) * 0.1 + bn_shift * mod.weight)
                mod.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                mod.running_var.copy_(0.5 + torch.rand(n, generator=gen))
        for name, mod in m.named_modules():
            if not isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
                continue
            if "bbox_pred" in name or "regression_head" in name:
                mod.weight.mul_(0.01)
            if name.endswith("cls_score"):
                mod.weight.mul_(3.0)
    return m


def calibrate_bn(m, batches):
    """Recomputes every BatchNorm's running statistics from `batches` (tuples of arguments),
    the rest of the model in eval mode, so activations are normalised rather than exploding."""
    import torch
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    m.eval()
    for b in bns:
        b.reset_running_stats()
        b.momentum = None  # cumulative average over the batches
        b.train()
    with torch.no_grad():
        for args in batches:
            m(*args)
    for b in bns:
        b.eval()
    return m


def images(rng, *shape):
    return rng.random(shape, dtype=np.float32)


def tensor(a):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a))


def vision(name, builder):
    import torch

    def build():
        tv_model = builder()
        reinit(tv_model, torch.Generator().manual_seed(seed_of(name)))
        crng = rng_for(name + "/calibrate")
        calibrate_bn(tv_model, [(tensor(images(crng, 2, 3, 224, 224)),), (tensor(images(crng, 2, 3, 192, 160)),)])
        seg = hasattr(tv_model, "classifier") and hasattr(tv_model, "backbone")

        class Wrap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = tv_model

            def forward(self, x):
                y = self.m(x)
                return y["out"] if seg else y

        rng = rng_for(name + "/data")
        img = {0: "batch", 2: "height", 3: "width"}
        out = ("out", img) if seg else ("logits", {0: "batch"})
        return Spec(Wrap().eval(), [("x", img)], [out], (images(rng, 2, 3, 256, 224),),
                    [(images(rng, 1, 3, 224, 224),), (images(rng, 2, 3, 160, 192),)])
    return build


def detection(name, builder):
    import torch

    def build():
        det = builder()
        reinit(det, torch.Generator().manual_seed(seed_of(name)), bn_shift=1.0)
        crng = rng_for(name + "/calibrate")
        # GeneralizedRCNNTransform / the SSD transform take a list of images of any size.
        calibrate_bn(det, [([tensor(images(crng, 3, 320, 320)), tensor(images(crng, 3, 256, 384))],),
                           ([tensor(images(crng, 3, 300, 400)), tensor(images(crng, 3, 320, 320))],)])
        det.eval()

        class Wrap(torch.nn.Module):
            """One image [3, H, W] -> boxes [K, 4], scores [K], labels [K] (after NMS)."""

            def __init__(self):
                super().__init__()
                self.m = det

            def forward(self, x):
                r = self.m([x])[0]
                return r["boxes"], r["scores"], r["labels"]

        module = Wrap().eval()
        rng = rng_for(name + "/data")
        picked = [detection_image(module, det, name, k, shape)
                  for k, shape in enumerate([(3, 320, 320), (3, 240, 360)])]
        k_dim = {0: "num_detections"}
        spec = Spec(module, [("x", {1: "height", 2: "width"})],
                    [("boxes", k_dim), ("scores", k_dim), ("labels", k_dim)],
                    (images(rng, 3, 300, 400),), [(x,) for x, _ in picked], detector=det)
        spec.attempts = [a for _, a in picked]
        return spec
    return build


def set_detections_per_img(det, n):
    if hasattr(det, "roi_heads"):
        det.roi_heads.detections_per_img = n
    else:
        det.detections_per_img = n


def torch_run(module, args):
    import torch
    with torch.no_grad():
        out = module(*[tensor(a) for a in args])
    out = [out] if isinstance(out, torch.Tensor) else list(out)
    return [t.detach().numpy() for t in out]


def score_gap(scores):
    """Smallest relative gap between consecutive (descending) scores; -1 when not descending."""
    s = scores.astype(np.float64)
    if len(s) < 2:
        return 1.0
    gaps = (s[:-1] - s[1:]) / np.abs(s[:-1])
    return float(gaps.min()) if (gaps > 0).all() else -1.0


def detection_image(module, det, name, k, shape):
    """The first of CANDIDATES seeded images whose DETECTIONS + 1 best detections (PyTorch) have
    scores at least MIN_SCORE_GAP apart: the order of the detections and the cut after the
    last are then decided by margins well over rounding differences."""
    best = None
    for attempt in range(CANDIDATES):
        x = images(rng_for(f"{name}/data/{k}/{attempt}"), *shape)
        set_detections_per_img(det, DETECTIONS + 1)
        try:
            _, scores, _ = torch_run(module, (x,))
        finally:
            set_detections_per_img(det, DETECTIONS)
        gap = score_gap(scores)
        if len(scores) == DETECTIONS + 1 and gap >= MIN_SCORE_GAP:
            return x, attempt
        best = max(best or (gap, len(scores)), (gap, len(scores)))
    raise SystemExit(f"no image of {CANDIDATES} gives {DETECTIONS + 1} detections with scores "
                     f"{MIN_SCORE_GAP:g} apart (best: gap {best[0]:.3g}, {best[1]} detections)")


def text_batch(rng, lens, seq, pad_rows, vocab=1000):
    """ids [B, seq] in [3, vocab) with rows in pad_rows padded at the end (id 0, mask 0)."""
    b = len(lens)
    ids = rng.integers(3, vocab, size=(b, seq), dtype=np.int64)
    mask = np.ones((b, seq), np.int64)
    for r, n in enumerate(lens):
        if r in pad_rows:
            ids[r, n:] = 0
            mask[r, n:] = 0
    return ids, mask


def hf(name):
    import torch
    import transformers as T

    def build():
        torch.manual_seed(seed_of(name))
        rng = rng_for(name + "/data")
        # Sizes of the export example (2 x 16, T5 decoder 6) differ from every data set's.
        shapes = [(1, 8, 3, ()), (3, 19, 7, (1, 2))]
        text = {0: "batch", 1: "seq"}
        if name == "hf_bert":
            cfg = T.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, max_position_embeddings=128, initializer_range=0.1)
            inner = T.BertModel(cfg).eval()

            class Wrap(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = inner

                def forward(self, input_ids, attention_mask, token_type_ids):
                    o = self.m(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids, return_dict=True)
                    return o.last_hidden_state, o.pooler_output

            def make(b, s, pad_rows):
                lens = [s - 5 * r if r in pad_rows else s for r in range(b)]
                ids, mask = text_batch(rng, lens, s, pad_rows)
                types = np.zeros((b, s), np.int64)
                for r, n in enumerate(lens):  # a sentence pair: the second half has type 1
                    types[r, n // 2:n] = 1
                return ids, mask, types
            inputs = [("input_ids", text), ("attention_mask", text), ("token_type_ids", text)]
            outputs = [("last_hidden_state", text), ("pooler_output", {0: "batch"})]
        elif name == "hf_gpt2":
            cfg = T.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                               initializer_range=0.1, use_cache=False)
            inner = T.GPT2LMHeadModel(cfg).eval()

            class Wrap(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = inner

                def forward(self, input_ids, attention_mask):
                    return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                  return_dict=True).logits

            def make(b, s, pad_rows):
                return text_batch(rng, [s - 5 * r if r in pad_rows else s for r in range(b)], s, pad_rows)
            inputs = [("input_ids", text), ("attention_mask", text)]
            outputs = [("logits", text)]
        else:
            cfg = T.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                             num_decoder_layers=2, num_heads=4, decoder_start_token_id=0, use_cache=False)
            inner = T.T5ForConditionalGeneration(cfg).eval()

            class Wrap(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = inner

                def forward(self, input_ids, attention_mask, decoder_input_ids):
                    return self.m(input_ids=input_ids, attention_mask=attention_mask,
                                  decoder_input_ids=decoder_input_ids, use_cache=False,
                                  return_dict=True).logits

            def make(b, s, pad_rows, d):
                ids, mask = text_batch(rng, [s - 5 * r if r in pad_rows else s for r in range(b)], s, pad_rows)
                dec = rng.integers(3, 1000, size=(b, d), dtype=np.int64)
                dec[:, 0] = cfg.decoder_start_token_id
                return ids, mask, dec
            enc = {0: "batch", 1: "enc_seq"}
            inputs = [("input_ids", enc), ("attention_mask", enc), ("decoder_input_ids", {0: "batch", 1: "dec_seq"})]
            outputs = [("logits", {0: "batch", 1: "dec_seq"})]
            return Spec(Wrap().eval(), inputs, outputs, make(2, 16, (1,), 6),
                        [make(b, s, pad, d) for b, s, d, pad in shapes])
        return Spec(Wrap().eval(), inputs, outputs, make(2, 16, (1,)),
                    [make(b, s, pad) for b, s, _, pad in shapes])
    return build


def models():
    import torchvision.models as tv
    from torchvision.models import detection as tvd
    from torchvision.models import segmentation as tvs
    return {
        "tv_resnet18": vision("tv_resnet18", lambda: tv.resnet18(weights=None)),
        "tv_mobilenet_v3_small": vision("tv_mobilenet_v3_small", lambda: tv.mobilenet_v3_small(weights=None)),
        "tv_lraspp_mobilenet_v3_large": vision(
            "tv_lraspp_mobilenet_v3_large",
            lambda: tvs.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)),
        "tv_ssdlite320_mobilenet_v3_large": detection(
            "tv_ssdlite320_mobilenet_v3_large",
            lambda: tvd.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                      detections_per_img=DETECTIONS)),
        "tv_fasterrcnn_mobilenet_v3_large_320_fpn": detection(
            "tv_fasterrcnn_mobilenet_v3_large_320_fpn",
            lambda: tvd.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                              box_detections_per_img=DETECTIONS)),
        "hf_bert": hf("hf_bert"),
        "hf_gpt2": hf("hf_gpt2"),
        "hf_t5": hf("hf_t5"),
    }


MODELS = ["tv_resnet18", "tv_mobilenet_v3_small", "tv_lraspp_mobilenet_v3_large",
          "tv_ssdlite320_mobilenet_v3_large", "tv_fasterrcnn_mobilenet_v3_large_320_fpn",
          "hf_bert", "hf_gpt2", "hf_t5"]
CASES = [f"{m}_{e}" for m in MODELS for e in EXPORTERS]


def patch_batched_nms():
    """torchvision's batched_nms branches in Python on boxes.numel() (> 4000: one NMS per class),
    which torch.export cannot guard on (a data-dependent size): always take the coordinate-trick
    path (what the TorchScript exporter's tracing takes), written so it also holds for no box."""
    import torch
    import torchvision.models.detection.roi_heads as roi_heads
    import torchvision.models.detection.rpn as rpn
    import torchvision.models.detection.ssd as ssd
    from torchvision.ops import boxes as box_ops

    def batched_nms(boxes, scores, idxs, iou_threshold):
        max_coordinate = torch.cat([boxes.flatten(), boxes.new_zeros(1)]).max()
        offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
        return box_ops.nms(boxes + offsets[:, None], scores, iou_threshold)

    box_ops.batched_nms = batched_nms
    for mod in (rpn, roi_heads, ssd):
        mod.box_ops.batched_nms = batched_nms


# ---------------------------------------------------------------------------------------------
# One case


def export(spec, exporter, path):
    import torch
    names = [n for n, _ in spec.inputs]
    out_names = [n for n, _ in spec.outputs]
    args = tuple(tensor(a) for a in spec.example)
    with torch.no_grad():
        if exporter == "ts":
            axes = {n: a for n, a in spec.inputs + spec.outputs}
            torch.onnx.export(spec.module, args, path, dynamo=False, opset_version=TS_OPSET,
                              input_names=names, output_names=out_names, dynamic_axes=axes)
        else:
            shapes = tuple(dict(a) for _, a in spec.inputs)  # dim names become the ONNX dim_params
            prog = torch.onnx.export(spec.module, args, dynamo=True, input_names=names,
                                     output_names=out_names, dynamic_shapes=shapes, external_data=False)
            prog.save(path, external_data=False)


def session(path, optimize=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def compare(what, got, want, tol):
    """Raises unless got matches want: shapes and dtypes, integers exactly, floats within tol."""
    if len(got) != len(want):
        raise SystemExit(f"{what}: {len(got)} outputs, want {len(want)}")
    worst = 0.0
    for j, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise SystemExit(f"{what}: output {j} is {g.dtype}{list(g.shape)}, want {w.dtype}{list(w.shape)}")
        if w.dtype.kind == "f":
            if not np.allclose(g, w, rtol=tol[0], atol=tol[1]):
                d = np.abs(g.astype(np.float64) - w.astype(np.float64))
                raise SystemExit(f"{what}: output {j} differs by up to {d.max():.3g} (|want| <= {np.abs(w).max():.3g})")
            if w.size:
                worst = max(worst, float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()))
        elif not np.array_equal(g, w):
            raise SystemExit(f"{what}: output {j} ({w.dtype}) differs")
    return worst


def dims_of(vi):
    return [d.dim_param or d.dim_value if (d.dim_param or d.HasField("dim_value")) else "?"
            for d in vi.type.tensor_type.shape.dim]


def count_nodes(graph):
    n = 0
    for node in graph.node:
        n += 1
        for a in node.attribute:
            if a.g.node:
                n += count_nodes(a.g)
            for g in a.graphs:
                n += count_nodes(g)
    return n


def write_tensor(path, arr, name):
    from onnx import numpy_helper
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr, name).SerializeToString())


def run_case(case, outdir):
    import torch
    import onnx
    from onnx import helper
    model, exporter = case.rsplit("_", 1)
    torch.set_num_threads(1)
    t0 = time.time()
    spec = models()[model]()
    if exporter == "dynamo" and spec.detector is not None:
        patch_batched_nms()
    cdir = os.path.join(outdir, case)
    os.makedirs(cdir, exist_ok=True)
    path = os.path.join(cdir, "model.onnx")
    t1 = time.time()
    export(spec, exporter, path)
    t2 = time.time()
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    in_names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    if in_names != [n for n, _ in spec.inputs]:
        raise SystemExit(f"graph inputs {in_names}, want {[n for n, _ in spec.inputs]}")
    out_names = [o.name for o in m.graph.output]
    sess, noopt = session(path), session(path, optimize=False)
    sets, worst = [], 0.0
    for k, args in enumerate(spec.datasets):
        feeds = dict(zip(in_names, args))
        outs = sess.run(None, feeds)
        for o, v in zip(m.graph.output, outs):
            if helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) != v.dtype:
                raise SystemExit(f"data set {k} output {o.name}: declared and computed dtypes differ")
        compare(f"data set {k}: onnxruntime without optimizations", noopt.run(None, feeds), outs, TOL_NOOPT)
        worst = max(worst, compare(f"data set {k}: PyTorch", torch_run(spec.module, args), outs, TOL_TORCH))
        info = {"inputs": [list(a.shape) for a in args], "outputs": [list(v.shape) for v in outs]}
        if spec.detector is not None:
            prng = rng_for(f"{case}/perturb/{k}")
            for p in range(2):
                x = args[0] + prng.uniform(-PERTURB, PERTURB, args[0].shape).astype(np.float32)
                compare(f"data set {k}: image perturbed by {PERTURB:g} ({p})", sess.run(None, {in_names[0]: x}),
                        outs, TOL_TORCH)
            info["n_det"] = int(outs[0].shape[0])
            info["labels"] = int(len(np.unique(outs[2])))
            info["score_gap"] = score_gap(outs[1])
            info["image"] = spec.attempts[k]
        ddir = os.path.join(cdir, f"test_data_set_{k}")
        os.makedirs(ddir, exist_ok=True)
        for j, (n, a) in enumerate(zip(in_names, args)):
            write_tensor(os.path.join(ddir, f"input_{j}.pb"), a, n)
        for j, (n, v) in enumerate(zip(out_names, outs)):
            write_tensor(os.path.join(ddir, f"output_{j}.pb"), v, n)
        sets.append(info)
    if len({json.dumps(s["inputs"]) for s in sets}) != len(sets):
        raise SystemExit("two data sets have the same input shapes")
    opsets = {(o.domain or "ai.onnx"): o.version for o in m.opset_import}
    ops = sorted({n.op_type for n in m.graph.node})
    return {"case": case, "opset": opsets.get("ai.onnx"), "ir_version": m.ir_version,
            "nodes": len(m.graph.node), "nodes_all": count_nodes(m.graph), "functions": len(m.functions),
            "size_mb": round(os.path.getsize(path) / 2**20, 1),
            "inputs": [[i.name, dims_of(i)] for i in m.graph.input if i.name in in_names],
            "outputs": [[o.name, dims_of(o)] for o in m.graph.output],
            "datasets": sets, "max_diff_torch": worst, "ops": ops,
            "build_s": round(t1 - t0, 1), "export_s": round(t2 - t1, 1), "check_s": round(time.time() - t2, 1)}


# ---------------------------------------------------------------------------------------------
# Every case


def shape_str(s):
    return "x".join(map(str, s)) or "scalar"


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    done, failed = [], []
    t_all = time.time()
    for case in CASES:
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case, outdir],
                               capture_output=True, text=True, timeout=1800)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if p.returncode == 0 and lines:
                rec = json.loads(lines[-1][len("RESULT "):])
            else:
                tail = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if ln.strip()] or ["?"]
                sys.stderr.write(f"--- {case} (exit {p.returncode}), last lines of its output:\n"
                                 + "\n".join(tail[-25:]) + "\n---\n")
                rec = {"error": f"exit {p.returncode}: {tail[-1].strip()[:500]}"}
        except subprocess.TimeoutExpired:
            rec = {"error": "timed out after 1800 s"}
        dt = time.time() - t0
        if "error" in rec:
            shutil.rmtree(os.path.join(outdir, case), ignore_errors=True)
            failed.append((case, rec["error"]))
            print(f"{case}: FAILED ({dt:.0f} s): {rec['error']}", flush=True)
            continue
        done.append(rec)
        print(f"{case}: opset {rec['opset']}, {rec['nodes']} nodes, {rec['size_mb']} MB, "
              f"{len(rec['datasets'])} data sets ({dt:.0f} s: export {rec['export_s']} s)", flush=True)
    with open(os.path.join(outdir, "cases.txt"), "w") as f:
        f.write("".join(r["case"] + "\n" for r in sorted(done, key=lambda r: r["case"])))
    with open(os.path.join(outdir, "failed.txt"), "w") as f:
        f.write("".join(f"{c}: {e}\n" for c, e in failed))
    print()
    print(f"{'case':46} {'opset':5} {'nodes':>11} {'MB':>5}  inputs -> outputs (per data set)")
    for r in done:
        io = " | ".join(",".join(map(shape_str, s["inputs"])) + " -> " + ",".join(map(shape_str, s["outputs"]))
                        + (f" (image {s['image']}, gap {s['score_gap']:.2g}, {s['labels']} labels)"
                           if "n_det" in s else "")
                        for s in r["datasets"])
        nodes = f"{r['nodes']}/{r['nodes_all']}" if r["nodes_all"] != r["nodes"] else str(r["nodes"])
        print(f"{r['case']:46} {r['opset']:5} {nodes:>11} {r['size_mb']:5}  {io}")
    print()
    print(f"{'case':46} declared input dims -> output dims")
    for r in done:
        dims = lambda vs: ", ".join(f"{n}[{','.join(map(str, d))}]" for n, d in vs)  # noqa: E731
        print(f"{r['case']:46} {dims(r['inputs'])} -> {dims(r['outputs'])}")
    print()
    print(f"{len(done)} of {len(CASES)} cases in {time.time() - t_all:.0f} s"
          + (f"; FAILED: {', '.join(c for c, _ in failed)} (see {os.path.join(outdir, 'failed.txt')})"
             if failed else ""))
    if not done:
        sys.exit("zoo_torch.py: no case was produced")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--case":
        if sys.argv[2] not in CASES:
            sys.exit(f"unknown case {sys.argv[2]}; cases: {' '.join(CASES)}")
        import warnings
        warnings.filterwarnings("ignore")
        print("RESULT " + json.dumps(run_case(sys.argv[2], sys.argv[3])), flush=True)
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: zoo_torch.py OUTDIR | zoo_torch.py --case CASE OUTDIR")
