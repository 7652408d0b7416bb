"""Types of kiln's compiled module (src/*.rs)."""

import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__version__: str

class KilnError(Exception):
    """An error kiln reports: a model it cannot read or compile, inputs that do not fit the
    model (names, shapes), a run-time error of the compiled code. The message is kiln's."""

class Port(NamedTuple):
    """An input or output of a model."""

    name: str
    """The name in the ONNX graph."""
    dtype: str
    """NumPy's name of the element type (`float32`, `int64`, `bool`, ...); kiln's name where
    NumPy has none (`bf16`, `f8e4m3fn`, `string`, ...)."""
    shape: tuple[int | str, ...]
    """Dims: an int, or a symbolic dim as its name (`"batch"`, `"seq*2"`)."""

class Model:
    """A model compiled for this machine. Runs release the GIL; threads may share a model."""

    @property
    def inputs(self) -> list[Port]:
        """The inputs in order."""
    @property
    def outputs(self) -> list[Port]:
        """The outputs in order; dims as inferred from the declared inputs."""
    @property
    def threads(self) -> int:
        """Threads each run uses, the calling thread included."""
    def run(
        self, inputs: Mapping[str, npt.NDArray[np.generic]] | Sequence[npt.NDArray[np.generic]]
    ) -> dict[str, npt.NDArray[np.generic]]:
        """Runs the model on a dict of input name to array (every input once) or a list of
        arrays in input order; returns a dict of output name to a new array, in output order.

        Raises KilnError for unknown or missing names and wrong shapes, TypeError for values
        that are not arrays or have the wrong dtype."""

def compile(
    path: str | os.PathLike[str],
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    threads: int | None = None,
) -> Model:
    """Loads the ONNX model at `path` and compiles it for this machine.

    `input_shapes` gives concrete shapes by input name, compiled now; inputs with symbolic
    dims not given compile when a run first sees their shapes. `threads` is how many threads
    each run uses (default: `KILN_THREADS`, else every core).

    Raises KilnError if the file cannot be read or the model cannot be compiled."""
