//! Reductions and ops along one axis: Reduce*, ArgMax/ArgMin, Softmax, LogSoftmax, Hardmax,
//! CumSum, CumProd and TopK.

use kiln_tir::{DType, Op};

use crate::args::Args;
use crate::array::{Arr, Buf, norm_axis, numel, strides, walk};
use crate::error::{Result, invalid, unsupported};
use crate::shape_ops::norm_axes;

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    let (kind, keepdims, noop) = match op {
        Op::ReduceSum(o) => (Reduction::Sum, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceMean(o) => (Reduction::Mean, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceMax(o) => (Reduction::Max, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceMin(o) => (Reduction::Min, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceProd(o) => (Reduction::Prod, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceL1(o) => (Reduction::L1, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceL2(o) => (Reduction::L2, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceLogSum(o) => (Reduction::LogSum, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceLogSumExp(o) => (Reduction::LogSumExp, o.keepdims, o.noop_with_empty_axes),
        Op::ReduceSumSquare(o) => (Reduction::SumSquare, o.keepdims, o.noop_with_empty_axes),
        Op::ArgMax(o) => return Some(arg_extreme(a, o.axis, o.keepdims != 0, o.select_last_index != 0, true)),
        Op::ArgMin(o) => return Some(arg_extreme(a, o.axis, o.keepdims != 0, o.select_last_index != 0, false)),
        Op::Softmax(o) => return Some(softmax(a, o.axis, SoftmaxKind::Softmax)),
        Op::LogSoftmax(o) => return Some(softmax(a, o.axis, SoftmaxKind::Log)),
        Op::Hardmax(o) => return Some(softmax(a, o.axis, SoftmaxKind::Hard)),
        Op::CumSum(o) => return Some(cumulative(a, o.exclusive != 0, o.reverse != 0, false)),
        Op::CumProd(o) => return Some(cumulative(a, o.exclusive != 0, o.reverse != 0, true)),
        Op::TopK(o) => return Some(top_k(a, o.axis, o.largest != 0)),
        _ => return None,
    };
    Some(reduce(a, kind, keepdims != 0, noop != 0))
}

/// Offsets of the kept positions and of the reduced positions relative to each, plus the
/// output shape.
fn plan(shape: &[usize], axes: &[usize], keepdims: bool) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let st = strides(shape);
    let (mut kept_shape, mut kept_steps, mut red_shape, mut red_steps, mut out_shape) = (vec![], vec![], vec![], vec![], vec![]);
    for d in 0..shape.len() {
        if axes.contains(&d) {
            red_shape.push(shape[d]);
            red_steps.push(st[d] as isize);
            if keepdims {
                out_shape.push(1);
            }
        } else {
            kept_shape.push(shape[d]);
            kept_steps.push(st[d] as isize);
            out_shape.push(shape[d]);
        }
    }
    (walk(&kept_shape, &kept_steps, 0), walk(&red_shape, &red_steps, 0), out_shape)
}

fn reduce(a: &Args, kind: Reduction, keepdims: bool, noop: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let rank = x.shape.len();
    let axes = match a.opt_i64s(1)? {
        Some(axes) if !axes.is_empty() => norm_axes(a.op, &axes, rank)?,
        // Reducing over no axes applies the per-element part (abs, square, ...) only.
        _ if noop => Vec::new(),
        _ => (0..rank).collect(),
    };
    let (outer, inner, shape) = plan(&x.shape, &axes, keepdims);
    let n = inner.len() as f64;
    let buf = match &x.buf {
        Buf::F(v) => Buf::F(
            outer
                .iter()
                .map(|&o| {
                    let it = inner.iter().map(|&i| v[o + i]);
                    match kind {
                        Reduction::Sum => it.sum(),
                        Reduction::Mean => it.sum::<f64>() / n,
                        Reduction::Max => it.fold(f64::NEG_INFINITY, |m, e| if m.is_nan() || e.is_nan() { f64::NAN } else { m.max(e) }),
                        Reduction::Min => it.fold(f64::INFINITY, |m, e| if m.is_nan() || e.is_nan() { f64::NAN } else { m.min(e) }),
                        Reduction::Prod => it.product(),
                        Reduction::L1 => it.map(f64::abs).sum(),
                        Reduction::L2 => it.map(|e| e * e).sum::<f64>().sqrt(),
                        Reduction::LogSum => it.sum::<f64>().ln(),
                        Reduction::SumSquare => it.map(|e| e * e).sum(),
                        Reduction::LogSumExp => {
                            let m = it.clone().fold(f64::NEG_INFINITY, f64::max);
                            if m.is_infinite() { m } else { m + it.map(|e| (e - m).exp()).sum::<f64>().ln() }
                        }
                    }
                })
                .collect(),
        ),
        Buf::I(v) => {
            let (lo, hi) = int_range(x.dtype);
            Buf::I(
                outer
                    .iter()
                    .map(|&o| {
                        let it = inner.iter().map(|&i| v[o + i]);
                        Ok(match kind {
                            Reduction::Sum => it.fold(0i128, i128::wrapping_add),
                            Reduction::Mean if inner.is_empty() => 0,
                            Reduction::Mean => it.fold(0i128, i128::wrapping_add) / inner.len() as i128,
                            Reduction::Max => it.fold(lo, i128::max),
                            Reduction::Min => it.fold(hi, i128::min),
                            Reduction::Prod => it.fold(1i128, i128::wrapping_mul),
                            Reduction::L1 => it.map(i128::wrapping_abs).fold(0, i128::wrapping_add),
                            Reduction::SumSquare => it.map(|e| e.wrapping_mul(e)).fold(0, i128::wrapping_add),
                            Reduction::L2 => (it.map(|e| (e as f64) * (e as f64)).sum::<f64>().sqrt()) as i128,
                            Reduction::LogSum | Reduction::LogSumExp => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
                        })
                    })
                    .collect::<Result<_>>()?,
            )
        }
        Buf::B(v) if matches!(kind, Reduction::Max | Reduction::Min) => {
            Buf::B(outer.iter().map(|&o| if kind == Reduction::Max { inner.iter().any(|&i| v[o + i]) } else { inner.iter().all(|&i| v[o + i]) }).collect())
        }
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}

/// The smallest and largest values of an integer type.
fn int_range(dtype: DType) -> (i128, i128) {
    let bits = dtype.bits().clamp(1, 64);
    if dtype.kind() == kiln_tir::dtype::DTypeKind::Signed { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) }
}

/// `(outer, dim, inner)` around axis `ax`: element `(o, j, i)` is at `(o * dim + j) * inner + i`.
fn lanes(shape: &[usize], ax: usize) -> (usize, usize, usize) {
    (shape[..ax].iter().product(), shape[ax], shape[ax + 1..].iter().product())
}

/// Total order for sorting and extremes: NaN above everything.
fn cmp_f(x: f64, y: f64) -> std::cmp::Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
    }
}

/// The elements as keys comparable with [`cmp_f`] (integers convert exactly below 2^53).
fn sort_keys(a: &Args, x: &Arr) -> Result<Vec<f64>> {
    match &x.buf {
        Buf::F(v) => Ok(v.clone()),
        Buf::I(v) if v.iter().all(|e| e.unsigned_abs() < 1 << 53) => Ok(v.iter().map(|&e| e as f64).collect()),
        _ => Err(unsupported(a.op, format!("element type {} or magnitude", x.dtype))),
    }
}

fn arg_extreme(a: &Args, axis: i64, keepdims: bool, last: bool, max: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let (outer, dim, inner) = lanes(&x.shape, ax);
    if dim == 0 {
        return Err(invalid(a.op, "cannot take the arg-extreme of an empty axis"));
    }
    let keys = sort_keys(a, &x)?;
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            for j in 1..dim {
                let ord = cmp_f(keys[(o * dim + j) * inner + i], keys[(o * dim + best) * inner + i]);
                let ord = if max { ord } else { ord.reverse() };
                if ord == std::cmp::Ordering::Greater || (last && ord == std::cmp::Ordering::Equal) {
                    best = j;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[ax] = 1;
    } else {
        shape.remove(ax);
    }
    Ok(vec![Arr::i64s(shape, out)])
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SoftmaxKind {
    Softmax,
    Log,
    Hard,
}

fn softmax(a: &Args, axis: i64, kind: SoftmaxKind) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let v = x.f(a.op)?;
    let (outer, dim, inner) = lanes(&x.shape, ax);
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * dim + j) * inner + i;
            let m = (0..dim).map(|j| v[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            match kind {
                SoftmaxKind::Hard => {
                    if let Some(j) = (0..dim).find(|&j| v[at(j)] == m) {
                        out[at(j)] = 1.0;
                    }
                }
                SoftmaxKind::Softmax => {
                    let sum: f64 = (0..dim).map(|j| (v[at(j)] - m).exp()).sum();
                    (0..dim).for_each(|j| out[at(j)] = (v[at(j)] - m).exp() / sum);
                }
                SoftmaxKind::Log => {
                    let lse = (0..dim).map(|j| (v[at(j)] - m).exp()).sum::<f64>().ln();
                    (0..dim).for_each(|j| out[at(j)] = v[at(j)] - m - lse);
                }
            }
        }
    }
    Ok(vec![Arr::floats(x.dtype, x.shape, out)])
}

fn cumulative(a: &Args, exclusive: bool, reverse: bool, product: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let axis = a.opt_i64_scalar(1)?.ok_or_else(|| invalid(a.op, "axis input is missing"))?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let shape = lanes(&x.shape, ax);
    /// Running `f` along the axis, starting from `id`, in the direction asked.
    fn scan<T: Copy>(v: &[T], (outer, dim, inner): (usize, usize, usize), exclusive: bool, reverse: bool, id: T, f: impl Fn(T, T) -> T) -> Vec<T> {
        let order = |j: usize| if reverse { dim - 1 - j } else { j };
        let mut out = vec![id; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = id;
                for j in 0..dim {
                    let at = (o * dim + order(j)) * inner + i;
                    if exclusive {
                        out[at] = acc;
                        acc = f(acc, v[at]);
                    } else {
                        acc = f(acc, v[at]);
                        out[at] = acc;
                    }
                }
            }
        }
        out
    }
    let buf = match (&x.buf, product) {
        (Buf::F(v), false) => Buf::F(scan(v, shape, exclusive, reverse, 0.0, |p, q| p + q)),
        (Buf::F(v), true) => Buf::F(scan(v, shape, exclusive, reverse, 1.0, |p, q| p * q)),
        (Buf::I(v), false) => Buf::I(scan(v, shape, exclusive, reverse, 0, i128::wrapping_add)),
        (Buf::I(v), true) => Buf::I(scan(v, shape, exclusive, reverse, 1, i128::wrapping_mul)),
        _ => return Err(unsupported(a.op, format!("element type {}", x.dtype))),
    };
    Ok(vec![Arr { buf, ..x }])
}

fn top_k(a: &Args, axis: i64, largest: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let k = a.opt_i64_scalar(1)?.ok_or_else(|| invalid(a.op, "K input is missing"))?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let (outer, dim, inner) = lanes(&x.shape, ax);
    let k = usize::try_from(k).ok().filter(|&k| k <= dim).ok_or_else(|| invalid(a.op, format!("K = {k} is not in [0, {dim}]")))?;
    let keys = sort_keys(a, &x)?;
    let mut shape = x.shape.clone();
    shape[ax] = k;
    numel(a.op, &shape)?;
    let mut src = vec![0usize; outer * k * inner];
    let mut indices = vec![0i64; outer * k * inner];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * dim + j) * inner + i;
            let mut order: Vec<usize> = (0..dim).collect();
            // Stable: equal values keep the lower index first.
            order.sort_by(|&p, &q| {
                let c = cmp_f(keys[at(p)], keys[at(q)]);
                if largest { c.reverse() } else { c }
            });
            for (r, &j) in order.iter().take(k).enumerate() {
                let dst = (o * k + r) * inner + i;
                src[dst] = at(j);
                indices[dst] = j as i64;
            }
        }
    }
    Ok(vec![x.take(a.op, &src, shape.clone())?, Arr::i64s(shape, indices)])
}
