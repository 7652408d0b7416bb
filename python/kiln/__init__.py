"""kiln compiles ONNX models to native code and runs them on NumPy arrays.

    import kiln
    model = kiln.compile("model.onnx")
    outputs = model.run({"input": x})   # {"output": ndarray, ...}

`compile(path, input_shapes=None, threads=None)` returns a `Model`. `Model.run` takes a dict
of input name to array (or a list in input order) and returns a dict of output name to a new
array. Arrays are copied in and out; the GIL is released while kiln compiles and runs, so
several Python threads can run one model at once.

Errors: `KilnError` with kiln's message for a model kiln cannot read or compile and for
inputs that do not fit (an unknown or missing input name, a wrong shape); `TypeError` for an
input that is not an array, or whose dtype kiln cannot take or is not the input's.
"""

from ._kiln import KilnError, Model, Port, __version__, compile

__all__ = ["KilnError", "Model", "Port", "compile", "__version__"]
