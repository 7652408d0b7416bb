//! Signal processing: DFT, STFT, the window generators, MelWeightMatrix.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::DFT;
use crate::types::TensorType;

use super::common::{Cx, Res, add, attr_err, div_floor, known, mul, offset, positive, set, shape_err, sub, tt};

/// A scalar size input: its value when constant (checked non-negative), else a fresh dim.
fn size_input(cx: &mut Cx<'_, '_>, i: usize, name: &str) -> Res<Dim> {
    cx.scalar_like(i, name)?;
    match cx.int_scalar(i) {
        Some(v) => known(v, name),
        None => Ok(cx.fresh()),
    }
}

/// `floor(n / 2) + 1`, the one-sided bin count.
fn half_plus_one(cx: &mut Cx<'_, '_>, n: &Dim) -> Res<Dim> {
    let half = div_floor(cx, n, 2);
    add(&half, &Dim::Known(1))
}

/// DFT: the transformed axis becomes the DFT length (or its one-sided bin count), the last
/// axis holds (re, im), or one real value for the inverse one-sided transform.
pub(super) fn dft(cx: &mut Cx<'_, '_>, a: &DFT) -> Res<Vec<TensorType>> {
    cx.arity(1, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check_opt(1, set::INDEX)?;
    cx.check_opt(2, set::I64)?;
    cx.rank_at_least(0, 2, "input")?;
    let x = cx.ty(0)?;
    let r = x.rank();
    if matches!(x.shape[r - 1], Dim::Known(n) if n != 1 && n != 2) {
        return Err(shape_err(format!("the last dim of {x} must be 1 (real) or 2 (complex)")));
    }
    let onesided = a.onesided != 0;
    let inverse = a.inverse != 0;
    let last = Dim::Known(if onesided && inverse { 1 } else { 2 });
    let axis = match cx.opt(2) {
        None => Some(-2),
        Some(_) => {
            cx.scalar_like(2, "axis")?;
            cx.int_scalar(2)
        }
    };
    let Some(axis) = axis else {
        let mut shape = cx.fresh_dims(r - 1);
        shape.push(last);
        return Ok(vec![tt(d, shape)]);
    };
    let rr = r as i64;
    let ax = if axis < 0 { axis + rr } else { axis };
    if !(0..rr - 1).contains(&ax) {
        return Err(attr_err(format!("axis {axis} must name a signal axis of rank-{r} input (not the last)")));
    }
    let ax = ax as usize;
    let signal = &x.shape[ax];
    let n = match cx.opt(1) {
        Some(_) => size_input(cx, 1, "dft_length")?,
        None if onesided && inverse => mul(&sub(signal, &Dim::Known(1))?, &Dim::Known(2))?,
        None => signal.clone(),
    };
    let mut shape = x.shape.clone();
    shape[ax] = if onesided && !inverse { half_plus_one(cx, &n)? } else { n };
    shape[r - 1] = last;
    Ok(vec![tt(d, shape)])
}

/// STFT: `[batch, frames, bins, 2]`.
pub(super) fn stft(cx: &mut Cx<'_, '_>, onesided: i64) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check(1, set::INDEX)?;
    cx.same(0, 2)?;
    cx.same(1, 3)?;
    cx.rank_is(0, 3, "signal")?;
    cx.rank_is(2, 1, "window")?;
    let x = cx.ty(0)?;
    let step = size_input(cx, 1, "frame_step")?;
    let frame = match (cx.opt(3), cx.opt(2)) {
        (Some(_), _) => size_input(cx, 3, "frame_length")?,
        (None, Some(w)) => w.shape[0].clone(),
        (None, None) => x.shape[1].clone(),
    };
    let frames = match (&x.shape[1], &frame, &step) {
        (Dim::Known(l), Dim::Known(f), Dim::Known(s)) => {
            let s = positive(*s as i64, "frame_step")?;
            let span = l.checked_sub(*f).ok_or_else(|| shape_err(format!("frame length {f} exceeds the signal length {l}")))?;
            Dim::Known(span / s + 1)
        }
        (l, f, Dim::Known(1)) if l.sub(f).is_some() => offset(&sub(l, f)?, 1)?,
        _ => cx.fresh(),
    };
    let bins = if onesided != 0 { half_plus_one(cx, &frame)? } else { frame };
    Ok(vec![tt(d, vec![x.shape[0].clone(), frames, bins, Dim::Known(2)])])
}

/// HannWindow, HammingWindow, BlackmanWindow: `[size]` of `output_datatype`.
pub(super) fn window(cx: &mut Cx<'_, '_>, dtype: DType) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::INDEX)?;
    set::NUMERIC.check(0, dtype).map_err(|_| attr_err(format!("output_datatype {dtype} is not numeric")))?;
    let n = size_input(cx, 0, "size")?;
    Ok(vec![tt(dtype, vec![n])])
}

/// MelWeightMatrix: `[floor(dft_length / 2) + 1, num_mel_bins]` of `output_datatype`.
pub(super) fn mel_weight_matrix(cx: &mut Cx<'_, '_>, dtype: DType) -> Res<Vec<TensorType>> {
    cx.arity(5, 5)?;
    for i in 0..3 {
        cx.check(i, set::INDEX)?;
    }
    cx.check(3, set::FLOAT)?;
    cx.same(3, 4)?;
    cx.scalar_like(2, "sample_rate")?;
    cx.scalar_like(3, "lower_edge_hertz")?;
    cx.scalar_like(4, "upper_edge_hertz")?;
    set::NUMERIC.check(0, dtype).map_err(|_| attr_err(format!("output_datatype {dtype} is not numeric")))?;
    let mels = size_input(cx, 0, "num_mel_bins")?;
    let n = size_input(cx, 1, "dft_length")?;
    let bins = half_plus_one(cx, &n)?;
    Ok(vec![tt(dtype, vec![bins, mels])])
}
