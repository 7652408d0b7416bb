//! Convolutions: Conv (any rank, groups, dilations, padding, strides) and ConvTranspose.
//!
//! Conv unfolds each group's input into a column matrix (one row per input channel and kernel
//! tap, one column per output position) and accumulates weight times row into each output
//! channel, so the inner loop runs over contiguous memory.

use kiln_tir::Op;
use kiln_tir::op::{AutoPad, Conv, ConvTranspose};

use crate::args::Args;
use crate::array::{Arr, numel, strides};
use crate::error::{Result, invalid};
use crate::linalg::axpy;
use crate::window::{Tap, Window, WindowAttrs, coords};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Conv(o) => conv(a, o),
        Op::ConvTranspose(o) => conv_transpose(a, o),
        _ => return None,
    })
}

/// The checked dims shared by Conv and ConvTranspose.
struct Dims {
    batch: usize,
    in_channels: usize,
    groups: usize,
    kernel: Vec<usize>,
}

/// Checks the ranks and types of X and W, `group` and `kernel_shape`.
fn dims(a: &Args, x: &Arr, w: &Arr, group: i64, kernel_shape: &[i64]) -> Result<Dims> {
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return Err(invalid(a.op, format!("input {:?} and weight {:?} must have one rank of 3 or more", x.shape, w.shape)));
    }
    if x.dtype != w.dtype {
        return Err(invalid(a.op, format!("input type {} differs from weight type {}", x.dtype, w.dtype)));
    }
    let groups = usize::try_from(group).ok().filter(|&g| g > 0).ok_or_else(|| invalid(a.op, format!("group {group} must be positive")))?;
    let kernel = w.shape[2..].to_vec();
    if !kernel_shape.is_empty() && kernel_shape.iter().map(|&k| k as usize).ne(kernel.iter().copied()) {
        return Err(invalid(a.op, format!("kernel_shape {kernel_shape:?} differs from the weight's {kernel:?}")));
    }
    Ok(Dims { batch: x.shape[0], in_channels: x.shape[1], groups, kernel })
}

/// The bias input, checked to hold one value per output channel.
fn bias(a: &Args, channels: usize) -> Result<Vec<f64>> {
    match a.opt_arr(2)? {
        None => Ok(vec![0.0; channels]),
        Some(b) if b.len() == channels => Ok(b.f(a.op)?.to_vec()),
        Some(b) => Err(invalid(a.op, format!("bias has {} values for {channels} output channels", b.len()))),
    }
}

fn conv(a: &Args, o: &Conv) -> Result<Vec<Arr>> {
    let (x, w) = (a.arr(0)?, a.arr(1)?);
    let d = dims(a, &x, &w, o.group, &o.kernel_shape)?;
    let (m, cg) = (w.shape[0], w.shape[1]);
    if d.in_channels != cg * d.groups || m % d.groups != 0 {
        return Err(invalid(a.op, format!("{} input channels and weight {:?} do not fit group {}", d.in_channels, w.shape, d.groups)));
    }
    let mg = m / d.groups;
    let attrs = WindowAttrs { auto_pad: o.auto_pad, strides: &o.strides, dilations: &o.dilations, pads: &o.pads, ceil_mode: false };
    let win = Window::new(a.op, &x.shape[2..], &d.kernel, &attrs)?;
    let (kl, ol, il) = (win.kernel_len(), win.output_len(), win.input_len());
    let taps = win.taps();
    let (xv, wv) = (x.f(a.op)?, w.f(a.op)?);
    let bias = bias(a, m)?;
    let mut shape = vec![d.batch, m];
    shape.extend(&win.output);
    let mut out = vec![0.0; numel(a.op, &shape)?];
    let mut col = vec![0.0; numel(a.op, &[cg, kl, ol])?];
    for n in 0..d.batch {
        for g in 0..d.groups {
            for c in 0..cg {
                let plane = &xv[(n * d.in_channels + g * cg + c) * il..][..il];
                for k in 0..kl {
                    let row = &mut col[(c * kl + k) * ol..][..ol];
                    for (dst, tap) in row.iter_mut().zip(&taps[k * ol..(k + 1) * ol]) {
                        *dst = if let Tap::In(i) = *tap { plane[i] } else { 0.0 };
                    }
                }
            }
            for mi in 0..mg {
                let oc = g * mg + mi;
                let orow = &mut out[(n * m + oc) * ol..][..ol];
                orow.fill(bias[oc]);
                let wrow = &wv[oc * cg * kl..][..cg * kl];
                for (r, &wt) in wrow.iter().enumerate() {
                    axpy(orow, wt, &col[r * ol..(r + 1) * ol]);
                }
            }
        }
    }
    Ok(vec![Arr::floats(x.dtype, shape, out)])
}

fn conv_transpose(a: &Args, o: &ConvTranspose) -> Result<Vec<Arr>> {
    let (x, w) = (a.arr(0)?, a.arr(1)?);
    let d = dims(a, &x, &w, o.group, &o.kernel_shape)?;
    if w.shape[0] != d.in_channels || d.in_channels % d.groups != 0 {
        return Err(invalid(a.op, format!("{} input channels and weight {:?} do not fit group {}", d.in_channels, w.shape, d.groups)));
    }
    let (cg, mg) = (d.in_channels / d.groups, w.shape[1]);
    let m = mg * d.groups;
    let input = &x.shape[2..];
    let rank = input.len();
    // i128 arithmetic: attribute values are arbitrary i64s, and products must not overflow.
    let list = |name: &str, v: &[i64], default: i128| -> Result<Vec<i128>> {
        match v.len() {
            0 => Ok(vec![default; rank]),
            n if n == rank => Ok(v.iter().map(|&e| i128::from(e)).collect()),
            n => Err(invalid(a.op, format!("{name} has {n} values for {rank} spatial dims"))),
        }
    };
    let strides_ = list("strides", &o.strides, 1)?;
    let dil = list("dilations", &o.dilations, 1)?;
    let out_pad = list("output_padding", &o.output_padding, 0)?;
    if strides_.iter().chain(&dil).any(|&v| v <= 0) {
        return Err(invalid(a.op, "strides and dilations must be positive"));
    }
    let mut pads: Vec<i128> = if o.pads.is_empty() { vec![0; 2 * rank] } else { o.pads.iter().map(|&p| i128::from(p)).collect() };
    if pads.len() != 2 * rank {
        return Err(invalid(a.op, format!("pads has {} values for {rank} spatial dims", pads.len())));
    }
    let mut output = vec![0i128; rank];
    for dd in 0..rank {
        let span = (d.kernel[dd] as i128 - 1) * dil[dd] + 1;
        let full = strides_[dd] * (input[dd] as i128 - 1) + out_pad[dd] + span;
        let wanted = match (o.output_shape.len(), o.auto_pad) {
            (n, _) if n == rank || n == rank + 2 => Some(i128::from(o.output_shape[n - rank + dd])),
            (_, AutoPad::SameUpper | AutoPad::SameLower) => Some(input[dd] as i128 * strides_[dd]),
            _ => None,
        };
        if let Some(out) = wanted {
            let total = (full - out).max(0);
            let (b, e) = if o.auto_pad == AutoPad::SameUpper { (total / 2, total - total / 2) } else { (total - total / 2, total / 2) };
            pads[dd] = b;
            pads[dd + rank] = e;
            output[dd] = out;
        } else {
            output[dd] = full - pads[dd] - pads[dd + rank];
        }
        if !(0..=i128::from(u32::MAX)).contains(&output[dd]) {
            return Err(invalid(a.op, format!("output size {} is out of range", output[dd])));
        }
    }
    let output: Vec<usize> = output.iter().map(|&v| v as usize).collect();
    let mut shape = vec![d.batch, m];
    shape.extend(&output);
    let mut out = vec![0.0; numel(a.op, &shape)?];
    let (ol, il, kl) = (output.iter().product::<usize>(), input.iter().product::<usize>(), d.kernel.iter().product::<usize>());
    let ost = strides(&output);
    // For each (kernel position, input position), the output offset it adds into.
    let mut scatter = Vec::with_capacity(kl * il);
    for kc in coords(&d.kernel) {
        for ic in coords(input) {
            let mut off = Some(0usize);
            for dd in 0..rank {
                let pos = ic[dd] as i128 * strides_[dd] + kc[dd] as i128 * dil[dd] - pads[dd];
                off = off.filter(|_| (0..output[dd] as i128).contains(&pos)).map(|v| v + pos as usize * ost[dd]);
            }
            scatter.push(off);
        }
    }
    let (xv, wv) = (x.f(a.op)?, w.f(a.op)?);
    let bias = bias(a, m)?;
    for n in 0..d.batch {
        for oc in 0..m {
            out[(n * m + oc) * ol..][..ol].fill(bias[oc]);
        }
        for g in 0..d.groups {
            for c in 0..cg {
                let ic = g * cg + c;
                let plane = &xv[(n * d.in_channels + ic) * il..][..il];
                for mi in 0..mg {
                    let oc = g * mg + mi;
                    let wk = &wv[(ic * mg + mi) * kl..][..kl];
                    let orow = &mut out[(n * m + oc) * ol..][..ol];
                    for (k, &wt) in wk.iter().enumerate() {
                        for (i, &xval) in plane.iter().enumerate() {
                            if let Some(p) = scatter[k * il + i] {
                                orow[p] += wt * xval;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(vec![Arr::floats(x.dtype, shape, out)])
}
