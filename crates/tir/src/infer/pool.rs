//! Pooling: AveragePool, MaxPool, LpPool, the global pools, MaxRoiPool, MaxUnpool, RoiAlign.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::{AveragePool, LpPool, MaxPool, MaxRoiPool, MaxUnpool, RoiAlign};
use crate::types::TensorType;

use super::common::{Cx, Res, TypeSet, attr_err, known, mul, offset, per_axis, positive, set, shape_err, tt, unify};
use super::conv::Window;

/// `[N, C, out...]` of a pooling window over input 0.
fn pooled(cx: &mut Cx<'_, '_>, accepts: TypeSet, window: &Window<'_>) -> Res<TensorType> {
    cx.arity(1, 1)?;
    let d = cx.check(0, accepts)?;
    let x = cx.ty(0)?;
    if x.rank() < 3 {
        return Err(shape_err(format!("input must have rank at least 3 (N, C, spatial...), found {x}")));
    }
    let n = x.rank() - 2;
    if window.kernel_shape.len() != n {
        return Err(attr_err(format!("kernel_shape has {} values for {n} spatial axes", window.kernel_shape.len())));
    }
    let kernel: Vec<Option<u64>> = window.kernel_shape.iter().map(|&k| positive(k, "kernel_shape").map(Some)).collect::<Res<_>>()?;
    let mut shape = x.shape[..2].to_vec();
    shape.extend(window.output(cx, &x.shape[2..], &kernel)?);
    Ok(tt(d, shape))
}

/// AveragePool.
pub(super) fn average_pool(cx: &mut Cx<'_, '_>, a: &AveragePool) -> Res<Vec<TensorType>> {
    let w = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: a.ceil_mode != 0,
    };
    Ok(vec![pooled(cx, set::FLOAT, &w)?])
}

/// MaxPool: values and i64 indices of one shape.
pub(super) fn max_pool(cx: &mut Cx<'_, '_>, a: &MaxPool) -> Res<Vec<TensorType>> {
    let w = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: a.ceil_mode != 0,
    };
    let y = pooled(cx, set::MAXPOOL, &w)?;
    let indices = tt(DType::I64, y.shape.clone());
    Ok(vec![y, indices])
}

/// LpPool.
pub(super) fn lp_pool(cx: &mut Cx<'_, '_>, a: &LpPool) -> Res<Vec<TensorType>> {
    let w = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: a.ceil_mode != 0,
    };
    Ok(vec![pooled(cx, set::FLOAT, &w)?])
}

/// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: `[N, C, 1, ...]`.
pub(super) fn global_pool(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.rank_at_least(0, 2, "X")?;
    let x = cx.ty(0)?;
    let mut shape = x.shape[..2].to_vec();
    shape.resize(x.rank(), Dim::Known(1));
    Ok(vec![tt(d, shape)])
}

/// MaxRoiPool: `[num_rois, C, pooled_h, pooled_w]`.
pub(super) fn max_roi_pool(cx: &mut Cx<'_, '_>, a: &MaxRoiPool) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.rank_is(0, 4, "X")?;
    cx.rank_is(1, 2, "rois")?;
    let (x, rois) = (cx.ty(0)?, cx.ty(1)?);
    if matches!(rois.shape[1], Dim::Known(n) if n != 5) {
        return Err(shape_err(format!("rois must have shape [num_rois, 5], found {rois}")));
    }
    if a.pooled_shape.len() != 2 {
        return Err(attr_err(format!("pooled_shape must have 2 values, found {:?}", a.pooled_shape)));
    }
    let mut shape = vec![rois.shape[0].clone(), x.shape[1].clone()];
    for &p in &a.pooled_shape {
        shape.push(Dim::Known(positive(p, "pooled_shape")?));
    }
    Ok(vec![tt(d, shape)])
}

/// MaxUnpool: `output_shape` when given, else `(in - 1) * stride + kernel - pads`.
pub(super) fn max_unpool(cx: &mut Cx<'_, '_>, a: &MaxUnpool) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check(1, set::I64)?;
    cx.check_opt(2, set::I64)?;
    let x = cx.ty(0)?;
    if x.rank() < 3 {
        return Err(shape_err(format!("input must have rank at least 3 (N, C, spatial...), found {x}")));
    }
    let n = x.rank() - 2;
    if cx.opt(2).is_some() {
        return match cx.ints(2) {
            Some(v) if v.len() == x.rank() => Ok(vec![tt(d, v.iter().map(|&s| known(s, "output_shape")).collect::<Res<_>>()?)]),
            Some(v) => Err(shape_err(format!("output_shape has {} values for rank {}", v.len(), x.rank()))),
            None => {
                let mut shape = x.shape[..2].to_vec();
                shape.extend(cx.fresh_dims(n));
                Ok(vec![tt(d, shape)])
            }
        };
    }
    if a.kernel_shape.len() != n {
        return Err(attr_err(format!("kernel_shape has {} values for {n} spatial axes", a.kernel_shape.len())));
    }
    let strides = per_axis(&a.strides, n, 1, "strides")?;
    let pads = per_axis(&a.pads, 2 * n, 0, "pads")?;
    let mut shape = x.shape[..2].to_vec();
    for i in 0..n {
        let k = positive(a.kernel_shape[i], "kernel_shape")?;
        let s = positive(strides[i], "strides")?;
        let grown = mul(&x.shape[2 + i], &Dim::Known(s))?;
        let rest = i128::from(k) - i128::from(s) - i128::from(pads[i]) - i128::from(pads[i + n]);
        shape.push(offset(&grown, i64::try_from(rest).map_err(|_| shape_err("pads overflow"))?)?);
    }
    Ok(vec![tt(d, shape)])
}

/// RoiAlign: `[num_rois, C, output_height, output_width]`.
pub(super) fn roi_align(cx: &mut Cx<'_, '_>, a: &RoiAlign) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.check(2, set::I64)?;
    cx.rank_is(0, 4, "X")?;
    cx.rank_is(1, 2, "rois")?;
    cx.rank_is(2, 1, "batch_indices")?;
    let (x, rois, idx) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    if matches!(rois.shape[1], Dim::Known(n) if n != 4) {
        return Err(shape_err(format!("rois must have shape [num_rois, 4], found {rois}")));
    }
    let r = unify(&rois.shape[0], &idx.shape[0], "rois and batch_indices differ in length")?;
    let (h, w) = (positive(a.output_height, "output_height")?, positive(a.output_width, "output_width")?);
    Ok(vec![tt(d, vec![r, x.shape[1].clone(), Dim::Known(h), Dim::Known(w)])])
}
