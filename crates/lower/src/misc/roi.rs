//! RoiAlign, following ONNX's reference (itself onnxruntime's CPU kernel).
//!
//! Every output bin of a region averages (or takes the maximum of) a grid of bilinear samples.
//! With `sampling_ratio = 0` the grid adapts to the region, `ceil(region / bins)` samples per
//! bin along each axis, a number only known at run time; loop extents are static, so the
//! sample loops run to a cap (enough for regions up to twice the feature map plus its border)
//! under a condition, and a `Check` reports a region too large for the cap. Sample positions
//! are computed per bin once and then applied to every channel, accumulating in a scratch
//! row of `C` values. Where the samples read the feature map more often than copying it would,
//! they read a channels-last copy: a sample's four pixels are then contiguous across channels,
//! and the channel loop runs in vectors, instead of gathering from a plane apart.

use kiln_tir::op::{RoiAlign, RoiCoordMode, RoiPoolMode};
use kiln_tir::NodeId;

use super::{bind, clamp, expect_dims, float_type, in_range, load_as, or, store, when, Body};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers RoiAlign.
pub(super) fn roi_align(cx: &mut Lowerer<'_>, n: NodeId, a: &RoiAlign) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let rois = cx.required(n, 1)?;
    let batch_indices = cx.required(n, 2)?;
    let t = float_type(cx, n, &x, "input")?;
    if x.rank() != 4 || rois.rank() != 2 || rois.dims[1] != 4 || batch_indices.dims != [rois.dims[0]] {
        return Err(cx.unsupported(n, format!("invalid model: input {:?}, rois {:?}, batch indices {:?}", x.dims, rois.dims, batch_indices.dims)));
    }
    if batch_indices.ty().is_float() {
        return Err(cx.unsupported(n, "invalid model: float batch indices"));
    }
    let (batch, channels, height, width) = (x.dims[0], x.dims[1], x.dims[2], x.dims[3]);
    let count = rois.dims[0];
    if a.output_height < 1 || a.output_width < 1 || a.sampling_ratio < 0 {
        return Err(cx.unsupported(n, "invalid model: output size or sampling ratio"));
    }
    let (ph, pw) = (a.output_height as u64, a.output_width as u64);
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &[count, channels, ph, pw])?;
    if y.numel() == 0 {
        return Ok(());
    }
    if height == 0 || width == 0 {
        return Err(cx.unsupported(n, "pooling an empty feature map"));
    }
    let half_pixel = a.coordinate_transformation_mode == RoiCoordMode::HalfPixel;
    let max_mode = a.mode == RoiPoolMode::Max;
    // Samples per bin: fixed, or capped for the adaptive grid.
    let caps = match a.sampling_ratio {
        0 => [(2 * height + 2).div_ceil(ph), (2 * width + 2).div_ceil(pw)],
        s => [s as u64, s as u64],
    };
    // Each sample reads four pixels of every channel; the copy reads and writes every element
    // of the map once. The adaptive grid counts one sample per bin, its fewest.
    let per_bin = if a.sampling_ratio == 0 { 1 } else { caps[0].saturating_mul(caps[1]) };
    let reads = count.saturating_mul(ph * pw).saturating_mul(per_bin).saturating_mul(2);
    let channels_last = channels > 1 && reads >= batch.saturating_mul(height * width);
    let plane = (height * width) as i64;
    let nhwc = channels_last.then(|| {
        let name = format!("{}_nhwc", cx.node(n).name);
        cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(t), len: batch * channels * height * width, kind: BufferKind::Temp })
    });
    // Where consecutive channels of a pixel are, and how far pixel offsets scale.
    let (channel_stride, pixel_stride) = if channels_last { (1, channels as i64) } else { (plane, 1) };
    let acc = {
        let name = format!("{}_acc", cx.node(n).name);
        cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(t), len: channels, kind: BufferKind::Temp })
    };
    let batch_error = cx.error(n, "batch index out of range");
    let mut b = Body::new(cx, n);
    let c = |v: f64| Expr::float(t, v);
    if let Some(nhwc) = nhwc {
        let copy = b.k.nest(&[batch, channels, height * width], |_, i| {
            let (image, ch, pixel) = (i[0].clone(), i[1].clone(), i[2].clone());
            let to = (image.clone() * plane + pixel.clone()) * channels as i64 + ch.clone();
            vec![Stmt::Store { buf: nhwc, index: to, value: load_as(&x, (image * channels as i64 + ch) * plane + pixel, t) }]
        });
        b.stmts.extend(copy);
    }
    let read = |at: Expr| match nhwc {
        Some(buf) => Expr::load(buf, at),
        None => load_as(&x, at, t),
    };
    let grid_errors = if a.sampling_ratio == 0 {
        let msg = |axis: &str, cap: u64| format!("region of interest needs more than {cap} samples per bin along {axis}");
        let h = cx.error(n, msg("height", caps[0]));
        let w = cx.error(n, msg("width", caps[1]));
        Some((h, w))
    } else {
        None
    };
    let nest = b.k.nest(&[count], |k, r| {
        let r = r[0].clone();
        let mut s = Vec::new();
        let bi = bind(k, &mut s, ScalarType::I64, load_as(&batch_indices, r.clone(), ScalarType::I64));
        s.push(Stmt::Check { cond: in_range(bi.clone(), 0, batch as i64), error: batch_error });
        let offset = if half_pixel { 0.5 } else { 0.0 };
        let coord = |j: i64| load_as(&rois, r.clone() * 4 + j, t) * c(f64::from(a.spatial_scale)) - c(offset);
        let x1 = bind(k, &mut s, t, coord(0));
        let y1 = bind(k, &mut s, t, coord(1));
        let x2 = bind(k, &mut s, t, coord(2));
        let y2 = bind(k, &mut s, t, coord(3));
        let (mut roi_w, mut roi_h) = (x2 - x1.clone(), y2 - y1.clone());
        if !half_pixel {
            roi_w = roi_w.max(c(1.0));
            roi_h = roi_h.max(c(1.0));
        }
        let roi_w = bind(k, &mut s, t, roi_w);
        let roi_h = bind(k, &mut s, t, roi_h);
        let bin_h = bind(k, &mut s, t, roi_h.clone() / c(ph as f64));
        let bin_w = bind(k, &mut s, t, roi_w.clone() / c(pw as f64));
        let (grid_h, grid_w) = match grid_errors {
            Some((eh, ew)) => {
                let gh = bind(k, &mut s, ScalarType::I64, bin_h.clone().un(UnOp::Ceil).cast(ScalarType::I64));
                let gw = bind(k, &mut s, ScalarType::I64, bin_w.clone().un(UnOp::Ceil).cast(ScalarType::I64));
                s.push(Stmt::Check { cond: gh.clone().cmp(CmpOp::Le, Expr::idx(caps[0] as i64)), error: eh });
                s.push(Stmt::Check { cond: gw.clone().cmp(CmpOp::Le, Expr::idx(caps[1] as i64)), error: ew });
                (gh, gw)
            }
            None => (Expr::idx(caps[0] as i64), Expr::idx(caps[1] as i64)),
        };
        let samples = bind(k, &mut s, ScalarType::I64, grid_h.clone() * grid_w.clone());
        let gh_f = bind(k, &mut s, t, grid_h.clone().cast(t));
        let gw_f = bind(k, &mut s, t, grid_w.clone().cast(t));
        let base = bind(k, &mut s, ScalarType::I64, bi * (channels as i64 * plane));
        s.extend(k.nest(&[ph, pw], |k, bin| {
            let mut s = k.nest(&[channels], |_, ch| vec![Stmt::Store { buf: acc, index: ch[0].clone(), value: c(if max_mode { f64::NEG_INFINITY } else { 0.0 }) }]);
            let sample_rows = k.nest(&[caps[0]], |k, iy| {
                let mut s = Vec::new();
                let yy = bind(k, &mut s, t, y1.clone() + bin[0].clone().cast(t) * bin_h.clone() + (iy[0].clone().cast(t) + c(0.5)) * bin_h.clone() / gh_f.clone());
                let cols = k.nest(&[caps[1]], |k, ix| {
                    let mut s = Vec::new();
                    let xx = bind(k, &mut s, t, x1.clone() + bin[1].clone().cast(t) * bin_w.clone() + (ix[0].clone().cast(t) + c(0.5)) * bin_w.clone() / gw_f.clone());
                    let outside = or(
                        or(yy.clone().cmp(CmpOp::Lt, c(-1.0)), yy.clone().cmp(CmpOp::Gt, c(height as f64))),
                        or(xx.clone().cmp(CmpOp::Lt, c(-1.0)), xx.clone().cmp(CmpOp::Gt, c(width as f64))),
                    );
                    let outside = bind(k, &mut s, ScalarType::Bool, outside);
                    // Per axis: the low and high rows (columns) and the weight of the high one.
                    let mut axis = |v: &Expr, dim: u64| {
                        let v = bind(k, &mut s, t, v.clone().max(c(0.0)));
                        let low = bind(k, &mut s, ScalarType::I64, v.clone().cast(ScalarType::I64));
                        let last = dim as i64 - 1;
                        let at_end = bind(k, &mut s, ScalarType::Bool, low.clone().cmp(CmpOp::Ge, Expr::idx(last)));
                        let lo = bind(k, &mut s, ScalarType::I64, clamp(at_end.clone().select(Expr::idx(last), low.clone()), 0, last));
                        let hi = bind(k, &mut s, ScalarType::I64, clamp(at_end.clone().select(Expr::idx(last), low + 1), 0, last));
                        let frac = at_end.select(c(0.0), v - lo.clone().cast(t));
                        let frac = bind(k, &mut s, t, outside.clone().select(c(0.0), frac));
                        (lo, hi, frac)
                    };
                    let (y_lo, y_hi, ly) = axis(&yy, height);
                    let (x_lo, x_hi, lx) = axis(&xx, width);
                    let zero_out = |w: Expr| outside.clone().select(c(0.0), w);
                    let (hy, hx) = (c(1.0) - ly.clone(), c(1.0) - lx.clone());
                    let corners = [
                        (y_lo.clone(), x_lo.clone(), zero_out(hy.clone() * hx.clone())),
                        (y_lo, x_hi.clone(), zero_out(hy * lx.clone())),
                        (y_hi.clone(), x_lo, zero_out(ly.clone() * hx)),
                        (y_hi, x_hi, zero_out(ly * lx)),
                    ];
                    let corners: Vec<(Expr, Expr)> = corners
                        .into_iter()
                        .map(|(yi, xi, w)| {
                            let pos = bind(k, &mut s, ScalarType::I64, (yi * width as i64 + xi) * pixel_stride);
                            (pos, bind(k, &mut s, t, w))
                        })
                        .collect();
                    s.extend(k.nest(&[channels], |_, ch| {
                        let at = base.clone() + ch[0].clone() * channel_stride;
                        let terms = corners.iter().map(|(pos, w)| w.clone() * read(at.clone() + pos.clone()));
                        let old = Expr::load(acc, ch[0].clone());
                        let value = if max_mode { terms.fold(old, |m, v| m.max(v)) } else { terms.fold(old, |sum, v| sum + v) };
                        vec![Stmt::Store { buf: acc, index: ch[0].clone(), value }]
                    }));
                    match grid_errors {
                        Some(_) => vec![when(ix[0].clone().cmp(CmpOp::Lt, grid_w.clone()), s)],
                        None => s,
                    }
                });
                s.extend(cols);
                match grid_errors {
                    Some(_) => vec![when(iy[0].clone().cmp(CmpOp::Lt, grid_h.clone()), s)],
                    None => s,
                }
            });
            s.extend(sample_rows);
            let sum = |ch: &Expr| Expr::load(acc, ch.clone());
            s.extend(k.nest(&[channels], |_, ch| {
                let value = if max_mode {
                    let any = grid_h.clone().cmp(CmpOp::Gt, Expr::idx(0)).bin(BinOp::And, grid_w.clone().cmp(CmpOp::Gt, Expr::idx(0)));
                    any.select(sum(&ch[0]), c(0.0))
                } else {
                    sum(&ch[0]) / samples.clone().max(Expr::idx(1)).cast(t)
                };
                let at = ((r.clone() * channels as i64 + ch[0].clone()) * ph as i64 + bin[0].clone()) * pw as i64 + bin[1].clone();
                vec![store(&y, at, value, t)]
            }));
            s
        }));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}
