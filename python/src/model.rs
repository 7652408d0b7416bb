//! `kiln.Model`: a compiled model, run on NumPy arrays from any number of Python threads.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyMapping, PyTuple, PyType};

use kiln::{CompiledModel, Dim, Tensor, TensorType};

use crate::convert::{numpy_name, to_array, to_tensor};
use crate::error::guarded;

/// A model compiled for this machine (`kiln.compile`). Runs release the GIL, so threads can
/// run one `Model` at once; each run takes its own scratch memory. Inputs with symbolic dims
/// compile once per distinct set of input shapes, on first use.
#[pyclass(frozen, module = "kiln", name = "Model")]
pub(crate) struct Model {
    compiled: CompiledModel,
}

impl Model {
    pub(crate) fn new(compiled: CompiledModel) -> Model {
        Model { compiled }
    }
}

#[pymethods]
impl Model {
    /// Runs the model. `inputs` is a dict of input name to array (every input once), or a
    /// list or tuple of arrays in input order. Returns a dict of output name to a new array,
    /// in output order.
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let outputs = if let Ok(map) = inputs.cast::<PyMapping>() {
            let mut named: Vec<(String, Tensor)> = Vec::new();
            for item in map.items()?.iter() {
                let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item.extract()?;
                let name: String = name.extract().map_err(|_| PyTypeError::new_err(format!("input names are str, got {}", crate::type_name(&name))))?;
                let tensor = to_tensor(&name, &value)?;
                named.push((name, tensor));
            }
            py.detach(|| {
                let named: Vec<(&str, Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
                guarded(|| self.compiled.run_named(&named))
            })?
        } else if inputs.is_instance_of::<PyList>() || inputs.is_instance_of::<PyTuple>() {
            let names = self.compiled.input_names();
            let mut ordered = Vec::new();
            for (k, value) in inputs.try_iter()?.enumerate() {
                let name = names.get(k).map_or_else(|| format!("#{k}"), |n| n.to_string());
                ordered.push(to_tensor(&name, &value?)?);
            }
            py.detach(|| guarded(|| self.compiled.run(&ordered)))?
        } else {
            return Err(PyTypeError::new_err(format!("inputs: expected a dict of input name to numpy.ndarray, or a list of arrays in input order; got {}", crate::type_name(inputs))));
        };
        let result = PyDict::new(py);
        for ((name, _), tensor) in self.compiled.outputs().into_iter().zip(&outputs) {
            result.set_item(name, to_array(py, name, tensor)?)?;
        }
        Ok(result)
    }

    /// The inputs in order, as `Port(name, dtype, shape)`: `dtype` is NumPy's name for the
    /// element type (kiln's where NumPy has none, e.g. `bf16`), `shape` a tuple of ints with a
    /// symbolic dim as its name (a str such as `"batch"` or `"seq*2"`).
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.compiled.inputs().into_iter().map(|(name, ty)| port(py, name, ty)).collect()
    }

    /// The outputs in order, as [`Model::inputs`] gives the inputs; dims are what kiln inferred
    /// from the declared inputs (a run's outputs have concrete shapes).
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.compiled.outputs().into_iter().map(|(name, ty)| port(py, name, ty)).collect()
    }

    /// Threads each run uses (the calling thread included).
    #[getter]
    fn threads(&self) -> usize {
        self.compiled.threads()
    }

    fn __repr__(&self) -> String {
        let list = |ports: Vec<(&str, &TensorType)>| {
            let items: Vec<String> = ports.into_iter().map(|(n, ty)| format!("{n}: {}[{}]", numpy_name(ty.dtype), dims(&ty.shape).join(", "))).collect();
            items.join(", ")
        };
        format!("<kiln.Model inputs=({}) outputs=({})>", list(self.compiled.inputs()), list(self.compiled.outputs()))
    }
}

/// Each dim as text: a number, or a symbolic dim's name.
fn dims(shape: &[Dim]) -> Vec<String> {
    shape.iter().map(Dim::to_string).collect()
}

/// `kiln.Port`, a named tuple `(name, dtype, shape)`.
pub(crate) fn port_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static PORT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    PORT.get_or_try_init(py, || {
        let kwargs = PyDict::new(py);
        kwargs.set_item("module", "kiln")?;
        let namedtuple = py.import("collections")?.getattr("namedtuple")?;
        Ok::<_, PyErr>(namedtuple.call(("Port", ("name", "dtype", "shape")), Some(&kwargs))?.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.bind(py))
}

fn port<'py>(py: Python<'py>, name: &str, ty: &TensorType) -> PyResult<Bound<'py, PyAny>> {
    let shape = ty
        .shape
        .iter()
        .map(|d| match d {
            Dim::Known(n) => n.into_bound_py_any(py),
            sym => sym.to_string().into_bound_py_any(py),
        })
        .collect::<PyResult<Vec<_>>>()?;
    let shape = PyTuple::new(py, shape)?;
    port_type(py)?.call1((name, numpy_name(ty.dtype), shape))
}
