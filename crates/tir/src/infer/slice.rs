//! Ops that cut, join or pad along axes: Slice, Split, Concat, Pad, CenterCropPad, Resize.

use crate::dim::Dim;
use crate::op::{AspectPolicy, Resize, Split};
use crate::types::TensorType;

use super::InferError;
use super::common::{Cx, Res, add, attr_err, axes, axis, div_ceil, fmt_dims, known, mul, offset, set, shape_err, tt, unify};

/// Slice bounds at or past this magnitude mean "to the end" (or "to the beginning") of a
/// symbolic axis: exporters write `i64::MAX`, `i32::MAX` and their negations.
const TO_END: i64 = i32::MAX as i64;

/// A position along an axis of size `d`: `coef * d + offset`, with `coef` 0 or 1.
#[derive(Clone, Copy)]
struct Pos {
    coef: i128,
    offset: i128,
}

/// The length of `start:end:step` over one dim, with ONNX's clamping for known sizes. For a
/// symbolic size `d`, a length of the form `d + k` assumes no clamping (`seq[1:]` is
/// `seq-1`); a constant length is kept only when it holds for every `d >= 2`.
fn slice_len(cx: &mut Cx<'_, '_>, d: &Dim, start: i64, end: i64, step: i64) -> Res<Dim> {
    if step == 0 {
        return Err(shape_err("slice step is 0"));
    }
    let (start, end, step) = (i128::from(start), i128::from(end), i128::from(step));
    if let Dim::Known(n) = d {
        let n = i128::from(*n);
        if n == 0 {
            return Ok(Dim::Known(0));
        }
        let (mut s, mut e) = (start, end);
        if s < 0 {
            s += n;
        }
        if e < 0 {
            e += n;
        }
        let len = if step > 0 {
            let (s, e) = (s.clamp(0, n), e.clamp(0, n));
            (e - s + step - 1).div_euclid(step)
        } else {
            let (s, e) = (s.clamp(0, n - 1), e.clamp(-1, n - 1));
            (s - e - step - 1).div_euclid(-step)
        };
        return Ok(Dim::Known(len.max(0) as u64));
    }
    let big = i128::from(TO_END);
    // Where a bound lands: past either end it clamps, negative counts from the back.
    let place = |v: i128, past_end: Pos, before_start: Pos| {
        if v >= big {
            past_end
        } else if v <= -big {
            before_start
        } else if v < 0 {
            Pos { coef: 1, offset: v }
        } else {
            Pos { coef: 0, offset: v }
        }
    };
    let (s, e, stride) = if step > 0 {
        let (last, first) = (Pos { coef: 1, offset: 0 }, Pos { coef: 0, offset: 0 });
        (place(start, last, first), place(end, last, first), step)
    } else {
        let last = Pos { coef: 1, offset: -1 };
        let s = place(start, last, Pos { coef: 0, offset: 0 });
        let e = place(end, last, Pos { coef: 0, offset: -1 });
        // Walking backwards from s to e covers s - e positions.
        (e, s, -step)
    };
    let (coef, span) = (e.coef - s.coef, e.offset - s.offset);
    let stride = u64::try_from(stride).map_err(|_| shape_err("slice step overflows"))?;
    match coef {
        // A constant length is exact only if no bound clamps, which the symbol being at
        // least 2 guarantees for offsets up to 2; beyond that it depends on the size.
        0 if [s, e].iter().all(|p| (if p.coef == 0 { p.offset } else { -p.offset }) <= 2) => {
            let len = if span <= 0 { 0 } else { (span as u128).div_ceil(u128::from(stride)) };
            Ok(Dim::Known(u64::try_from(len).map_err(|_| shape_err("slice length overflows"))?))
        }
        1 => {
            let span = i64::try_from(span).map_err(|_| shape_err("slice bounds overflow"))?;
            let len = offset(d, span)?;
            Ok(div_ceil(cx, &len, stride))
        }
        _ => Ok(cx.fresh()),
    }
}

/// Slice: constant starts, ends, axes and steps give exact sizes; others give fresh dims.
pub(super) fn slice(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(3, 5)?;
    cx.check(1, set::INDEX)?;
    for i in 2..5 {
        cx.same(1, i)?;
    }
    let x = cx.ty(0)?;
    let r = x.rank();
    let n = cx.vector_len(1, "starts")?;
    cx.vector_len(2, "ends")?;
    let axes_list = match cx.opt(3) {
        None => match &n {
            Dim::Known(n) => Some((0..*n as i64).collect::<Vec<_>>()),
            Dim::Sym(_) => None,
        },
        Some(_) => cx.ints(3),
    };
    let Some(axes_list) = axes_list else {
        return Ok(vec![tt(x.dtype, cx.fresh_dims(r))]);
    };
    let idx = axes(&axes_list, r, "axis")?;
    let starts = cx.ints(1);
    let ends = cx.ints(2);
    let steps = match cx.opt(4) {
        None => Some(vec![1; idx.len()]),
        Some(_) => cx.ints(4),
    };
    let mut shape = x.shape.clone();
    let (Some(starts), Some(ends), Some(steps)) = (starts, ends, steps) else {
        for &i in &idx {
            shape[i] = cx.fresh();
        }
        return Ok(vec![tt(x.dtype, shape)]);
    };
    if starts.len() != idx.len() || ends.len() != idx.len() || steps.len() != idx.len() {
        return Err(shape_err(format!("starts, ends, axes and steps differ in length ({}, {}, {}, {})", starts.len(), ends.len(), idx.len(), steps.len())));
    }
    for (k, &i) in idx.iter().enumerate() {
        shape[i] = slice_len(cx, &x.shape[i], starts[k], ends[k], steps[k])?;
    }
    Ok(vec![tt(x.dtype, shape)])
}

/// Split: sizes from the `split` input, or `num_outputs` chunks (the last one smaller), or
/// equal parts for each output.
pub(super) fn split(cx: &mut Cx<'_, '_>, a: &Split) -> Res<Vec<TensorType>> {
    cx.arity(1, 2)?;
    cx.check_opt(1, set::I64)?;
    let x = cx.ty(0)?;
    let ax = axis(a.axis, x.rank(), "axis")?;
    let d = &x.shape[ax];
    let n = cx.num_outputs;
    let sizes: Vec<Dim> = if cx.opt(1).is_some() {
        match cx.ints(1) {
            Some(v) => {
                if v.len() != n {
                    return Err(shape_err(format!("split has {} sizes for {n} outputs", v.len())));
                }
                let sizes: Vec<Dim> = v.iter().map(|&s| known(s, "split size")).collect::<Res<_>>()?;
                let total: u128 = v.iter().map(|&s| s as u128).sum();
                if matches!(d, Dim::Known(t) if u128::from(*t) != total) {
                    return Err(shape_err(format!("split sizes {v:?} do not add up to the axis size {d}")));
                }
                sizes
            }
            None => cx.fresh_dims(n),
        }
    } else {
        if let Some(k) = a.num_outputs
            && usize::try_from(k).ok() != Some(n)
        {
            return Err(attr_err(format!("num_outputs = {k} but the node has {n} outputs")));
        }
        chunks(cx, d, n)
    };
    Ok(sizes
        .into_iter()
        .map(|s| {
            let mut shape = x.shape.clone();
            shape[ax] = s;
            tt(x.dtype, shape)
        })
        .collect())
}

/// `n` chunks of `ceil(d / n)`, the last one holding what is left (as the reference does).
fn chunks(cx: &mut Cx<'_, '_>, d: &Dim, n: usize) -> Vec<Dim> {
    match d {
        _ if n == 0 => Vec::new(),
        Dim::Known(t) => {
            let chunk = t.div_ceil(n as u64);
            (0..n as u64).map(|i| Dim::Known((*t).min(chunk.saturating_mul(i + 1)).saturating_sub(chunk.saturating_mul(i).min(*t)))).collect()
        }
        _ => match d.div_exact(&Dim::Known(n as u64)) {
            Some(c) => vec![c; n],
            None => cx.fresh_dims(n),
        },
    }
}

/// Concat: one rank and dtype; the axis sizes add up, the other dims agree.
pub(super) fn concat(cx: &mut Cx<'_, '_>, ax: i64) -> Res<Vec<TensorType>> {
    cx.arity(1, usize::MAX)?;
    let first = cx.ty(0)?;
    let r = first.rank();
    let a = axis(ax, r, "axis")?;
    let mut shape = first.shape.clone();
    for i in 1..cx.len() {
        cx.same(0, i)?;
        let t = cx.ty(i)?;
        if t.rank() != r {
            return Err(shape_err(format!("input {i} has rank {}, input 0 has rank {r}", t.rank())));
        }
        for (k, d) in t.shape.iter().enumerate() {
            shape[k] = if k == a { add(&shape[k], d)? } else { unify(&shape[k], d, &format!("input {i} differs from input 0 on axis {k}"))? };
        }
    }
    Ok(vec![tt(first.dtype, shape)])
}

/// Pad: each padded axis grows by its begin and end pads (which may be negative).
pub(super) fn pad(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    cx.check(1, set::I64)?;
    cx.check_opt(3, set::INDEX)?;
    cx.same(0, 2)?;
    cx.scalar_like(2, "constant_value")?;
    let x = cx.ty(0)?;
    let r = x.rank();
    let idx: Vec<usize> = match cx.opt(3) {
        None => (0..r).collect(),
        Some(_) => match cx.ints(3) {
            Some(v) => axes(&v, r, "axis")?,
            None => return Ok(vec![tt(x.dtype, cx.fresh_dims(r))]),
        },
    };
    let mut shape = x.shape.clone();
    let Some(pads) = cx.ints(1) else {
        for &i in &idx {
            shape[i] = cx.fresh();
        }
        return Ok(vec![tt(x.dtype, shape)]);
    };
    if pads.len() != 2 * idx.len() {
        return Err(shape_err(format!("pads has {} values for {} axes", pads.len(), idx.len())));
    }
    for (k, &i) in idx.iter().enumerate() {
        let total = i64::try_from(i128::from(pads[k]) + i128::from(pads[k + idx.len()])).map_err(|_| shape_err("pads overflow"))?;
        shape[i] = offset(&x.shape[i], total).map_err(|_| shape_err(format!("pads {pads:?} remove more than axis {i} of {} holds", fmt_dims(&x.shape))))?;
    }
    Ok(vec![tt(x.dtype, shape)])
}

/// CenterCropPad: the given axes take the sizes of the shape input.
pub(super) fn center_crop_pad(cx: &mut Cx<'_, '_>, axes_attr: &[i64]) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::INDEX)?;
    let x = cx.ty(0)?;
    let r = x.rank();
    let idx: Vec<usize> = if axes_attr.is_empty() { (0..r).collect() } else { axes(axes_attr, r, "axis")? };
    let n = cx.vector_len(1, "shape")?;
    if matches!(n, Dim::Known(n) if n as usize != idx.len()) {
        return Err(shape_err(format!("shape has {n} values for {} axes", idx.len())));
    }
    let mut shape = x.shape.clone();
    let sizes = cx.ints(1);
    if let Some(v) = &sizes
        && v.len() != idx.len()
    {
        return Err(shape_err(format!("shape has {} values for {} axes", v.len(), idx.len())));
    }
    for (k, &i) in idx.iter().enumerate() {
        shape[i] = match &sizes {
            Some(v) => known(v[k], "shape value")?,
            None => cx.fresh(),
        };
    }
    Ok(vec![tt(x.dtype, shape)])
}

/// True if optional input `i` is present and not an empty tensor.
fn given(cx: &Cx<'_, '_>, i: usize) -> bool {
    cx.opt(i).is_some_and(|t| !t.shape.contains(&Dim::Known(0)))
}

/// Resize: sizes from `scales` (`floor(in * scale)`) or `sizes` (with the aspect policy).
pub(super) fn resize(cx: &mut Cx<'_, '_>, a: &Resize) -> Res<Vec<TensorType>> {
    cx.arity(1, 4)?;
    cx.check_opt(2, set::F32)?;
    cx.check_opt(3, set::I64)?;
    let x = cx.ty(0)?;
    let r = x.rank();
    let idx: Vec<usize> = if a.axes.is_empty() { (0..r).collect() } else { axes(&a.axes, r, "axis")? };
    let mut shape = x.shape.clone();
    let (values, is_scales) = match (given(cx, 2), given(cx, 3)) {
        (true, true) => return Err(shape_err("scales and sizes are both given")),
        (true, false) => (cx.floats(2), true),
        (false, true) => (cx.ints(3).map(|v| v.into_iter().map(|s| s as f64).collect()), false),
        (false, false) => return Err(shape_err("one of scales and sizes must be given")),
    };
    let Some(values) = values else {
        for &i in &idx {
            shape[i] = cx.fresh();
        }
        return Ok(vec![tt(x.dtype, shape)]);
    };
    if values.len() != idx.len() {
        let what = if is_scales { "scales" } else { "sizes" };
        return Err(shape_err(format!("{what} has {} values for {} axes", values.len(), idx.len())));
    }
    if is_scales {
        for (&i, &s) in idx.iter().zip(&values) {
            if !(s > 0.0 && s.is_finite()) {
                return Err(shape_err(format!("scale {s} is not positive")));
            }
            shape[i] = scaled(cx, &x.shape[i], s)?;
        }
        return Ok(vec![tt(x.dtype, shape)]);
    }
    for &s in &values {
        if s < 0.0 {
            return Err(shape_err(format!("size {s} is negative")));
        }
    }
    if a.keep_aspect_ratio_policy == AspectPolicy::Stretch {
        for (&i, &s) in idx.iter().zip(&values) {
            shape[i] = Dim::Known(s as u64);
        }
        return Ok(vec![tt(x.dtype, shape)]);
    }
    // One scale for all axes: the smallest (not_larger) or largest (not_smaller) ratio.
    let mut ratios = Vec::with_capacity(idx.len());
    for (&i, &s) in idx.iter().zip(&values) {
        match x.shape[i] {
            Dim::Known(n) if n > 0 => ratios.push(s / n as f64),
            _ => {
                for &i in &idx {
                    shape[i] = cx.fresh();
                }
                return Ok(vec![tt(x.dtype, shape)]);
            }
        }
    }
    let pick = if a.keep_aspect_ratio_policy == AspectPolicy::NotLarger { f64::min } else { f64::max };
    let scale = ratios.iter().copied().reduce(pick).unwrap_or(1.0);
    for &i in &idx {
        let n = x.shape[i].known().unwrap_or(0) as f64;
        shape[i] = Dim::Known((scale * n + 0.5).floor() as u64);
    }
    Ok(vec![tt(x.dtype, shape)])
}

/// `floor(d * scale)`; a symbolic dim keeps its form for whole-number scales.
fn scaled(cx: &mut Cx<'_, '_>, d: &Dim, scale: f64) -> Res<Dim> {
    match d {
        Dim::Known(n) => {
            let v = (*n as f64 * scale).floor();
            if v >= u64::MAX as f64 {
                return Err(InferError::Overflow(format!("resized size {n} x {scale} overflows")));
            }
            Ok(Dim::Known(v as u64))
        }
        _ if scale.fract() == 0.0 && scale < u32::MAX as f64 => mul(d, &Dim::Known(scale as u64)),
        _ => Ok(cx.fresh()),
    }
}
