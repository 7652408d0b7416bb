//! Indexing ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot,
//! NonZero and Compress. Every index is range-checked; a bad one is an error, never a panic.

use bytes::Bytes;
use kiln_tir::{Op, Tensor, TensorData};
use kiln_tir::op::ScatterReduction;

use crate::args::Args;
use crate::array::{Arr, Buf, float_to_int, norm_axis, numel, strides};
use crate::error::{Result, invalid, unsupported};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Gather(o) => gather(a, o.axis),
        Op::GatherElements(o) => gather_elements(a, o.axis),
        Op::GatherND(o) => gather_nd(a, o.batch_dims),
        Op::ScatterElements(o) => scatter_elements(a, o.axis, o.reduction),
        Op::ScatterND(o) => scatter_nd(a, o.reduction),
        Op::OneHot(o) => one_hot(a, o.axis),
        Op::NonZero(_) => non_zero(a),
        Op::Compress(o) => compress(a, o.axis),
        _ => return None,
    })
}

/// Gather on whole-byte element types, copying bytes without decoding the (often large) data.
pub(crate) fn eval_raw(op: &Op, a: &Args) -> Option<Result<Vec<Tensor>>> {
    let Op::Gather(o) = op else { return None };
    let t = a.opt_tensor(0)?;
    let TensorData::Raw(raw) = &t.data else { return None };
    let width = (t.dtype.bits() / 8) as usize;
    if t.dtype.bits() % 8 != 0 || width == 0 {
        return None;
    }
    Some((|| {
        let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
        let n = numel(a.op, &shape)?;
        if raw.len() != n * width {
            return Err(invalid(a.op, format!("{} tensor of shape {shape:?} has {} bytes", t.dtype, raw.len())));
        }
        let ind = a.arr(1)?;
        let ax = norm_axis(a.op, o.axis, shape.len())?;
        let dim = shape[ax];
        let idx: Vec<usize> = ind.as_i64s(a.op)?.into_iter().map(|i| check_index(a.op, i, dim, ax)).collect::<Result<_>>()?;
        let out_shape: Vec<usize> = shape[..ax].iter().chain(&ind.shape).chain(&shape[ax + 1..]).copied().collect();
        let total = numel(a.op, &out_shape)?;
        let outer: usize = shape[..ax].iter().product();
        let row = shape[ax + 1..].iter().product::<usize>() * width;
        let mut bytes = Vec::with_capacity(total * width);
        for o in 0..outer {
            for &i in &idx {
                let start = (o * dim + i) * row;
                bytes.extend_from_slice(&raw[start..start + row]);
            }
        }
        Ok(vec![Tensor { dtype: t.dtype, shape: out_shape.iter().map(|&d| d as u64).collect(), data: TensorData::Raw(Bytes::from(bytes)) }])
    })())
}

/// `i` made non-negative against `dim`, or an error if it is out of `[-dim, dim)`.
fn check_index(op: &'static str, i: i64, dim: usize, axis: usize) -> Result<usize> {
    let d = dim as i128;
    let j = if i < 0 { i128::from(i) + d } else { i128::from(i) };
    if (0..d).contains(&j) { Ok(j as usize) } else { Err(invalid(op, format!("index {i} is out of range for axis {axis} of size {dim}"))) }
}

fn gather(a: &Args, axis: i64) -> Result<Vec<Arr>> {
    let (x, ind) = (a.arr(0)?, a.arr(1)?);
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let dim = x.shape[ax];
    let idx: Vec<usize> = ind.as_i64s(a.op)?.into_iter().map(|i| check_index(a.op, i, dim, ax)).collect::<Result<_>>()?;
    let shape: Vec<usize> = x.shape[..ax].iter().chain(&ind.shape).chain(&x.shape[ax + 1..]).copied().collect();
    numel(a.op, &shape)?;
    let outer: usize = x.shape[..ax].iter().product();
    let inner: usize = x.shape[ax + 1..].iter().product();
    let mut buf = x.buf.empty_like();
    for o in 0..outer {
        for &i in &idx {
            let start = (o * dim + i) * inner;
            buf.extend_range(a.op, &x.buf, start..start + inner)?;
        }
    }
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}

/// For each element of `ind` (same rank as `data_shape`), the offset into data of the element
/// whose coordinates are the element's own, with the coordinate along `ax` replaced by the
/// index value.
fn element_offsets(op: &'static str, data_shape: &[usize], ind: &Arr, ax: usize) -> Result<Vec<usize>> {
    if ind.shape.len() != data_shape.len() {
        return Err(invalid(op, format!("indices rank {} differs from data rank {}", ind.shape.len(), data_shape.len())));
    }
    let st = strides(data_shape);
    let values = ind.as_i64s(op)?;
    let mut counter = vec![0usize; ind.shape.len()];
    let mut out = Vec::with_capacity(values.len());
    for &v in &values {
        let mut off = 0;
        for (d, &c) in counter.iter().enumerate() {
            let coord = if d == ax {
                check_index(op, v, data_shape[d], d)?
            } else if c < data_shape[d] {
                c
            } else {
                return Err(invalid(op, format!("indices dim {d} ({}) exceeds data dim ({})", ind.shape[d], data_shape[d])));
            };
            off += coord * st[d];
        }
        out.push(off);
        for d in (0..counter.len()).rev() {
            counter[d] += 1;
            if counter[d] < ind.shape[d] {
                break;
            }
            counter[d] = 0;
        }
    }
    Ok(out)
}

fn gather_elements(a: &Args, axis: i64) -> Result<Vec<Arr>> {
    let (x, ind) = (a.arr(0)?, a.arr(1)?);
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let offsets = element_offsets(a.op, &x.shape, &ind, ax)?;
    Ok(vec![x.take(a.op, &offsets, ind.shape.clone())?])
}

/// Combines `src[si]` into `dst[di]` under `red`.
fn apply(op: &'static str, red: ScatterReduction, dst: &mut Buf, di: usize, src: &Buf, si: usize) -> Result<()> {
    let oob = || invalid(op, "internal error: scatter offset out of bounds");
    match (dst, src) {
        (Buf::F(d), Buf::F(s)) => {
            let (t, u) = (d.get_mut(di).ok_or_else(oob)?, *s.get(si).ok_or_else(oob)?);
            *t = match red {
                ScatterReduction::None => u,
                ScatterReduction::Add => *t + u,
                ScatterReduction::Mul => *t * u,
                ScatterReduction::Max => t.max(u),
                ScatterReduction::Min => t.min(u),
            };
        }
        (Buf::I(d), Buf::I(s)) => {
            let (t, u) = (d.get_mut(di).ok_or_else(oob)?, *s.get(si).ok_or_else(oob)?);
            *t = match red {
                ScatterReduction::None => u,
                ScatterReduction::Add => t.wrapping_add(u),
                ScatterReduction::Mul => t.wrapping_mul(u),
                ScatterReduction::Max => (*t).max(u),
                ScatterReduction::Min => (*t).min(u),
            };
        }
        (Buf::B(d), Buf::B(s)) if red == ScatterReduction::None => *d.get_mut(di).ok_or_else(oob)? = *s.get(si).ok_or_else(oob)?,
        (Buf::S(d), Buf::S(s)) if red == ScatterReduction::None => *d.get_mut(di).ok_or_else(oob)? = s.get(si).ok_or_else(oob)?.clone(),
        _ => return Err(unsupported(op, format!("reduction `{}` on this element type", red.as_str()))),
    }
    Ok(())
}

fn scatter_elements(a: &Args, axis: i64, red: ScatterReduction) -> Result<Vec<Arr>> {
    let (mut x, ind, upd) = (a.arr(0)?, a.arr(1)?, a.arr(2)?);
    if upd.shape != ind.shape || upd.dtype != x.dtype {
        return Err(invalid(a.op, format!("updates {}{:?} do not match indices shape {:?} and data type {}", upd.dtype, upd.shape, ind.shape, x.dtype)));
    }
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let offsets = element_offsets(a.op, &x.shape, &ind, ax)?;
    for (si, &di) in offsets.iter().enumerate() {
        apply(a.op, red, &mut x.buf, di, &upd.buf, si)?;
    }
    Ok(vec![x])
}

/// For each index tuple of `ind` (last axis of length k), the offset of the slice it selects
/// in data (after `batch_dims` shared leading axes), and the slice length.
fn nd_offsets(op: &'static str, data_shape: &[usize], ind: &Arr, batch_dims: usize) -> Result<(Vec<usize>, usize)> {
    let q = ind.shape.len();
    let k = *ind.shape.last().ok_or_else(|| invalid(op, "indices must have rank 1 or more"))?;
    if batch_dims >= q || batch_dims + k > data_shape.len() || ind.shape[..batch_dims] != data_shape[..batch_dims] {
        return Err(invalid(op, format!("indices shape {:?} does not fit data shape {data_shape:?} with {batch_dims} batch dims", ind.shape)));
    }
    let st = strides(data_shape);
    let values = ind.as_i64s(op)?;
    let batches: usize = data_shape[..batch_dims].iter().product();
    let per_batch: usize = ind.shape[batch_dims..q - 1].iter().product();
    let batch_stride: usize = data_shape[batch_dims..].iter().product();
    let slice: usize = data_shape[batch_dims + k..].iter().product();
    let mut out = Vec::with_capacity(batches * per_batch);
    for b in 0..batches {
        for t in 0..per_batch {
            let tuple = &values[(b * per_batch + t) * k..(b * per_batch + t + 1) * k];
            let mut off = b * batch_stride;
            for (j, &i) in tuple.iter().enumerate() {
                let d = batch_dims + j;
                off += check_index(op, i, data_shape[d], d)? * st[d];
            }
            out.push(off);
        }
    }
    Ok((out, slice))
}

fn gather_nd(a: &Args, batch_dims: i64) -> Result<Vec<Arr>> {
    let (x, ind) = (a.arr(0)?, a.arr(1)?);
    let b = usize::try_from(batch_dims).map_err(|_| invalid(a.op, "batch_dims is negative"))?;
    let (offsets, slice) = nd_offsets(a.op, &x.shape, &ind, b)?;
    let k = ind.shape.last().copied().unwrap_or(0);
    let shape: Vec<usize> = ind.shape[..ind.shape.len() - 1].iter().chain(&x.shape[b + k..]).copied().collect();
    numel(a.op, &shape)?;
    let mut buf = x.buf.empty_like();
    for off in offsets {
        buf.extend_range(a.op, &x.buf, off..off + slice)?;
    }
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}

fn scatter_nd(a: &Args, red: ScatterReduction) -> Result<Vec<Arr>> {
    let (mut x, ind, upd) = (a.arr(0)?, a.arr(1)?, a.arr(2)?);
    let (offsets, slice) = nd_offsets(a.op, &x.shape, &ind, 0)?;
    let k = ind.shape.last().copied().unwrap_or(0);
    let want: Vec<usize> = ind.shape[..ind.shape.len() - 1].iter().chain(&x.shape[k..]).copied().collect();
    if upd.shape != want || upd.dtype != x.dtype {
        return Err(invalid(a.op, format!("updates {}{:?} should be {}{want:?}", upd.dtype, upd.shape, x.dtype)));
    }
    for (t, off) in offsets.into_iter().enumerate() {
        for e in 0..slice {
            apply(a.op, red, &mut x.buf, off + e, &upd.buf, t * slice + e)?;
        }
    }
    Ok(vec![x])
}

fn one_hot(a: &Args, axis: i64) -> Result<Vec<Arr>> {
    let (ind, values) = (a.arr(0)?, a.arr(2)?);
    let depth = match a.opt_f64_scalar(1)? {
        Some(d) if d >= 1.0 && d <= (1u64 << 32) as f64 => d as usize,
        _ => return Err(invalid(a.op, "depth must be a positive scalar")),
    };
    if values.len() != 2 {
        return Err(invalid(a.op, "values must hold [off_value, on_value]"));
    }
    let rank = ind.shape.len() + 1;
    let ax = norm_axis(a.op, axis, rank)?;
    let mut shape = ind.shape.clone();
    shape.insert(ax, depth);
    numel(a.op, &shape)?;
    let hot: Vec<Option<usize>> = ind
        .to_f64s(a.op)?
        .into_iter()
        .map(|v| {
            let i = float_to_int(v);
            let i = if i < 0 { i + depth as i128 } else { i };
            (0..depth as i128).contains(&i).then_some(i as usize)
        })
        .collect();
    let outer: usize = ind.shape[..ax].iter().product();
    let inner: usize = ind.shape[ax..].iter().product();
    let mut pick = Vec::with_capacity(outer * depth * inner);
    for o in 0..outer {
        for d in 0..depth {
            for i in 0..inner {
                pick.push(usize::from(hot[o * inner + i] == Some(d)));
            }
        }
    }
    Ok(vec![values.take(a.op, &pick, shape)?])
}

fn non_zero(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let nz: Vec<bool> = match &x.buf {
        Buf::F(v) => v.iter().map(|&e| e != 0.0).collect(),
        Buf::I(v) => v.iter().map(|&e| e != 0).collect(),
        Buf::B(v) => v.clone(),
        Buf::S(v) => v.iter().map(|s| !s.is_empty()).collect(),
    };
    let st = strides(&x.shape);
    let hits: Vec<usize> = nz.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i).collect();
    let rank = x.shape.len();
    let mut out = Vec::with_capacity(rank * hits.len());
    for (&step, &dim) in st.iter().zip(&x.shape) {
        out.extend(hits.iter().map(|&h| ((h / step) % dim) as i64));
    }
    Ok(vec![Arr::i64s(vec![rank, hits.len()], out)])
}

fn compress(a: &Args, axis: Option<i64>) -> Result<Vec<Arr>> {
    let (x, cond) = (a.arr(0)?, a.arr(1)?);
    let cond = cond.b(a.op)?;
    let (x, ax) = match axis {
        Some(axis) => {
            let ax = norm_axis(a.op, axis, x.shape.len())?;
            (x, ax)
        }
        None => {
            let n = x.len();
            (x.with_shape(vec![n]), 0)
        }
    };
    let dim = x.shape[ax];
    if cond.iter().skip(dim).any(|&c| c) {
        return Err(invalid(a.op, format!("condition selects past the end of axis {ax} (size {dim})")));
    }
    let keep: Vec<usize> = cond.iter().take(dim).enumerate().filter(|(_, c)| **c).map(|(i, _)| i).collect();
    let outer: usize = x.shape[..ax].iter().product();
    let inner: usize = x.shape[ax + 1..].iter().product();
    let mut buf = x.buf.empty_like();
    for o in 0..outer {
        for &i in &keep {
            let start = (o * dim + i) * inner;
            buf.extend_range(a.op, &x.buf, start..start + inner)?;
        }
    }
    let mut shape = x.shape.clone();
    shape[ax] = keep.len();
    Ok(vec![Arr { dtype: x.dtype, shape, buf }])
}
