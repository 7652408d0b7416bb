//! Lowering of the ops that fit no other family: the losses (NegativeLogLikelihoodLoss,
//! SoftmaxCrossEntropyLoss), spatial sampling (GridSample, AffineGrid, RoiAlign, DeformConv),
//! signal processing (DFT, STFT, the window generators, MelWeightMatrix) and Det.
//!
//! **Invariant: no kernel of this family reads or writes outside a buffer.** Class indices,
//! batch indices and sample positions that come from tensor data are checked by a
//! [`Stmt::Check`] or clamped into range before they address a buffer; a clamped position is
//! only ever read under a condition that says it was inside (zero padding).
//!
//! Refused, in `dispatch.rs`: NonMaxSuppression (its output shape depends on the data) and
//! the random ops (Bernoulli, RandomUniform[Like], RandomNormal[Like], Multinomial), whose
//! results kiln cannot reproduce.
//!
//! Topics: [`loss`], [`grid`] (GridSample, AffineGrid, and the interpolation taps DeformConv
//! shares), [`roi`] (RoiAlign), [`deform`] (DeformConv), [`signal`] (DFT, STFT, windows,
//! MelWeightMatrix), [`det`] (Det).

mod deform;
mod det;
mod grid;
mod loss;
mod roi;
mod signal;
#[cfg(test)]
mod tests;

use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer, Operand};
use kiln_loops::ir::*;

/// Lowers `n` if this family handles its op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::NegativeLogLikelihoodLoss(a) => loss::lower(cx, n, loss::Kind::Nll, a.ignore_index, a.reduction)?,
        Op::SoftmaxCrossEntropyLoss(a) => loss::lower(cx, n, loss::Kind::SoftmaxCrossEntropy, a.ignore_index, a.reduction)?,
        Op::GridSample(a) => grid::grid_sample(cx, n, a)?,
        Op::AffineGrid(a) => grid::affine_grid(cx, n, a.align_corners != 0)?,
        Op::RoiAlign(a) => roi::roi_align(cx, n, a)?,
        Op::DeformConv(a) => deform::deform_conv(cx, n, a)?,
        Op::DFT(a) => signal::dft(cx, n, a.inverse != 0, a.onesided != 0)?,
        Op::STFT(a) => signal::stft(cx, n, a.onesided != 0)?,
        Op::HannWindow(a) => signal::window(cx, n, signal::Window::Hann, a.periodic != 0)?,
        Op::HammingWindow(a) => signal::window(cx, n, signal::Window::Hamming, a.periodic != 0)?,
        Op::BlackmanWindow(a) => signal::window(cx, n, signal::Window::Blackman, a.periodic != 0)?,
        Op::MelWeightMatrix(_) => signal::mel_weight_matrix(cx, n)?,
        Op::Det(_) => det::det(cx, n)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// A kernel being built: the kernel (for fresh variables) and its top-level statements.
struct Body {
    k: Kernel,
    stmts: Vec<Stmt>,
}

impl Body {
    /// A new kernel for node `n`.
    fn new(cx: &mut Lowerer<'_>, n: NodeId) -> Body {
        Body { k: cx.kernel(n), stmts: Vec::new() }
    }

    /// Finishes the kernel and appends it to the program.
    fn push(mut self, cx: &mut Lowerer<'_>) {
        self.k.body = self.stmts;
        cx.push(self.k);
    }
}

/// Binds `e` (of type `ty`) to a fresh immutable variable, appending the `Let` to `stmts`;
/// constants and variables are returned as they are.
fn bind(k: &mut Kernel, stmts: &mut Vec<Stmt>, ty: ScalarType, e: Expr) -> Expr {
    if matches!(e, Expr::Var(_) | Expr::Const(_)) {
        return e;
    }
    let v = k.var(ty);
    stmts.push(Stmt::Let(v, e));
    Expr::Var(v)
}

/// Declares a mutable local of type `ty` starting at `init`.
fn local(k: &mut Kernel, stmts: &mut Vec<Stmt>, ty: ScalarType, init: Expr) -> Var {
    let v = k.var(ty);
    stmts.push(Stmt::Local(v, init));
    v
}

/// `e` of type `from` converted to `to` if the types differ.
fn convert(e: Expr, from: ScalarType, to: ScalarType) -> Expr {
    if from == to { e } else { e.cast(to) }
}

/// Element `index` of `x` as a value of type `ty`.
fn load_as(x: &Operand, index: Expr, ty: ScalarType) -> Expr {
    convert(Expr::load(x.buf, index), x.ty(), ty)
}

/// A store of `value` (of type `ty`) into element `index` of `y`, converted to `y`'s value type.
fn store(y: &Operand, index: Expr, value: Expr, ty: ScalarType) -> Stmt {
    Stmt::Store { buf: y.buf, index, value: convert(value, ty, y.ty()) }
}

/// `a && b` on bools.
fn and(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::And, b)
}

/// `a || b` on bools.
fn or(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::Or, b)
}

/// `lo <= e < hi` for an `i64` expression.
fn in_range(e: Expr, lo: i64, hi: i64) -> Expr {
    and(e.clone().cmp(CmpOp::Ge, Expr::idx(lo)), e.cmp(CmpOp::Lt, Expr::idx(hi)))
}

/// `e` (an `i64`) clamped to `lo..=hi`.
fn clamp(e: Expr, lo: i64, hi: i64) -> Expr {
    e.max(Expr::idx(lo)).min(Expr::idx(hi))
}

/// `then` when `cond` holds.
fn when(cond: Expr, then: Vec<Stmt>) -> Stmt {
    Stmt::If { cond, then, otherwise: Vec::new() }
}

/// The float type `x` computes in (`f32` for half types), or unsupported.
fn float_type(cx: &Lowerer<'_>, n: NodeId, x: &Operand, what: &str) -> Result<ScalarType, LowerError> {
    let t = x.ty();
    if t.is_float() { Ok(t) } else { Err(cx.unsupported(n, format!("{what} of type {}", x.elem.name()))) }
}

/// Fails unless `out` has dims `want`: a guard against emitting wrong code when shape
/// inference and this lowering disagree.
fn expect_dims(cx: &Lowerer<'_>, n: NodeId, out: &Operand, want: &[u64]) -> Result<(), LowerError> {
    if out.dims == want {
        Ok(())
    } else {
        Err(cx.unsupported(n, format!("output has shape {:?} where {want:?} was expected", out.dims)))
    }
}

/// The integer scalar behind constant input `i` of `n`: `Ok(None)` if the input is omitted,
/// unsupported if it is computed at run time.
fn const_scalar(cx: &Lowerer<'_>, n: NodeId, i: usize, what: &str) -> Result<Option<i64>, LowerError> {
    if cx.node(n).inputs.get(i).copied().flatten().is_none() {
        return Ok(None);
    }
    match cx.const_input(n, i).and_then(kiln_tir::Tensor::to_i64s).as_deref() {
        Some(&[v]) => Ok(Some(v)),
        Some(_) => Err(cx.unsupported(n, format!("{what} is not a scalar"))),
        None => Err(cx.unsupported(n, format!("{what} computed at run time"))),
    }
}
