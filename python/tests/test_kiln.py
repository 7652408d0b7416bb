"""kiln's Python bindings against onnxruntime 1.31.1 on the shared models and the bundled one,
plus metadata, dtypes, errors and threads.

Inputs are made as scripts/model_reference.py makes them (numpy seed 0; float inputs standard
normal, int64 token ids uniform in 0..8192); symbolic dims are given concrete sizes through
`input_shapes`. Outputs are compared as crates/testkit compares them (`compare_with_onnxruntime`):
floats at rtol 1e-3, atol 1e-4, 8-bit integers within one step, other integers exactly.

Shared models: $KILN_SHARED_MODELS, default ../shared/models beside the repository.
"""

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED_MODELS", REPO.parent / "shared" / "models"))
TINY_CNN = REPO / "examples" / "models" / "tiny_cnn.onnx"
MLP = SHARED / "mlp.onnx"

# The size a symbolic dim takes (every shared model's inputs are static; tiny_cnn has `batch`).
SYMBOL_SIZE = 2
VOCAB = 8192


def models():
    shared = sorted(SHARED.glob("*.onnx"))
    return shared + [TINY_CNN]


def declared_inputs(path):
    """(name, numpy dtype, dims) of each graph input; a symbolic dim is its name."""
    m = onnx.load(str(path), load_external_data=False)
    result = []
    for i in m.graph.input:
        t = i.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim)
        result.append((i.name, helper.tensor_dtype_to_np_dtype(t.elem_type), dims))
    return result


def make_inputs(path, rng, sizes=None):
    """Random inputs as scripts/model_reference.py makes them, and the concrete shapes of the
    inputs with symbolic dims (each symbol `sizes.get(symbol, SYMBOL_SIZE)`)."""
    feeds, shapes = {}, {}
    for name, dtype, dims in declared_inputs(path):
        shape = tuple(d if isinstance(d, int) else (sizes or {}).get(d, SYMBOL_SIZE) for d in dims)
        if any(not isinstance(d, int) for d in dims):
            shapes[name] = list(shape)
        if dtype == np.int64:
            feeds[name] = rng.integers(0, VOCAB, size=shape, dtype=np.int64)
        else:
            feeds[name] = rng.standard_normal(size=shape).astype(dtype)
    return feeds, shapes


def onnxruntime_outputs(path, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def assert_matches(got, want, what):
    """crates/testkit's compare_with_onnxruntime: floats at rtol 1e-3, atol 1e-4; 8-bit
    integers within one step; other integers and bools exactly."""
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    )
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, equal_nan=True, err_msg=what)
    elif want.dtype in (np.int8, np.uint8):
        np.testing.assert_allclose(got.astype(np.int16), want.astype(np.int16), rtol=0, atol=1, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


_compiled = {}


def compiled(path, input_shapes=None, threads=None):
    """kiln.compile, once per arguments for the whole session."""
    key = (str(path), repr(input_shapes), threads)
    if key not in _compiled:
        _compiled[key] = kiln.compile(path, input_shapes=input_shapes, threads=threads)
    return _compiled[key]


# --- the models against onnxruntime ---------------------------------------------------------


def test_shared_models_are_there():
    assert MLP.is_file(), f"no shared models in {SHARED} (set KILN_SHARED_MODELS)"


@pytest.mark.parametrize("path", models(), ids=lambda p: p.stem)
def test_matches_onnxruntime(path):
    feeds, shapes = make_inputs(path, np.random.default_rng(0))
    model = compiled(path, input_shapes=shapes or None)
    got = model.run(feeds)
    want = onnxruntime_outputs(path, feeds)
    assert list(got) == list(want), "output names and order"
    for name in want:
        assert_matches(got[name], want[name], f"{path.stem} output {name}")


def test_symbolic_dims_compile_on_first_run():
    # No input_shapes: each batch size compiles when first run.
    model = kiln.compile(TINY_CNN)
    rng = np.random.default_rng(1)
    for batch in (1, 3):
        feeds, _ = make_inputs(TINY_CNN, rng, {"batch": batch})
        got = model.run(feeds)
        want = onnxruntime_outputs(TINY_CNN, feeds)
        assert got["probs"].shape == (batch, 10)
        assert_matches(got["probs"], want["probs"], f"tiny_cnn batch {batch}")


# --- the Python interface -------------------------------------------------------------------


def test_metadata():
    mlp = compiled(MLP)
    assert mlp.inputs == [kiln.Port("input", "float32", (1, 784))]
    assert mlp.outputs == [("output", "float32", (1, 10))]
    port = mlp.inputs[0]
    assert (port.name, port.dtype, port.shape) == ("input", "float32", (1, 784))
    assert compiled(SHARED / "bert_mini.onnx").inputs[0].dtype == "int64"
    cnn = kiln.compile(TINY_CNN)
    assert cnn.inputs == [("image", "float32", ("batch", 1, 16, 16))]
    assert cnn.outputs == [("probs", "float32", ("batch", 10))]
    assert "image: float32[batch, 1, 16, 16]" in repr(cnn)
    assert kiln.compile(MLP, threads=1).threads == 1


def test_inputs_as_list_and_non_contiguous():
    model = compiled(MLP)
    x = np.random.default_rng(2).standard_normal((1, 784)).astype(np.float32)
    want = model.run({"input": x})["output"]
    np.testing.assert_array_equal(model.run([x])["output"], want)
    np.testing.assert_array_equal(model.run((x,))["output"], want)
    # Every other column of a wider array, and a Fortran-ordered copy.
    wide = np.zeros((1, 2 * 784), np.float32)
    wide[:, ::2] = x
    assert not wide[:, ::2].flags.c_contiguous
    np.testing.assert_array_equal(model.run({"input": wide[:, ::2]})["output"], want)
    np.testing.assert_array_equal(model.run({"input": np.asfortranarray(x)})["output"], want)


def test_outputs_are_new_writable_arrays():
    model = compiled(MLP)
    x = np.ones((1, 784), np.float32)
    first = model.run({"input": x})["output"]
    second = model.run({"input": x})["output"]
    assert first.flags.writeable and first.flags.c_contiguous
    assert not np.shares_memory(first, second)
    first[...] = 0
    assert second.any()


def identity_model(tmp_path, elem_type):
    """A one-node model: y = Identity(x) of `elem_type` and shape [2, 3]."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", elem_type, [2, 3])],
        [helper.make_tensor_value_info("y", elem_type, [2, 3])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / f"identity_{elem_type}.onnx"
    onnx.save(m, str(path))
    return path


DTYPES = [
    (TensorProto.FLOAT, np.float32),
    (TensorProto.DOUBLE, np.float64),
    (TensorProto.FLOAT16, np.float16),
    (TensorProto.INT8, np.int8),
    (TensorProto.INT16, np.int16),
    (TensorProto.INT32, np.int32),
    (TensorProto.INT64, np.int64),
    (TensorProto.UINT8, np.uint8),
    (TensorProto.UINT16, np.uint16),
    (TensorProto.UINT32, np.uint32),
    (TensorProto.UINT64, np.uint64),
    (TensorProto.BOOL, np.bool_),
]


@pytest.mark.parametrize("elem_type,dtype", DTYPES, ids=[np.dtype(d).name for _, d in DTYPES])
def test_dtypes_round_trip(tmp_path, elem_type, dtype):
    model = kiln.compile(identity_model(tmp_path, elem_type))
    assert model.inputs == [("x", np.dtype(dtype).name, (2, 3))]
    if dtype == np.bool_:
        x = np.array([[True, False, True], [False, False, True]])
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = np.array([[info.min, -1 if info.min else 0, 0], [1, 7, info.max]], dtype=dtype)
    else:
        x = np.array([[-1.5, 0.0, 2.25], [np.inf, -np.inf, 1e-3]], dtype=dtype)
    y = model.run({"x": x})["y"]
    assert y.dtype == dtype and y.shape == (2, 3)
    np.testing.assert_array_equal(y, x)
    # Transposed twice: the same values through a non-contiguous view.
    np.testing.assert_array_equal(model.run({"x": np.ascontiguousarray(x.T).T})["y"], x)


# --- errors ---------------------------------------------------------------------------------


def test_bad_path(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(kiln.KilnError, match=r"cannot read ONNX model .*missing\.onnx"):
        kiln.compile(missing)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"this is not a protobuf")
    with pytest.raises(kiln.KilnError, match="cannot decode ONNX model"):
        kiln.compile(str(garbage))


def test_missing_and_unknown_inputs():
    model = compiled(MLP)
    x = np.zeros((1, 784), np.float32)
    with pytest.raises(kiln.KilnError, match='input "input": not given'):
        model.run({})
    with pytest.raises(kiln.KilnError, match='the model has no input named "nope"'):
        model.run({"input": x, "nope": x})
    with pytest.raises(kiln.KilnError, match="expected 1 inputs, got 2"):
        model.run([x, x])
    with pytest.raises(kiln.KilnError, match='the model has no input named "nope"'):
        kiln.compile(MLP, input_shapes={"nope": [1, 2]})


def test_wrong_shape():
    with pytest.raises(kiln.KilnError, match=r'input "input": dim 1 is 783, the model declares 784'):
        compiled(MLP).run({"input": np.zeros((1, 783), np.float32)})


def test_wrong_dtypes():
    model = compiled(MLP)
    with pytest.raises(TypeError, match='input "input": expected element type f32, got f64'):
        model.run({"input": np.zeros((1, 784))})
    with pytest.raises(TypeError, match=r'input "input": kiln cannot take arrays of dtype complex64'):
        model.run({"input": np.zeros((1, 784), np.complex64)})
    with pytest.raises(TypeError, match=r"kiln cannot take arrays of dtype object"):
        model.run({"input": np.full((1, 784), "a", dtype=object)})
    with pytest.raises(TypeError, match=r"kiln cannot take arrays of dtype >f4"):
        model.run({"input": np.zeros((1, 784), ">f4")})
    with pytest.raises(TypeError, match=r'input "input": expected a numpy.ndarray, got list'):
        model.run({"input": [0.0] * 784})
    with pytest.raises(TypeError, match="input names are str"):
        model.run({0: np.zeros((1, 784), np.float32)})
    with pytest.raises(TypeError, match="expected a dict of input name to numpy.ndarray"):
        model.run(np.zeros((1, 784), np.float32))


def test_bad_compile_arguments():
    with pytest.raises(ValueError, match="threads must be at least 1"):
        kiln.compile(MLP, threads=0)
    with pytest.raises(TypeError, match=r'input_shapes\["input"\]: expected a list or tuple'):
        kiln.compile(MLP, input_shapes={"input": "1x784"})
    with pytest.raises(TypeError, match=r'input_shapes\["input"\]'):
        kiln.compile(MLP, input_shapes={"input": [1, -784]})


# --- threads --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [MLP, SHARED / "bert_mini.onnx", TINY_CNN], ids=lambda p: p.stem)
def test_concurrent_runs(path):
    """Four Python threads run one model at once (two kiln threads each, so they also contend
    for its pool) and get what single runs give."""
    shapes = make_inputs(path, np.random.default_rng(0))[1]
    model = compiled(path, input_shapes=shapes or None, threads=2)
    rng = np.random.default_rng(3)
    feeds = [make_inputs(path, rng)[0] for _ in range(8)]
    alone = [model.run(f) for f in feeds]
    results = [[None] * len(feeds) for _ in range(4)]
    errors = []
    start = threading.Barrier(4)

    def worker(t):
        try:
            start.wait()
            for k in range(len(feeds)):
                i = (k + 2 * t) % len(feeds)
                results[t][i] = model.run(feeds[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for t in range(4):
        for i, want in enumerate(alone):
            for name in want:
                np.testing.assert_array_equal(results[t][i][name], want[name], err_msg=f"thread {t} run {i} {name}")


def test_runs_release_the_gil():
    """With a 10 s switch interval, another Python thread gets the GIL only when it is released:
    it counts during a run only if the run released it. The run takes milliseconds (tiny_cnn at
    batch 512) so that the counter's wake-up, on a loaded machine, falls inside it."""
    model = compiled(TINY_CNN, input_shapes={"image": [512, 1, 16, 16]})
    x = np.ones((512, 1, 16, 16), np.float32)
    count = 0
    stop = threading.Event()

    def counter():
        nonlocal count
        while not stop.is_set():
            count += 1
            time.sleep(1e-6)  # releases the GIL

    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    thread = threading.Thread(target=counter)
    try:
        thread.start()
        counted = []
        for _ in range(50):
            before = count
            model.run({"image": x})
            counted.append(count - before)
            if counted[-1] > 0:
                break
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        thread.join()
    assert counted[-1] > 0, f"no Python ran during {len(counted)} runs: the GIL was held"
