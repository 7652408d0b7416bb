//! Linear quantization: QuantizeLinear and DequantizeLinear, with per-tensor, per-axis and
//! blocked scales and zero points.

use kiln_tir::dtype::DTypeKind;
use kiln_tir::{DType, Op};

use crate::args::Args;
use crate::array::{Arr, Buf, float_to_int, norm_axis, strides};
use crate::cast::{Rounding, cast};
use crate::error::{Result, invalid, unsupported};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::QuantizeLinear(o) => quantize(a, o.axis, o.block_size, o.output_dtype, o.saturate != 0, o.precision),
        Op::DequantizeLinear(o) => dequantize(a, o.axis, o.block_size, o.output_dtype),
        _ => return None,
    })
}

/// For each element of an array of `shape`, the element of the parameter (scale or zero
/// point) of shape `param` that applies: one for all (a scalar), one per index along `axis`
/// (a vector), or one per block of `block` indices along `axis` (same rank as the input).
fn param_index(op: &'static str, shape: &[usize], param: &[usize], axis: i64, block: i64) -> Result<Vec<usize>> {
    let n: usize = shape.iter().product();
    if param.iter().product::<usize>() == 1 && param.len() <= 1 {
        return Ok(vec![0; n]);
    }
    let ax = norm_axis(op, axis, shape.len())?;
    let st = strides(shape);
    if param.len() == 1 && block == 0 {
        if param[0] != shape[ax] {
            return Err(invalid(op, format!("{} per-axis parameters for axis {ax} of size {}", param[0], shape[ax])));
        }
        return Ok((0..n).map(|e| (e / st[ax]) % shape[ax]).collect());
    }
    let block = usize::try_from(block).ok().filter(|&b| b > 0).ok_or_else(|| invalid(op, format!("parameter shape {param:?} needs a positive block_size")))?;
    let fits = param.len() == shape.len() && (0..shape.len()).all(|d| if d == ax { param[d] == shape[d].div_ceil(block) } else { param[d] == shape[d] });
    if !fits {
        return Err(invalid(op, format!("blocked parameters of shape {param:?} do not fit input {shape:?} with block size {block}")));
    }
    let pst = strides(param);
    Ok((0..n)
        .map(|e| (0..shape.len()).map(|d| (e / st[d]) % shape[d] / if d == ax { block } else { 1 } * pst[d]).sum())
        .collect())
}

/// The zero point (input 2) per element as `f64`, and its type, or zeros.
fn zero_points(a: &Args, shape: &[usize], axis: i64, block: i64) -> Result<(Vec<f64>, Option<DType>)> {
    let n: usize = shape.iter().product();
    match a.opt_arr(2)? {
        None => Ok((vec![0.0; n], None)),
        Some(z) => {
            let v = z.to_f64s(a.op)?;
            let idx = param_index(a.op, shape, &z.shape, axis, block)?;
            Ok((idx.into_iter().map(|i| v[i]).collect(), Some(z.dtype)))
        }
    }
}

/// The scale (input 1) per element.
fn scales(a: &Args, shape: &[usize], axis: i64, block: i64) -> Result<(Vec<f64>, DType)> {
    let s = a.arr(1)?;
    let v = s.to_f64s(a.op)?;
    let idx = param_index(a.op, shape, &s.shape, axis, block)?;
    Ok((idx.into_iter().map(|i| v[i]).collect(), s.dtype))
}

fn dequantize(a: &Args, axis: i64, block: i64, output_dtype: Option<DType>) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (scale, scale_type) = scales(a, &x.shape, axis, block)?;
    let (zp, _) = zero_points(a, &x.shape, axis, block)?;
    let xv = x.to_f64s(a.op)?;
    let y = (0..xv.len()).map(|i| (xv[i] - zp[i]) * scale[i]).collect();
    Ok(vec![Arr::floats(output_dtype.unwrap_or(scale_type), x.shape, y)])
}

/// `x / scale` rounded to nearest even, plus the zero point, saturated to the integer target;
/// float targets take `x / scale` through Cast's rounding (with the zero point for float4/6).
fn quantize(a: &Args, axis: i64, block: i64, output_dtype: Option<DType>, saturate: bool, precision: i64) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (scale, _) = scales(a, &x.shape, axis, block)?;
    let (zp, zp_type) = zero_points(a, &x.shape, axis, block)?;
    if let (Some(z), Some(o)) = (zp_type, output_dtype)
        && z != o
    {
        return Err(invalid(a.op, format!("output_dtype {o} differs from the zero point type {z}")));
    }
    let to = zp_type.or(output_dtype).unwrap_or(DType::U8);
    // The quotient is computed in the input's precision (or `precision`), as the reference does.
    let work = if precision != 0 { DType::from_onnx(precision as i32).ok_or_else(|| invalid(a.op, format!("unknown precision type {precision}")))? } else { x.dtype };
    let xv = x.to_f64s(a.op)?;
    let quotient = Arr::floats(work, x.shape.clone(), (0..xv.len()).map(|i| xv[i] / scale[i]).collect());
    let q = cast(a.op, &quotient, work, Rounding::default())?;
    let Buf::F(q) = q.buf else { return Err(unsupported(a.op, format!("computing in {work}"))) };
    let buf = match to.kind() {
        DTypeKind::Signed | DTypeKind::Unsigned => {
            let bits = to.bits();
            let (lo, hi) = if to.kind() == DTypeKind::Signed { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) };
            Buf::I((0..q.len()).map(|i| (float_to_int(q[i].round_ties_even()) + float_to_int(zp[i])).clamp(lo, hi)).collect())
        }
        DTypeKind::Float if to.bits() == 8 => {
            let y = Arr::floats(x.dtype, x.shape.clone(), q);
            return Ok(vec![cast(a.op, &y, to, Rounding { saturate, ..Rounding::default() })?]);
        }
        DTypeKind::Float => {
            let y = Arr::floats(x.dtype, x.shape.clone(), (0..q.len()).map(|i| q[i] + zp[i]).collect());
            return Ok(vec![cast(a.op, &y, to, Rounding::default())?]);
        }
        _ => return Err(unsupported(a.op, format!("quantizing to {to}"))),
    };
    Ok(vec![Arr { dtype: to, shape: x.shape, buf }])
}
