//! Lowering of the neural-network family: Conv, FusedConv, ConvInteger, QLinearConv,
//! ConvTranspose, the windowed pools (MaxPool, AveragePool, LpPool), the global pools and
//! MaxUnpool.
//!
//! All of them slide a window over the spatial dims of an `[N, C, spatial...]` tensor;
//! [`Window`] holds that geometry once the attributes (`auto_pad`, `pads`, `strides`,
//! `dilations`) are resolved against the static input and output shapes.

mod conv;
mod conv_transpose;
mod pool;
#[cfg(test)]
mod tests;

use kiln_tir::op::{AutoPad, WindowAxis, window_pads};
use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;

/// Lowers `n` if this family handles its op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Conv(a) => conv::conv(
            cx,
            n,
            &conv::ConvAttrs {
                auto_pad: a.auto_pad,
                dilations: &a.dilations,
                group: a.group,
                kernel_shape: &a.kernel_shape,
                pads: &a.pads,
                strides: &a.strides,
            },
        )?,
        Op::FusedConv(a) => conv::fused_conv(
            cx,
            n,
            &conv::ConvAttrs {
                auto_pad: a.auto_pad,
                dilations: &a.dilations,
                group: a.group,
                kernel_shape: &a.kernel_shape,
                pads: &a.pads,
                strides: &a.strides,
            },
            a,
        )?,
        Op::ConvInteger(a) => conv::conv_integer(
            cx,
            n,
            &conv::ConvAttrs {
                auto_pad: a.auto_pad,
                dilations: &a.dilations,
                group: a.group,
                kernel_shape: &a.kernel_shape,
                pads: &a.pads,
                strides: &a.strides,
            },
        )?,
        Op::QLinearConv(a) => conv::qlinear_conv(
            cx,
            n,
            &conv::ConvAttrs {
                auto_pad: a.auto_pad,
                dilations: &a.dilations,
                group: a.group,
                kernel_shape: &a.kernel_shape,
                pads: &a.pads,
                strides: &a.strides,
            },
        )?,
        Op::ConvTranspose(a) => conv_transpose::conv_transpose(cx, n, a)?,
        Op::MaxPool(_)
        | Op::AveragePool(_)
        | Op::LpPool(_)
        | Op::GlobalMaxPool(_)
        | Op::GlobalAveragePool(_)
        | Op::GlobalLpPool(_) => pool::pool(cx, n)?,
        Op::MaxUnpool(a) => pool::max_unpool(cx, n, a)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The geometry of a sliding window over the spatial dims: output position `o` with kernel
/// tap `t` reads input position `o·stride + t·dilation − pad_begin` (per spatial dim).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    /// Spatial input extents.
    pub input: Vec<u64>,
    /// Spatial output extents.
    pub output: Vec<u64>,
    /// Kernel extents.
    pub kernel: Vec<u64>,
    /// Strides.
    pub strides: Vec<i64>,
    /// Dilations.
    pub dilations: Vec<i64>,
    /// Padding before each dim.
    pub pad_begin: Vec<i64>,
    /// Padding after each dim.
    pub pad_end: Vec<i64>,
}

/// A window's attributes before resolution; empty lists take their defaults.
pub(crate) struct WindowAttrs<'a> {
    pub auto_pad: AutoPad,
    pub kernel: &'a [u64],
    pub strides: &'a [i64],
    pub dilations: &'a [i64],
    pub pads: &'a [i64],
}

impl Window {
    /// Resolves `a` for spatial extents `input` → `output` (the output comes from shape
    /// inference). `SAME_UPPER` puts the odd padding element at the end, `SAME_LOWER` at the
    /// beginning.
    pub fn new(a: &WindowAttrs<'_>, input: &[u64], output: &[u64]) -> Result<Window, String> {
        let r = input.len();
        let list = |v: &[i64], name: &str, default: i64| -> Result<Vec<i64>, String> {
            match v.len() {
                0 => Ok(vec![default; r]),
                l if l == r => Ok(v.to_vec()),
                l => Err(format!("{name} has {l} entries for {r} spatial dims")),
            }
        };
        let strides = list(a.strides, "strides", 1)?;
        let dilations = list(a.dilations, "dilations", 1)?;
        if strides.iter().chain(&dilations).any(|&s| s < 1) {
            return Err("strides and dilations must be positive".into());
        }
        if a.kernel.len() != r || output.len() != r {
            return Err(format!(
                "kernel of rank {} over {r} spatial dims",
                a.kernel.len()
            ));
        }
        let axes: Vec<WindowAxis> = (0..r)
            .map(|i| WindowAxis { input: input[i], kernel: a.kernel[i], stride: strides[i] as u64, dilation: dilations[i] as u64 })
            .collect();
        let pads = window_pads(a.auto_pad, a.pads, r, Some(&axes)).map_err(|_| format!("pads {:?} for {r} spatial dims", a.pads))?;
        let (pad_begin, pad_end) = (pads[..r].iter().map(|&p| p as i64).collect(), pads[r..].iter().map(|&p| p as i64).collect());
        Ok(Window {
            input: input.to_vec(),
            output: output.to_vec(),
            kernel: a.kernel.to_vec(),
            strides,
            dilations,
            pad_begin,
            pad_end,
        })
    }

    /// Number of spatial dims.
    pub fn rank(&self) -> usize {
        self.input.len()
    }

    /// A 2-D window (or a 1-D one, as planes of one row) as the runtime's windowed routines
    /// take it: `ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw` (`kiln_loops::call::Conv2d::
    /// window`'s order).
    pub fn call_operands(&self) -> [Expr; 12] {
        let size = |v: u64| Expr::idx(v as i64);
        // One spatial dim is planes of one row: a unit row extent, kernel, stride and dilation.
        let (row, col) = if self.rank() == 1 { (None, 0) } else { (Some(0), 1) };
        let u = |v: &[u64]| row.map_or(1, |r| v[r]);
        let i = |v: &[i64], unit: i64| row.map_or(unit, |r| v[r]);
        let [ih, iw, oh, ow, kh, kw] = [u(&self.input), self.input[col], u(&self.output), self.output[col], u(&self.kernel), self.kernel[col]].map(size);
        let [sh, sw, ph, pw, dh, dw] = [i(&self.strides, 1), self.strides[col], i(&self.pad_begin, 0), self.pad_begin[col], i(&self.dilations, 1), self.dilations[col]].map(Expr::idx);
        [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw]
    }

    /// True if every tap of every output position along dim `i` lands inside the input.
    pub fn always_inside(&self, i: usize) -> bool {
        let last = (self.output[i] as i64 - 1) * self.strides[i]
            + (self.kernel[i] as i64 - 1) * self.dilations[i]
            - self.pad_begin[i];
        self.pad_begin[i] == 0 && (self.output[i] == 0 || last < self.input[i] as i64)
    }

    /// Input positions read by output position `o` at kernel tap `t`.
    pub fn positions(&self, o: &[Expr], t: &[Expr]) -> Vec<Expr> {
        (0..self.rank())
            .map(|i| {
                o[i].clone() * self.strides[i] + t[i].clone() * self.dilations[i]
                    - self.pad_begin[i]
            })
            .collect()
    }

    /// The condition that `pos` lies inside the input (`None`: always).
    pub fn inside(&self, pos: &[Expr]) -> Option<Expr> {
        all((0..self.rank())
            .filter(|&i| !self.always_inside(i))
            .map(|i| in_range(pos[i].clone(), 0, self.input[i] as i64)))
    }

    /// Row-major flat index of `pos` within one input plane.
    pub fn flat(&self, pos: &[Expr]) -> Expr {
        linear(pos, &strides(&self.input))
    }

    /// Elements of one input plane.
    pub fn plane(&self) -> u64 {
        self.input.iter().product()
    }

    /// Elements of one output plane.
    pub fn out_plane(&self) -> u64 {
        self.output.iter().product()
    }

    /// Kernel taps.
    pub fn taps(&self) -> u64 {
        self.kernel.iter().product()
    }
}

/// `lo <= e < hi` for an `i64` expression.
pub(crate) fn in_range(e: Expr, lo: i64, hi: i64) -> Expr {
    e.clone()
        .cmp(CmpOp::Ge, Expr::idx(lo))
        .bin(BinOp::And, e.cmp(CmpOp::Lt, Expr::idx(hi)))
}

/// The conjunction of `conds` (`None` if there are none).
pub(crate) fn all(conds: impl IntoIterator<Item = Expr>) -> Option<Expr> {
    conds.into_iter().reduce(|a, b| a.bin(BinOp::And, b))
}

/// `then` guarded by `cond` (unguarded when `cond` is `None`).
pub(crate) fn guarded(cond: Option<Expr>, then: Vec<Stmt>) -> Vec<Stmt> {
    match cond {
        Some(cond) => vec![Stmt::If {
            cond,
            then,
            otherwise: Vec::new(),
        }],
        None => then,
    }
}

/// The spatial dims of an `[N, C, spatial...]` tensor, or an error naming `what`.
pub(crate) fn spatial<'a>(dims: &'a [u64], what: &str) -> Result<&'a [u64], String> {
    if dims.len() < 3 {
        return Err(format!(
            "{what} must have a batch, a channel and at least one spatial dim"
        ));
    }
    Ok(&dims[2..])
}
