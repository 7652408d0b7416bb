//! Value types: an element type and a shape of (possibly symbolic) dims.

use std::fmt;

use crate::dim::Dim;
use crate::dtype::DType;

/// The type of a tensor value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// One dim per axis; empty for a scalar.
    pub shape: Vec<Dim>,
}

impl TensorType {
    /// A type with all dims known.
    pub fn known(dtype: DType, dims: &[u64]) -> TensorType {
        TensorType { dtype, shape: dims.iter().map(|&d| Dim::Known(d)).collect() }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The dims, if all are known.
    pub fn known_dims(&self) -> Option<Vec<u64>> {
        self.shape.iter().map(Dim::known).collect()
    }

    /// The element count, if all dims are known and it fits in `u64`.
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.known()?))
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
