//! Pooling: MaxPool (with indices), AveragePool, LpPool and the global pools.

use kiln_tir::Op;

use crate::args::Args;
use crate::array::{Arr, Buf, float_to_int, numel, strides};
use crate::error::{Result, invalid, unsupported};
use crate::window::{Tap, Window, WindowAttrs};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::MaxPool(o) => {
            let attrs = WindowAttrs { auto_pad: o.auto_pad, strides: &o.strides, dilations: &o.dilations, pads: &o.pads, ceil_mode: o.ceil_mode != 0 };
            pool(a, &o.kernel_shape, &attrs, Kind::Max { column_major: o.storage_order != 0 })
        }
        Op::AveragePool(o) => {
            let attrs = WindowAttrs { auto_pad: o.auto_pad, strides: &o.strides, dilations: &o.dilations, pads: &o.pads, ceil_mode: o.ceil_mode != 0 };
            pool(a, &o.kernel_shape, &attrs, Kind::Average { count_pad: o.count_include_pad != 0 })
        }
        Op::LpPool(o) => {
            let attrs = WindowAttrs { auto_pad: o.auto_pad, strides: &o.strides, dilations: &o.dilations, pads: &o.pads, ceil_mode: o.ceil_mode != 0 };
            pool(a, &o.kernel_shape, &attrs, Kind::Lp(o.p as f64))
        }
        Op::GlobalAveragePool(_) => global(a, Kind::Average { count_pad: false }),
        Op::GlobalMaxPool(_) => global(a, Kind::Max { column_major: false }),
        Op::GlobalLpPool(o) => global(a, Kind::Lp(o.p as f64)),
        _ => return None,
    })
}

/// What a pool computes over its window.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The maximum; the optional second output indexes it (row- or column-major spatially).
    Max { column_major: bool },
    /// The mean, counting padding elements when `count_pad`.
    Average { count_pad: bool },
    /// `(sum |x|^p)^(1/p)`.
    Lp(f64),
}

/// The input as floats (integer inputs of MaxPool convert exactly below 2^53).
fn values(a: &Args, x: &Arr) -> Result<Vec<f64>> {
    if x.shape.len() < 3 {
        return Err(invalid(a.op, format!("input must have rank 3 or more, has shape {:?}", x.shape)));
    }
    match &x.buf {
        Buf::F(v) => Ok(v.clone()),
        Buf::I(v) => Ok(v.iter().map(|&e| e as f64).collect()),
        _ => Err(unsupported(a.op, format!("element type {}", x.dtype))),
    }
}

/// An output array of `x`'s type from float results.
fn output(x: &Arr, shape: Vec<usize>, v: Vec<f64>) -> Arr {
    match x.buf {
        Buf::I(_) => Arr::ints(x.dtype, shape, v.into_iter().map(float_to_int).collect()),
        _ => Arr::floats(x.dtype, shape, v),
    }
}

fn pool(a: &Args, kernel: &[i64], attrs: &WindowAttrs, kind: Kind) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let xv = values(a, &x)?;
    let kernel: Vec<usize> = kernel.iter().map(|&k| usize::try_from(k).map_err(|_| invalid(a.op, format!("kernel dim {k} is negative")))).collect::<Result<_>>()?;
    let win = Window::new(a.op, &x.shape[2..], &kernel, attrs)?;
    let (kl, ol, il) = (win.kernel_len(), win.output_len(), win.input_len());
    let taps = win.taps();
    let planes = x.shape[0] * x.shape[1];
    let mut shape = x.shape[..2].to_vec();
    shape.extend(&win.output);
    let total = numel(a.op, &shape)?;
    let mut out = Vec::with_capacity(total);
    let mut arg = Vec::with_capacity(total);
    for p in 0..planes {
        let plane = &xv[p * il..(p + 1) * il];
        for o in 0..ol {
            let window = (0..kl).map(|k| taps[k * ol + o]);
            let value = match kind {
                Kind::Max { .. } => {
                    let mut best: Option<(f64, usize)> = None;
                    for tap in window {
                        if let Tap::In(i) = tap
                            && best.is_none_or(|(b, _)| plane[i] > b)
                        {
                            best = Some((plane[i], i));
                        }
                    }
                    arg.push(best.map_or(0, |(_, i)| i));
                    best.map_or(f64::NEG_INFINITY, |(b, _)| b)
                }
                Kind::Average { count_pad } => {
                    let (mut sum, mut count) = (0.0, 0usize);
                    for tap in window {
                        match tap {
                            Tap::In(i) => {
                                sum += plane[i];
                                count += 1;
                            }
                            Tap::Pad if count_pad => count += 1,
                            _ => {}
                        }
                    }
                    sum / count as f64
                }
                Kind::Lp(pw) => window.filter_map(|t| if let Tap::In(i) = t { Some(plane[i].abs().powf(pw)) } else { None }).sum::<f64>().powf(1.0 / pw),
            };
            out.push(value);
        }
    }
    let mut results = vec![output(&x, shape.clone(), out)];
    if let Kind::Max { column_major } = kind {
        let in_st = strides(&win.input);
        // Column-major strides: the first spatial axis varies fastest.
        let col_st: Vec<usize> = (0..win.input.len()).map(|d| win.input[..d].iter().product()).collect();
        let indices = arg.iter().enumerate().map(|(e, &i)| {
            let plane = e / ol.max(1);
            let spatial = if column_major { (0..in_st.len()).map(|d| (i / in_st[d]) % win.input[d] * col_st[d]).sum() } else { i };
            (plane * il + spatial) as i64
        });
        results.push(Arr::i64s(shape, indices));
    }
    Ok(results)
}

fn global(a: &Args, kind: Kind) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let xv = values(a, &x)?;
    let planes = x.shape[0] * x.shape[1];
    let il: usize = x.shape[2..].iter().product();
    let out = (0..planes)
        .map(|p| {
            let plane = &xv[p * il..(p + 1) * il];
            match kind {
                Kind::Max { .. } => plane.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Kind::Average { .. } => plane.iter().sum::<f64>() / il as f64,
                Kind::Lp(pw) => plane.iter().map(|v| v.abs().powf(pw)).sum::<f64>().powf(1.0 / pw),
            }
        })
        .collect();
    let mut shape = x.shape.clone();
    shape[2..].fill(1);
    Ok(vec![output(&x, shape, out)])
}
