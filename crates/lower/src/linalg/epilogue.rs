//! The epilogue of kiln's fused kernels (FusedConv, FusedMatMul): after the product, add the
//! bias and the residual addend and apply the activation, element by element. In `f32` it is
//! part of one product's `sgemm_fused` call ([`Epilogue::fused_sgemm`]), or, after the
//! runtime's `sgemm` calls or `dwconv2d` have written the bare product, one call of the
//! runtime's `epilogue` over the output ([`Epilogue::call`]); elsewhere it is part of each
//! element's store ([`Epilogue::apply`]).

use kiln_runtime::epilogue::Activation as RtActivation;
use kiln_tir::op::Activation;

use kiln_loops::call;
use kiln_loops::ir::*;
use crate::Operand;
use super::Sgemm;
use crate::elementwise::{ElemResult, Scope, activation_expr};

/// How the runtime `epilogue` indexes a bias over the output matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BiasIndex {
    /// Row `r` adds `b[r mod period]`: a convolution's `[N·M, P]` output, channel `r mod M`.
    PerRow {
        /// The bias's length (the output channels).
        period: u64,
    },
    /// Column `c` adds `b[c]`: a product's bias over its last axis.
    PerColumn,
}

/// A fused op's residual addend and activation; the plain ops have neither.
#[derive(Clone, Debug)]
pub(crate) struct Epilogue {
    /// The residual addend: the output's shape, read at the output element's flat index.
    pub z: Option<BufId>,
    /// The activation applied last.
    pub act: Activation,
    /// Clip's lower bound or LeakyRelu's slope.
    pub alpha: f32,
    /// Clip's upper bound.
    pub beta: f32,
}

impl Epilogue {
    /// Nothing after the product: Conv and MatMul.
    pub const NONE: Epilogue = Epilogue {
        z: None,
        act: Activation::None,
        alpha: 0.0,
        beta: 0.0,
    };

    /// The epilogue adding `z` (if present; it must match the output `y`) and applying `act`.
    pub fn new(
        z: Option<&Operand>,
        act: Activation,
        alpha: f32,
        beta: f32,
        y: &Operand,
    ) -> Result<Epilogue, String> {
        if let Some(z) = z.filter(|z| z.dims != y.dims || z.elem != y.elem) {
            return Err(format!(
                "the residual addend ({} {:?}) differs from the output ({} {:?})",
                z.elem.name(),
                z.dims,
                y.elem.name(),
                y.dims
            ));
        }
        Ok(Epilogue {
            z: z.map(|z| z.buf),
            act,
            alpha,
            beta,
        })
    }

    /// True if the epilogue changes nothing.
    pub fn is_empty(&self) -> bool {
        self.z.is_none() && self.act == Activation::None
    }

    /// The activation as the runtime's `epilogue` numbers it: its code, `alpha` and `beta`.
    pub(crate) fn code(&self) -> (i64, f32, f32) {
        let act = match self.act {
            Activation::None => RtActivation::None,
            Activation::Relu => RtActivation::Relu,
            Activation::Clip => RtActivation::Clip {
                min: self.alpha,
                max: self.beta,
            },
            Activation::LeakyRelu => RtActivation::LeakyRelu { alpha: self.alpha },
            Activation::Sigmoid => RtActivation::Sigmoid,
            Activation::Tanh => RtActivation::Tanh,
            Activation::HardSwish => RtActivation::HardSwish,
            Activation::Gelu => RtActivation::Gelu,
            Activation::GeluTanh => RtActivation::GeluTanh,
            Activation::Silu => RtActivation::Silu,
            Activation::QuantDequantU8 => RtActivation::QuantDequantU8 {
                scale: self.alpha,
                zero_point: self.beta,
            },
            Activation::QuantDequantU16 => RtActivation::QuantDequantU16 {
                scale: self.alpha,
                zero_point: self.beta,
            },
        };
        act.code()
    }

    /// The runtime `epilogue` call over the `f32` output `y` viewed as `rows × cols` (row
    /// stride `cols`): adds `bias` (indexed as its [`BiasIndex`] says), then the residual
    /// addend, and applies the activation, in place. `None` when there is nothing to do. The
    /// loop IR has no null address, so an absent bias or addend is passed as `y`'s own address
    /// with its flag off (the runtime and the verifier then ignore it).
    pub fn call(
        &self,
        y: &Operand,
        bias: Option<(BufId, BiasIndex)>,
        rows: u64,
        cols: u64,
    ) -> Option<Stmt> {
        if self.is_empty() && bias.is_none() {
            return None;
        }
        let (b, mode, period) = match bias {
            None => (y.buf, 0, 0),
            Some((b, BiasIndex::PerRow { period })) => (b, 1, period as i64),
            Some((b, BiasIndex::PerColumn)) => (b, 2, 0),
        };
        let (code, alpha, beta) = self.code();
        let e = call::Epilogue {
            y: Addr::at(y.buf, 0),
            b: Addr::at(b, 0),
            z: Addr::at(self.z.unwrap_or(y.buf), 0),
            rows: Expr::idx(rows as i64),
            cols: Expr::idx(cols as i64),
            bias_mode: Expr::idx(mode),
            period: Expr::idx(period),
            residual: Expr::idx(i64::from(self.z.is_some())),
            act: Expr::idx(code),
            alpha: Expr::f32(alpha),
            beta: Expr::f32(beta),
        };
        Some(Stmt::Call(e.into()))
    }

    /// The product `g` with this epilogue and `bias` applied to its `m × n` result as the
    /// runtime finishes each block (`sgemm_fused`); the residual addend is laid out as `C`, at
    /// `C`'s offset. Unused operands are passed as `C`'s address with their flags off.
    pub fn fused_sgemm(&self, g: Sgemm, bias: Option<(BufId, BiasIndex)>) -> Stmt {
        let (c, at) = g.c.clone();
        let (b, mode, period) = match bias {
            None => (c, 0, 0),
            Some((b, BiasIndex::PerRow { period })) => (b, 1, period as i64),
            Some((b, BiasIndex::PerColumn)) => (b, 2, 0),
        };
        let (code, act_alpha, act_beta) = self.code();
        let call::Sgemm { a, b: matrix, c: product, m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta } = g.routine();
        let fused = call::SgemmFused {
            a,
            b: matrix,
            c: product,
            bias: Addr::at(b, 0),
            z: Addr::new(self.z.unwrap_or(c), at),
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            trans_a,
            trans_b,
            // No packed layout: `prepack` may give one.
            nr: Expr::idx(0),
            kc: Expr::idx(0),
            bias_mode: Expr::idx(mode),
            period: Expr::idx(period),
            residual: Expr::idx(i64::from(self.z.is_some())),
            act: Expr::idx(code),
            alpha,
            beta,
            act_alpha: Expr::f32(act_alpha),
            act_beta: Expr::f32(act_beta),
        };
        Stmt::Call(fused.into())
    }

    /// The value stored at flat output index `at` whose product plus bias is `v`, of type `ty`.
    pub fn apply(&self, s: &mut Scope<'_>, v: Expr, at: &Expr, ty: ScalarType) -> ElemResult {
        if self.is_empty() {
            return Ok(v);
        }
        let sum = match self.z {
            Some(z) => v.bin(BinOp::Add, Expr::load(z, at.clone())),
            None => v,
        };
        // The activation formulas read their operand several times; a variable computes it once.
        let x = match sum {
            Expr::Var(_) => sum,
            e => {
                let x = s.k.var(ty);
                s.stmts.push(Stmt::Let(x, e));
                Expr::Var(x)
            }
        };
        activation_expr(s, self.act, self.alpha, self.beta, x, ty)
    }
}
