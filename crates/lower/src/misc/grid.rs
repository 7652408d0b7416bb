//! GridSample and AffineGrid, and the interpolation taps GridSample shares with DeformConv.
//!
//! GridSample follows ONNX's reference (itself PyTorch's `GridSampler.h`): a normalized grid
//! coordinate is denormalized to a pixel coordinate, rounded half to even for `nearest`,
//! clamped (`border`) or reflected (`reflection`) when it lies outside the image, and then
//! interpolated from its neighbours along every spatial axis (1, 2 or 4 taps per axis for
//! nearest, linear, cubic). A tap outside the image reads 0 (`zeros`), the border pixel, or its
//! reflection. Interpolating along all axes at once is the tensor product of the per-axis
//! weights, which is what the reference's axis-by-axis recursion computes.

use kiln_tir::op::{GridPadMode, GridSample, ResizeMode};
use kiln_tir::NodeId;

use super::{and, bind, clamp, expect_dims, float_type, in_range, load_as, store, Body};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Keys' cubic convolution coefficient (PyTorch's and ONNX's `cubic_alpha`).
const CUBIC_ALPHA: f64 = -0.75;

/// One interpolation tap along one axis: the (clamped, always in-range) index it reads, the
/// condition that the unclamped index was inside (`None`: always, or it does not matter),
/// and its weight (`None`: 1).
#[derive(Clone, Debug)]
pub(super) struct Tap {
    pub index: Expr,
    pub valid: Option<Expr>,
    pub weight: Option<Expr>,
}

/// The taps of every axis combined: one entry per combination of one tap per axis, with the
/// flat offset it reads inside one image, its validity and its weight, all bound to variables.
pub(super) struct Taps(Vec<Tap>);

impl Taps {
    /// Combines per-axis taps (`axes[i]` for spatial axis `i` of an image with dims `dims`).
    pub(super) fn combine(k: &mut Kernel, s: &mut Vec<Stmt>, t: ScalarType, axes: &[Vec<Tap>], dims: &[u64]) -> Taps {
        let st = strides(dims);
        let mut combos: Vec<Tap> = vec![Tap { index: Expr::idx(0), valid: None, weight: None }];
        for (i, taps) in axes.iter().enumerate() {
            let stride = st[i];
            combos = combos
                .iter()
                .flat_map(|c| {
                    taps.iter().map(move |tap| Tap {
                        index: c.index.clone() + tap.index.clone() * stride,
                        valid: match (&c.valid, &tap.valid) {
                            (Some(a), Some(b)) => Some(and(a.clone(), b.clone())),
                            (a, b) => a.clone().or(b.clone()),
                        },
                        weight: match (&c.weight, &tap.weight) {
                            (Some(a), Some(b)) => Some(a.clone() * b.clone()),
                            (a, b) => a.clone().or(b.clone()),
                        },
                    })
                })
                .collect();
        }
        let combos = combos
            .into_iter()
            .map(|c| Tap {
                index: bind(k, s, ScalarType::I64, c.index),
                valid: c.valid.map(|v| bind(k, s, ScalarType::Bool, v)),
                weight: c.weight.map(|w| bind(k, s, t, w)),
            })
            .collect();
        Taps(combos)
    }

    /// `Σ weight · (valid ? read(offset) : 0)` over all combinations, in type `t`.
    pub(super) fn sum(&self, t: ScalarType, read: impl Fn(Expr) -> Expr) -> Expr {
        let zero = Expr::float(t, 0.0);
        self.0
            .iter()
            .map(|c| {
                let v = read(c.index.clone());
                let v = match &c.valid {
                    Some(ok) => ok.clone().select(v, zero.clone()),
                    None => v,
                };
                match &c.weight {
                    Some(w) => w.clone() * v,
                    None => v,
                }
            })
            .reduce(|a, b| a + b)
            .unwrap_or(zero)
    }
}

/// The two linear-interpolation taps around coordinate `x` (of type `t`) along an axis of
/// `dim` pixels, reading 0 outside (zero padding).
pub(super) fn linear_taps_zero(k: &mut Kernel, s: &mut Vec<Stmt>, t: ScalarType, x: Expr, dim: u64) -> Vec<Tap> {
    let x0 = bind(k, s, t, x.clone().un(UnOp::Floor));
    let frac = bind(k, s, t, x - x0.clone());
    let i0 = bind(k, s, ScalarType::I64, x0.cast(ScalarType::I64));
    let weights = [Expr::float(t, 1.0) - frac.clone(), frac];
    weights
        .into_iter()
        .enumerate()
        .map(|(j, w)| {
            let p = bind(k, s, ScalarType::I64, i0.clone() + j as i64);
            Tap { index: clamp(p.clone(), 0, dim as i64 - 1), valid: Some(in_range(p, 0, dim as i64)), weight: Some(w) }
        })
        .collect()
}

/// `x` rounded half to even.
fn round_even(x: Expr, t: ScalarType) -> Expr {
    if t == ScalarType::F32 { x.un(UnOp::Round) } else { x.math(MathFn::Rint) }
}

/// Reflects `x` (of type `t`) into `[lo, hi]` by the nearer border, repeatedly, as the
/// reference's `_gs_reflect` does. A degenerate range reflects everything to `lo`.
fn reflect(k: &mut Kernel, s: &mut Vec<Stmt>, t: ScalarType, x: Expr, lo: f64, hi: f64) -> Expr {
    let range = hi - lo;
    if range <= 0.0 {
        return Expr::float(t, lo);
    }
    let x = bind(k, s, t, x);
    let (lo_e, hi_e, range_e) = (Expr::float(t, lo), Expr::float(t, hi), Expr::float(t, range));
    // Distance past the border, whole ranges crossed, and what is left of the last one.
    let mut fold = |dx: Expr| {
        let dx = bind(k, s, t, dx);
        let flips = bind(k, s, t, (dx.clone() / range_e.clone()).un(UnOp::Trunc));
        let rest = bind(k, s, t, dx - flips.clone() * range_e.clone());
        let even = flips.bin(BinOp::Rem, Expr::float(t, 2.0)).cmp(CmpOp::Eq, Expr::float(t, 0.0));
        (even, rest)
    };
    let (even_lo, rest_lo) = fold(lo_e.clone() - x.clone());
    let below = even_lo.select(lo_e.clone() + rest_lo.clone(), hi_e.clone() - rest_lo);
    let (even_hi, rest_hi) = fold(x.clone() - hi_e.clone());
    let above = even_hi.select(hi_e.clone() - rest_hi.clone(), lo_e.clone() + rest_hi);
    let inside = x.clone().cmp(CmpOp::Gt, hi_e).select(above, x.clone());
    bind(k, s, t, x.cmp(CmpOp::Lt, lo_e).select(below, inside))
}

/// How GridSample treats one spatial axis.
struct Axis {
    dim: u64,
    pad: GridPadMode,
    /// The borders a coordinate is reflected into: `[-0.5, dim - 0.5]`, or `[0, dim - 1]`
    /// with aligned corners.
    lo: f64,
    hi: f64,
}

impl Axis {
    /// The tap reading integer position `p` (an `i64`).
    fn pixel(&self, k: &mut Kernel, s: &mut Vec<Stmt>, t: ScalarType, p: Expr, weight: Option<Expr>) -> Tap {
        let last = self.dim as i64 - 1;
        let p = bind(k, s, ScalarType::I64, p);
        match self.pad {
            GridPadMode::Zeros => Tap { index: clamp(p.clone(), 0, last), valid: Some(in_range(p, 0, self.dim as i64)), weight },
            GridPadMode::Border => Tap { index: clamp(p, 0, last), valid: None, weight },
            GridPadMode::Reflection => {
                let r = reflect(k, s, t, p.cast(t), self.lo, self.hi);
                Tap { index: clamp(r.cast(ScalarType::I64), 0, last), valid: None, weight }
            }
        }
    }
}

/// Interpolation of GridSample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interp {
    Nearest,
    Linear,
    Cubic,
}

/// Cubic convolution weights of the taps at offsets -1, 0, 1, 2 from `floor(x)`, for
/// `frac = x - floor(x)`.
fn cubic_weights(t: ScalarType, frac: &Expr) -> [Expr; 4] {
    let a = CUBIC_ALPHA;
    let c = |v: f64| Expr::float(t, v);
    // Far taps (distance 1 < d < 2): ((a·d − 5a)·d + 8a)·d − 4a.
    let far = |d: Expr| ((c(a) * d.clone() - c(5.0 * a)) * d.clone() + c(8.0 * a)) * d - c(4.0 * a);
    // Near taps (distance d ≤ 1): ((a + 2)·d − (a + 3))·d·d + 1.
    let near = |d: Expr| ((c(a + 2.0) * d.clone() - c(a + 3.0)) * d.clone()) * d + c(1.0);
    let one_minus = c(1.0) - frac.clone();
    [far(frac.clone() + c(1.0)), near(frac.clone()), near(one_minus.clone()), far(one_minus + c(1.0))]
}

/// Lowers GridSample.
pub(super) fn grid_sample(cx: &mut Lowerer<'_>, n: NodeId, a: &GridSample) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let grid = cx.required(n, 1)?;
    let t = float_type(cx, n, &x, "input")?;
    float_type(cx, n, &grid, "grid")?;
    let interp = match a.mode {
        ResizeMode::Nearest => Interp::Nearest,
        ResizeMode::Linear | ResizeMode::Bilinear => Interp::Linear,
        ResizeMode::Cubic | ResizeMode::Bicubic => Interp::Cubic,
    };
    let align = a.align_corners != 0;
    if x.rank() < 3 {
        return Err(cx.unsupported(n, "invalid model: the input needs a batch, a channel and a spatial axis"));
    }
    let r = x.rank() - 2;
    let (batch, channels) = (x.dims[0], x.dims[1]);
    let image = &x.dims[2..];
    if grid.rank() != r + 2 || grid.dims[0] != batch || grid.dims[r + 1] != r as u64 {
        return Err(cx.unsupported(n, format!("invalid model: grid shape {:?} for input shape {:?}", grid.dims, x.dims)));
    }
    let out_sp = grid.dims[1..=r].to_vec();
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &[&[batch, channels][..], &out_sp].concat())?;
    if y.numel() == 0 {
        return Ok(());
    }
    if image.contains(&0) {
        return Err(cx.unsupported(n, "sampling an empty image"));
    }
    let axes: Vec<Axis> = image
        .iter()
        .map(|&d| {
            let (lo, hi) = if align { (0.0, d as f64 - 1.0) } else { (-0.5, d as f64 - 0.5) };
            Axis { dim: d, pad: a.padding_mode, lo, hi }
        })
        .collect();
    let gs = grid.strides();
    let plane: u64 = image.iter().product();
    let out_plane: u64 = out_sp.iter().product();
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&[&[batch][..], &out_sp].concat(), |k, o| {
        let mut s = Vec::new();
        let mut per_axis = Vec::with_capacity(r);
        for (i, ax) in axes.iter().enumerate() {
            // The grid's last axis lists coordinates innermost axis first (x, y, z).
            let mut at = o.to_vec();
            at.push(Expr::idx((r - 1 - i) as i64));
            let g = bind(k, &mut s, t, load_as(&grid, linear(&at, &gs), t));
            let d = ax.dim as f64;
            let one = Expr::float(t, 1.0);
            let mut c = if align { (g + one) * Expr::float(t, (d - 1.0) / 2.0) } else { ((g + one) * Expr::float(t, d) - Expr::float(t, 1.0)) / Expr::float(t, 2.0) };
            if interp == Interp::Nearest {
                c = round_even(c, t);
            }
            let c = bind(k, &mut s, t, c);
            let outside = c.clone().cmp(CmpOp::Lt, Expr::float(t, ax.lo)).bin(BinOp::Or, c.clone().cmp(CmpOp::Gt, Expr::float(t, ax.hi)));
            let c = match ax.pad {
                GridPadMode::Zeros => c,
                GridPadMode::Border => {
                    let clamped = c.clone().max(Expr::float(t, 0.0)).min(Expr::float(t, d - 1.0));
                    bind(k, &mut s, t, outside.select(clamped, c))
                }
                GridPadMode::Reflection => reflect(k, &mut s, t, c, ax.lo, ax.hi),
            };
            let taps = match interp {
                Interp::Nearest => vec![ax.pixel(k, &mut s, t, c.cast(ScalarType::I64), None)],
                Interp::Linear | Interp::Cubic => {
                    let x0 = bind(k, &mut s, t, c.clone().un(UnOp::Floor));
                    let frac = bind(k, &mut s, t, c - x0.clone());
                    let i0 = bind(k, &mut s, ScalarType::I64, x0.cast(ScalarType::I64));
                    let (first, weights): (i64, Vec<Expr>) = match interp {
                        Interp::Linear => (0, vec![Expr::float(t, 1.0) - frac.clone(), frac]),
                        _ => (-1, cubic_weights(t, &frac).to_vec()),
                    };
                    let mut taps = Vec::new();
                    for (j, w) in weights.into_iter().enumerate() {
                        let w = bind(k, &mut s, t, w);
                        taps.push(ax.pixel(k, &mut s, t, i0.clone() + (first + j as i64), Some(w)));
                    }
                    taps
                }
            };
            per_axis.push(taps);
        }
        let taps = Taps::combine(k, &mut s, t, &per_axis, image);
        let out_pos = linear(&o[1..], &strides(&out_sp));
        s.extend(k.nest(&[channels], |_, c| {
            let base = (o[0].clone() * channels as i64 + c[0].clone()) * plane as i64;
            let value = taps.sum(t, |off| load_as(&x, base.clone() + off, t));
            let at = (o[0].clone() * channels as i64 + c[0].clone()) * out_plane as i64 + out_pos.clone();
            vec![store(&y, at, value, t)]
        }));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}

/// Lowers AffineGrid: `grid[n, ..., :] = theta[n] · (x, y[, z], 1)` over the base grid of
/// normalized pixel centres (or corners, with `align_corners`).
pub(super) fn affine_grid(cx: &mut Lowerer<'_>, n: NodeId, align: bool) -> Result<(), LowerError> {
    let theta = cx.required(n, 0)?;
    let t = float_type(cx, n, &theta, "theta")?;
    let y = cx.required_output(n, 0)?;
    if theta.rank() != 3 || !matches!(theta.dims[1], 2 | 3) || theta.dims[2] != theta.dims[1] + 1 {
        return Err(cx.unsupported(n, format!("invalid model: theta shape {:?}", theta.dims)));
    }
    let r = theta.dims[1] as usize;
    if y.rank() != r + 2 || y.dims[0] != theta.dims[0] || y.dims[r + 1] != r as u64 {
        return Err(cx.unsupported(n, format!("output shape {:?} for theta shape {:?}", y.dims, theta.dims)));
    }
    let sizes = y.dims[1..=r].to_vec();
    let ts = theta.strides();
    let ys = y.strides();
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&y.dims[..=r], |k, o| {
        let mut s = Vec::new();
        // Base coordinates, x (the innermost axis) first.
        let base: Vec<Expr> = (0..r)
            .map(|j| {
                let axis = r - 1 - j;
                let size = sizes[axis] as f64;
                let (start, step) = match (align, sizes[axis]) {
                    (true, 1) => (-1.0, 0.0),
                    (true, _) => (-1.0, 2.0 / (size - 1.0)),
                    (false, _) => (-1.0 + 1.0 / size, 2.0 / size),
                };
                let v = Expr::float(t, start) + o[1 + axis].clone().cast(t) * Expr::float(t, step);
                bind(k, &mut s, t, v)
            })
            .collect();
        for row in 0..r {
            let th = |col: usize| load_as(&theta, linear(&[o[0].clone(), Expr::idx(row as i64), Expr::idx(col as i64)], &ts), t);
            let value = base.iter().enumerate().fold(th(r), |acc, (j, bj)| acc + th(j) * bj.clone());
            let mut at = o.to_vec();
            at.push(Expr::idx(row as i64));
            s.push(store(&y, linear(&at, &ys), value, t));
        }
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}
