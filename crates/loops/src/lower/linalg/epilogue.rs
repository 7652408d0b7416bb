//! The epilogue of kiln's fused kernels (FusedConv, FusedMatMul): after the product and its
//! bias, add the residual addend and apply the activation, element by element.

use kiln_tir::op::Activation;

use crate::ir::*;
use crate::lower::Operand;
use crate::lower::elementwise::{ElemResult, Scope, activation_expr};

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

    /// A loop over the output `y` applying the epilogue in place, after a runtime call has
    /// filled it; no statements when the epilogue is empty.
    pub fn pass(&self, k: &mut Kernel, y: &Operand) -> Result<Vec<Stmt>, String> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let ty = y.ty();
        let mut result = Ok(());
        let stmts = k.nest(&[y.numel()], |k, idx| {
            let mut s = Scope {
                k,
                stmts: Vec::new(),
            };
            let v = s.k.var(ty);
            s.stmts
                .push(Stmt::Let(v, Expr::load(y.buf, idx[0].clone())));
            match self.apply(&mut s, Expr::Var(v), &idx[0], ty) {
                Ok(value) => s.stmts.push(Stmt::Store {
                    buf: y.buf,
                    index: idx[0].clone(),
                    value,
                }),
                Err(why) => result = Err(why),
            }
            s.stmts
        });
        result.map(|()| stmts)
    }
}
