//! `kiln._kiln`, the native half of the `kiln` Python package: [`compile`] an ONNX model into a
//! [`model::Model`] and run it on NumPy arrays. `python/kiln/__init__.py` re-exports it and
//! `python/kiln/_kiln.pyi` gives its types.
//!
//! The GIL is released while kiln loads, compiles and runs a model; arrays are copied in and
//! out while it is held.

mod convert;
mod error;
mod model;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyMapping;

use crate::error::{KilnError, guarded};
use crate::model::Model;

// Generated code and kiln's tensors are little-endian; NumPy arrays are in the host's order.
#[cfg(target_endian = "big")]
compile_error!("kiln's Python bindings convert arrays as little-endian bytes");

/// Loads the ONNX model at `path` and compiles it for this machine.
///
/// `input_shapes` maps input names to concrete shapes (lists or tuples of ints), compiled now;
/// inputs with symbolic dims that are not given are compiled when a run first sees their
/// shapes. `threads` is how many threads each run uses (default: `KILN_THREADS`, else every
/// core). The other `KILN_*` variables the CLI honours (`KILN_OPT`, `KILN_PREPACK`, ...) apply.
#[pyfunction]
#[pyo3(signature = (path, input_shapes = None, threads = None))]
fn compile(py: Python<'_>, path: PathBuf, input_shapes: Option<&Bound<'_, PyMapping>>, threads: Option<usize>) -> PyResult<Model> {
    let mut options = kiln::CompileOptions::from_env();
    if let Some(threads) = threads {
        if threads == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("threads must be at least 1"));
        }
        options.threads = threads;
    }
    if let Some(shapes) = input_shapes {
        for item in shapes.items()?.iter() {
            let (name, dims): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let name: String = name.extract().map_err(|_| pyo3::exceptions::PyTypeError::new_err(format!("input_shapes keys are input names (str), got {}", type_name(&name))))?;
            let dims: Vec<u64> = dims.extract().map_err(|_| pyo3::exceptions::PyTypeError::new_err(format!("input_shapes[\"{name}\"]: expected a list or tuple of non-negative ints, got {dims}")))?;
            options.input_shapes.push((name, dims));
        }
    }
    let compiled = py.detach(move || guarded(|| kiln::Model::load(&path)?.compile(&options)))?;
    Ok(Model::new(compiled))
}

/// The name of `value`'s type, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".to_string(), |n| n.to_string())
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_class::<Model>()?;
    m.add("KilnError", m.py().get_type::<KilnError>())?;
    m.add("Port", model::port_type(m.py())?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
