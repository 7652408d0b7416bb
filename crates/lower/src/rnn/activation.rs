//! The activation functions of RNN, GRU and LSTM, with their `alpha`/`beta` parameters
//! resolved from `activation_alpha`/`activation_beta`.

use kiln_loops::ir::*;
use kiln_tir::op::RnnActivation;

/// One activation function with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    /// `alpha·x + beta`
    Affine(f32, f32),
    /// `x < 0 ? alpha·x : x`
    LeakyRelu(f32),
    /// `x > alpha ? x : 0`
    ThresholdedRelu(f32),
    /// `alpha·tanh(beta·x)`
    ScaledTanh(f32, f32),
    /// `clamp(alpha·x + beta, 0, 1)`
    HardSigmoid(f32, f32),
    /// `x < 0 ? alpha·(eˣ − 1) : x`
    Elu(f32),
    /// `x / (1 + |x|)`
    Softsign,
    /// `ln(1 + eˣ)`
    Softplus,
}

/// The functions `names` names. Each function that takes parameters consumes the next values
/// of `alphas` and `betas` in order, falling back to the ONNX operator's defaults when the
/// lists run out (as onnxruntime reads them).
pub(super) fn resolve(names: &[RnnActivation], alphas: &[f32], betas: &[f32]) -> Vec<Act> {
    let (mut a, mut b) = (alphas.iter().copied(), betas.iter().copied());
    names
        .iter()
        .map(|name| match name {
            RnnActivation::Relu => Act::Relu,
            RnnActivation::Tanh => Act::Tanh,
            RnnActivation::Sigmoid => Act::Sigmoid,
            RnnActivation::Affine => Act::Affine(a.next().unwrap_or(1.0), b.next().unwrap_or(0.0)),
            RnnActivation::LeakyRelu => Act::LeakyRelu(a.next().unwrap_or(0.01)),
            RnnActivation::ThresholdedRelu => Act::ThresholdedRelu(a.next().unwrap_or(1.0)),
            RnnActivation::ScaledTanh => Act::ScaledTanh(a.next().unwrap_or(1.0), b.next().unwrap_or(1.0)),
            RnnActivation::HardSigmoid => Act::HardSigmoid(a.next().unwrap_or(0.2), b.next().unwrap_or(0.5)),
            RnnActivation::Elu => Act::Elu(a.next().unwrap_or(1.0)),
            RnnActivation::Softsign => Act::Softsign,
            RnnActivation::Softplus => Act::Softplus,
        })
        .collect()
}

impl Act {
    /// `f(x)` for a float `x` of type `ty` that is a variable or a constant (it may be used
    /// more than once).
    pub(super) fn apply(self, x: Expr, ty: ScalarType) -> Expr {
        let c = |v: f32| Expr::float(ty, f64::from(v));
        let zero = c(0.0);
        let one = c(1.0);
        match self {
            Act::Relu => x.max(zero),
            Act::Tanh => x.math(MathFn::Tanh),
            Act::Sigmoid => one.clone().bin(BinOp::Div, one + x.un(UnOp::Neg).math(MathFn::Exp)),
            Act::Affine(a, b) => c(a) * x + c(b),
            Act::LeakyRelu(a) => x.clone().cmp(CmpOp::Lt, zero).select(c(a) * x.clone(), x),
            Act::ThresholdedRelu(a) => x.clone().cmp(CmpOp::Gt, c(a)).select(x, zero),
            Act::ScaledTanh(a, b) => c(a) * (c(b) * x).math(MathFn::Tanh),
            Act::HardSigmoid(a, b) => (c(a) * x + c(b)).max(zero).min(one),
            Act::Elu(a) => x.clone().cmp(CmpOp::Lt, zero).select(c(a) * (x.clone().math(MathFn::Exp) - one), x),
            Act::Softsign => x.clone().bin(BinOp::Div, one + x.un(UnOp::Abs)),
            Act::Softplus => x.math(MathFn::Softplus),
        }
    }
}
