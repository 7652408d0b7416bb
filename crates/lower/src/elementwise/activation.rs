//! Activation functions: Relu, LeakyRelu, Elu, Selu, Celu, HardSigmoid, HardSwish, Gelu, Mish,
//! Softplus, Softsign, ThresholdedRelu, Shrink, Swish (one input), and PRelu, SwiGLU and Clip
//! (more).
//! Formulas follow the ONNX reference implementation.

use kiln_tir::op::{Activation, Gelu, GeluApprox, HardSwish, LeakyRelu, Relu, Sigmoid, Tanh};
use kiln_tir::{NodeId, Op};

use super::unary::sigmoid;
use super::{ElemResult, Scope, UnaryFn, c, cast_to, common_type, map_n, need_float, need_number};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// A float-only activation computed by `f`.
fn float(f: impl FnOnce(&mut Scope<'_>, Expr, ScalarType) -> Expr + 'static) -> UnaryFn {
    Box::new(move |s, x, ty| {
        need_float(ty)?;
        Ok(f(s, x, ty))
    })
}

/// `a · b`.
fn mul(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::Mul, b)
}

/// `a + b`.
fn add(a: Expr, b: Expr) -> Expr {
    a.bin(BinOp::Add, b)
}

/// `x > 0`.
fn positive(x: &Expr, ty: ScalarType) -> Expr {
    x.clone().cmp(CmpOp::Gt, c(ty, 0.0))
}

/// e^x − 1, accurate near 0 too: 2t / (1 − t) with t = tanh(x/2) for x ≤ ½ (no cancellation),
/// e^x − 1 above (where tanh(x/2) would round to 1).
fn expm1(s: &mut Scope<'_>, x: Expr, ty: ScalarType) -> Expr {
    let x = s.bind(x);
    let t = s.bind(mul(x.clone(), c(ty, 0.5)).math(MathFn::Tanh));
    let small = mul(c(ty, 2.0), t.clone()).bin(BinOp::Div, c(ty, 1.0).bin(BinOp::Sub, t));
    let large = x.clone().math(MathFn::Exp).bin(BinOp::Sub, c(ty, 1.0));
    x.cmp(CmpOp::Le, c(ty, 0.5)).select(small, large)
}

/// The element function of `op` if it is a one-input activation.
pub(super) fn unary_fn(op: &Op) -> Option<UnaryFn> {
    Some(match op {
        // max(x, 0), NaN-propagating like numpy.maximum
        Op::Relu(_) => Box::new(|_, x, ty| {
            need_number(ty)?;
            Ok(x.max(c(ty, 0.0)))
        }),
        // x > 0 ? x : αx
        Op::LeakyRelu(a) => {
            let alpha = f64::from(a.alpha);
            float(move |_, x, ty| positive(&x, ty).select(x.clone(), mul(x, c(ty, alpha))))
        }
        // x > 0 ? x : α(e^x − 1)
        Op::Elu(a) => {
            let alpha = f64::from(a.alpha);
            float(move |s, x, ty| {
                positive(&x, ty).select(x.clone(), mul(c(ty, alpha), expm1(s, x, ty)))
            })
        }
        // γ · (x > 0 ? x : α(e^x − 1))
        Op::Selu(a) => {
            let (alpha, gamma) = (f64::from(a.alpha), f64::from(a.gamma));
            float(move |s, x, ty| {
                mul(
                    positive(&x, ty).select(x.clone(), mul(c(ty, alpha), expm1(s, x, ty))),
                    c(ty, gamma),
                )
            })
        }
        // max(0, x) + min(0, α(e^(x/α) − 1))
        Op::Celu(a) => {
            let alpha = f64::from(a.alpha);
            float(move |s, x, ty| {
                let e = expm1(s, x.clone().bin(BinOp::Div, c(ty, alpha)), ty);
                add(x.max(c(ty, 0.0)), mul(c(ty, alpha), e).min(c(ty, 0.0)))
            })
        }
        // max(0, min(1, αx + β))
        Op::HardSigmoid(a) => {
            let (alpha, beta) = (f64::from(a.alpha), f64::from(a.beta));
            float(move |_, x, ty| hard_sigmoid(x, ty, alpha, beta))
        }
        // x · max(0, min(1, x/6 + ½))
        Op::HardSwish(_) => float(|_, x, ty| mul(x.clone(), hard_sigmoid(x, ty, 1.0 / 6.0, 0.5))),
        Op::Gelu(a) => {
            let approx = a.approximate;
            float(move |s, x, ty| {
                let inner = match approx {
                    // ½x(1 + erf(x/√2))
                    GeluApprox::None => {
                        mul(x.clone(), c(ty, std::f64::consts::FRAC_1_SQRT_2)).math(MathFn::Erf)
                    }
                    // ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
                    GeluApprox::Tanh => {
                        let cube = mul(mul(x.clone(), x.clone()), x.clone());
                        let poly = add(x.clone(), mul(c(ty, 0.044715), cube));
                        let k = (2.0 / std::f64::consts::PI).sqrt();
                        s.bind(mul(c(ty, k), poly)).math(MathFn::Tanh)
                    }
                };
                mul(mul(c(ty, 0.5), x), add(c(ty, 1.0), inner))
            })
        }
        // x · tanh(ln(1 + e^x))
        Op::Mish(_) => float(|_, x, _| mul(x.clone(), x.math(MathFn::Softplus).math(MathFn::Tanh))),
        // ln(1 + e^x)
        Op::Softplus(_) => float(|_, x, _| x.math(MathFn::Softplus)),
        // x / (1 + |x|)
        Op::Softsign(_) => {
            float(|_, x, ty| x.clone().bin(BinOp::Div, add(c(ty, 1.0), x.un(UnOp::Abs))))
        }
        // x > α ? x : 0
        Op::ThresholdedRelu(a) => {
            let alpha = f64::from(a.alpha);
            float(move |_, x, ty| x.clone().cmp(CmpOp::Gt, c(ty, alpha)).select(x, c(ty, 0.0)))
        }
        // x < −λ ? x + bias : x > λ ? x − bias : 0
        Op::Shrink(a) => {
            let (bias, lambd) = (f64::from(a.bias), f64::from(a.lambd));
            Box::new(move |s, x, ty| {
                need_number(ty)?;
                // Integers compare and shift in f64 and truncate back, as numpy does.
                let ft = if ty.is_float() { ty } else { ScalarType::F64 };
                let xf = s.bind(cast_to(x, ty, ft));
                let low = xf.clone().cmp(CmpOp::Lt, c(ft, -lambd));
                let high = xf.clone().cmp(CmpOp::Gt, c(ft, lambd));
                let r = low.select(
                    add(xf.clone(), c(ft, bias)),
                    high.select(xf.bin(BinOp::Sub, c(ft, bias)), c(ft, 0.0)),
                );
                Ok(cast_to(r, ft, ty))
            })
        }
        // x · sigmoid(αx)
        Op::Swish(a) => {
            let alpha = f64::from(a.alpha);
            float(move |_, x, ty| mul(x.clone(), sigmoid(mul(c(ty, alpha), x), ty)))
        }
        _ => return None,
    })
}

/// max(0, min(1, αx + β)), NaN-propagating.
fn hard_sigmoid(x: Expr, ty: ScalarType, alpha: f64, beta: f64) -> Expr {
    add(mul(x, c(ty, alpha)), c(ty, beta))
        .min(c(ty, 1.0))
        .max(c(ty, 0.0))
}

/// Lowers PRelu, SwiGLU and Clip.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        // x > 0 ? x : slope·x, the slope broadcast to x
        Op::PRelu(_) => {
            let ops = [cx.required(n, 0)?, cx.required(n, 1)?];
            let ty = common_type(&ops).map_err(|why| cx.unsupported(n, why))?;
            map_n(cx, n, &ops, |_, a| {
                need_number(ty)?;
                let (x, slope) = (a[0].clone(), a[1].clone());
                Ok(positive(&x, ty).select(x.clone(), mul(x, slope)))
            })
        }
        // a · sigmoid(αa) · b
        Op::SwiGLU(attrs) => {
            let alpha = f64::from(attrs.alpha);
            let ops = [cx.required(n, 0)?, cx.required(n, 1)?];
            let ty = common_type(&ops).map_err(|why| cx.unsupported(n, why))?;
            map_n(cx, n, &ops, |_, a| {
                need_float(ty)?;
                let gate = mul(a[0].clone(), sigmoid(mul(c(ty, alpha), a[0].clone()), ty));
                Ok(mul(gate, a[1].clone()))
            })
        }
        // min(max(x, lo), hi) with either bound optional (numpy.clip: hi wins when lo > hi)
        Op::Clip(_) => {
            let mut ops = vec![cx.required(n, 0)?];
            let mut bounds = Vec::new();
            for (i, bound) in [(1, BinOp::Max), (2, BinOp::Min)] {
                if let Some(b) = cx.input(n, i)? {
                    if b.numel() != 1 {
                        return Err(cx.unsupported(
                            n,
                            format!("bound {i} has {} elements, not one", b.numel()),
                        ));
                    }
                    ops.push(b);
                    bounds.push(bound);
                }
            }
            let ty = common_type(&ops).map_err(|why| cx.unsupported(n, why))?;
            map_n(cx, n, &ops, |_, a| {
                need_number(ty)?;
                Ok(bounds
                    .iter()
                    .zip(&a[1..])
                    .fold(a[0].clone(), |v, (&op, b)| v.bin(op, b.clone())))
            })
        }
        _ => Ok(false),
    }
}

/// The activation of a fused op (FusedConv, FusedMatMul) applied to `x`, a value of type `ty`
/// bound to a variable (the formulas use it more than once). `clip` bounds to `[alpha, beta]`
/// as Clip does; `leaky_relu` uses `alpha` as the slope.
pub(crate) fn activation_expr(
    s: &mut Scope<'_>,
    act: Activation,
    alpha: f32,
    beta: f32,
    x: Expr,
    ty: ScalarType,
) -> ElemResult {
    let op = match act {
        Activation::None => return Ok(x),
        Activation::Clip => {
            need_number(ty)?;
            return Ok(x.max(c(ty, f64::from(alpha))).min(c(ty, f64::from(beta))));
        }
        Activation::Relu => Op::Relu(Relu {}),
        Activation::LeakyRelu => Op::LeakyRelu(LeakyRelu { alpha }),
        Activation::Sigmoid => Op::Sigmoid(Sigmoid {}),
        Activation::Tanh => Op::Tanh(Tanh {}),
        Activation::HardSwish => Op::HardSwish(HardSwish {}),
        Activation::Gelu => Op::Gelu(Gelu {
            approximate: GeluApprox::None,
        }),
        Activation::GeluTanh => Op::Gelu(Gelu {
            approximate: GeluApprox::Tanh,
        }),
        Activation::Silu => {
            need_float(ty)?;
            return Ok(x.clone().bin(BinOp::Mul, sigmoid(x, ty)));
        }
        Activation::QuantDequantU8 | Activation::QuantDequantU16 => {
            if !matches!(ty, ScalarType::F32 | ScalarType::F64) {
                return Err(format!("{} of {} values", act.as_str(), ty.name()));
            }
            let top = if act == Activation::QuantDequantU8 { 255.0 } else { 65535.0 };
            // QuantizeLinear's lowering, then DequantizeLinear's: the level as a float, NaN to 0.
            let (scale, zero) = (c(ty, f64::from(alpha)), c(ty, f64::from(beta)));
            let q = s.bind(x.bin(BinOp::Div, scale.clone()).un(UnOp::Round).bin(BinOp::Add, zero.clone()));
            let above = s.bind(q.clone().cmp(CmpOp::Ge, c(ty, 0.0)).select(q, c(ty, 0.0)));
            let level = above.clone().cmp(CmpOp::Gt, c(ty, top)).select(c(ty, top), above);
            return Ok(level.bin(BinOp::Sub, zero).bin(BinOp::Mul, scale));
        }
    };
    let f = super::unary::unary_fn(&op)
        .or_else(|| unary_fn(&op))
        .ok_or_else(|| {
            format!(
                "kiln bug: no element function for activation {}",
                act.as_str()
            )
        })?;
    f(s, x, ty)
}
