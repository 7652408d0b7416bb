//! Elementwise ops of several broadcast tensors: arithmetic, comparisons, logic, bitwise ops,
//! the variadic Max/Min/Sum/Mean, PRelu and Where.

use std::cmp::Ordering;

use kiln_tir::Op;
use kiln_tir::op::ShiftDirection;

use crate::args::Args;
use crate::array::{Arr, Buf, broadcast_shape, broadcast_to, float_to_int, numel, zip_vec};
use crate::error::{Result, invalid, unsupported};

/// Evaluates `op` if it is an elementwise op of several inputs.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Add(_) => arith(a, |x, y| x + y, |x, y| Some(x.wrapping_add(y))),
        Op::Sub(_) => arith(a, |x, y| x - y, |x, y| Some(x.wrapping_sub(y))),
        Op::Mul(_) => arith(a, |x, y| x * y, |x, y| Some(x.wrapping_mul(y))),
        Op::Div(_) => arith(a, |x, y| x / y, |x, y| (y != 0).then(|| x.wrapping_div(y))),
        Op::Mod(o) if o.fmod != 0 => arith(a, |x, y| x % y, |x, y| (y != 0).then(|| x.wrapping_rem(y))),
        Op::Mod(_) => arith(a, floor_mod_f, floor_mod_i),
        Op::Pow(_) => pow(a),
        Op::Equal(_) => compare(a, |o| o == Some(Ordering::Equal)),
        Op::Less(_) => compare(a, |o| o == Some(Ordering::Less)),
        Op::LessOrEqual(_) => compare(a, |o| matches!(o, Some(Ordering::Less | Ordering::Equal))),
        Op::Greater(_) => compare(a, |o| o == Some(Ordering::Greater)),
        Op::GreaterOrEqual(_) => compare(a, |o| matches!(o, Some(Ordering::Greater | Ordering::Equal))),
        Op::And(_) => logical(a, |x, y| x && y),
        Op::Or(_) => logical(a, |x, y| x || y),
        Op::Xor(_) => logical(a, |x, y| x != y),
        Op::BitwiseAnd(_) => arith_int(a, |x, y| x & y),
        Op::BitwiseOr(_) => arith_int(a, |x, y| x | y),
        Op::BitwiseXor(_) => arith_int(a, |x, y| x ^ y),
        Op::BitShift(o) => bit_shift(a, o.direction),
        Op::Max(_) => variadic(a, max_f, |x, y| Some(x.max(y))),
        Op::Min(_) => variadic(a, min_f, |x, y| Some(x.min(y))),
        Op::Sum(_) => variadic(a, |x, y| x + y, |x, y| Some(x.wrapping_add(y))),
        Op::Mean(_) => mean(a),
        Op::PRelu(_) => prelu(a),
        Op::Where(_) => where_(a),
        _ => return None,
    })
}

/// Python-style float modulo: the result takes the sign of the divisor.
fn floor_mod_f(x: f64, y: f64) -> f64 {
    let r = x % y;
    if r != 0.0 && (r < 0.0) != (y < 0.0) { r + y } else { r }
}

/// Python-style integer modulo; `None` for a zero divisor.
fn floor_mod_i(x: i128, y: i128) -> Option<i128> {
    if y == 0 {
        return None;
    }
    let r = x.wrapping_rem(y);
    Some(if r != 0 && (r < 0) != (y < 0) { r + y } else { r })
}

/// NaN-propagating maximum (numpy `maximum`).
fn max_f(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() { f64::NAN } else { x.max(y) }
}

/// NaN-propagating minimum (numpy `minimum`).
fn min_f(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() { f64::NAN } else { x.min(y) }
}

/// `x` and `y` broadcast to their common shape.
pub(crate) fn broadcast2(op: &'static str, x: &Arr, y: &Arr) -> Result<(Vec<usize>, Arr, Arr)> {
    let shape = broadcast_shape(op, &x.shape, &y.shape)?;
    numel(op, &shape)?;
    Ok((shape.clone(), broadcast_to(op, x, &shape)?, broadcast_to(op, y, &shape)?))
}

fn same_dtype(op: &'static str, x: &Arr, y: &Arr) -> Result<()> {
    if x.dtype == y.dtype { Ok(()) } else { Err(invalid(op, format!("operand types {} and {} differ", x.dtype, y.dtype))) }
}

/// Combines two arrays of one numeric type elementwise; `g` answers `None` for an integer
/// division by zero.
fn combine(op: &'static str, x: &Arr, y: &Arr, f: &impl Fn(f64, f64) -> f64, g: &impl Fn(i128, i128) -> Option<i128>) -> Result<Arr> {
    same_dtype(op, x, y)?;
    let (shape, x, y) = broadcast2(op, x, y)?;
    let buf = match (&x.buf, &y.buf) {
        (Buf::F(p), Buf::F(q)) => Buf::F(zip_vec(p, q, f)),
        (Buf::I(p), Buf::I(q)) => {
            let r = zip_vec(p, q, g);
            if r.contains(&None) {
                return Err(invalid(op, "integer division by zero"));
            }
            Buf::I(r.into_iter().flatten().collect())
        }
        _ => return Err(unsupported(op, format!("element type {}", x.dtype))),
    };
    Ok(Arr { dtype: x.dtype, shape, buf })
}

fn arith(a: &Args, f: impl Fn(f64, f64) -> f64, g: impl Fn(i128, i128) -> Option<i128>) -> Result<Vec<Arr>> {
    Ok(vec![combine(a.op, &a.arr(0)?, &a.arr(1)?, &f, &g)?])
}

fn arith_int(a: &Args, g: impl Fn(i128, i128) -> i128) -> Result<Vec<Arr>> {
    let (x, y) = (a.arr(0)?, a.arr(1)?);
    x.i(a.op)?;
    let no_float = |_: f64, _: f64| f64::NAN;
    Ok(vec![combine(a.op, &x, &y, &no_float, &|u, v| Some(g(u, v)))?])
}

/// Shifts by amounts in `[0, width)`; other amounts shift everything out (a negative value
/// shifted right leaves -1), as the ONNX reference defines.
fn bit_shift(a: &Args, direction: ShiftDirection) -> Result<Vec<Arr>> {
    let width = i128::from(a.tensor(0)?.dtype.bits());
    match direction {
        ShiftDirection::Left => arith_int(a, |x, s| if (0..width).contains(&s) { ((x as u128) << s) as i128 } else { 0 }),
        ShiftDirection::Right => arith_int(a, |x, s| if (0..width).contains(&s) { x >> s } else if x < 0 { -1 } else { 0 }),
    }
}

fn variadic(a: &Args, f: impl Fn(f64, f64) -> f64, g: impl Fn(i128, i128) -> Option<i128>) -> Result<Vec<Arr>> {
    let mut all = a.all()?.into_iter();
    let mut acc = all.next().ok_or_else(|| invalid(a.op, "needs at least one input"))?;
    for next in all {
        acc = combine(a.op, &acc, &next, &f, &g)?;
    }
    Ok(vec![acc])
}

fn mean(a: &Args) -> Result<Vec<Arr>> {
    let n = a.all()?.len() as f64;
    let mut out = variadic(a, |x, y| x + y, |_, _| None)?;
    if let Some(Buf::F(v)) = out.first_mut().map(|o| &mut o.buf) {
        v.iter_mut().for_each(|x| *x /= n);
    }
    Ok(out)
}

fn pow(a: &Args) -> Result<Vec<Arr>> {
    let (x, y) = broadcast2(a.op, &a.arr(0)?, &a.arr(1)?).map(|(_, x, y)| (x, y))?;
    let buf = match (&x.buf, &y.buf) {
        (Buf::F(p), _) => Buf::F(zip_vec(p, &y.to_f64s(a.op)?, f64::powf)),
        (Buf::I(p), Buf::I(q)) => Buf::I(zip_vec(p, q, int_pow)),
        (Buf::I(p), Buf::F(q)) => Buf::I(zip_vec(p, q, |u, v| float_to_int((u as f64).powf(v)))),
        _ => return Err(unsupported(a.op, format!("element types {} and {}", x.dtype, y.dtype))),
    };
    Ok(vec![Arr { buf, ..x }])
}

/// Integer power with wrapping; negative exponents go through float and truncate.
fn int_pow(base: i128, exp: i128) -> i128 {
    if exp < 0 {
        return float_to_int((base as f64).powf(exp as f64));
    }
    let (mut result, mut b, mut e) = (1i128, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

fn compare(a: &Args, pred: impl Fn(Option<Ordering>) -> bool) -> Result<Vec<Arr>> {
    let (x, y) = (a.arr(0)?, a.arr(1)?);
    same_dtype(a.op, &x, &y)?;
    let (shape, x, y) = broadcast2(a.op, &x, &y)?;
    let v = match (&x.buf, &y.buf) {
        (Buf::F(p), Buf::F(q)) => zip_vec(p, q, |u, v| pred(u.partial_cmp(&v))),
        (Buf::I(p), Buf::I(q)) => zip_vec(p, q, |u, v| pred(Some(u.cmp(&v)))),
        (Buf::B(p), Buf::B(q)) => zip_vec(p, q, |u, v| pred(Some(u.cmp(&v)))),
        (Buf::S(p), Buf::S(q)) => p.iter().zip(q).map(|(u, v)| pred(Some(u.cmp(v)))).collect(),
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr::bools(shape, v)])
}

fn logical(a: &Args, f: impl Fn(bool, bool) -> bool) -> Result<Vec<Arr>> {
    let (shape, x, y) = broadcast2(a.op, &a.arr(0)?, &a.arr(1)?)?;
    let v = zip_vec(x.b(a.op)?, y.b(a.op)?, f);
    Ok(vec![Arr::bools(shape, v)])
}

fn prelu(a: &Args) -> Result<Vec<Arr>> {
    let (x, slope) = (a.arr(0)?, a.arr(1)?);
    same_dtype(a.op, &x, &slope)?;
    let (shape, x, slope) = broadcast2(a.op, &x, &slope)?;
    let buf = match (&x.buf, &slope.buf) {
        (Buf::F(p), Buf::F(q)) => Buf::F(zip_vec(p, q, |u, s| if u < 0.0 { u * s } else { u })),
        (Buf::I(p), Buf::I(q)) => Buf::I(zip_vec(p, q, |u, s| if u < 0 { u.wrapping_mul(s) } else { u })),
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}

fn where_(a: &Args) -> Result<Vec<Arr>> {
    let (c, x, y) = (a.arr(0)?, a.arr(1)?, a.arr(2)?);
    same_dtype(a.op, &x, &y)?;
    let shape = broadcast_shape(a.op, &broadcast_shape(a.op, &c.shape, &x.shape)?, &y.shape)?;
    numel(a.op, &shape)?;
    let c = broadcast_to(a.op, &c, &shape)?;
    let (x, y) = (broadcast_to(a.op, &x, &shape)?, broadcast_to(a.op, &y, &shape)?);
    let mask = c.b(a.op)?;
    fn pick<T: Clone>(mask: &[bool], x: &[T], y: &[T]) -> Vec<T> {
        mask.iter().zip(x.iter().zip(y)).map(|(&m, (u, v))| if m { u.clone() } else { v.clone() }).collect()
    }
    let buf = match (&x.buf, &y.buf) {
        (Buf::F(p), Buf::F(q)) => Buf::F(pick(mask, p, q)),
        (Buf::I(p), Buf::I(q)) => Buf::I(pick(mask, p, q)),
        (Buf::B(p), Buf::B(q)) => Buf::B(pick(mask, p, q)),
        (Buf::S(p), Buf::S(q)) => Buf::S(pick(mask, p, q)),
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}
