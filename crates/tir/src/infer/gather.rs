//! Indexing: Gather, GatherElements, GatherND, the scatters, OneHot, Compress, NonZero, Unique,
//! Trilu, ReverseSequence.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::ReverseSequence;
use crate::types::TensorType;

use super::InferError;
use super::common::{Cx, Res, attr_err, axis, axis_in, fmt_dims, product, set, shape_err, to_f64s, truths, tt, unify};

/// Gather: `data[:axis] + indices.shape + data[axis + 1:]`.
pub(super) fn gather(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::INDEX)?;
    let (x, idx) = (cx.ty(0)?, cx.ty(1)?);
    let a = axis(ax, x.rank(), "axis")?;
    let mut shape = x.shape[..a].to_vec();
    shape.extend(idx.shape.iter().cloned());
    shape.extend(x.shape[a + 1..].iter().cloned());
    Ok(vec![tt(x.dtype, shape)])
}

/// GatherElements: the indices' shape.
pub(super) fn gather_elements(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::INDEX)?;
    let (x, idx) = (cx.ty(0)?, cx.ty(1)?);
    axis(ax, x.rank(), "axis")?;
    if idx.rank() != x.rank() {
        return Err(shape_err(format!("indices {idx} must have the data's rank {}", x.rank())));
    }
    Ok(vec![tt(x.dtype, idx.shape.clone())])
}

/// GatherND: `indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]`.
pub(super) fn gather_nd(cx: &mut Cx<'_, '_>, batch_dims: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    let (x, idx) = (cx.ty(0)?, cx.ty(1)?);
    let (r, q) = (x.rank(), idx.rank());
    let b = usize::try_from(batch_dims)
        .ok()
        .filter(|b| *b < r.min(q))
        .ok_or_else(|| attr_err(format!("batch_dims {batch_dims} must be non-negative and below both ranks ({r} and {q})")))?;
    let k = match &idx.shape[q - 1] {
        Dim::Known(k) => *k as usize,
        Dim::Sym(_) => return Err(InferError::NotStatic("the output rank depends on the indices' last dim, which is not static".into())),
    };
    if k < 1 || k > r - b {
        return Err(shape_err(format!("indices' last dim {k} must be in 1..={} for data of rank {r} with {b} batch dims", r - b)));
    }
    let mut shape = Vec::with_capacity(q - 1 + r - b - k);
    for i in 0..q - 1 {
        shape.push(if i < b { unify(&idx.shape[i], &x.shape[i], "batch dims of data and indices differ")? } else { idx.shape[i].clone() });
    }
    shape.extend(x.shape[b + k..].iter().cloned());
    Ok(vec![tt(x.dtype, shape)])
}

/// ScatterElements: the data's type; indices and updates have one shape.
pub(super) fn scatter_elements(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(1, set::INDEX)?;
    cx.same(0, 2)?;
    let (x, idx, upd) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    axis(ax, x.rank(), "axis")?;
    if idx.rank() != x.rank() || upd.rank() != x.rank() {
        return Err(shape_err(format!("data {x}, indices {idx} and updates {upd} must have one rank")));
    }
    for (i, u) in idx.shape.iter().zip(&upd.shape) {
        unify(i, u, "indices and updates differ in shape")?;
    }
    Ok(vec![x.clone()])
}

/// ScatterND: the data's type; updates are `indices.shape[:-1] + data.shape[k:]`.
pub(super) fn scatter_nd(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(1, set::I64)?;
    cx.same(0, 2)?;
    cx.rank_at_least(0, 1, "data")?;
    cx.rank_at_least(1, 1, "indices")?;
    let (x, idx, upd) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    let q = idx.rank();
    if let Dim::Known(k) = idx.shape[q - 1] {
        let k = k as usize;
        if k > x.rank() {
            return Err(shape_err(format!("indices' last dim {k} exceeds the data's rank {}", x.rank())));
        }
        if upd.rank() != q - 1 + x.rank() - k {
            let want: Vec<Dim> = idx.shape[..q - 1].iter().chain(&x.shape[k..]).cloned().collect();
            return Err(shape_err(format!("updates {upd} must have shape {}", fmt_dims(&want))));
        }
    }
    Ok(vec![x.clone()])
}

/// TensorScatter: the past cache's type; the update differs only on the sequence axis.
pub(super) fn tensor_scatter(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    cx.same(0, 1)?;
    cx.check_opt(2, set::I64)?;
    let (past, upd) = (cx.ty(0)?, cx.ty(1)?);
    let a = axis(ax, past.rank(), "axis")?;
    if upd.rank() != past.rank() {
        return Err(shape_err(format!("update {upd} must have the cache's rank {}", past.rank())));
    }
    for (i, (p, u)) in past.shape.iter().zip(&upd.shape).enumerate() {
        if i != a {
            unify(p, u, &format!("update differs from the cache on axis {i}"))?;
        }
    }
    Ok(vec![past.clone()])
}

/// OneHot: `depth` inserted at `axis` of the indices' shape, the values' element type.
pub(super) fn one_hot(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(0, set::ONE_HOT_INDEX)?;
    cx.check(1, set::ONE_HOT_INDEX)?;
    cx.scalar_like(1, "depth")?;
    let (idx, values) = (cx.ty(0)?, cx.ty(2)?);
    if !matches!(&values.shape[..], [d] if !matches!(d, Dim::Known(n) if *n != 2)) {
        return Err(shape_err(format!("values must be [off_value, on_value], found {values}")));
    }
    let a = axis_in(ax, idx.rank() + 1, idx.rank() + 1, "axis")?;
    let depth = match cx.value(1).and_then(to_f64s).as_deref() {
        Some(&[d]) if d >= 1.0 && d < u64::MAX as f64 => Dim::Known(d as u64),
        Some(&[d]) => return Err(shape_err(format!("depth {d} must be at least 1"))),
        _ => cx.fresh(),
    };
    let mut shape = idx.shape.clone();
    shape.insert(a, depth);
    Ok(vec![tt(values.dtype, shape)])
}

/// Compress: the selected count replaces the axis (or the flattened input when no axis).
pub(super) fn compress(cx: &mut Cx<'_, '_>, ax: Option<i64>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::BOOL)?;
    cx.rank_is(1, 1, "condition")?;
    let x = cx.ty(0)?;
    let (a, len) = match ax {
        Some(ax) => {
            let a = axis(ax, x.rank(), "axis")?;
            (Some(a), x.shape[a].clone())
        }
        None => (None, product(&x.shape)?),
    };
    let count = match cx.value(1).and_then(truths) {
        Some(c) => {
            let limit = len.known().map_or(c.len(), |n| c.len().min(n as usize));
            Dim::Known(c[..limit].iter().filter(|b| **b).count() as u64)
        }
        None => cx.fresh(),
    };
    let shape = match a {
        Some(a) => {
            let mut s = x.shape.clone();
            s[a] = count;
            s
        }
        None => vec![count],
    };
    Ok(vec![tt(x.dtype, shape)])
}

/// NonZero: i64 `[rank, count]`; the count is known for a constant input.
pub(super) fn nonzero(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    let count = match cx.value(0).and_then(truths) {
        Some(v) => Dim::Known(v.iter().filter(|b| **b).count() as u64),
        None => cx.fresh(),
    };
    Ok(vec![tt(DType::I64, vec![Dim::Known(x.rank() as u64), count])])
}

/// Unique: the unique values (a fresh count along the axis, or flattened), the i64 first
/// indices, inverse indices and counts.
pub(super) fn unique(cx: &mut Cx<'_, '_>, ax: Option<i64>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    let u = cx.fresh();
    let (y, inverse) = match ax {
        Some(ax) => {
            let a = axis(ax, x.rank(), "axis")?;
            let mut s = x.shape.clone();
            s[a] = u.clone();
            (s, x.shape[a].clone())
        }
        None => (vec![u.clone()], product(&x.shape)?),
    };
    let idx = tt(DType::I64, vec![u]);
    Ok(vec![tt(x.dtype, y), idx.clone(), tt(DType::I64, vec![inverse]), idx])
}

/// Trilu: the input's type; `k` is an optional i64 scalar.
pub(super) fn trilu(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 2)?;
    cx.rank_at_least(0, 2, "input")?;
    cx.check_opt(1, set::I64)?;
    cx.scalar_like(1, "k")?;
    Ok(vec![cx.ty(0)?.clone()])
}

/// ReverseSequence: the input's type; time and batch axes are 0 and 1.
pub(super) fn reverse_sequence(cx: &mut Cx<'_, '_>, a: &ReverseSequence) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    cx.rank_at_least(0, 2, "input")?;
    cx.rank_is(1, 1, "sequence_lens")?;
    let (x, lens) = (cx.ty(0)?, cx.ty(1)?);
    let ok = |v: i64| v == 0 || v == 1;
    if !ok(a.batch_axis) || !ok(a.time_axis) || a.batch_axis == a.time_axis {
        return Err(attr_err(format!("batch_axis {} and time_axis {} must be 0 and 1", a.batch_axis, a.time_axis)));
    }
    unify(&x.shape[a.batch_axis as usize], &lens.shape[0], "sequence_lens differs from the batch size")?;
    Ok(vec![x.clone()])
}
