//! Data movement and indexing: ops whose output elements are input elements (or constants)
//! picked by computed indices. Each lowers to loop nests over the output (or, for scatters,
//! over the updates) that compute the input index of every element.
//!
//! Parameter inputs (starts, pads, repeats, scales, ...) are usually constants, but need not
//! be: output shapes are static either way, so a run-time parameter becomes a load in the
//! kernel's preamble plus a [`Stmt::Check`] that it agrees with the static output shape.
//! Constant parameters fold away ([`fold`]), so the common case has no preamble at all.
//!
//! **Invariant: no kernel of this family reads or writes outside a buffer.** Every index that
//! comes from tensor data (gather and scatter indices, sequence lengths, run-time slice
//! bounds) is either clamped or guarded by a `Check` before it is used.
//!
//! Topics: [`layout`] (Transpose, Concat, Split, Tile, Expand, DepthToSpace, SpaceToDepth,
//! Trilu), [`crop`] (Slice, Pad, CenterCropPad, ReverseSequence, Compress), [`index`]
//! (Gather*, Scatter*, OneHot, TensorScatter), [`fill`] (ConstantOfShape, Range, EyeLike,
//! Shape, Size), [`resize`] (Resize), [`col2im`] (Col2Im). NonZero and Unique are refused
//! (`dispatch.rs`): their output shapes depend on the data.

pub(crate) mod col2im;
pub(crate) mod crop;
pub(crate) mod fill;
pub(crate) mod index;
pub(crate) mod layout;
pub(crate) mod resize;
#[cfg(test)]
mod tests;

use kiln_tir::{DType, NodeId, Tensor};

use super::{LowerError, Lowerer, Operand};
use kiln_loops::interp::Val;
use kiln_loops::ir::*;

/// A kernel being built: the kernel (for fresh variables) and its top-level statements.
pub(super) struct Body {
    /// The kernel.
    pub k: Kernel,
    /// Statements so far.
    pub stmts: Vec<Stmt>,
}

impl Body {
    /// A new kernel for node `n`.
    pub fn new(cx: &mut Lowerer<'_>, n: NodeId) -> Body {
        Body { k: cx.kernel(n), stmts: Vec::new() }
    }

    /// Binds `e` (of type `ty`), folded, to a `let` unless it is a constant or a variable.
    pub fn bind(&mut self, ty: ScalarType, e: Expr) -> Expr {
        bind(&mut self.k, &mut self.stmts, ty, e)
    }

    /// Appends a loop nest over `dims` built by `body`.
    pub fn nest(&mut self, dims: &[u64], body: impl FnOnce(&mut Kernel, &[Expr]) -> Vec<Stmt>) {
        let s = self.k.nest(dims, body);
        self.stmts.extend(s);
    }

    /// Adds a run-time check that `cond` holds (see [`check`]).
    pub fn check(&mut self, cx: &mut Lowerer<'_>, n: NodeId, cond: Expr, msg: &str) -> Result<(), LowerError> {
        check(cx, n, &mut self.stmts, cond, msg)
    }

    /// Finishes the kernel and appends it to the program.
    pub fn push(mut self, cx: &mut Lowerer<'_>) {
        self.k.body = self.stmts;
        cx.push(self.k);
    }
}

/// Binds `e` (of type `ty`), folded, to a fresh `let` in `stmts`; constants and variables are
/// returned as they are.
pub(super) fn bind(k: &mut Kernel, stmts: &mut Vec<Stmt>, ty: ScalarType, e: Expr) -> Expr {
    let e = fold(e);
    if matches!(e, Expr::Var(_) | Expr::Const(_)) {
        return e;
    }
    let v = k.var(ty);
    stmts.push(Stmt::Let(v, e));
    Expr::Var(v)
}

/// Appends a check that `cond` holds at run time, naming `msg` if it fails. A condition that
/// folds to true is dropped; one that folds to false means the model is invalid.
pub(super) fn check(cx: &mut Lowerer<'_>, n: NodeId, stmts: &mut Vec<Stmt>, cond: Expr, msg: &str) -> Result<(), LowerError> {
    match fold(cond) {
        Expr::Const(Scalar::Bool(true)) => Ok(()),
        Expr::Const(Scalar::Bool(false)) => Err(cx.unsupported(n, format!("invalid model: {msg}"))),
        cond => {
            let error = cx.error(n, msg);
            stmts.push(Stmt::Check { cond, error });
            Ok(())
        }
    }
}

/// `a && b`.
pub(super) fn and(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::And, b)
}

/// `a || b`.
pub(super) fn or(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::Or, b)
}

/// `lo <= x && x < hi` for `i64` expressions.
pub(super) fn in_range(x: Expr, lo: i64, hi: Expr) -> Expr {
    and(x.clone().cmp(CmpOp::Ge, Expr::idx(lo)), x.cmp(CmpOp::Lt, hi))
}

/// `x` clamped to `lo..=hi`.
pub(super) fn clamp(x: Expr, lo: Expr, hi: Expr) -> Expr {
    x.max(lo).min(hi)
}

/// An index loaded from tensor data, as `i64`; negative values count from `dim`.
pub(super) fn wrap_index(raw: Expr, dim: Expr) -> Expr {
    raw.clone().cmp(CmpOp::Lt, Expr::idx(0)).select(raw.clone() + dim, raw)
}

/// Converts `e` of type `from` to `to`, leaving it alone when the types agree.
pub(super) fn convert(e: Expr, from: ScalarType, to: ScalarType) -> Expr {
    if from == to { e } else { e.cast(to) }
}

/// Element `i` of operand `x` converted to `i64`.
pub(super) fn load_i64(x: &Operand, i: Expr) -> Expr {
    convert(Expr::load(x.buf, i), x.ty(), ScalarType::I64)
}

/// Element `i` of operand `x` converted to `f64`.
pub(super) fn load_f64(x: &Operand, i: Expr) -> Expr {
    convert(Expr::load(x.buf, i), x.ty(), ScalarType::F64)
}

/// Normalizes a possibly negative axis against `rank`.
pub(super) fn norm_axis(cx: &Lowerer<'_>, n: NodeId, axis: i64, rank: usize) -> Result<usize, LowerError> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a >= rank as i64 {
        return Err(cx.unsupported(n, format!("invalid model: axis {axis} is out of range for rank {rank}")));
    }
    Ok(a as usize)
}

/// The values of integer parameter input `i` (axes, pads, repeats, ...) as `i64` expressions:
/// constants when the input is constant, else loads bound in `body`'s preamble. `None` if
/// the input is omitted.
pub(super) fn int_param(cx: &mut Lowerer<'_>, n: NodeId, i: usize, body: &mut Body) -> Result<Option<Vec<Expr>>, LowerError> {
    if let Some(t) = cx.const_input(n, i) {
        let vals = t.to_i64s().ok_or_else(|| cx.unsupported(n, format!("input {i} must be an integer tensor")))?;
        return Ok(Some(vals.into_iter().map(Expr::idx).collect()));
    }
    let Some(x) = cx.input(n, i)? else { return Ok(None) };
    if x.ty().is_float() {
        return Err(cx.unsupported(n, format!("input {i} must be an integer tensor")));
    }
    Ok(Some((0..x.numel() as i64).map(|j| body.bind(ScalarType::I64, load_i64(&x, Expr::idx(j)))).collect()))
}

/// The values of a float parameter input (scales, roi) as `f64` expressions, constant or loaded.
pub(super) fn float_param(cx: &mut Lowerer<'_>, n: NodeId, i: usize, body: &mut Body) -> Result<Option<Vec<Expr>>, LowerError> {
    if let Some(t) = cx.const_input(n, i) {
        let numel = t.numel().unwrap_or(0);
        let vals: Option<Vec<Expr>> = (0..numel as usize).map(|j| tensor_scalar(t, j, ScalarType::F64)).collect();
        return vals.map(Some).ok_or_else(|| cx.unsupported(n, format!("input {i}: constant of unsupported element type")));
    }
    let Some(x) = cx.input(n, i)? else { return Ok(None) };
    Ok(Some((0..x.numel() as i64).map(|j| body.bind(ScalarType::F64, load_f64(&x, Expr::idx(j)))).collect()))
}

/// Element `i` of constant `t` as a constant of type `ty` (converted as a cast would).
pub(super) fn tensor_scalar(t: &Tensor, i: usize, ty: ScalarType) -> Option<Expr> {
    let raw = t.raw()?;
    let width = (t.dtype.bits() / 8) as usize;
    let bytes = raw.get(i * width..(i + 1) * width)?;
    let mut b8 = [0u8; 8];
    b8[..width].copy_from_slice(bytes);
    let u = u64::from_le_bytes(b8);
    let val = match t.dtype {
        DType::Bool => Val::Bool(u != 0),
        DType::F32 => Val::F32(f32::from_bits(u as u32)),
        DType::F64 => Val::F64(f64::from_bits(u)),
        DType::F16 => Val::F32(half::f16::from_bits(u as u16).to_f32()),
        DType::BF16 => Val::F32(half::bf16::from_bits(u as u16).to_f32()),
        DType::I8 => Val::Int(ScalarType::I8, u as u8 as i8 as i64),
        DType::I16 => Val::Int(ScalarType::I16, u as u16 as i16 as i64),
        DType::I32 => Val::Int(ScalarType::I32, u as u32 as i32 as i64),
        DType::I64 => Val::Int(ScalarType::I64, u as i64),
        DType::U8 => Val::Int(ScalarType::U8, u as i64),
        DType::U16 => Val::Int(ScalarType::U16, u as i64),
        DType::U32 => Val::Int(ScalarType::U32, u as i64),
        DType::U64 => Val::Int(ScalarType::U64, u as i64),
        _ => return None,
    };
    Some(Expr::Const(scalar_of(val.cast(ty))))
}

fn scalar_of(v: Val) -> Scalar {
    match v {
        Val::Bool(b) => Scalar::Bool(b),
        Val::Int(t, x) => Scalar::Int(t, x),
        Val::F32(f) => Scalar::F32(f),
        Val::F64(f) => Scalar::F64(f),
    }
}

fn val_of(s: Scalar) -> Val {
    match s {
        Scalar::Bool(b) => Val::Bool(b),
        Scalar::Int(t, x) => Val::Int(t, x),
        Scalar::F32(f) => Val::F32(f),
        Scalar::F64(f) => Val::F64(f),
    }
}

/// Folds constant subexpressions of `i64`, `f64`, `f32` and `bool` type, and selects with a
/// constant condition, so parameters that are constants leave no trace in the kernel.
pub(super) fn fold(e: Expr) -> Expr {
    match e {
        Expr::Binary(op, a, b) => {
            let (a, b) = (fold(*a), fold(*b));
            if let (Expr::Const(x), Expr::Const(y)) = (&a, &b)
                && let Some(c) = fold_binary(op, *x, *y)
            {
                return Expr::Const(c);
            }
            Expr::Binary(op, Box::new(a), Box::new(b))
        }
        Expr::Cmp(op, a, b) => {
            let (a, b) = (fold(*a), fold(*b));
            if let (Expr::Const(x), Expr::Const(y)) = (&a, &b)
                && let Some(c) = fold_cmp(op, *x, *y)
            {
                return Expr::Const(Scalar::Bool(c));
            }
            Expr::Cmp(op, Box::new(a), Box::new(b))
        }
        Expr::Select(c, a, b) => match fold(*c) {
            Expr::Const(Scalar::Bool(true)) => fold(*a),
            Expr::Const(Scalar::Bool(false)) => fold(*b),
            c => Expr::Select(Box::new(c), Box::new(fold(*a)), Box::new(fold(*b))),
        },
        Expr::Unary(op, a) => {
            let a = fold(*a);
            let folded = match (op, &a) {
                (UnOp::Neg, Expr::Const(Scalar::Int(ScalarType::I64, x))) => Some(Scalar::index(x.wrapping_neg())),
                (UnOp::Not, Expr::Const(Scalar::Bool(x))) => Some(Scalar::Bool(!x)),
                (UnOp::Neg, Expr::Const(Scalar::F64(x))) => Some(Scalar::F64(-x)),
                (UnOp::Floor, Expr::Const(Scalar::F64(x))) => Some(Scalar::F64(x.floor())),
                (UnOp::Ceil, Expr::Const(Scalar::F64(x))) => Some(Scalar::F64(x.ceil())),
                (UnOp::Abs, Expr::Const(Scalar::F64(x))) => Some(Scalar::F64(x.abs())),
                (UnOp::Round, Expr::Const(Scalar::F64(x))) => Some(Scalar::F64(x.round_ties_even())),
                _ => None,
            };
            folded.map_or_else(|| Expr::Unary(op, Box::new(a)), Expr::Const)
        }
        Expr::Cast(ty, mode, a) => match fold(*a) {
            Expr::Const(s) => Expr::Const(scalar_of(val_of(s).cast(ty))),
            a => Expr::Cast(ty, mode, Box::new(a)),
        },
        e => e,
    }
}

fn fold_binary(op: BinOp, x: Scalar, y: Scalar) -> Option<Scalar> {
    Some(match (x, y) {
        (Scalar::Int(ScalarType::I64, a), Scalar::Int(ScalarType::I64, b)) => Scalar::index(match op {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            BinOp::Div if b != 0 => a.wrapping_div(b),
            BinOp::Rem if b != 0 => a.wrapping_rem(b),
            BinOp::Min => a.min(b),
            BinOp::Max => a.max(b),
            _ => return None,
        }),
        (Scalar::F64(a), Scalar::F64(b)) => Scalar::F64(float_op(op, a, b)?),
        (Scalar::F32(a), Scalar::F32(b)) => Scalar::F32(float_op(op, f64::from(a), f64::from(b))? as f32),
        (Scalar::Bool(a), Scalar::Bool(b)) => Scalar::Bool(match op {
            BinOp::And => a && b,
            BinOp::Or => a || b,
            BinOp::Xor => a != b,
            _ => return None,
        }),
        _ => return None,
    })
}

fn float_op(op: BinOp, a: f64, b: f64) -> Option<f64> {
    Some(match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Min if !a.is_nan() && !b.is_nan() => a.min(b),
        BinOp::Max if !a.is_nan() && !b.is_nan() => a.max(b),
        _ => return None,
    })
}

fn fold_cmp(op: CmpOp, x: Scalar, y: Scalar) -> Option<bool> {
    let ord = match (x, y) {
        (Scalar::Int(ScalarType::I64, a), Scalar::Int(ScalarType::I64, b)) => a.cmp(&b),
        (Scalar::F64(a), Scalar::F64(b)) => a.partial_cmp(&b)?,
        (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(&b),
        _ => return None,
    };
    Some(match op {
        CmpOp::Eq => ord.is_eq(),
        CmpOp::Ne => ord.is_ne(),
        CmpOp::Lt => ord.is_lt(),
        CmpOp::Le => ord.is_le(),
        CmpOp::Gt => ord.is_gt(),
        CmpOp::Ge => ord.is_ge(),
    })
}
