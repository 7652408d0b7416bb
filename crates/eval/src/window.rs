//! Sliding windows shared by convolution and pooling: output size, padding and, for every
//! (kernel position, output position) pair, which input element it reads.

use kiln_tir::op::{AutoPad, PadsError, WindowAxis, window_pads};

use crate::array::{numel, strides};
use crate::error::{Result, invalid};

/// Where one kernel tap of one output position lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tap {
    /// On the input element at this spatial offset.
    In(usize),
    /// In the explicit padding.
    Pad,
    /// Past the padding (only windows that `ceil_mode` adds reach there).
    Outside,
}

/// A window over N spatial dims.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    /// Input spatial dims.
    pub input: Vec<usize>,
    /// Kernel spatial dims.
    pub kernel: Vec<usize>,
    /// Output spatial dims.
    pub output: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
    pad_end: Vec<usize>,
}

/// The window attributes as the op gives them (empty lists take their defaults).
pub(crate) struct WindowAttrs<'a> {
    /// `auto_pad`.
    pub auto_pad: AutoPad,
    /// `strides`, default all 1.
    pub strides: &'a [i64],
    /// `dilations`, default all 1.
    pub dilations: &'a [i64],
    /// `pads` as `[begin..., end...]`, default all 0.
    pub pads: &'a [i64],
    /// Round the output size up instead of down (pooling only).
    pub ceil_mode: bool,
}

/// Positive values of `list`, or `default` per dim when it is empty.
fn positive(op: &'static str, name: &str, list: &[i64], rank: usize) -> Result<Vec<usize>> {
    if list.is_empty() {
        return Ok(vec![1; rank]);
    }
    if list.len() != rank {
        return Err(invalid(op, format!("{name} has {} values for {rank} spatial dims", list.len())));
    }
    list.iter().map(|&v| usize::try_from(v).ok().filter(|&v| v > 0).ok_or_else(|| invalid(op, format!("{name} value {v} must be positive")))).collect()
}

impl Window {
    /// Computes the output size and padding of a window of `kernel` over `input`.
    pub(crate) fn new(op: &'static str, input: &[usize], kernel: &[usize], attrs: &WindowAttrs) -> Result<Window> {
        let rank = input.len();
        if kernel.len() != rank {
            return Err(invalid(op, format!("kernel has {} dims for {rank} spatial dims", kernel.len())));
        }
        let strides = positive(op, "strides", attrs.strides, rank)?;
        let dilations = positive(op, "dilations", attrs.dilations, rank)?;
        let axes: Vec<WindowAxis> = (0..rank).map(|d| WindowAxis { input: input[d] as u64, kernel: kernel[d] as u64, stride: strides[d] as u64, dilation: dilations[d] as u64 }).collect();
        let bad = |v: i64| invalid(op, format!("pad {v} must be non-negative and small"));
        let pads = window_pads(attrs.auto_pad, attrs.pads, rank, Some(&axes)).map_err(|e| match e {
            PadsError::Count { len, .. } => invalid(op, format!("pads has {len} values for {rank} spatial dims")),
            PadsError::Negative(v) => bad(v),
            PadsError::Unknown => invalid(op, "the window's sizes are unknown"),
        })?;
        // Explicit pads are bounded so that the padded extents below cannot overflow.
        let too_large = pads.iter().find(|&&p| p > u64::from(u32::MAX));
        if let (AutoPad::Notset, Some(&p)) = (attrs.auto_pad, too_large) {
            return Err(bad(p as i64));
        }
        let (pad_begin, pad_end): (Vec<usize>, Vec<usize>) = (0..rank).map(|d| (pads[d] as usize, pads[rank + d] as usize)).unzip();
        let mut output = vec![0; rank];
        for d in 0..rank {
            let span = kernel[d].checked_sub(1).and_then(|k| k.checked_mul(dilations[d])).map(|k| k + 1).ok_or_else(|| invalid(op, "kernel dim is zero or too large"))?;
            let (i, s) = (input[d], strides[d]);
            output[d] = match attrs.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => i.div_ceil(s),
                AutoPad::Notset | AutoPad::Valid => {
                    let padded = i + pad_begin[d] + pad_end[d];
                    if padded < span {
                        return Err(invalid(op, format!("window of extent {span} is larger than the padded input {padded}")));
                    }
                    let mut out = if attrs.ceil_mode { (padded - span).div_ceil(s) + 1 } else { (padded - span) / s + 1 };
                    // A window may not start in the end padding.
                    if attrs.ceil_mode && (out - 1) * s >= i + pad_begin[d] {
                        out -= 1;
                    }
                    out
                }
            };
        }
        numel(op, &output)?;
        Ok(Window { input: input.to_vec(), kernel: kernel.to_vec(), output, strides, dilations, pad_begin, pad_end })
    }

    /// Number of kernel positions.
    pub(crate) fn kernel_len(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Number of output positions.
    pub(crate) fn output_len(&self) -> usize {
        self.output.iter().product()
    }

    /// Number of input positions.
    pub(crate) fn input_len(&self) -> usize {
        self.input.iter().product()
    }

    /// For kernel position `k` and output position `o`, entry `k * output_len + o`.
    pub(crate) fn taps(&self) -> Vec<Tap> {
        let rank = self.input.len();
        let in_st = strides(&self.input);
        let kcoords = coords(&self.kernel);
        let ocoords = coords(&self.output);
        let mut taps = Vec::with_capacity(kcoords.len() * ocoords.len());
        for kc in &kcoords {
            for oc in &ocoords {
                let mut tap = Tap::In(0);
                let mut off = 0;
                for d in 0..rank {
                    let pos = oc[d] * self.strides[d] + kc[d] * self.dilations[d];
                    if pos < self.pad_begin[d] || pos >= self.pad_begin[d] + self.input[d] {
                        let inside = pos < self.pad_begin[d] + self.input[d] + self.pad_end[d];
                        if !inside {
                            tap = Tap::Outside;
                        } else if tap != Tap::Outside {
                            tap = Tap::Pad;
                        }
                    } else {
                        off += (pos - self.pad_begin[d]) * in_st[d];
                    }
                }
                taps.push(if tap == Tap::In(0) { Tap::In(off) } else { tap });
            }
        }
        taps
    }
}

/// Every coordinate of `shape`, row-major.
pub(crate) fn coords(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut c = vec![0; shape.len()];
    for _ in 0..n {
        out.push(c.clone());
        for d in (0..shape.len()).rev() {
            c[d] += 1;
            if c[d] < shape[d] {
                break;
            }
            c[d] = 0;
        }
    }
    out
}
