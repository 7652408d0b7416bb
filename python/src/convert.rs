//! NumPy arrays to kiln tensors and back, by copying.
//!
//! Inputs are copied while the GIL is held, so a run never reads an array that Python code
//! may change meanwhile; outputs become arrays that own their data. Supported: bool, int8–64,
//! uint8–64, float16, float32, float64 in native byte order. Not yet: strings, complex,
//! and types NumPy lacks (bfloat16, float8, int4).

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use kiln::{DType, Tensor, TensorData};

use crate::error::KilnError;

/// An element type both NumPy and kiln hold, with kiln's little-endian byte form.
trait Le: Element + Copy {
    const DTYPE: DType;
    /// The elements' bytes as kiln stores them.
    fn to_le(values: impl ExactSizeIterator<Item = Self>) -> Vec<u8>;
    /// The elements stored in `raw` (trailing bytes of a partial element are ignored).
    fn from_le(raw: &[u8]) -> Vec<Self>;
}

macro_rules! le {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Le for $t {
            const DTYPE: DType = DType::$d;
            fn to_le(values: impl ExactSizeIterator<Item = Self>) -> Vec<u8> {
                const N: usize = std::mem::size_of::<$t>();
                let mut out = vec![0u8; values.len() * N];
                for (o, v) in out.as_chunks_mut::<N>().0.iter_mut().zip(values) {
                    *o = v.to_le_bytes();
                }
                out
            }
            fn from_le(raw: &[u8]) -> Vec<Self> {
                raw.as_chunks::<{ std::mem::size_of::<$t>() }>().0.iter().map(|c| <$t>::from_le_bytes(*c)).collect()
            }
        }
    )*};
}

le!(f32 => F32, f64 => F64, half::f16 => F16, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

impl Le for bool {
    const DTYPE: DType = DType::Bool;
    fn to_le(values: impl ExactSizeIterator<Item = Self>) -> Vec<u8> {
        values.map(u8::from).collect()
    }
    fn from_le(raw: &[u8]) -> Vec<Self> {
        raw.iter().map(|&b| b != 0).collect()
    }
}

/// Calls `$f::<T>($($arg),*)` for the element type `T` matching kiln dtype `$dtype`, or
/// evaluates `$otherwise` when the bindings have no conversion for it.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident($($arg:expr),*), $otherwise:expr) => {
        match $dtype {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            DType::F16 => $f::<half::f16>($($arg),*),
            DType::I8 => $f::<i8>($($arg),*),
            DType::I16 => $f::<i16>($($arg),*),
            DType::I32 => $f::<i32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::U16 => $f::<u16>($($arg),*),
            DType::U32 => $f::<u32>($($arg),*),
            DType::U64 => $f::<u64>($($arg),*),
            DType::Bool => $f::<bool>($($arg),*),
            _ => $otherwise,
        }
    };
}

/// The dtypes [`to_tensor`] takes, for messages.
const SUPPORTED: &str = "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32 and float64";

/// `value` (input `name`) as a tensor: a copy of its elements in row-major order, whatever
/// its strides. `TypeError` for anything but a NumPy array of a supported dtype in native byte
/// order.
pub(crate) fn to_tensor(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let Ok(array) = value.cast::<PyUntypedArray>() else {
        return Err(PyTypeError::new_err(format!("input \"{name}\": expected a numpy.ndarray, got {}", crate::type_name(value))));
    };
    DType::ALL.iter().find_map(|&d| by_dtype!(d, copy_in(array), None)).unwrap_or_else(|| {
        Err(PyTypeError::new_err(format!("input \"{name}\": kiln cannot take arrays of dtype {}; it takes {SUPPORTED} arrays in native byte order", array.dtype())))
    })
}

/// The tensor of `array` if its dtype is `T`'s (NumPy's `EquivTypes`: same kind, size and
/// byte order).
fn copy_in<T: Le>(array: &Bound<'_, PyUntypedArray>) -> Option<PyResult<Tensor>> {
    let typed = array.cast::<PyArrayDyn<T>>().ok()?;
    // Fails only while Rust code (another rust-numpy extension) holds the array mutably.
    let view = match typed.try_readonly() {
        Ok(view) => view,
        Err(e) => return Some(Err(e.into())),
    };
    // ndarray's slice is the elements in row-major order (NumPy's `as_slice` also takes
    // Fortran order); any other layout is walked in row-major order.
    let elements = view.as_array();
    let bytes = match elements.as_slice() {
        Some(slice) => T::to_le(slice.iter().copied()),
        None => T::to_le(elements.iter().copied()),
    };
    let shape = view.shape().iter().map(|&d| d as u64).collect();
    Some(Ok(Tensor { dtype: T::DTYPE, shape, data: TensorData::Raw(bytes.into()) }))
}

/// Output `name` as a NumPy array owning a copy of its elements.
pub(crate) fn to_array<'py>(py: Python<'py>, name: &str, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let no = || KilnError::new_err(format!("output \"{name}\" has element type {}, which the Python bindings cannot convert yet", tensor.dtype));
    by_dtype!(tensor.dtype, copy_out(py, name, tensor), Err(no()))
}

fn copy_out<'py, T: Le>(py: Python<'py>, name: &str, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let raw = tensor.raw().ok_or_else(|| KilnError::new_err(format!("output \"{name}\" has no bytes")))?;
    let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
    let array = ArrayD::from_shape_vec(IxDyn(&shape), T::from_le(raw))
        .map_err(|e| KilnError::new_err(format!("output \"{name}\": {} bytes for shape {:?} of {}: {e}", raw.len(), tensor.shape, tensor.dtype)))?;
    Ok(array.into_pyarray(py).into_any())
}

/// The NumPy name of `dtype` where NumPy has the type (`float32`, `int64`, `bool`), else
/// kiln's (`bf16`, `f8e4m3fn`, `string`, ...).
pub(crate) fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
        other => other.name(),
    }
}
