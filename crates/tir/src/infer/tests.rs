//! Unit tests of shape inference, by op family. Each test states inputs and expected output
//! types in the text form (`f32[batch, 3]`).

mod control;
mod elementwise;
mod graph;
mod nn;
mod robustness;
mod shape;
mod slice_gather;

use bytes::Bytes;

use super::{InferError, InferInput, RegionSig, infer_op};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::Op;
use crate::tensor::{Tensor, TensorData};
use crate::types::TensorType;

/// A type from its text form, e.g. `f32[batch, 3]` or `i64[]`.
pub(super) fn t(text: &str) -> TensorType {
    let (dtype, rest) = text.split_once('[').expect("type text has `[`");
    let dtype = DType::from_name(dtype).expect("known dtype");
    let dims = rest.strip_suffix(']').expect("type text ends with `]`");
    let shape = if dims.trim().is_empty() { Vec::new() } else { dims.split(',').map(|d| Dim::parse(d.trim()).expect("dim parses")).collect() };
    TensorType { dtype, shape }
}

/// One node input in a test.
pub(super) enum Arg {
    /// A non-constant input of this type.
    Ty(TensorType),
    /// A constant input.
    Const(Tensor),
    /// An omitted optional input.
    Missing,
}

/// A non-constant input of type `text`.
pub(super) fn ty(text: &str) -> Arg {
    Arg::Ty(t(text))
}

/// A constant 1-D i64 input.
pub(super) fn ints(values: &[i64]) -> Arg {
    Arg::Const(Tensor::from_i64s(&[values.len() as u64], values))
}

/// A constant i64 scalar input.
pub(super) fn int(value: i64) -> Arg {
    Arg::Const(Tensor::from_i64s(&[], &[value]))
}

/// A constant tensor of `dtype` and `shape` from little-endian bytes.
pub(super) fn raw(dtype: DType, shape: &[u64], bytes: Vec<u8>) -> Arg {
    Arg::Const(Tensor { dtype, shape: shape.to_vec(), data: TensorData::Raw(Bytes::from(bytes)) })
}

/// A constant f32 scalar input.
pub(super) fn float(value: f32) -> Arg {
    Arg::Const(Tensor::from_f32s(&[], &[value]))
}

/// A constant 1-D f32 input.
pub(super) fn floats(values: &[f32]) -> Arg {
    Arg::Const(Tensor::from_f32s(&[values.len() as u64], values))
}

/// Runs inference with fresh symbols `u1`, `u2`, ...
pub(super) fn run_with(op: &Op, args: &[Arg], regions: &[RegionSig], outputs: usize) -> Result<Vec<TensorType>, InferError> {
    let types: Vec<Option<TensorType>> = args
        .iter()
        .map(|a| match a {
            Arg::Ty(t) => Some(t.clone()),
            Arg::Const(c) => Some(c.ty()),
            Arg::Missing => None,
        })
        .collect();
    let inputs: Vec<Option<InferInput<'_>>> = args
        .iter()
        .zip(&types)
        .map(|(a, ty)| {
            ty.as_ref().map(|ty| InferInput {
                ty,
                value: match a {
                    Arg::Const(c) => Some(c),
                    _ => None,
                },
            })
        })
        .collect();
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        Dim::sym(&format!("u{n}"))
    };
    infer_op(op, &inputs, regions, outputs, &mut fresh)
}

/// The outputs as text (`f32[2, 3]; i64[2, 3]`) or the error as `error: message`.
pub(super) fn show(r: Result<Vec<TensorType>, InferError>) -> String {
    match r {
        Ok(types) => types.iter().map(TensorType::to_string).collect::<Vec<_>>().join("; "),
        Err(e) => format!("error: {e}"),
    }
}

/// Infers `op` with `outputs` outputs and shows the result.
pub(super) fn infer(op: Op, args: &[Arg], outputs: usize) -> String {
    show(run_with(&op, args, &[], outputs))
}

/// Infers a one-output `op` and shows the result.
pub(super) fn infer1(op: Op, args: &[Arg]) -> String {
    infer(op, args, 1)
}

#[test]
fn type_text_helper_parses() {
    assert_eq!(t("f32[batch, 3]").to_string(), "f32[batch, 3]");
    assert_eq!(t("i64[]").rank(), 0);
}
