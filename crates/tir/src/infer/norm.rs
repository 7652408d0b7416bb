//! Normalization layers: BatchNormalization, LayerNormalization, GroupNormalization,
//! InstanceNormalization, RMSNormalization, LRN, MeanVarianceNormalization.

use crate::dim::Dim;
use crate::op::{GroupNormalization, LRN, LayerNormalization, MeanVarianceNormalization, RMSNormalization};
use crate::types::TensorType;

use super::common::{Cx, Res, attr_err, axes, axis, fmt_dims, set, shape_err, tt, unify};

/// Checks per-channel input `i` is 1-D of `channels` elements.
fn per_channel(cx: &Cx<'_, '_>, i: usize, name: &str, channels: &Dim) -> Res<()> {
    let Some(t) = cx.opt(i) else {
        return Ok(());
    };
    match &t.shape[..] {
        [c] => unify(channels, c, &format!("input {i} (`{name}`) has a size other than the channel count")).map(|_| ()),
        _ => Err(shape_err(format!("input {i} (`{name}`) must be 1-D with one value per channel, found {t}"))),
    }
}

/// BatchNormalization: Y like X; in training mode also the running mean and variance.
pub(super) fn batch_norm(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(5, 5)?;
    cx.check(0, set::FLOAT)?;
    cx.rank_at_least(0, 2, "X")?;
    let x = cx.ty(0)?;
    for (i, name) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
        cx.check(i, set::FLOAT)?;
        per_channel(cx, i, name, &x.shape[1])?;
    }
    cx.same(1, 2)?;
    cx.same(3, 4)?;
    let stats = tt(cx.ty(3)?.dtype, vec![x.shape[1].clone()]);
    Ok(vec![x.clone(), stats.clone(), stats])
}

/// LayerNormalization: Y like X, and Mean and InvStdDev of shape `X[:axis] + [1, ...]` in the
/// stash type.
pub(super) fn layer_norm(cx: &mut Cx<'_, '_>, a: &LayerNormalization) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    let x = cx.ty(0)?;
    let ax = axis(a.axis, x.rank(), "axis")?;
    let stats: Vec<Dim> = x.shape.iter().enumerate().map(|(i, d)| if i < ax { d.clone() } else { Dim::Known(1) }).collect();
    let stash = a.stash_type;
    Ok(vec![x.clone(), tt(stash, stats.clone()), tt(stash, stats)])
}

/// GroupNormalization: Y like X; scale and bias have one value per channel.
pub(super) fn group_norm(cx: &mut Cx<'_, '_>, a: &GroupNormalization) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    cx.rank_at_least(0, 2, "X")?;
    let x = cx.ty(0)?;
    if a.num_groups <= 0 {
        return Err(attr_err(format!("num_groups must be positive, found {}", a.num_groups)));
    }
    if let Dim::Known(c) = x.shape[1]
        && c % a.num_groups as u64 != 0
    {
        return Err(shape_err(format!("{c} channels do not divide into {} groups", a.num_groups)));
    }
    per_channel(cx, 1, "scale", &x.shape[1])?;
    per_channel(cx, 2, "bias", &x.shape[1])?;
    Ok(vec![x.clone()])
}

/// InstanceNormalization: Y like X; scale and bias have one value per channel.
pub(super) fn instance_norm(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    cx.rank_at_least(0, 3, "input")?;
    let x = cx.ty(0)?;
    per_channel(cx, 1, "scale", &x.shape[1])?;
    per_channel(cx, 2, "B", &x.shape[1])?;
    Ok(vec![x.clone()])
}

/// RMSNormalization: Y like X (the reference implementation keeps X's element type); the
/// scale broadcasts to the normalized axes.
pub(super) fn rms_norm(cx: &mut Cx<'_, '_>, a: &RMSNormalization) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(0, set::FLOAT)?;
    cx.check(1, set::FLOAT)?;
    let x = cx.ty(0)?;
    let ax = axis(a.axis, x.rank(), "axis")?;
    let scale = cx.ty(1)?;
    if scale.rank() > x.rank() - ax {
        return Err(shape_err(format!("scale of shape {} has more axes than the normalized {}", fmt_dims(&scale.shape), fmt_dims(&x.shape[ax..]))));
    }
    Ok(vec![x.clone()])
}

/// LRN: Y like X, a positive window size.
pub(super) fn lrn(cx: &mut Cx<'_, '_>, a: &LRN) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::FLOAT)?;
    cx.rank_at_least(0, 2, "X")?;
    if a.size <= 0 {
        return Err(attr_err(format!("size must be positive, found {}", a.size)));
    }
    Ok(vec![cx.ty(0)?.clone()])
}

/// MeanVarianceNormalization: Y like X; the axes must exist.
pub(super) fn mvn(cx: &mut Cx<'_, '_>, a: &MeanVarianceNormalization) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::FLOAT)?;
    let x = cx.ty(0)?;
    axes(&a.axes, x.rank(), "axis")?;
    Ok(vec![x.clone()])
}
