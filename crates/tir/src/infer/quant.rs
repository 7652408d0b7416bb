//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::{DequantizeLinear, QuantizeLinear};
use crate::types::TensorType;

use super::common::{Cx, Res, attr_err, axis, fmt_dims, set, shape_err, tt, unify};

/// Checks the scale (input 1) and zero point (input 2) fit the input (input 0): per tensor,
/// per `axis`, or blocked along `axis`.
fn check_scale(cx: &Cx<'_, '_>, ax: i64, block_size: i64) -> Res<()> {
    let (x, scale) = (cx.ty(0)?, cx.ty(1)?);
    let one = |t: &crate::types::TensorType| t.rank() <= 1 && t.shape.iter().all(|d| *d == Dim::Known(1));
    if let Some(zp) = cx.opt(2)
        && !(one(zp) && one(scale))
    {
        if zp.rank() != scale.rank() {
            return Err(shape_err(format!("zero point {zp} must have the scale's shape {}", fmt_dims(&scale.shape))));
        }
        for (z, s) in zp.shape.iter().zip(&scale.shape) {
            unify(s, z, "zero point and scale differ in shape")?;
        }
    }
    let per_tensor = scale.rank() == 0 || (scale.rank() == 1 && scale.shape[0] == Dim::Known(1) && block_size <= 0);
    if per_tensor {
        return Ok(());
    }
    if block_size < 0 {
        return Err(attr_err(format!("block_size must not be negative, found {block_size}")));
    }
    let a = axis(ax, x.rank(), "axis")?;
    if block_size == 0 {
        if scale.rank() != 1 {
            return Err(shape_err(format!("a per-axis scale must be 1-D, found {scale}")));
        }
        unify(&x.shape[a], &scale.shape[0], &format!("scale length differs from axis {a} of the input"))?;
        return Ok(());
    }
    if scale.rank() != x.rank() {
        return Err(shape_err(format!("a blocked scale {scale} must have the input's rank {}", x.rank())));
    }
    for (i, (d, s)) in x.shape.iter().zip(&scale.shape).enumerate() {
        match (d, s) {
            (Dim::Known(d), Dim::Known(s)) if i == a && d.div_ceil(block_size as u64) != *s => {
                return Err(shape_err(format!("blocked scale has {s} blocks on axis {a}, the input needs {}", d.div_ceil(block_size as u64))));
            }
            _ if i != a => {
                unify(d, s, &format!("blocked scale differs from the input on axis {i}"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// QuantizeLinear: the zero point's type, else `output_dtype`, else u8.
pub(super) fn quantize(cx: &mut Cx<'_, '_>, a: &QuantizeLinear) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    cx.check(0, set::QUANT_IN)?;
    cx.check(1, set::QSCALE)?;
    let zp = cx.check_opt(2, set::QUANTIZED)?;
    let out = match (zp, a.output_dtype) {
        (Some(z), Some(o)) if z != o => return Err(attr_err(format!("output_dtype {o} differs from the zero point's type {z}"))),
        (Some(z), _) => z,
        (None, Some(o)) => set::QUANTIZED.check(0, o).map_err(|_| attr_err(format!("output_dtype {o} is not a quantized type")))?,
        (None, None) => DType::U8,
    };
    check_scale(cx, a.axis, a.block_size)?;
    Ok(vec![tt(out, cx.ty(0)?.shape.clone())])
}

/// DequantizeLinear: `output_dtype`, else the scale's type.
pub(super) fn dequantize(cx: &mut Cx<'_, '_>, a: &DequantizeLinear) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    cx.check(0, set::QUANTIZED)?;
    let s = cx.check(1, set::QSCALE)?;
    cx.same(0, 2)?;
    let out = match a.output_dtype {
        Some(o) => set::SCALE.check(0, o).map_err(|_| attr_err(format!("output_dtype {o} must be f32, f16 or bf16")))?,
        None if s == DType::F8E8M0 || s == DType::I32 => DType::F32,
        None => s,
    };
    check_scale(cx, a.axis, a.block_size)?;
    Ok(vec![tt(out, cx.ty(0)?.shape.clone())])
}

/// DynamicQuantizeLinear: u8 data, an f32 scale and a u8 zero point.
pub(super) fn dynamic_quantize(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::F32)?;
    Ok(vec![tt(DType::U8, cx.ty(0)?.shape.clone()), tt(DType::F32, Vec::new()), tt(DType::U8, Vec::new())])
}
