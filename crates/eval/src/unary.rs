//! Elementwise ops of one tensor: math functions, activations, Clip, IsNaN/IsInf, Not.

use kiln_tir::Op;
use kiln_tir::op::GeluApprox;

use crate::args::Args;
use crate::array::{Arr, Buf, map_vec};
use crate::error::{Result, invalid, unsupported};
use crate::math::{erf, sigmoid, softplus};

/// Evaluates `op` if it is a one-input elementwise op.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    let f: fn(f64) -> f64 = match op {
        Op::Acos(_) => f64::acos,
        Op::Acosh(_) => f64::acosh,
        Op::Asin(_) => f64::asin,
        Op::Asinh(_) => f64::asinh,
        Op::Atan(_) => f64::atan,
        Op::Atanh(_) => f64::atanh,
        Op::Cos(_) => f64::cos,
        Op::Cosh(_) => f64::cosh,
        Op::Sin(_) => f64::sin,
        Op::Sinh(_) => f64::sinh,
        Op::Tan(_) => f64::tan,
        Op::Tanh(_) => f64::tanh,
        Op::Exp(_) => f64::exp,
        Op::Log(_) => f64::ln,
        Op::Sqrt(_) => f64::sqrt,
        Op::Reciprocal(_) => f64::recip,
        Op::Ceil(_) => f64::ceil,
        Op::Floor(_) => f64::floor,
        Op::Round(_) => f64::round_ties_even,
        Op::Erf(_) => erf,
        Op::Sigmoid(_) => sigmoid,
        Op::Softplus(_) => softplus,
        Op::Softsign(_) => |x| x / (1.0 + x.abs()),
        Op::Mish(_) => |x| x * softplus(x).tanh(),
        Op::HardSwish(_) => |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        _ => return with_attrs(op, a),
    };
    Some(float_map(a, f))
}

/// One-input ops with attributes or integer support.
fn with_attrs(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Abs(_) => numeric_map(a, f64::abs, i128::wrapping_abs),
        Op::Neg(_) => numeric_map(a, |x| -x, |x| x.wrapping_neg()),
        Op::Sign(_) => numeric_map(a, |x| if x.is_nan() || x == 0.0 { x } else { x.signum() }, i128::signum),
        Op::Relu(_) => numeric_map(a, |x| if x < 0.0 { 0.0 } else { x }, |x| x.max(0)),
        Op::LeakyRelu(o) => {
            let alpha = f64::from(o.alpha);
            float_map(a, |x| if x < 0.0 { alpha * x } else { x })
        }
        Op::Elu(o) => {
            let alpha = f64::from(o.alpha);
            float_map(a, |x| if x < 0.0 { alpha * x.exp_m1() } else { x })
        }
        Op::Selu(o) => {
            let (alpha, gamma) = (f64::from(o.alpha), f64::from(o.gamma));
            float_map(a, |x| if x <= 0.0 { gamma * alpha * x.exp_m1() } else { gamma * x })
        }
        Op::Celu(o) => {
            let alpha = f64::from(o.alpha);
            float_map(a, |x| x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0))
        }
        Op::ThresholdedRelu(o) => {
            let alpha = f64::from(o.alpha);
            float_map(a, |x| if x > alpha { x } else { 0.0 })
        }
        Op::HardSigmoid(o) => {
            let (alpha, beta) = (f64::from(o.alpha), f64::from(o.beta));
            float_map(a, |x| (alpha * x + beta).clamp(0.0, 1.0))
        }
        Op::Swish(o) => {
            let alpha = f64::from(o.alpha);
            float_map(a, |x| x * sigmoid(alpha * x))
        }
        Op::Gelu(o) => match o.approximate {
            GeluApprox::None => float_map(a, |x| 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))),
            GeluApprox::Tanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                float_map(a, |x| 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh()))
            }
        },
        Op::Shrink(o) => {
            let (bias, lambd) = (f64::from(o.bias), f64::from(o.lambd));
            shrink(a, bias, lambd)
        }
        Op::IsNaN(_) => float_test(a, f64::is_nan),
        Op::IsInf(o) => {
            let (neg, pos) = (o.detect_negative != 0, o.detect_positive != 0);
            float_test(a, |x| (pos && x == f64::INFINITY) || (neg && x == f64::NEG_INFINITY))
        }
        Op::Not(_) => not(a),
        Op::BitwiseNot(_) => bitwise_not(a),
        Op::Clip(_) => clip(a),
        _ => return None,
    })
}

/// Applies `f` to every element of float input 0.
fn float_map(a: &Args, f: impl Fn(f64) -> f64) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let v = map_vec(x.f(a.op)?, f);
    Ok(vec![Arr::floats(x.dtype, x.shape, v)])
}

/// Applies `f` to float elements or `g` to integer elements of input 0.
fn numeric_map(a: &Args, f: impl Fn(f64) -> f64, g: impl Fn(i128) -> i128) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let buf = match &x.buf {
        Buf::F(v) => Buf::F(map_vec(v, f)),
        Buf::I(v) => Buf::I(map_vec(v, g)),
        _ => return Err(invalid(a.op, format!("element type {} is not numeric", x.dtype))),
    };
    Ok(vec![Arr { buf, ..x }])
}

/// A bool per element of float input 0 (integers answer `false`).
fn float_test(a: &Args, f: impl Fn(f64) -> bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let v = match &x.buf {
        Buf::F(v) => v.iter().map(|&e| f(e)).collect(),
        Buf::I(v) => vec![false; v.len()],
        _ => return Err(invalid(a.op, format!("element type {} is not numeric", x.dtype))),
    };
    Ok(vec![Arr::bools(x.shape, v)])
}

fn shrink(a: &Args, bias: f64, lambd: f64) -> Result<Vec<Arr>> {
    let f = |x: f64| {
        if x < -lambd {
            x + bias
        } else if x > lambd {
            x - bias
        } else {
            0.0
        }
    };
    let x = a.arr(0)?;
    let buf = match &x.buf {
        Buf::F(v) => Buf::F(v.iter().map(|&e| f(e)).collect()),
        // Integer Shrink computes in float and truncates, as the reference does.
        Buf::I(v) => Buf::I(v.iter().map(|&e| f(e as f64) as i128).collect()),
        _ => return Err(invalid(a.op, format!("element type {} is not numeric", x.dtype))),
    };
    Ok(vec![Arr { buf, ..x }])
}

fn not(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let v = x.b(a.op)?.iter().map(|&b| !b).collect();
    Ok(vec![Arr::bools(x.shape, v)])
}

fn bitwise_not(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let v = x.i(a.op)?.iter().map(|&e| !e).collect();
    Ok(vec![Arr::ints(x.dtype, x.shape, v)])
}

/// `Clip(x, min?, max?)`: `min(max(x, min), max)`, so `min > max` gives `max`; NaN passes.
fn clip(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let bound = |i: usize| -> Result<Option<Arr>> {
        let b = a.opt_arr(i)?;
        if let Some(b) = &b {
            if b.len() != 1 {
                return Err(invalid(a.op, format!("input {i} must be a scalar, has {} elements", b.len())));
            }
            if b.dtype != x.dtype {
                return Err(invalid(a.op, format!("bound type {} differs from input type {}", b.dtype, x.dtype)));
            }
        }
        Ok(b)
    };
    let (lo, hi) = (bound(1)?, bound(2)?);
    let buf = match &x.buf {
        Buf::F(v) => {
            let lo = lo.map(|b| b.f(a.op).map(|s| s[0])).transpose()?.unwrap_or(f64::NEG_INFINITY);
            let hi = hi.map(|b| b.f(a.op).map(|s| s[0])).transpose()?.unwrap_or(f64::INFINITY);
            Buf::F(
                v.iter()
                    .map(|&e| {
                        let e = if e < lo { lo } else { e };
                        if e > hi { hi } else { e }
                    })
                    .collect(),
            )
        }
        Buf::I(v) => {
            let lo = lo.map(|b| b.i(a.op).map(|s| s[0])).transpose()?.unwrap_or(i128::MIN);
            let hi = hi.map(|b| b.i(a.op).map(|s| s[0])).transpose()?.unwrap_or(i128::MAX);
            Buf::I(v.iter().map(|&e| e.max(lo).min(hi)).collect())
        }
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr { buf, ..x }])
}
