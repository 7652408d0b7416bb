//! Conversions between kiln tensors and `ndarray` arrays.

use bytes::Bytes;
use kiln_tir::{DType, Tensor, TensorData};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::{Error, Result};

/// An element type with a kiln dtype and a little-endian byte form.
pub trait Element: Copy + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// Size in bytes.
    const SIZE: usize;
    /// Appends the little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// Reads from exactly `SIZE` little-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {
        $(
            impl Element for $t {
                const DTYPE: DType = DType::$d;
                const SIZE: usize = std::mem::size_of::<$t>();
                fn put(self, out: &mut Vec<u8>) {
                    out.extend_from_slice(&self.to_le_bytes());
                }
                fn get(bytes: &[u8]) -> Self {
                    let mut b = [0u8; std::mem::size_of::<$t>()];
                    b.copy_from_slice(bytes);
                    <$t>::from_le_bytes(b)
                }
            }
        )*
    };
}

elements!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    const SIZE: usize = 1;
    fn put(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// A tensor holding a copy of `a`'s elements in row-major order.
pub fn tensor_from_array<T: Element>(a: ArrayViewD<'_, T>) -> Tensor {
    let mut bytes = Vec::with_capacity(a.len() * T::SIZE);
    for &x in a.iter() {
        x.put(&mut bytes);
    }
    Tensor { dtype: T::DTYPE, shape: a.shape().iter().map(|&d| d as u64).collect(), data: TensorData::Raw(Bytes::from(bytes)) }
}

/// The tensor's elements as an array of `T`; the dtype must match.
pub fn tensor_to_array<T: Element>(t: &Tensor) -> Result<ArrayD<T>> {
    let bad = |reason: String| Error::InputShape { name: String::from("(tensor)"), reason };
    if t.dtype != T::DTYPE {
        return Err(Error::InputDType { name: String::from("(tensor)"), expected: T::DTYPE, got: t.dtype });
    }
    let raw = t.raw().ok_or_else(|| bad("the tensor has no bytes".into()))?;
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    if raw.len() != n * T::SIZE {
        return Err(bad(format!("{} bytes for {n} elements of {}", raw.len(), T::DTYPE)));
    }
    let values: Vec<T> = raw.chunks_exact(T::SIZE).map(T::get).collect();
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| bad(e.to_string()))
}
