//! Access to an op's inputs, with errors that name the op.

use kiln_tir::Tensor;

use crate::array::Arr;
use crate::error::{Result, invalid};

/// The inputs of one op application.
pub(crate) struct Args<'a> {
    /// Text name of the op, for errors.
    pub op: &'static str,
    inputs: &'a [Option<&'a Tensor>],
    /// How many outputs the caller wants.
    pub num_outputs: usize,
}

impl<'a> Args<'a> {
    /// Wraps the inputs of `op`.
    pub(crate) fn new(op: &'static str, inputs: &'a [Option<&'a Tensor>], num_outputs: usize) -> Args<'a> {
        Args { op, inputs, num_outputs }
    }

    /// Input `i` as a tensor, if present.
    pub(crate) fn opt_tensor(&self, i: usize) -> Option<&'a Tensor> {
        self.inputs.get(i).copied().flatten()
    }

    /// Input `i` as a tensor; an error if absent.
    pub(crate) fn tensor(&self, i: usize) -> Result<&'a Tensor> {
        self.opt_tensor(i).ok_or_else(|| invalid(self.op, format!("required input {i} is missing")))
    }

    /// Input `i` decoded; an error if absent.
    pub(crate) fn arr(&self, i: usize) -> Result<Arr> {
        Arr::from_tensor(self.op, self.tensor(i)?)
    }

    /// Input `i` decoded, if present.
    pub(crate) fn opt_arr(&self, i: usize) -> Result<Option<Arr>> {
        self.opt_tensor(i).map(|t| Arr::from_tensor(self.op, t)).transpose()
    }

    /// Every present input, decoded, in order (for variadic ops).
    pub(crate) fn all(&self) -> Result<Vec<Arr>> {
        self.inputs.iter().flatten().map(|t| Arr::from_tensor(self.op, t)).collect()
    }

    /// Integer input `i` as `i64`s, if present (axes, pads, shapes, ...).
    pub(crate) fn opt_i64s(&self, i: usize) -> Result<Option<Vec<i64>>> {
        self.opt_arr(i)?.map(|a| a.as_i64s(self.op)).transpose()
    }

    /// Integer input `i` as `i64`s; an error if absent.
    pub(crate) fn i64s(&self, i: usize) -> Result<Vec<i64>> {
        self.arr(i)?.as_i64s(self.op)
    }

    /// The single element of integer input `i`, if present.
    pub(crate) fn opt_i64_scalar(&self, i: usize) -> Result<Option<i64>> {
        match self.opt_i64s(i)? {
            None => Ok(None),
            Some(v) if v.len() == 1 => Ok(Some(v[0])),
            Some(v) => Err(invalid(self.op, format!("input {i} must hold one element, holds {}", v.len()))),
        }
    }

    /// The single element of input `i` as `f64`, if present.
    pub(crate) fn opt_f64_scalar(&self, i: usize) -> Result<Option<f64>> {
        match self.opt_arr(i)? {
            None => Ok(None),
            Some(a) if a.len() == 1 => Ok(Some(a.to_f64s(self.op)?[0])),
            Some(a) => Err(invalid(self.op, format!("input {i} must hold one element, holds {}", a.len()))),
        }
    }
}
