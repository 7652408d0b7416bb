//! Lowering of the attention family: Attention (scaled dot-product attention with masks, key
//! and value caches and grouped heads), RotaryEmbedding, LinearAttention and
//! CausalConvWithState.
//!
//! Kernels are plain loop nests. Arithmetic happens in one computation type per kernel (`f32`,
//! or `f64` when any operand is `f64`; half-precision values load as `f32`). ONNX's reference
//! implementation computes these ops array by array in the data type, so every intermediate
//! array it materializes is rounded to that type; [`Num::round`] rounds at exactly those points,
//! which makes half-precision results agree with the reference bit for bit instead of to within
//! a unit or two of rounding.

mod causal_conv;
mod linear;
mod rotary;
mod sdpa;
mod sdpa_kernel;

use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer, Operand};
use kiln_loops::ir::*;

/// Lowers `n` if this family handles its op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Attention(a) => sdpa::lower(cx, n, a)?,
        Op::RotaryEmbedding(a) => rotary::lower(cx, n, a)?,
        Op::LinearAttention(a) => linear::lower(cx, n, a)?,
        Op::CausalConvWithState(a) => causal_conv::lower(cx, n, a)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// A kernel's arithmetic: values computed in [`Num::ty`] and rounded to storage types where
/// the reference materializes an array of that type.
pub(super) struct Num {
    /// The computation type: `f64` if any operand is `f64`, else `f32`.
    pub ty: ScalarType,
    /// One-element scratch buffers through which values are rounded to `f16` and `bf16` (a
    /// store rounds to nearest-even, the following load gives the rounded value back).
    f16: Option<BufId>,
    bf16: Option<BufId>,
}

impl Num {
    /// The arithmetic of a kernel named `name` over data of the element types `elems` (every
    /// type it will round to must be among them).
    pub fn new(cx: &mut Lowerer<'_>, name: &str, elems: &[ElemType]) -> Num {
        let ty = if elems.contains(&ElemType::Scalar(ScalarType::F64)) { ScalarType::F64 } else { ScalarType::F32 };
        let mut scratch = |elem: ElemType, suffix: &str| {
            elems.contains(&elem).then(|| cx.program.add_buffer(Buffer { name: format!("{name}_{suffix}"), elem, len: 1, kind: BufferKind::Temp }))
        };
        let f16 = scratch(ElemType::F16, "round_f16");
        let bf16 = scratch(ElemType::BF16, "round_bf16");
        Num { ty, f16, bf16 }
    }

    /// A constant of the computation type.
    pub fn c(&self, v: f64) -> Expr {
        Expr::float(self.ty, v)
    }

    /// −∞ in the computation type.
    pub fn neg_inf(&self) -> Expr {
        self.c(f64::NEG_INFINITY)
    }

    /// Element `index` of a buffer with storage type `elem`, as a value of the computation type.
    pub fn load(&self, buf: BufId, elem: ElemType, index: Expr) -> Expr {
        let e = Expr::load(buf, index);
        if elem.value_type() == self.ty { e } else { e.cast(self.ty) }
    }

    /// Element `index` of `x` as a value of the computation type.
    pub fn load_op(&self, x: &Operand, index: Expr) -> Expr {
        self.load(x.buf, x.elem, index)
    }

    /// Stores `value` (of the computation type) at `index` of a buffer with storage type
    /// `elem`, rounding it to that type.
    pub fn store(&self, buf: BufId, elem: ElemType, index: Expr, value: Expr) -> Stmt {
        let vt = elem.value_type();
        let value = if vt == self.ty { value } else { value.cast(vt) };
        Stmt::Store { buf, index, value }
    }

    /// Stores `value` into element `index` of `x`.
    pub fn store_op(&self, x: &Operand, index: Expr, value: Expr) -> Stmt {
        self.store(x.buf, x.elem, index, value)
    }

    /// Binds `value` (of the computation type) to a fresh variable, appending the `Let` to `s`.
    pub fn bind(&self, k: &mut Kernel, s: &mut Vec<Stmt>, value: Expr) -> Expr {
        let v = k.var(self.ty);
        s.push(Stmt::Let(v, value));
        Expr::Var(v)
    }

    /// `value` rounded to the storage type `to`, as a value of the computation type bound to
    /// a fresh variable; the statements that compute it are appended to `s`.
    pub fn round(&self, k: &mut Kernel, s: &mut Vec<Stmt>, to: ElemType, value: Expr) -> Expr {
        let scratch = match to {
            ElemType::Scalar(t) if t == self.ty => return self.bind(k, s, value),
            ElemType::Scalar(ScalarType::F32) => return self.bind(k, s, value.cast(ScalarType::F32).cast(self.ty)),
            ElemType::F16 => self.f16,
            ElemType::BF16 => self.bf16,
            _ => None,
        };
        let Some(buf) = scratch else {
            // `new` was not told about this type (a lowering bug); rounding is skipped rather
            // than a panic, and debug builds catch it.
            debug_assert!(false, "Num::round to {} without a scratch buffer", to.name());
            return self.bind(k, s, value);
        };
        // From f64 this rounds twice (through f32), where numpy rounds once: it can differ
        // only when the f32 value is exactly halfway between two half-precision values.
        s.push(self.store(buf, to, Expr::idx(0), value));
        self.bind(k, s, self.load(buf, to, Expr::idx(0)))
    }
}

/// `v` rounded to the storage type `elem` at compile time, as numpy and ml_dtypes convert a
/// Python float: directly for `f16`, through `f32` for `bf16`.
pub(super) fn round_const(elem: ElemType, v: f64) -> f64 {
    match elem {
        ElemType::F16 => half::f16::from_f64(v).to_f64(),
        ElemType::BF16 => half::bf16::from_f32(v as f32).to_f64(),
        ElemType::Scalar(ScalarType::F32) => f64::from(v as f32),
        _ => v,
    }
}

/// True for the floating-point storage types.
pub(super) fn is_float(elem: ElemType) -> bool {
    matches!(elem, ElemType::F16 | ElemType::BF16 | ElemType::Scalar(ScalarType::F32 | ScalarType::F64))
}

/// The type numpy gives the sum of arrays of types `a` and `b` (both floating-point).
pub(super) fn promote(a: ElemType, b: ElemType) -> ElemType {
    let rank = |e: ElemType| match e {
        ElemType::F16 | ElemType::BF16 => 1,
        ElemType::Scalar(ScalarType::F32) => 2,
        _ => 3,
    };
    match (rank(a), rank(b)) {
        _ if a == b => a,
        (1, 1) => ElemType::Scalar(ScalarType::F32),
        (x, y) if x > y => a,
        _ => b,
    }
}

#[cfg(test)]
mod tests;
