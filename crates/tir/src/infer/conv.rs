//! Convolutions (Conv, ConvInteger, QLinearConv, ConvTranspose, DeformConv,
//! CausalConvWithState), Col2Im, and the sliding-window arithmetic pooling shares.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::{
    AutoPad, Col2Im, Conv, ConvInteger, ConvTranspose, DeformConv, FusedConv, PadsError,
    QLinearConv, window_pads,
};
use crate::types::TensorType;

use super::common::{
    Cx, Res, attr_err, fmt_dims, known, mul, offset, per_axis, positive, product, set, shape_err,
    tt, unify,
};

/// The attributes of a sliding window over the spatial axes.
pub(super) struct Window<'a> {
    /// Explicit kernel sizes (empty: take them from the weight).
    pub kernel_shape: &'a [i64],
    /// Strides (empty: 1).
    pub strides: &'a [i64],
    /// Dilations (empty: 1).
    pub dilations: &'a [i64],
    /// Begin pads then end pads (empty: 0).
    pub pads: &'a [i64],
    /// Automatic padding.
    pub auto_pad: AutoPad,
    /// Round the window count up (pooling).
    pub ceil_mode: bool,
}

/// The checked, per-axis numbers of a window over `n` spatial axes.
struct Resolved {
    strides: Vec<u64>,
    dilations: Vec<u64>,
    pads: Vec<u64>,
}

impl Window<'_> {
    fn resolve(&self, n: usize) -> Res<Resolved> {
        let pos = |list: &[i64], what: &str| -> Res<Vec<u64>> {
            per_axis(list, n, 1, what)?
                .into_iter()
                .map(|v| positive(v, what))
                .collect()
        };
        per_axis(self.pads, 2 * n, 0, "pads")?;
        // SAME windows have ceil(input / stride) outputs whatever their pads, which over a
        // symbolic size have no closed form: `output` does not read them.
        let pads = match window_pads(self.auto_pad, self.pads, n, None) {
            Ok(pads) => pads,
            Err(PadsError::Unknown) => vec![0; 2 * n],
            Err(PadsError::Negative(p)) => return Err(attr_err(format!("pads must not be negative, found {p}"))),
            Err(PadsError::Count { len, .. }) => return Err(attr_err(format!("`pads` has {len} values, expected {}", 2 * n))),
        };
        Ok(Resolved {
            strides: pos(self.strides, "strides")?,
            dilations: pos(self.dilations, "dilations")?,
            pads,
        })
    }

    /// Output sizes of the window over `spatial` input sizes with `kernel` sizes (`None` for a
    /// kernel size that is not static).
    pub fn output(
        &self,
        cx: &mut Cx<'_, '_>,
        spatial: &[Dim],
        kernel: &[Option<u64>],
    ) -> Res<Vec<Dim>> {
        let n = spatial.len();
        let r = self.resolve(n)?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (s, input) = (r.strides[i], &spatial[i]);
            if matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
                out.push(super::common::div_ceil(cx, input, s));
                continue;
            }
            let Some(k) = kernel[i] else {
                out.push(cx.fresh());
                continue;
            };
            let ek = effective(k, r.dilations[i])?;
            let (pb, pe) = (r.pads[i], r.pads[i + n]);
            let dim = match input {
                Dim::Known(x) => {
                    let total = u128::from(*x) + u128::from(pb) + u128::from(pe);
                    let span = total.checked_sub(u128::from(ek)).ok_or_else(|| {
                        shape_err(format!("window of {ek} (kernel {k}, dilation {}) exceeds padded input {total} on spatial axis {i}", r.dilations[i]))
                    })?;
                    let s = u128::from(s);
                    let mut o = if self.ceil_mode {
                        span.div_ceil(s) + 1
                    } else {
                        span / s + 1
                    };
                    // The last window must start inside the input or its begin padding.
                    if self.ceil_mode && (o - 1) * s >= u128::from(*x) + u128::from(pb) {
                        o -= 1;
                    }
                    Dim::Known(u64::try_from(o).map_err(|_| shape_err("output size overflows"))?)
                }
                Dim::Sym(_) => {
                    let delta = i64::try_from(i128::from(pb) + i128::from(pe) - i128::from(ek))
                        .map_err(|_| shape_err("pads overflow"))?;
                    let span = offset(input, delta)?;
                    match span.div_exact(&Dim::Known(s)) {
                        Some(q) => offset(&q, 1)?,
                        None => cx.fresh(),
                    }
                }
            };
            out.push(dim);
        }
        Ok(out)
    }
}

/// `(k - 1) * d + 1`, checked.
pub(super) fn effective(k: u64, d: u64) -> Res<u64> {
    k.checked_sub(1)
        .and_then(|k| k.checked_mul(d))
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| {
            shape_err(format!(
                "kernel {k} with dilation {d} is not a valid window"
            ))
        })
}

/// Kernel sizes: the attribute when given (checked against the weight), else the weight's
/// spatial dims.
pub(super) fn kernel(attr: &[i64], weight_spatial: &[Dim]) -> Res<Vec<Option<u64>>> {
    if attr.is_empty() {
        return Ok(weight_spatial.iter().map(Dim::known).collect());
    }
    if attr.len() != weight_spatial.len() {
        return Err(attr_err(format!(
            "kernel_shape has {} values for {} spatial axes",
            attr.len(),
            weight_spatial.len()
        )));
    }
    attr.iter()
        .zip(weight_spatial)
        .map(|(&k, w)| {
            let k = positive(k, "kernel_shape")?;
            if matches!(w, Dim::Known(n) if *n != k) {
                return Err(shape_err(format!(
                    "kernel_shape {attr:?} does not match the weight's spatial dims {}",
                    fmt_dims(weight_spatial)
                )));
            }
            Ok(Some(k))
        })
        .collect()
}

/// The shape of a (grouped) convolution of input `xi` with weight `wi`: `[N, M, out...]`.
fn conv_shape(
    cx: &mut Cx<'_, '_>,
    xi: usize,
    wi: usize,
    group: i64,
    window: &Window<'_>,
) -> Res<Vec<Dim>> {
    let (x, w) = (cx.ty(xi)?, cx.ty(wi)?);
    if x.rank() < 3 {
        return Err(shape_err(format!(
            "input must have rank at least 3 (N, C, spatial...), found {x}"
        )));
    }
    if w.rank() != x.rank() {
        return Err(shape_err(format!(
            "weight {w} must have the input's rank {}",
            x.rank()
        )));
    }
    let g = positive(group, "group")?;
    if let (Dim::Known(c), Dim::Known(wc)) = (&x.shape[1], &w.shape[1])
        && wc.checked_mul(g) != Some(*c)
    {
        return Err(shape_err(format!(
            "input has {c} channels but weight expects {wc} x group {g}"
        )));
    }
    if let Dim::Known(m) = w.shape[0]
        && m % g != 0
    {
        return Err(shape_err(format!(
            "{m} output channels do not divide into {g} groups"
        )));
    }
    let k = kernel(window.kernel_shape, &w.shape[2..])?;
    let spatial = window.output(cx, &x.shape[2..], &k)?;
    let mut shape = vec![x.shape[0].clone(), w.shape[0].clone()];
    shape.extend(spatial);
    Ok(shape)
}

/// Checks the bias at input `i` is 1-D with `m` elements.
fn bias(cx: &Cx<'_, '_>, i: usize, m: &Dim) -> Res<()> {
    if let Some(b) = cx.opt(i) {
        match &b.shape[..] {
            [d] => {
                unify(m, d, "bias size differs from the output channels")?;
            }
            _ => return Err(shape_err(format!("bias must be 1-D, found {b}"))),
        }
    }
    Ok(())
}

/// Conv.
pub(super) fn conv(cx: &mut Cx<'_, '_>, a: &Conv) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    let window = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: false,
    };
    let shape = conv_shape(cx, 0, 1, a.group, &window)?;
    bias(cx, 2, &shape[1])?;
    Ok(vec![tt(d, shape)])
}

/// FusedConv: Conv's inputs plus a residual addend `Z` of the output's type.
pub(super) fn fused_conv(cx: &mut Cx<'_, '_>, a: &FusedConv) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in 1..4 {
        cx.same(0, i)?;
    }
    let window = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: false,
    };
    let shape = conv_shape(cx, 0, 1, a.group, &window)?;
    bias(cx, 2, &shape[1])?;
    let y = tt(d, shape);
    residual(cx, 3, &y)?;
    Ok(vec![y])
}

/// Checks the optional residual addend `i` has exactly the output's type.
pub(super) fn residual(cx: &Cx<'_, '_>, i: usize, y: &TensorType) -> Res<()> {
    match cx.opt(i) {
        Some(z) if z.shape != y.shape => Err(shape_err(format!(
            "residual addend {z} differs from the output {y}"
        ))),
        _ => Ok(()),
    }
}

/// ConvInteger: 8-bit operands, i32 output.
pub(super) fn conv_integer(cx: &mut Cx<'_, '_>, a: &ConvInteger) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    cx.check(0, set::INT8)?;
    cx.check(1, set::INT8)?;
    cx.same(0, 2)?;
    cx.same(1, 3)?;
    let window = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: false,
    };
    Ok(vec![tt(
        DType::I32,
        conv_shape(cx, 0, 1, a.group, &window)?,
    )])
}

/// QLinearConv: x, its scale and zero point, w, its scale and zero point, y's scale and zero
/// point, and an i32 bias; the output has the type of y's zero point.
pub(super) fn qlinear_conv(cx: &mut Cx<'_, '_>, a: &QLinearConv) -> Res<Vec<TensorType>> {
    cx.arity(8, 9)?;
    cx.check(0, set::INT8)?;
    cx.check(3, set::INT8)?;
    let d = cx.check(7, set::INT8)?;
    cx.same(0, 2)?;
    cx.same(3, 5)?;
    for i in [1, 4, 6] {
        cx.check(i, set::F32)?;
    }
    cx.check_opt(8, set::I32)?;
    let window = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: false,
    };
    let shape = conv_shape(cx, 0, 3, a.group, &window)?;
    bias(cx, 8, &shape[1])?;
    Ok(vec![tt(d, shape)])
}

/// ConvTranspose: `[N, W[1] * group, out...]` with the output size from `output_shape`, the
/// SAME rule (`in * stride`) or the transposed-convolution formula.
pub(super) fn conv_transpose(cx: &mut Cx<'_, '_>, a: &ConvTranspose) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    let (x, w) = (cx.ty(0)?, cx.ty(1)?);
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(shape_err(format!(
            "input {x} and weight {w} must have one rank of at least 3"
        )));
    }
    let n = x.rank() - 2;
    let g = positive(a.group, "group")?;
    unify(
        &x.shape[1],
        &w.shape[0],
        "input channels differ from the weight's first dim",
    )?;
    let m = mul(&w.shape[1], &Dim::Known(g))?;
    let k = kernel(&a.kernel_shape, &w.shape[2..])?;
    let window = Window {
        kernel_shape: &[],
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: a.auto_pad,
        ceil_mode: false,
    };
    let r = window.resolve(n)?;
    let out_pad = per_axis(&a.output_padding, n, 0, "output_padding")?;
    let mut shape = vec![x.shape[0].clone(), m];
    if !a.output_shape.is_empty() {
        let given = match a.output_shape.len() {
            l if l == n => &a.output_shape[..],
            l if l == n + 2 => &a.output_shape[2..],
            l => {
                return Err(attr_err(format!(
                    "output_shape has {l} values for {n} spatial axes"
                )));
            }
        };
        for &v in given {
            shape.push(known(v, "output_shape")?);
        }
    } else {
        for i in 0..n {
            let input = &x.shape[2 + i];
            let s = r.strides[i];
            let scaled = mul(input, &Dim::Known(s))?;
            if matches!(a.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
                shape.push(scaled);
                continue;
            }
            let Some(k) = k[i] else {
                shape.push(cx.fresh());
                continue;
            };
            let ek = effective(k, r.dilations[i])?;
            // stride * (in - 1) + output_padding + ek - pads = in * stride + (the rest).
            let rest = i128::from(out_pad[i]) + i128::from(ek)
                - i128::from(s)
                - i128::from(r.pads[i])
                - i128::from(r.pads[i + n]);
            let rest = i64::try_from(rest).map_err(|_| shape_err("pads overflow"))?;
            shape.push(offset(&scaled, rest)?);
        }
    }
    bias(cx, 2, &shape[1])?;
    Ok(vec![tt(d, shape)])
}

/// DeformConv: a convolution whose sampling offsets (and optional mask) come as inputs.
pub(super) fn deform_conv(cx: &mut Cx<'_, '_>, a: &DeformConv) -> Res<Vec<TensorType>> {
    cx.arity(3, 5)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in 1..5 {
        cx.same(0, i)?;
    }
    let window = Window {
        kernel_shape: &a.kernel_shape,
        strides: &a.strides,
        dilations: &a.dilations,
        pads: &a.pads,
        auto_pad: AutoPad::Notset,
        ceil_mode: false,
    };
    let mut shape = conv_shape(cx, 0, 1, a.group, &window)?;
    positive(a.offset_group, "offset_group")?;
    let off = cx.ty(2)?;
    if off.rank() != shape.len() {
        return Err(shape_err(format!(
            "offset {off} must have the input's rank {}",
            shape.len()
        )));
    }
    for (i, o) in off.shape[2..].iter().enumerate() {
        shape[2 + i] = unify(
            &shape[2 + i],
            o,
            "offset spatial size differs from the output's",
        )?;
    }
    bias(cx, 3, &shape[1])?;
    Ok(vec![tt(d, shape)])
}

/// CausalConvWithState: output like the input `(B, C, L)`; the new state `(B, C, k - 1)`.
pub(super) fn causal_conv(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in 1..4 {
        cx.same(0, i)?;
    }
    cx.rank_is(0, 3, "input")?;
    cx.rank_is(1, 3, "weight")?;
    let (x, w) = (cx.ty(0)?, cx.ty(1)?);
    unify(
        &x.shape[1],
        &w.shape[0],
        "weight channels differ from the input's",
    )?;
    let state = match &w.shape[2] {
        Dim::Known(0) => return Err(shape_err("kernel size must be positive")),
        Dim::Known(k) => Dim::Known(k - 1),
        k => offset(k, -1)?,
    };
    let state_shape = vec![x.shape[0].clone(), x.shape[1].clone(), state];
    if let Some(past) = cx.opt(3)
        && past.shape.len() != 3
    {
        return Err(shape_err(format!(
            "past_state must have shape {}, found {past}",
            fmt_dims(&state_shape)
        )));
    }
    Ok(vec![x.clone(), tt(d, state_shape)])
}

/// Col2Im: `[N, C * prod(block), L]` back to `[N, C, image...]`.
pub(super) fn col2im(cx: &mut Cx<'_, '_>, a: &Col2Im) -> Res<Vec<TensorType>> {
    cx.arity(3, 3)?;
    let x = cx.ty(0)?;
    cx.rank_is(0, 3, "input")?;
    cx.check(1, set::I64)?;
    cx.check(2, set::I64)?;
    let image = cx.ints(1);
    let block = cx.ints(2);
    let n = match (&image, cx.vector_len(1, "image_shape")?) {
        (Some(v), _) => v.len(),
        (None, Dim::Known(n)) => n as usize,
        (None, Dim::Sym(_)) => {
            return Err(super::InferError::NotStatic(
                "the output rank depends on image_shape's length, which is not static".into(),
            ));
        }
    };
    let channels = match &block {
        Some(b) => {
            if b.len() != n {
                return Err(shape_err(format!(
                    "block_shape has {} values for {n} image axes",
                    b.len()
                )));
            }
            let dims: Vec<Dim> = b
                .iter()
                .map(|&v| positive(v, "block_shape").map(Dim::Known))
                .collect::<Res<_>>()?;
            let p = product(&dims)?;
            match (&x.shape[1], x.shape[1].div_exact(&p)) {
                (_, Some(c)) => c,
                (Dim::Known(c), None) => {
                    return Err(shape_err(format!(
                        "{c} channels do not divide by the block size {p}"
                    )));
                }
                (_, None) => cx.fresh(),
            }
        }
        None => cx.fresh(),
    };
    let mut shape = vec![x.shape[0].clone(), channels];
    match image {
        Some(v) => {
            for d in v {
                shape.push(known(d, "image_shape")?);
            }
            if let Some(b) = &block {
                check_col2im_blocks(a, &shape[2..], b, &x.shape[2])?;
            }
        }
        None => shape.extend(cx.fresh_dims(n)),
    }
    Ok(vec![tt(x.dtype, shape)])
}

/// Checks the block count `L` matches what the image, block and window attributes give.
fn check_col2im_blocks(a: &Col2Im, image: &[Dim], block: &[i64], l: &Dim) -> Res<()> {
    let n = image.len();
    let strides = per_axis(&a.strides, n, 1, "strides")?;
    let dil = per_axis(&a.dilations, n, 1, "dilations")?;
    let pads = per_axis(&a.pads, 2 * n, 0, "pads")?;
    let mut count: u128 = 1;
    for i in 0..n {
        let Dim::Known(size) = image[i] else {
            return Ok(());
        };
        let ek = effective(
            positive(block[i], "block_shape")?,
            positive(dil[i], "dilations")?,
        )?;
        let span =
            i128::from(size) + i128::from(pads[i]) + i128::from(pads[i + n]) - i128::from(ek);
        if span < 0 {
            return Err(shape_err(format!(
                "block of {ek} exceeds the padded image on axis {i}"
            )));
        }
        let s = i128::from(positive(strides[i], "strides")?);
        count = count.saturating_mul((span / s + 1) as u128);
    }
    match l {
        Dim::Known(l) if u128::from(*l) != count => Err(shape_err(format!(
            "input has {l} blocks, but the image and block shapes give {count}"
        ))),
        _ => Ok(()),
    }
}
