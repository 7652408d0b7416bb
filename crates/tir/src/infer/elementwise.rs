//! Elementwise ops: unary maps, casts, broadcasting binary and variadic maps, Where, Clip.

use crate::dtype::DType;
use crate::types::TensorType;

use super::InferError;
use super::common::{Cx, Res, TypeSet, fmt_dims, set, shape_err, tt};

/// One input; the output has its type.
pub(super) fn unary(cx: &mut Cx<'_, '_>, accepts: TypeSet) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, accepts)?;
    Ok(vec![cx.ty(0)?.clone()])
}

/// One input; the output has its shape and element type `to`.
pub(super) fn unary_to(cx: &mut Cx<'_, '_>, accepts: TypeSet, to: DType) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, accepts)?;
    Ok(vec![tt(to, cx.ty(0)?.shape.clone())])
}

/// CastLike: the first input's shape with the second input's element type.
pub(super) fn cast_like(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    Ok(vec![tt(cx.ty(1)?.dtype, cx.ty(0)?.shape.clone())])
}

/// BitCast: same shape, an element type of the same width.
pub(super) fn bitcast(cx: &mut Cx<'_, '_>, to: DType) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    if x.dtype == DType::String || to == DType::String {
        return Err(InferError::Attr("bitcast does not apply to strings".into()));
    }
    if x.dtype.bits() != to.bits() {
        return Err(InferError::Attr(format!("cannot bitcast {} ({} bits) to {to} ({} bits)", x.dtype, x.dtype.bits(), to.bits())));
    }
    Ok(vec![tt(to, x.shape.clone())])
}

/// Dropout: the data, and a bool mask of the same shape.
pub(super) fn dropout(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 3)?;
    cx.check(0, set::FLOAT_F8)?;
    cx.check_opt(1, set::FLOAT_F8)?;
    cx.check_opt(2, set::BOOL)?;
    cx.scalar_like(1, "ratio")?;
    cx.scalar_like(2, "training_mode")?;
    let x = cx.ty(0)?;
    Ok(vec![x.clone(), tt(DType::Bool, x.shape.clone())])
}

/// Clip: optional scalar bounds of the input's type.
pub(super) fn clip(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 3)?;
    cx.check(0, set::NUMERIC)?;
    for (i, name) in [(1, "min"), (2, "max")] {
        cx.same(0, i)?;
        cx.scalar_like(i, name)?;
    }
    Ok(vec![cx.ty(0)?.clone()])
}

/// Two inputs of one type in `accepts`, broadcast; the output has element type `out`
/// (default: the inputs').
pub(super) fn binary(cx: &mut Cx<'_, '_>, accepts: TypeSet, out: Option<DType>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, accepts)?;
    cx.same(0, 1)?;
    let shape = cx.broadcast(&[&cx.ty(0)?.shape, &cx.ty(1)?.shape])?;
    Ok(vec![tt(out.unwrap_or(d), shape)])
}

/// Pow: the exponent may have another numeric type; the output has the base's.
pub(super) fn pow(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, set::POW_BASE)?;
    cx.check(1, set::NUMERIC)?;
    let shape = cx.broadcast(&[&cx.ty(0)?.shape, &cx.ty(1)?.shape])?;
    Ok(vec![tt(d, shape)])
}

/// PRelu: the slope broadcasts to the input, whose shape the output keeps.
pub(super) fn prelu(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(0, set::REDUCIBLE)?;
    cx.same(0, 1)?;
    let (x, slope) = (cx.ty(0)?, cx.ty(1)?);
    cx.broadcasts_to(&slope.shape, &x.shape, "slope")?;
    Ok(vec![x.clone()])
}

/// SwiGLU: two inputs of identical shape, no broadcasting.
pub(super) fn swiglu(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    let (a, b) = (cx.ty(0)?, cx.ty(1)?);
    if a.shape != b.shape {
        return Err(shape_err(format!("inputs must have identical shapes, found {} and {}", fmt_dims(&a.shape), fmt_dims(&b.shape))));
    }
    Ok(vec![a.clone()])
}

/// Where: a bool condition and two values of one type, all broadcast.
pub(super) fn where_(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    cx.check(0, set::BOOL)?;
    cx.same(1, 2)?;
    let shape = cx.broadcast(&[&cx.ty(0)?.shape, &cx.ty(1)?.shape, &cx.ty(2)?.shape])?;
    Ok(vec![tt(cx.ty(1)?.dtype, shape)])
}

/// Max, Min, Mean, Sum: one or more inputs of one type, all broadcast.
pub(super) fn variadic(cx: &mut Cx<'_, '_>, accepts: TypeSet) -> Res<Vec<TensorType>> {
    cx.arity(1, usize::MAX)?;
    let d = cx.check(0, accepts)?;
    let mut shapes = Vec::with_capacity(cx.len());
    for i in 0..cx.len() {
        cx.same(0, i)?;
        shapes.push(&cx.ty(i)?.shape[..]);
    }
    Ok(vec![tt(d, cx.broadcast(&shapes)?)])
}
