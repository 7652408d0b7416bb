//! The activation functions RNN, GRU and LSTM accept by name, with their `alpha`/`beta`
//! parameters resolved from `activation_alpha`/`activation_beta`.

use kiln_loops::ir::*;

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

/// Resolves activation names (case-insensitive) to functions. Each function that takes
/// parameters consumes the next values of `alphas` and `betas` in order, falling back to the
/// ONNX operator's defaults when the lists run out (as onnxruntime reads them).
pub(super) fn parse(names: &[String], alphas: &[f32], betas: &[f32]) -> Result<Vec<Act>, String> {
    let (mut a, mut b) = (alphas.iter().copied(), betas.iter().copied());
    names
        .iter()
        .map(|name| {
            Ok(match name.to_ascii_lowercase().as_str() {
                "relu" => Act::Relu,
                "tanh" => Act::Tanh,
                "sigmoid" => Act::Sigmoid,
                "affine" => Act::Affine(a.next().unwrap_or(1.0), b.next().unwrap_or(0.0)),
                "leakyrelu" => Act::LeakyRelu(a.next().unwrap_or(0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(a.next().unwrap_or(1.0)),
                "scaledtanh" => Act::ScaledTanh(a.next().unwrap_or(1.0), b.next().unwrap_or(1.0)),
                "hardsigmoid" => Act::HardSigmoid(a.next().unwrap_or(0.2), b.next().unwrap_or(0.5)),
                "elu" => Act::Elu(a.next().unwrap_or(1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                _ => return Err(format!("activation function \"{name}\"")),
            })
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
