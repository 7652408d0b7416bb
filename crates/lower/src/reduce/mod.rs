//! Lowering of reductions and ops along one axis: the Reduce* ops, ArgMax/ArgMin, Softmax,
//! LogSoftmax, Hardmax, CumSum/CumProd and TopK (see `mod.rs`).
//!
//! Every kernel here has the same shape: an outer loop nest over the axes that are kept and,
//! inside it, one or more passes over the axes that are reduced or scanned. [`Split`]
//! describes that division of an operand's axes; [`fold`] builds one accumulating pass. The
//! normalization family (`norm`) uses both.

pub(crate) mod arg;
pub(crate) mod reduce_ops;
pub(crate) mod scan;
pub(crate) mod softmax;
pub(crate) mod topk;

use kiln_tir::{NodeId, Tensor};

use super::{LowerError, Lowerer, Operand};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;

/// An operand's axes divided into outer axes, which a kernel loops over outside, and inner
/// axes, which each outer iteration passes over (reduces, scans, normalizes).
#[derive(Clone, Debug)]
pub(super) struct Split {
    dims: Vec<u64>,
    inner: Vec<bool>,
}

impl Split {
    /// `dims` with the axes marked true in `inner` as inner axes.
    pub(super) fn new(dims: &[u64], inner: Vec<bool>) -> Split {
        debug_assert_eq!(dims.len(), inner.len());
        Split { dims: dims.to_vec(), inner }
    }

    /// `dims` with the single inner axis `axis`.
    pub(super) fn along(dims: &[u64], axis: usize) -> Split {
        Split::new(dims, (0..dims.len()).map(|i| i == axis).collect())
    }

    /// `dims` with the axes from `first` on as inner axes.
    pub(super) fn trailing(dims: &[u64], first: usize) -> Split {
        Split::new(dims, (0..dims.len()).map(|i| i >= first).collect())
    }

    /// Extents of the outer axes, in order.
    pub(super) fn outer_dims(&self) -> Vec<u64> {
        self.dims.iter().zip(&self.inner).filter(|&(_, &r)| !r).map(|(&d, _)| d).collect()
    }

    /// Extents of the inner axes, in order.
    pub(super) fn inner_dims(&self) -> Vec<u64> {
        self.dims.iter().zip(&self.inner).filter(|&(_, &r)| r).map(|(&d, _)| d).collect()
    }

    /// Number of outer iterations.
    pub(super) fn outer_count(&self) -> u64 {
        self.outer_dims().iter().product()
    }

    /// Number of elements each outer iteration passes over.
    pub(super) fn inner_count(&self) -> u64 {
        self.inner_dims().iter().product()
    }

    /// The full multi-index from outer and inner indices.
    pub(super) fn full(&self, outer: &[Expr], inner: &[Expr]) -> Vec<Expr> {
        let (mut o, mut i) = (outer.iter(), inner.iter());
        self.inner.iter().map(|&r| if r { i.next() } else { o.next() }.cloned().unwrap_or_else(|| Expr::idx(0))).collect()
    }

    /// The row-major element index from outer and inner indices.
    pub(super) fn index(&self, outer: &[Expr], inner: &[Expr]) -> Expr {
        self.flat(&self.full(outer, inner))
    }

    /// The row-major element index of a full multi-index.
    pub(super) fn flat(&self, full: &[Expr]) -> Expr {
        linear(full, &strides(&self.dims))
    }

    /// The row-major index of an outer iteration among all of them: the element index of a
    /// reduction's output, whether or not it keeps the reduced axes as ones.
    pub(super) fn outer_index(&self, outer: &[Expr]) -> Expr {
        linear(outer, &strides(&self.outer_dims()))
    }
}

/// One accumulating pass over the inner axes of `split` at outer index `outer`: declares a
/// local of type `ty` starting at `init` and assigns it `step(acc, full_index)` for every inner
/// element. Returns the statements and the accumulator.
pub(super) fn fold(k: &mut Kernel, split: &Split, outer: &[Expr], ty: ScalarType, init: Expr, step: impl FnOnce(Expr, &[Expr]) -> Expr) -> (Vec<Stmt>, Expr) {
    let acc = k.var(ty);
    let mut stmts = vec![Stmt::Local(acc, init)];
    stmts.extend(k.nest(&split.inner_dims(), |_, inner| {
        let full = split.full(outer, inner);
        vec![Stmt::Assign(acc, step(Expr::Var(acc), &full))]
    }));
    (stmts, Expr::Var(acc))
}

/// Partial sums [`fold_sum`] keeps.
const PARTIAL_SUMS: u64 = 8;

/// `Σ term(full_index)` over the inner axes of `split` at outer index `outer`, in `ty`. Along a
/// long innermost axis the elements go to eight partial sums in turn, added pairwise at the
/// end: a row's additions form eight chains instead of one, each an eighth as long, so the
/// adds overlap (a float sum then rounds as that blocked order does, as vectorized reductions
/// elsewhere do). Returns the statements and the sum.
pub(super) fn fold_sum(k: &mut Kernel, split: &Split, outer: &[Expr], ty: ScalarType, term: impl Fn(&[Expr]) -> Expr) -> (Vec<Stmt>, Expr) {
    let dims = split.inner_dims();
    let zero = if ty.is_float() { Expr::float(ty, 0.0) } else { Expr::int(ty, 0) };
    let Some((&last, rest)) = dims.split_last().filter(|&(&last, _)| last >= 2 * PARTIAL_SUMS && ty != ScalarType::Bool) else {
        return fold(k, split, outer, ty, zero, |acc, f| acc + term(f));
    };
    let partial: Vec<Var> = (0..PARTIAL_SUMS).map(|_| k.var(ty)).collect();
    let mut stmts: Vec<Stmt> = partial.iter().map(|&v| Stmt::Local(v, zero.clone())).collect();
    let (blocks, tail) = (last / PARTIAL_SUMS, last % PARTIAL_SUMS);
    stmts.extend(k.nest(rest, |k, i| {
        let add = |v: Var, at: Expr| {
            let inner: Vec<Expr> = i.iter().cloned().chain([at]).collect();
            Stmt::Assign(v, Expr::Var(v) + term(&split.full(outer, &inner)))
        };
        let mut s = k.nest(&[blocks], |_, b| partial.iter().zip(0..).map(|(&v, j)| add(v, b[0].clone() * PARTIAL_SUMS as i64 + j)).collect());
        s.extend(partial.iter().zip(0..tail as i64).map(|(&v, j)| add(v, Expr::idx((blocks * PARTIAL_SUMS) as i64 + j))));
        s
    }));
    let mut sums: Vec<Expr> = partial.into_iter().map(Expr::Var).collect();
    while sums.len() > 1 {
        sums = sums.chunks(2).map(|p| p.iter().cloned().reduce(|a, b| a + b).unwrap_or_else(|| zero.clone())).collect();
    }
    (stmts, sums.pop().unwrap_or(zero))
}

/// Binds `e` to a fresh immutable variable of type `ty`, appending the `Let` to `stmts`.
pub(super) fn bind(k: &mut Kernel, stmts: &mut Vec<Stmt>, ty: ScalarType, e: Expr) -> Expr {
    let v = k.var(ty);
    stmts.push(Stmt::Let(v, e));
    Expr::Var(v)
}

/// Element `index` of `x`, converted to `ty` if its values have another type.
pub(super) fn load_as(x: &Operand, index: Expr, ty: ScalarType) -> Expr {
    let e = Expr::load(x.buf, index);
    if x.ty() == ty { e } else { e.cast(ty) }
}

/// `e` (of type `from`) converted to `to` if the types differ.
pub(super) fn convert(e: Expr, from: ScalarType, to: ScalarType) -> Expr {
    if from == to { e } else { e.cast(to) }
}

/// The least value of `ty`: −∞ for floats, the minimum integer, false.
pub(super) fn lowest(ty: ScalarType) -> Expr {
    match ty {
        ScalarType::F32 | ScalarType::F64 => Expr::float(ty, f64::NEG_INFINITY),
        ScalarType::Bool => Expr::Const(Scalar::Bool(false)),
        ScalarType::I8 => Expr::int(ty, i8::MIN.into()),
        ScalarType::I16 => Expr::int(ty, i16::MIN.into()),
        ScalarType::I32 => Expr::int(ty, i32::MIN.into()),
        ScalarType::I64 => Expr::int(ty, i64::MIN),
        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 | ScalarType::U64 => Expr::int(ty, 0),
    }
}

/// The greatest value of `ty`: +∞ for floats, the maximum integer, true.
pub(super) fn highest(ty: ScalarType) -> Expr {
    match ty {
        ScalarType::F32 | ScalarType::F64 => Expr::float(ty, f64::INFINITY),
        ScalarType::Bool => Expr::Const(Scalar::Bool(true)),
        ScalarType::I8 => Expr::int(ty, i8::MAX.into()),
        ScalarType::I16 => Expr::int(ty, i16::MAX.into()),
        ScalarType::I32 => Expr::int(ty, i32::MAX.into()),
        ScalarType::I64 => Expr::int(ty, i64::MAX),
        ScalarType::U8 => Expr::int(ty, u8::MAX.into()),
        ScalarType::U16 => Expr::int(ty, u16::MAX.into()),
        ScalarType::U32 => Expr::int(ty, u32::MAX.into()),
        // The bit pattern of u64::MAX.
        ScalarType::U64 => Expr::int(ty, -1),
    }
}

/// True if `e` (of type `ty`) is NaN; constant false for non-float types.
pub(super) fn is_nan(e: Expr, ty: ScalarType) -> Expr {
    if ty.is_float() { e.un(UnOp::IsNan) } else { Expr::Const(Scalar::Bool(false)) }
}

/// `a && b` on bools.
pub(super) fn and(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::And, b)
}

/// `a || b` on bools.
pub(super) fn or(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::Or, b)
}

/// `!a` on a bool.
pub(super) fn not(a: Expr) -> Expr {
    a.un(UnOp::Not)
}

/// `axis` in `-rank..rank` as a non-negative axis.
pub(super) fn axis(cx: &Lowerer<'_>, n: NodeId, axis: i64, rank: usize) -> Result<usize, LowerError> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a >= rank as i64 {
        return Err(cx.unsupported(n, format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(a as usize)
}

/// The integers of constant input `i` of `n`: `Ok(None)` if the input is omitted, unsupported
/// if it is computed at run time.
pub(super) fn const_ints(cx: &Lowerer<'_>, n: NodeId, i: usize, what: &str) -> Result<Option<Vec<i64>>, LowerError> {
    if cx.node(n).inputs.get(i).copied().flatten().is_none() {
        return Ok(None);
    }
    match cx.const_input(n, i).and_then(Tensor::to_i64s) {
        Some(v) => Ok(Some(v)),
        None => Err(cx.unsupported(n, format!("{what} computed at run time"))),
    }
}

/// Fails unless `out` has `count` elements: a guard against emitting wrong code when shape
/// inference and this lowering disagree.
pub(super) fn expect_len(cx: &Lowerer<'_>, n: NodeId, out: &Operand, count: u64) -> Result<(), LowerError> {
    if out.numel() == count {
        Ok(())
    } else {
        Err(cx.unsupported(n, format!("output has {} elements where {count} were expected", out.numel())))
    }
}

#[cfg(test)]
mod tests;
