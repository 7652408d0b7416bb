//! Lowering of the linear-algebra family: MatMul, Gemm, MatMulInteger, QLinearMatMul, Einsum
//! and kiln's FusedMatMul.
//!
//! `f32` products call the runtime's `sgemm` micro-kernel ([`Sgemm`]); every other element
//! type is a plain loop nest with an accumulator (half precision computes in `f32`, as loads
//! give `f32` values). The helpers here ([`Sgemm`], [`zero`], [`accumulate`]) and the fused
//! kernels' [`Epilogue`] are shared with the `nn` family.

mod einsum;
mod epilogue;
mod integer;
mod matmul;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use epilogue::{BiasIndex, Epilogue};
pub(crate) use integer::{OutputStage, f32_constant, i32_zeros, output_stage};

use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer, Operand};
use kiln_loops::call;
use kiln_loops::ir::*;

/// Lowers `n` if this family handles its op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::MatMul(_) => matmul::matmul(cx, n)?,
        Op::FusedMatMul(attrs) => matmul::fused_matmul(cx, n, attrs)?,
        Op::Gemm(attrs) => matmul::gemm(cx, n, attrs)?,
        Op::MatMulInteger(_) => integer::matmul_integer(cx, n)?,
        Op::QLinearMatMul(_) => integer::qlinear_matmul(cx, n)?,
        Op::Einsum(attrs) => einsum::einsum(cx, n, &attrs.equation)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// One call of the runtime `sgemm` micro-kernel: `C[m×n] = alpha·op(A)·op(B) + beta·C`, all
/// row-major `f32` with leading dimensions; `beta == 0` ignores the old `C`.
#[derive(Clone, Debug)]
pub(crate) struct Sgemm {
    /// `A`'s buffer and the element offset of `A[0,0]`.
    pub a: (BufId, Expr),
    /// `B`'s buffer and the element offset of `B[0,0]`.
    pub b: (BufId, Expr),
    /// `C`'s buffer and the element offset of `C[0,0]`.
    pub c: (BufId, Expr),
    /// Rows of `op(A)` and `C`.
    pub m: u64,
    /// Columns of `op(B)` and `C`.
    pub n: u64,
    /// The contracted extent.
    pub k: u64,
    /// Leading dimension (row stride) of `A` as stored.
    pub lda: u64,
    /// Leading dimension of `B` as stored.
    pub ldb: u64,
    /// Leading dimension of `C`.
    pub ldc: u64,
    /// `op(A) = Aᵀ`.
    pub trans_a: bool,
    /// `op(B) = Bᵀ`.
    pub trans_b: bool,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the old `C`.
    pub beta: f32,
}

impl Sgemm {
    /// The call statement.
    pub fn call(self) -> Stmt {
        Stmt::Call(self.routine().into())
    }

    /// The runtime call's operands.
    pub fn routine(self) -> call::Sgemm {
        let int = |v: u64| Expr::idx(v as i64);
        call::Sgemm {
            a: Addr::new(self.a.0, self.a.1),
            b: Addr::new(self.b.0, self.b.1),
            c: Addr::new(self.c.0, self.c.1),
            m: int(self.m),
            n: int(self.n),
            k: int(self.k),
            lda: int(self.lda),
            ldb: int(self.ldb),
            ldc: int(self.ldc),
            trans_a: int(u64::from(self.trans_a)),
            trans_b: int(u64::from(self.trans_b)),
            alpha: Expr::f32(self.alpha),
            beta: Expr::f32(self.beta),
        }
    }
}

/// The zero of `ty`.
pub(crate) fn zero(ty: ScalarType) -> Expr {
    Expr::int(ty, 0)
}

/// True if the operand is stored as plain `f32` (the `sgemm` path).
pub(crate) fn is_f32(op: &Operand) -> bool {
    op.elem == ElemType::Scalar(ScalarType::F32)
}

/// A sum over `extents`: `Local acc = init; for ... { acc = acc + term(idx) }`. Returns the
/// accumulator and the statements; `term` gets the reduction indices.
pub(crate) fn accumulate(
    k: &mut Kernel,
    ty: ScalarType,
    init: Expr,
    extents: &[u64],
    term: impl FnOnce(&mut Kernel, &[Expr]) -> Expr,
) -> (Var, Vec<Stmt>) {
    let acc = k.var(ty);
    let mut stmts = vec![Stmt::Local(acc, init)];
    stmts.extend(k.nest(extents, |k, idx| {
        let t = term(k, idx);
        vec![Stmt::Assign(acc, Expr::Var(acc) + t)]
    }));
    (acc, stmts)
}
