//! Ops that compute or change shapes without moving elements: Shape, Size, and the views
//! Identity, Reshape, Flatten, Squeeze, Unsqueeze, BitCast (whose results share the input's bytes),
//! plus the generators ConstantOfShape, Range and EyeLike, and Dropout in inference mode.

use kiln_tir::op::Op;
use kiln_tir::{DType, Tensor, TensorData};

use crate::args::Args;
use crate::array::{Arr, Buf, MAX_ELEMENTS, norm_axis, numel};
use crate::error::{EvalError, Result, invalid, unsupported};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Shape(o) => shape(a, o.start, o.end),
        Op::Size(_) => a.tensor(0).and_then(|t| {
            let n = t.numel().ok_or_else(|| invalid(a.op, "element count overflows"))?;
            Ok(vec![Arr::i64s(vec![], [n as i64])])
        }),
        Op::ConstantOfShape(o) => constant_of_shape(a, o.value.as_ref()),
        Op::Range(_) => range(a),
        Op::EyeLike(o) => eye_like(a, o.dtype, o.k),
        Op::Dropout(_) => dropout(a),
        _ => return None,
    })
}

/// Evaluates `op` if it only relabels its input's shape; the result shares the input's bytes.
pub(crate) fn eval_view(op: &Op, a: &Args) -> Option<Result<Vec<Tensor>>> {
    Some(match op {
        Op::Identity(_) => view(a, |s| Ok(s.to_vec())),
        Op::Reshape(o) => view(a, |s| reshape(a, s, o.allowzero != 0)),
        Op::Flatten(o) => view(a, |s| flatten(a, s, o.axis)),
        Op::Squeeze(_) => view(a, |s| squeeze(a, s)),
        Op::Unsqueeze(_) => view(a, |s| unsqueeze(a, s)),
        Op::BitCast(o) => bit_cast(a, o.to),
        _ => return None,
    })
}

/// The input's bytes reinterpreted as `to`, which must have the same width.
fn bit_cast(a: &Args, to: DType) -> Result<Vec<Tensor>> {
    let from = a.tensor(0)?.dtype;
    if from.bits() != to.bits() || from == DType::String || to == DType::String {
        return Err(invalid(a.op, format!("cannot reinterpret {from} as {to}")));
    }
    let mut out = view(a, |s| Ok(s.to_vec()))?;
    out[0].dtype = to;
    Ok(out)
}

/// Input 0 under the shape `f` computes from its shape.
fn view(a: &Args, f: impl FnOnce(&[usize]) -> Result<Vec<usize>>) -> Result<Vec<Tensor>> {
    let t = a.tensor(0)?;
    let shape: Vec<usize> = t.shape.iter().map(|&d| usize::try_from(d).map_err(|_| unsupported(a.op, "dim too large"))).collect::<Result<_>>()?;
    let n = numel(a.op, &shape)?;
    let whole = match &t.data {
        TensorData::Raw(b) => t.dtype.storage_bytes(n as u64) == Some(b.len() as u64),
        TensorData::Strings(s) => s.len() == n,
        TensorData::Absent => return Err(EvalError::MissingData { value: format!("input of {}", a.op) }),
    };
    if !whole {
        return Err(invalid(a.op, format!("{} tensor data does not fit shape {shape:?}", t.dtype)));
    }
    let out = f(&shape)?;
    Ok(vec![Tensor { dtype: t.dtype, shape: out.iter().map(|&d| d as u64).collect(), data: t.data.clone() }])
}

/// Input `i` read as a list of dims (every entry must be non-negative).
pub(crate) fn dims_input(a: &Args, i: usize) -> Result<Vec<usize>> {
    a.i64s(i)?.into_iter().map(|d| usize::try_from(d).map_err(|_| invalid(a.op, format!("dim {d} is negative")))).collect()
}

fn shape(a: &Args, start: i64, end: Option<i64>) -> Result<Vec<Arr>> {
    let t = a.tensor(0)?;
    let r = t.shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(r) } else { v }).clamp(0, r) as usize;
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    let dims: Vec<i64> = if s < e { t.shape[s..e].iter().map(|&d| d as i64).collect() } else { Vec::new() };
    Ok(vec![Arr::i64s(vec![dims.len()], dims)])
}

fn reshape(a: &Args, in_shape: &[usize], allowzero: bool) -> Result<Vec<usize>> {
    let spec = a.i64s(1)?;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_some() => return Err(invalid(a.op, "more than one -1 in the shape")),
            -1 => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*in_shape.get(i).ok_or_else(|| invalid(a.op, format!("0 at position {i} copies a dim the input of rank {} lacks", in_shape.len())))?),
            d if d < 0 => return Err(invalid(a.op, format!("dim {d} is negative"))),
            d => out.push(usize::try_from(d).map_err(|_| invalid(a.op, "dim too large"))?),
        }
    }
    let total: usize = in_shape.iter().product();
    let known = out.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| invalid(a.op, "shape overflows"))?;
    if let Some(i) = infer {
        if known == 0 || !total.is_multiple_of(known) {
            return Err(invalid(a.op, format!("cannot infer -1: {total} elements into shape {spec:?}")));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(invalid(a.op, format!("cannot reshape {in_shape:?} ({total} elements) to {out:?}")));
    }
    Ok(out)
}

fn flatten(a: &Args, in_shape: &[usize], axis: i64) -> Result<Vec<usize>> {
    let r = in_shape.len() as i64;
    let ax = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&ax) {
        return Err(invalid(a.op, format!("axis {axis} is out of range for rank {r}")));
    }
    let (outer, inner) = in_shape.split_at(ax as usize);
    Ok(vec![outer.iter().product(), inner.iter().product()])
}

/// Normalizes `axes` against `rank`, rejecting duplicates.
pub(crate) fn norm_axes(op: &'static str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &ax in axes {
        let n = norm_axis(op, ax, rank)?;
        if out.contains(&n) {
            return Err(invalid(op, format!("axis {ax} is repeated")));
        }
        out.push(n);
    }
    Ok(out)
}

fn squeeze(a: &Args, in_shape: &[usize]) -> Result<Vec<usize>> {
    Ok(match a.opt_i64s(1)? {
        None => in_shape.iter().copied().filter(|&d| d != 1).collect(),
        Some(axes) => {
            let axes = norm_axes(a.op, &axes, in_shape.len())?;
            if let Some(&bad) = axes.iter().find(|&&ax| in_shape[ax] != 1) {
                return Err(invalid(a.op, format!("axis {bad} has size {}, not 1", in_shape[bad])));
            }
            in_shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect()
        }
    })
}

fn unsqueeze(a: &Args, in_shape: &[usize]) -> Result<Vec<usize>> {
    let axes = a.i64s(1)?;
    let rank = in_shape.len() + axes.len();
    let axes = norm_axes(a.op, &axes, rank)?;
    let mut rest = in_shape.iter();
    Ok((0..rank).map(|i| if axes.contains(&i) { 1 } else { rest.next().copied().unwrap_or(1) }).collect())
}

fn constant_of_shape(a: &Args, value: Option<&Tensor>) -> Result<Vec<Arr>> {
    let shape = dims_input(a, 0)?;
    let n = numel(a.op, &shape)?;
    let fill = match value {
        Some(t) => Arr::from_tensor(a.op, t)?,
        None => Arr::floats(DType::F32, vec![1], vec![0.0]),
    };
    if fill.len() != 1 {
        return Err(invalid(a.op, format!("value must hold one element, holds {}", fill.len())));
    }
    let buf = fill.buf.take(a.op, &vec![0; n])?;
    Ok(vec![Arr { dtype: fill.dtype, shape, buf }])
}

fn range(a: &Args) -> Result<Vec<Arr>> {
    let (start, limit, delta) = (a.arr(0)?, a.arr(1)?, a.arr(2)?);
    if start.dtype != limit.dtype || start.dtype != delta.dtype {
        return Err(invalid(a.op, "start, limit and delta must have one type"));
    }
    if [&start, &limit, &delta].iter().any(|x| x.len() != 1) {
        return Err(invalid(a.op, "start, limit and delta must be scalars"));
    }
    let too_many = || unsupported(a.op, "range is too long to evaluate");
    let buf = match (&start.buf, &limit.buf, &delta.buf) {
        (Buf::I(s), Buf::I(l), Buf::I(d)) => {
            let (s, l, d) = (s[0], l[0], d[0]);
            if d == 0 {
                return Err(invalid(a.op, "delta is zero"));
            }
            // Values are at most 64-bit, so this i128 arithmetic cannot overflow.
            let n = if d > 0 { (l - s + d - 1).div_euclid(d) } else { (s - l - d - 1).div_euclid(-d) }.max(0);
            if n > MAX_ELEMENTS as i128 {
                return Err(too_many());
            }
            Buf::I((0..n).map(|i| s + i * d).collect())
        }
        (Buf::F(s), Buf::F(l), Buf::F(d)) => {
            let (s, l, d) = (s[0], l[0], d[0]);
            let n = ((l - s) / d).ceil().max(0.0);
            if !n.is_finite() || n > MAX_ELEMENTS as f64 {
                return Err(if d == 0.0 { invalid(a.op, "delta is zero") } else { too_many() });
            }
            Buf::F((0..n as usize).map(|i| s + i as f64 * d).collect())
        }
        _ => return Err(unsupported(a.op, format!("element type {}", start.dtype))),
    };
    Ok(vec![Arr { dtype: start.dtype, shape: vec![buf.len()], buf }])
}

fn eye_like(a: &Args, dtype: Option<DType>, k: i64) -> Result<Vec<Arr>> {
    let x = a.tensor(0)?;
    let dtype = dtype.unwrap_or(x.dtype);
    let [rows, cols] = x.shape[..] else {
        return Err(invalid(a.op, format!("input must be 2-D, has shape {:?}", x.shape)));
    };
    let shape = vec![rows as usize, cols as usize];
    numel(a.op, &shape)?;
    let on = |i: usize, j: usize| j as i128 - i as i128 == i128::from(k);
    let cells = (0..shape[0]).flat_map(|i| (0..shape[1]).map(move |j| (i, j)));
    let buf = match dtype {
        d if d.is_float() => Buf::F(cells.map(|(i, j)| if on(i, j) { 1.0 } else { 0.0 }).collect()),
        d if d.is_int() => Buf::I(cells.map(|(i, j)| i128::from(on(i, j))).collect()),
        DType::Bool => Buf::B(cells.map(|(i, j)| on(i, j)).collect()),
        d => return Err(unsupported(a.op, format!("element type {d}"))),
    };
    Ok(vec![Arr { dtype, shape, buf }])
}

/// Dropout at inference: the identity, with an all-true mask. Training mode with a nonzero
/// ratio is random and not evaluated.
fn dropout(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ratio = a.opt_f64_scalar(1)?.unwrap_or(0.5);
    let training = match a.opt_arr(2)? {
        Some(t) => t.b(a.op)?.first().copied().unwrap_or(false),
        None => false,
    };
    if training && ratio != 0.0 {
        return Err(unsupported(a.op, "training mode draws random numbers"));
    }
    let mask = Arr::bools(x.shape.clone(), vec![true; x.len()]);
    Ok(vec![x, mask])
}
