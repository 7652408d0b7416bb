//! Lowering of normalization ops: BatchNormalization, LayerNormalization,
//! InstanceNormalization, GroupNormalization, RMSNormalization, LpNormalization,
//! MeanVarianceNormalization and LRN (see `mod.rs`).
//!
//! Most are one kernel over a [`Split`] of the input: an outer loop per normalized group, and
//! inside it passes over the group's elements that compute its statistics and then write the
//! normalized values. Statistics are computed in `f32` (`f64` for `f64` inputs or an `f64`
//! stash type), the variance in two passes as ONNX's reference does.

pub(crate) mod batch;
pub(crate) mod group;
pub(crate) mod layer;
pub(crate) mod local;
#[cfg(test)]
mod tests;

use kiln_tir::NodeId;

use super::reduce::{bind, fold_sum, load_as, Split};
use super::{LowerError, Lowerer, Operand};
use kiln_loops::ir::*;

/// Statements computing the mean and the population variance, in `ct`, of the elements of
/// `x` over the inner axes of `split` (a row-major view of `x`) at outer index `o`. Returns
/// the statements and the two values, valid after them.
fn moments(k: &mut Kernel, x: &Operand, split: &Split, o: &[Expr], ct: ScalarType) -> (Vec<Stmt>, Expr, Expr) {
    let count = Expr::float(ct, split.inner_count() as f64);
    let (mut s, sum) = fold_sum(k, split, o, ct, |f| load_as(x, split.flat(f), ct));
    let mean = bind(k, &mut s, ct, sum / count.clone());
    let (st, squares) = fold_sum(k, split, o, ct, |f| {
        let d = load_as(x, split.flat(f), ct) - mean.clone();
        d.clone() * d
    });
    s.extend(st);
    let var = bind(k, &mut s, ct, squares / count);
    (s, mean, var)
}

/// `1 / sqrt(var + epsilon)` in `ct`.
fn inv_std(var: Expr, epsilon: f32, ct: ScalarType) -> Expr {
    Expr::float(ct, 1.0) / (var + Expr::float(ct, f64::from(epsilon))).un(UnOp::Sqrt)
}

/// True if a tensor of shape `small` broadcasts (numpy rules) to `big` without growing it.
fn broadcasts_to(small: &[u64], big: &[u64]) -> bool {
    small.len() <= big.len() && small.iter().rev().zip(big.iter().rev()).all(|(&s, &b)| s == 1 || s == b)
}

/// The statistics type for an input whose values have type `ty`: `f64` when the input is
/// `f64` or `stash_f64` asks for it, else `f32`.
fn stats_type(ty: ScalarType, stash_f64: bool) -> ScalarType {
    if ty == ScalarType::F64 || stash_f64 { ScalarType::F64 } else { ScalarType::F32 }
}

/// Fails unless `op` is a float tensor.
fn expect_float(cx: &Lowerer<'_>, n: NodeId, op: &Operand) -> Result<(), LowerError> {
    if op.ty().is_float() { Ok(()) } else { Err(cx.unsupported(n, format!("{} input", op.ty().name()))) }
}

/// Fails unless `out` has exactly the dims `dims`.
fn expect_dims(cx: &Lowerer<'_>, n: NodeId, out: &Operand, dims: &[u64]) -> Result<(), LowerError> {
    if out.dims == dims { Ok(()) } else { Err(cx.unsupported(n, format!("output dims {:?} differ from the expected {dims:?}", out.dims))) }
}
