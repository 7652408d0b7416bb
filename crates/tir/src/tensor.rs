//! Constant tensors: weights, folded constants and tensor-valued attributes.

use bytes::Bytes;

use crate::dtype::{DType, DTypeKind};
use crate::types::TensorType;

/// A tensor with a concrete shape and (usually) its bytes.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Concrete dims.
    pub shape: Vec<u64>,
    /// The elements.
    pub data: TensorData,
}

/// Where a constant tensor's elements are.
#[derive(Clone, PartialEq)]
pub enum TensorData {
    /// Elements in ONNX `raw_data` layout: little-endian, row-major, sub-byte types packed
    /// low bits first, `bool` one byte each. Usually a zero-copy slice of a mapped file.
    Raw(Bytes),
    /// Elements of a `string` tensor.
    Strings(Vec<Bytes>),
    /// A weight known only by reference (parsed from text IR): the bytes are not available.
    Absent,
}

impl Tensor {
    /// Number of elements, or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// The tensor's type.
    pub fn ty(&self) -> TensorType {
        TensorType::known(self.dtype, &self.shape)
    }

    /// Size of the element storage in bytes (string tensors: total string bytes).
    pub fn byte_len(&self) -> u64 {
        match &self.data {
            TensorData::Raw(b) => b.len() as u64,
            TensorData::Strings(s) => s.iter().map(|b| b.len() as u64).sum(),
            TensorData::Absent => self.numel().and_then(|n| self.dtype.storage_bytes(n)).unwrap_or(0),
        }
    }

    /// The raw bytes, if present.
    pub fn raw(&self) -> Option<&[u8]> {
        match &self.data {
            TensorData::Raw(b) => Some(b),
            _ => None,
        }
    }

    /// A tensor of `i64` elements.
    pub fn from_i64s(shape: &[u64], values: &[i64]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor { dtype: DType::I64, shape: shape.to_vec(), data: TensorData::Raw(Bytes::from(bytes)) }
    }

    /// A tensor of `f32` elements.
    pub fn from_f32s(shape: &[u64], values: &[f32]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor { dtype: DType::F32, shape: shape.to_vec(), data: TensorData::Raw(Bytes::from(bytes)) }
    }

    /// The elements as `i64`, for integer and bool tensors whose bytes are present.
    ///
    /// Shape inference reads constant shape, axes and index inputs through this.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        let raw = self.raw()?;
        let n = usize::try_from(self.numel()?).ok()?;
        let width = (self.dtype.bits() / 8) as usize;
        if !matches!(self.dtype.kind(), DTypeKind::Signed | DTypeKind::Unsigned | DTypeKind::Bool) || width == 0 {
            return None;
        }
        if raw.len() != n * width {
            return None;
        }
        let signed = self.dtype.kind() == DTypeKind::Signed;
        raw.chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                if signed && c[width - 1] & 0x80 != 0 {
                    b[width..].fill(0xff);
                }
                let v = i64::from_le_bytes(b);
                // u64 values past i64::MAX do not fit the answer.
                (signed || width < 8 || v >= 0).then_some(v)
            })
            .collect()
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({}{:?}, {} bytes)", self.dtype, self.shape, self.byte_len())
    }
}
