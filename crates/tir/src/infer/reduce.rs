//! Reductions (Reduce*, ArgMax/ArgMin), cumulative scans, TopK and ops that work along one
//! axis without changing the shape (Softmax, LogSoftmax, Hardmax, LpNormalization).

use crate::dim::Dim;
use crate::dtype::DType;
use crate::types::TensorType;

use super::InferError;
use super::common::{Cx, Res, TypeSet, attr_err, axes, axis, known, set, shape_err, tt};

/// Reduce*: `data` and optional `axes` (an i64 input); all axes when it is absent or empty,
/// unless `noop_with_empty_axes` makes that the identity.
pub(super) fn reduce(cx: &mut Cx<'_, '_>, accepts: TypeSet, keepdims: i64, noop_with_empty_axes: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 2)?;
    let d = cx.check(0, accepts)?;
    let x = cx.ty(0)?;
    let r = x.rank();
    let list = match cx.opt(1) {
        None => Some(Vec::new()),
        Some(_) => {
            cx.check(1, set::I64)?;
            cx.ints(1)
        }
    };
    let Some(list) = list else {
        // Axes computed at run time: the rank is known only when kept, or from the axes' count.
        let n = cx.vector_len(1, "axes")?;
        if keepdims != 0 {
            return Ok(vec![tt(d, cx.fresh_dims(r))]);
        }
        return match n {
            Dim::Known(0) if noop_with_empty_axes != 0 => Ok(vec![x.clone()]),
            Dim::Known(0) => Ok(vec![tt(d, Vec::new())]),
            Dim::Known(n) if n as usize <= r => Ok(vec![tt(d, cx.fresh_dims(r - n as usize))]),
            Dim::Known(n) => Err(shape_err(format!("{n} axes given for rank {r}"))),
            Dim::Sym(_) => Err(InferError::NotStatic("the output rank depends on the number of axes, which is not static".into())),
        };
    };
    if list.is_empty() && noop_with_empty_axes != 0 {
        return Ok(vec![x.clone()]);
    }
    let reduced = if list.is_empty() { (0..r).collect() } else { axes(&list, r, "axis")? };
    let mut shape = Vec::with_capacity(r);
    for (i, dim) in x.shape.iter().enumerate() {
        if !reduced.contains(&i) {
            shape.push(dim.clone());
        } else if keepdims != 0 {
            shape.push(Dim::Known(1));
        }
    }
    Ok(vec![tt(d, shape)])
}

/// ArgMax, ArgMin: i64 indices along `axis`.
pub(super) fn arg(cx: &mut Cx<'_, '_>, ax: i64, keepdims: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::NUMERIC)?;
    let x = cx.ty(0)?;
    let a = axis(ax, x.rank(), "axis")?;
    let mut shape = x.shape.clone();
    if keepdims != 0 {
        shape[a] = Dim::Known(1);
    } else {
        shape.remove(a);
    }
    Ok(vec![tt(DType::I64, shape)])
}

/// CumSum, CumProd: the input's type; the axis input is a scalar.
pub(super) fn cumulative(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(0, set::REDUCIBLE)?;
    cx.check(1, set::INDEX)?;
    cx.scalar_like(1, "axis")?;
    let x = cx.ty(0)?;
    if let Some(a) = cx.int_scalar(1) {
        axis(a, x.rank(), "axis")?;
    }
    Ok(vec![x.clone()])
}

/// TopK: values and i64 indices, with `k` elements along `axis`.
pub(super) fn topk(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, set::NUMERIC)?;
    cx.check(1, set::I64)?;
    cx.scalar_like(1, "K")?;
    let x = cx.ty(0)?;
    let a = axis(ax, x.rank(), "axis")?;
    let mut shape = x.shape.clone();
    shape[a] = match cx.int_scalar(1) {
        Some(k) => {
            let k = known(k, "k")?;
            if let (Dim::Known(k), Dim::Known(n)) = (&k, &x.shape[a])
                && k > n
            {
                return Err(shape_err(format!("k = {k} exceeds the axis size {n}")));
            }
            k
        }
        None => cx.fresh(),
    };
    Ok(vec![tt(d, shape.clone()), tt(DType::I64, shape)])
}

/// Softmax, LogSoftmax, Hardmax, LpNormalization: shape unchanged, `axis` in range.
pub(super) fn along_axis(cx: &mut Cx<'_, '_>, accepts: TypeSet, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, accepts)?;
    let x = cx.ty(0)?;
    if x.rank() == 0 {
        return Err(attr_err(format!("axis {ax} is out of range for rank 0")));
    }
    axis(ax, x.rank(), "axis")?;
    Ok(vec![x.clone()])
}
