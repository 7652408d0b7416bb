//! Shape manipulation: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile, Shape,
//! Size, ConstantOfShape, Range, DepthToSpace, SpaceToDepth.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::tensor::Tensor;
use crate::types::TensorType;

use super::InferError;
use super::common::{Cx, Res, attr_err, axes, fmt_dims, known, mul, positive, product, set, shape_err, to_f64s, tt};

/// The length of 1-D input `i`, which sets an output rank, or an error when it is not static.
fn static_len(cx: &Cx<'_, '_>, i: usize, name: &str) -> Res<usize> {
    match cx.vector_len(i, name)? {
        Dim::Known(n) => usize::try_from(n).map_err(|_| shape_err("rank too large")),
        Dim::Sym(_) => Err(InferError::NotStatic(format!("the output rank is the length of `{name}`, which is not static"))),
    }
}

/// Fresh dims for an output whose rank is the length of 1-D input `i`.
fn fresh_of_len(cx: &mut Cx<'_, '_>, i: usize, name: &str) -> Res<Vec<Dim>> {
    let n = static_len(cx, i, name)?;
    Ok(cx.fresh_dims(n))
}

/// Reshape: `0` copies the input dim (unless `allowzero`), one `-1` takes what is left.
pub(super) fn reshape(cx: &mut Cx<'_, '_>, allowzero: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    let x = cx.ty(0)?;
    let Some(target) = cx.ints(1) else {
        let dims = fresh_of_len(cx, 1, "shape")?;
        return Ok(vec![tt(x.dtype, dims)]);
    };
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    let shown = || crate::echo::list(&target);
    for (i, &v) in target.iter().enumerate() {
        match v {
            -1 if infer_at.is_some() => return Err(shape_err(format!("shape {} has more than one -1", shown()))),
            -1 => {
                infer_at = Some(i);
                out.push(Dim::Known(1));
            }
            0 if allowzero == 0 => {
                out.push(x.shape.get(i).cloned().ok_or_else(|| shape_err(format!("shape {} copies dim {i} (a 0) of an input of rank {}", shown(), x.rank())))?)
            }
            v if v < 0 => return Err(shape_err(format!("dim {i} of shape {} is negative ({v})", shown()))),
            v => out.push(Dim::Known(v as u64)),
        }
    }
    if allowzero != 0 && infer_at.is_some() && target.contains(&0) {
        return Err(shape_err(format!("shape {} has both 0 and -1 with allowzero = 1", shown())));
    }
    let total = product(&x.shape)?;
    let rest = product(&out)?;
    match infer_at {
        Some(i) => {
            out[i] = match (&total, &rest) {
                (Dim::Known(t), Dim::Known(r)) if *r == 0 || t % r != 0 => {
                    return Err(shape_err(format!("cannot reshape {} ({t} elements) into {}", fmt_dims(&x.shape), shown())));
                }
                (Dim::Known(t), Dim::Known(r)) => Dim::Known(t / r),
                (_, Dim::Known(0)) => return Err(shape_err(format!("cannot infer the -1 of {}: the other dims hold no elements", shown()))),
                _ => total.div_exact(&rest).unwrap_or_else(|| cx.fresh()),
            };
        }
        None => {
            if let (Dim::Known(t), Dim::Known(r)) = (&total, &rest)
                && t != r
            {
                return Err(shape_err(format!("cannot reshape {} ({t} elements) into {} ({r} elements)", fmt_dims(&x.shape), fmt_dims(&out))));
            }
        }
    }
    Ok(vec![tt(x.dtype, out)])
}

/// Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`.
pub(super) fn flatten(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    let r = i64::try_from(x.rank()).map_err(|_| shape_err("rank too large"))?;
    let a = if ax < 0 { ax + r } else { ax };
    if !(0..=r).contains(&a) {
        return Err(attr_err(format!("axis {ax} is out of range for rank {r}")));
    }
    let a = a as usize;
    Ok(vec![tt(x.dtype, vec![product(&x.shape[..a])?, product(&x.shape[a..])?])])
}

/// Squeeze: removes the given axes (which must be 1), or every axis of known size 1.
pub(super) fn squeeze(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 2)?;
    cx.check_opt(1, set::I64)?;
    let x = cx.ty(0)?;
    let list = match cx.opt(1) {
        None => Some(Vec::new()),
        Some(_) => cx.ints(1),
    };
    let Some(list) = list else {
        return match cx.vector_len(1, "axes")? {
            Dim::Known(n) if n as usize <= x.rank() => Ok(vec![tt(x.dtype, cx.fresh_dims(x.rank() - n as usize))]),
            Dim::Known(n) => Err(shape_err(format!("{n} axes to squeeze from rank {}", x.rank()))),
            Dim::Sym(_) => Err(InferError::NotStatic("the output rank depends on the number of axes, which is not static".into())),
        };
    };
    if list.is_empty() {
        let shape = x.shape.iter().filter(|d| **d != Dim::Known(1)).cloned().collect();
        return Ok(vec![tt(x.dtype, shape)]);
    }
    let drop = axes(&list, x.rank(), "axis")?;
    for &i in &drop {
        if matches!(x.shape[i], Dim::Known(n) if n != 1) {
            return Err(shape_err(format!("cannot squeeze axis {i} of size {} in {}", x.shape[i], fmt_dims(&x.shape))));
        }
    }
    let shape = x.shape.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, d)| d.clone()).collect();
    Ok(vec![tt(x.dtype, shape)])
}

/// Unsqueeze: inserts axes of size 1 at the given positions of the output.
pub(super) fn unsqueeze(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    let x = cx.ty(0)?;
    let Some(list) = cx.ints(1) else {
        let extra = if cx.ty(1)?.rank() == 0 { 1 } else { static_len(cx, 1, "axes")? };
        return Ok(vec![tt(x.dtype, cx.fresh_dims(x.rank() + extra))]);
    };
    let r = x.rank() + list.len();
    let add = axes(&list, r, "axis")?;
    let mut rest = x.shape.iter();
    let shape = (0..r).map(|k| if add.contains(&k) { Dim::Known(1) } else { rest.next().cloned().unwrap_or(Dim::Known(1)) }).collect();
    Ok(vec![tt(x.dtype, shape)])
}

/// Transpose: `perm` (default: reversed axes) must be a permutation.
pub(super) fn transpose(cx: &mut Cx<'_, '_>, perm: &[i64]) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    let r = x.rank();
    let shape = if perm.is_empty() {
        x.shape.iter().rev().cloned().collect()
    } else {
        if perm.len() != r {
            return Err(attr_err(format!("perm {perm:?} has {} values for rank {r}", perm.len())));
        }
        let idx = axes(perm, r, "perm value")?;
        idx.iter().map(|&i| x.shape[i].clone()).collect()
    };
    Ok(vec![tt(x.dtype, shape)])
}

/// Expand: broadcasts the input with the shape input.
pub(super) fn expand(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    let x = cx.ty(0)?;
    match cx.ints(1) {
        Some(v) => {
            let target: Vec<Dim> = v.iter().map(|&d| known(d, "shape value")).collect::<Res<_>>()?;
            Ok(vec![tt(x.dtype, cx.broadcast(&[&x.shape, &target])?)])
        }
        None => {
            let n = static_len(cx, 1, "shape")?;
            let r = n.max(x.rank());
            // An input dim other than 1 survives any valid target; the others are unknown.
            let shape = (0..r)
                .map(|k| match (k + x.rank()).checked_sub(r).map(|i| &x.shape[i]) {
                    Some(d) if *d != Dim::Known(1) => d.clone(),
                    _ => cx.fresh(),
                })
                .collect();
            Ok(vec![tt(x.dtype, shape)])
        }
    }
}

/// Tile: each dim times its repeat count.
pub(super) fn tile(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::I64)?;
    let x = cx.ty(0)?;
    let n = cx.vector_len(1, "repeats")?;
    if matches!(n, Dim::Known(n) if n as usize != x.rank()) {
        return Err(shape_err(format!("repeats has {n} values for rank {}", x.rank())));
    }
    let shape = match cx.ints(1) {
        Some(v) if v.len() != x.rank() => return Err(shape_err(format!("repeats has {} values for rank {}", v.len(), x.rank()))),
        Some(v) => x.shape.iter().zip(&v).map(|(d, &r)| mul(d, &known(r, "repeat")?)).collect::<Res<_>>()?,
        None => cx.fresh_dims(x.rank()),
    };
    Ok(vec![tt(x.dtype, shape)])
}

/// Shape: the i64 dims `[start, end)` (clamped) of the input.
pub(super) fn shape(cx: &mut Cx<'_, '_>, start: i64, end: Option<i64>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let r = i64::try_from(cx.ty(0)?.rank()).map_err(|_| shape_err("rank too large"))?;
    let clamp = |v: i64| if v < 0 { v.saturating_add(r).max(0) } else { v.min(r) };
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    Ok(vec![tt(DType::I64, vec![Dim::Known((e - s).max(0) as u64)])])
}

/// Size: an i64 scalar.
pub(super) fn size(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    Ok(vec![tt(DType::I64, Vec::new())])
}

/// ConstantOfShape: the shape input's values as dims, the `value` attribute's element type.
pub(super) fn constant_of_shape(cx: &mut Cx<'_, '_>, value: Option<&Tensor>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::I64)?;
    let dtype = match value {
        Some(v) if v.numel() != Some(1) => return Err(attr_err(format!("value must hold one element, found shape {:?}", v.shape))),
        Some(v) => v.dtype,
        None => DType::F32,
    };
    let shape = match cx.ints(0) {
        Some(v) => v.iter().map(|&d| known(d, "shape value")).collect::<Res<_>>()?,
        None => fresh_of_len(cx, 0, "input")?,
    };
    Ok(vec![tt(dtype, shape)])
}

/// Range: `max(ceil((limit - start) / delta), 0)` elements.
pub(super) fn range(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    let d = cx.check(0, set::RANGE)?;
    for (i, name) in [(0, "start"), (1, "limit"), (2, "delta")] {
        cx.same(0, i)?;
        cx.scalar_like(i, name)?;
    }
    let count = if d.is_int() {
        match (cx.int_scalar(0), cx.int_scalar(1), cx.int_scalar(2)) {
            (Some(s), Some(l), Some(dl)) => Some(int_range_len(s, l, dl)?),
            _ => None,
        }
    } else {
        let one = |i: usize| cx.value(i).and_then(to_f64s).and_then(|v| (v.len() == 1).then(|| v[0]));
        match (one(0), one(1), one(2)) {
            (Some(s), Some(l), Some(dl)) => Some(float_range_len(s, l, dl)?),
            _ => None,
        }
    };
    let n = match count {
        Some(n) => Dim::Known(n),
        None => cx.fresh(),
    };
    Ok(vec![tt(d, vec![n])])
}

fn int_range_len(start: i64, limit: i64, delta: i64) -> Res<u64> {
    if delta == 0 {
        return Err(shape_err("range delta is 0"));
    }
    let (span, delta) = (i128::from(limit) - i128::from(start), i128::from(delta));
    let q = span / delta;
    let n = if span % delta != 0 && (span < 0) == (delta < 0) { q + 1 } else { q };
    u64::try_from(n.max(0)).map_err(|_| InferError::Overflow("range length overflows".into()))
}

fn float_range_len(start: f64, limit: f64, delta: f64) -> Res<u64> {
    if delta == 0.0 {
        return Err(shape_err("range delta is 0"));
    }
    let n = ((limit - start) / delta).ceil();
    if !n.is_finite() || n >= u64::MAX as f64 {
        return Err(shape_err(format!("range({start}, {limit}, {delta}) has no finite length")));
    }
    Ok(n.max(0.0) as u64)
}

/// DepthToSpace: `[N, C / b², H * b, W * b]`.
pub(super) fn depth_to_space(cx: &mut Cx<'_, '_>, blocksize: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.rank_is(0, 4, "input")?;
    let x = cx.ty(0)?;
    let b = Dim::Known(positive(blocksize, "blocksize")?);
    let bb = mul(&b, &b)?;
    let c = match &x.shape[1] {
        Dim::Known(c) if bb.known().is_some_and(|bb| c % bb != 0) => {
            return Err(shape_err(format!("{c} channels do not divide by blocksize² = {bb}")));
        }
        c => c.div_exact(&bb).unwrap_or_else(|| cx.fresh()),
    };
    let shape = vec![x.shape[0].clone(), c, mul(&x.shape[2], &b)?, mul(&x.shape[3], &b)?];
    Ok(vec![tt(x.dtype, shape)])
}

/// SpaceToDepth: `[N, C * b², H / b, W / b]`.
pub(super) fn space_to_depth(cx: &mut Cx<'_, '_>, blocksize: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.rank_is(0, 4, "input")?;
    let x = cx.ty(0)?;
    let b = positive(blocksize, "blocksize")?;
    let mut shape = vec![x.shape[0].clone(), mul(&x.shape[1], &mul(&Dim::Known(b), &Dim::Known(b))?)?];
    for d in &x.shape[2..] {
        shape.push(match d {
            Dim::Known(n) if n % b != 0 => return Err(shape_err(format!("spatial size {n} does not divide by blocksize {b}"))),
            d => d.div_exact(&Dim::Known(b)).unwrap_or_else(|| cx.fresh()),
        });
    }
    Ok(vec![tt(x.dtype, shape)])
}
