//! kiln's errors as Python exceptions.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::PyErr;
use pyo3::exceptions::{PyException, PyTypeError};

pyo3::create_exception!(
    kiln,
    KilnError,
    PyException,
    "An error kiln reports: a model it cannot read or compile, inputs that do not fit the model (names, shapes), a run-time error of the compiled code. The message is kiln's."
);

/// kiln's error as the exception Python code expects: `TypeError` for an input of another
/// element type than the model's, [`KilnError`] for everything else.
pub(crate) fn to_py(error: kiln::Error) -> PyErr {
    match error {
        e @ kiln::Error::InputDType { .. } => PyTypeError::new_err(e.to_string()),
        e => KilnError::new_err(e.to_string()),
    }
}

/// Runs `f`, turning its error and any panic into a Python exception: a panic is a kiln bug,
/// reported as [`KilnError`] rather than pyo3's `PanicException` (a `BaseException` that
/// `except Exception` misses). Needs no GIL. kiln's locks recover from poisoning, so a model
/// stays usable after a panic in one of its runs.
pub(crate) fn guarded<T>(f: impl FnOnce() -> kiln::Result<T>) -> Result<T, PyErr> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(KilnError::new_err(format!("internal error (a kiln bug): {what}")))
        }
    }
}
