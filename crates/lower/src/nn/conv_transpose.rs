//! ConvTranspose as a gather: each output element sums the input elements whose scattered
//! taps land on it, `y[n, m, o] = b[m] + Σ_{c, t} x[n, c, i] · w[c, m, t]` over the taps `t`
//! with `o = i·stride + t·dilation − pad_begin` for an integer `i` inside the input.
//!
//! In `f32` the sum over channels is a product first, as onnxruntime computes it: per image
//! and group, `cols[(m, t), i] = Σ_c w[c, m, t] · x[n, c, i]` is one `sgemm` (`Wᵀ·X`), and
//! each output element then gathers its taps from `cols` (col2im). Other types sum directly.

use kiln_tir::op::{AutoPad, ConvTranspose};
use kiln_tir::NodeId;

use super::{all, guarded, in_range, spatial};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::linalg::{Sgemm, zero};
use crate::{LowerError, Lowerer};

/// A spatial-dims attribute list, or `default` for each dim when empty.
fn per_dim(v: &[i64], r: usize, default: i64, name: &str) -> Result<Vec<i64>, String> {
    match v.len() {
        0 => Ok(vec![default; r]),
        l if l == r => Ok(v.to_vec()),
        l => Err(format!("{name} has {l} entries for {r} spatial dims")),
    }
}

/// ConvTranspose.
pub(super) fn conv_transpose(cx: &mut Lowerer<'_>, n: NodeId, a: &ConvTranspose) -> Result<(), LowerError> {
    let (x, w, bias, y) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.input(n, 2)?, cx.required_output(n, 0)?);
    if x.elem != w.elem || x.elem != y.elem || !x.ty().is_float() {
        return Err(cx.unsupported(n, "X, W and Y must have one float element type"));
    }
    let bad = |e: String| cx.unsupported(n, e);
    let (xin, wk, yout) = (spatial(&x.dims, "X").map_err(bad)?, spatial(&w.dims, "W").map_err(bad)?, spatial(&y.dims, "Y").map_err(bad)?);
    let r = xin.len();
    if wk.len() != r || yout.len() != r {
        return Err(cx.unsupported(n, "X, W and Y differ in rank"));
    }
    if !a.kernel_shape.is_empty() && a.kernel_shape.iter().zip(wk).any(|(&k, &d)| k as u64 != d) {
        return Err(cx.unsupported(n, "kernel_shape differs from W's dims"));
    }
    let (batch, c, mg) = (x.dims[0], x.dims[1], w.dims[1]);
    let groups = u64::try_from(a.group).ok().filter(|&g| g > 0 && c % g == 0).ok_or_else(|| cx.unsupported(n, "group does not divide the input channels"))?;
    let (cg, m) = (c / groups, mg * groups);
    if w.dims[0] != c || y.dims[..2] != [batch, m] {
        return Err(cx.unsupported(n, "W and Y do not fit X"));
    }
    if bias.as_ref().is_some_and(|b| b.dims != [m] || b.elem != y.elem) {
        return Err(cx.unsupported(n, "B must be a vector over the output channels"));
    }
    let st = per_dim(&a.strides, r, 1, "strides").map_err(bad)?;
    let dil = per_dim(&a.dilations, r, 1, "dilations").map_err(bad)?;
    let out_pad = per_dim(&a.output_padding, r, 0, "output_padding").map_err(bad)?;
    if st.iter().chain(&dil).any(|&v| v < 1) {
        return Err(cx.unsupported(n, "strides and dilations must be positive"));
    }
    let pad_begin: Vec<i64> = match a.auto_pad {
        AutoPad::SameUpper | AutoPad::SameLower => (0..r)
            .map(|i| {
                let total = st[i] * (xin[i] as i64 - 1) + out_pad[i] + (wk[i] as i64 - 1) * dil[i] + 1 - yout[i] as i64;
                let half = total.div_euclid(2);
                if a.auto_pad == AutoPad::SameUpper { half } else { total - half }
            })
            .collect(),
        AutoPad::Valid => vec![0; r],
        AutoPad::Notset if a.pads.is_empty() => vec![0; r],
        AutoPad::Notset if a.pads.len() == 2 * r => a.pads[..r].to_vec(),
        AutoPad::Notset => return Err(cx.unsupported(n, format!("pads {:?} for {r} spatial dims", a.pads))),
    };
    let (plane, taps, out_plane): (u64, u64, u64) = (xin.iter().product(), wk.iter().product(), yout.iter().product());
    let shape = Shape { m, mg, out_plane, st, dil, pad_begin, xin: xin.to_vec(), wk: wk.to_vec(), yout: yout.to_vec() };
    let (ty, kst) = (y.ty(), strides(wk));
    let bias = bias.map(|b| b.buf);
    let mut k = cx.kernel(n);
    k.body = if ty == ScalarType::F32 {
        let rows = mg * taps;
        let len = rows.checked_mul(plane).ok_or_else(|| cx.unsupported(n, "the product's columns do not fit in memory"))?;
        let cols = cx.program.add_buffer(Buffer { name: format!("{}_cols", cx.node(n).name), elem: ElemType::Scalar(ty), len, kind: BufferKind::Temp });
        k.nest(&[batch, groups], |k, idx| {
            let (nn, g) = (&idx[0], &idx[1]);
            // `w`'s rows of group `g` are `cg × (mg·taps)`: the product takes them transposed.
            let product = Sgemm {
                a: (w.buf, g.clone() * (cg * rows) as i64),
                b: (x.buf, (nn.clone() * c as i64 + g.clone() * cg as i64) * plane as i64),
                c: (cols, Expr::idx(0)),
                m: rows,
                n: plane,
                k: cg,
                lda: rows,
                ldb: plane,
                ldc: plane,
                trans_a: true,
                trans_b: false,
                alpha: 1.0,
                beta: 0.0,
            };
            let mut s = vec![product.call()];
            if taps <= MAX_SCATTERED_TAPS {
                s.extend(shape.scatter(k, nn, g, cols, plane, bias, y.buf));
            } else {
                s.extend(shape.gather(k, ty, nn, g, 1, bias, y.buf, |mo, _, t, pos| Expr::load(cols, (mo * taps as i64 + linear(t, &kst)) * plane as i64 + pos)));
            }
            s
        })
    } else {
        k.nest(&[batch, groups], |k, idx| {
            let (nn, g) = (&idx[0], &idx[1]);
            shape.gather(k, ty, nn, g, cg, bias, y.buf, |mo, ci, t, pos| {
                let cc = g.clone() * cg as i64 + ci;
                let xv = Expr::load(x.buf, (nn.clone() * c as i64 + cc.clone()) * plane as i64 + pos);
                let wv = Expr::load(w.buf, (cc * mg as i64 + mo) * taps as i64 + linear(t, &kst));
                xv * wv
            })
        })
    };
    cx.push(k);
    Ok(())
}

/// Kernels of up to this many taps add `cols` into the output one tap at a time, each over the
/// inputs it reaches (a loop nest per tap); larger ones gather per output element.
const MAX_SCATTERED_TAPS: u64 = 256;

/// A ConvTranspose's sizes, per group where it says.
struct Shape {
    /// Output channels, and per group.
    m: u64,
    mg: u64,
    /// Elements of an output channel.
    out_plane: u64,
    st: Vec<i64>,
    dil: Vec<i64>,
    pad_begin: Vec<i64>,
    /// Spatial dims of the input, the kernel and the output.
    xin: Vec<u64>,
    wk: Vec<u64>,
    yout: Vec<u64>,
}

impl Shape {
    /// col2im for image `nn` and group `g`: each output channel starts as its bias (or zero),
    /// then every tap adds its row of `cols` (`plane` inputs) onto the outputs it lands on, the
    /// taps in order, as the gather would sum them. Each tap's loops run over exactly the
    /// inputs whose position lands inside the output, so they hold no condition.
    #[allow(clippy::too_many_arguments)]
    fn scatter(&self, k: &mut Kernel, nn: &Expr, g: &Expr, cols: BufId, plane: u64, bias: Option<BufId>, y: BufId) -> Vec<Stmt> {
        let (xst, ost, kst) = (strides(&self.xin), strides(&self.yout), strides(&self.wk));
        let taps: u64 = self.wk.iter().product();
        k.nest(&[self.mg], |k, idx| {
            let mo = &idx[0];
            let mm = g.clone() * self.mg as i64 + mo.clone();
            let base = (nn.clone() * self.m as i64 + mm.clone()) * self.out_plane as i64;
            let init = bias.map_or_else(|| zero(ScalarType::F32), |b| Expr::load(b, mm));
            let mut s = k.nest(&[self.out_plane], |_, o| vec![Stmt::Store { buf: y, index: base.clone() + o[0].clone(), value: init.clone() }]);
            for t in 0..taps {
                // Per spatial dim: the tap's offset and the inputs `[lo, hi)` it maps inside the
                // output, `0 ≤ i·stride + t·dilation − pad < out`.
                let tap: Vec<i64> = kst.iter().zip(&self.wk).map(|(&st, &w)| (t as i64 / st) % w as i64).collect();
                let ranges: Vec<(i64, i64, i64)> = (0..self.xin.len())
                    .map(|d| {
                        let shift = tap[d] * self.dil[d] - self.pad_begin[d];
                        let lo = (-shift).div_euclid(self.st[d]) + i64::from((-shift).rem_euclid(self.st[d]) != 0);
                        let hi = (self.yout[d] as i64 - shift - 1).div_euclid(self.st[d]) + 1;
                        (shift, lo.max(0), hi.min(self.xin[d] as i64))
                    })
                    .collect();
                if ranges.iter().any(|&(_, lo, hi)| lo >= hi) {
                    continue;
                }
                let extents: Vec<u64> = ranges.iter().map(|&(_, lo, hi)| (hi - lo) as u64).collect();
                let row = (mo.clone() * taps as i64 + t as i64) * plane as i64;
                s.extend(k.nest(&extents, |_, i| {
                    let input: Vec<Expr> = i.iter().zip(&ranges).map(|(i, &(_, lo, _))| i.clone() + lo).collect();
                    let output: Vec<Expr> = input.iter().zip(&ranges).enumerate().map(|(d, (i, &(shift, ..)))| i.clone() * self.st[d] + shift).collect();
                    let at = base.clone() + linear(&output, &ost);
                    let value = Expr::load(y, at.clone()) + Expr::load(cols, row.clone() + linear(&input, &xst));
                    vec![Stmt::Store { buf: y, index: at, value }]
                }));
            }
            s
        })
    }

    /// The outputs of image `nn` and group `g`: each the bias (or zero) plus
    /// `term(output channel in the group, input channel, taps, input position)` over `channels`
    /// input channels and the taps whose scattered position lands on it.
    #[allow(clippy::too_many_arguments)]
    fn gather(&self, k: &mut Kernel, ty: ScalarType, nn: &Expr, g: &Expr, channels: u64, bias: Option<BufId>, y: BufId, term: impl Fn(Expr, Expr, &[Expr], Expr) -> Expr) -> Vec<Stmt> {
        let (xst, ost) = (strides(&self.xin), strides(&self.yout));
        let mut dims = vec![self.mg];
        dims.extend(&self.yout);
        let mut inner = vec![channels];
        inner.extend(&self.wk);
        k.nest(&dims, |k, idx| {
            let (mo, o) = (&idx[0], &idx[1..]);
            let mm = g.clone() * self.mg as i64 + mo.clone();
            let acc = k.var(ty);
            let init = bias.map_or_else(|| zero(ty), |b| Expr::load(b, mm.clone()));
            let mut body = vec![Stmt::Local(acc, init)];
            body.extend(k.nest(&inner, |_, it| {
                let (ci, t) = (&it[0], &it[1..]);
                let mut conds = Vec::new();
                let mut pos = Vec::new();
                for i in 0..self.xin.len() {
                    let u = o[i].clone() + self.pad_begin[i] - t[i].clone() * self.dil[i];
                    let (st, size) = (self.st[i], self.xin[i] as i64);
                    if st == 1 {
                        conds.push(in_range(u.clone(), 0, size));
                        pos.push(u);
                    } else {
                        conds.push(in_range(u.clone(), 0, size * st));
                        conds.push((u.clone() % st).cmp(CmpOp::Eq, Expr::idx(0)));
                        pos.push(u / st);
                    }
                }
                let v = term(mo.clone(), ci.clone(), t, linear(&pos, &xst));
                guarded(all(conds), vec![Stmt::Assign(acc, Expr::Var(acc) + v)])
            }));
            let at = (nn.clone() * self.m as i64 + mm) * self.out_plane as i64 + linear(o, &ost);
            body.push(Stmt::Store { buf: y, index: at, value: Expr::Var(acc) });
            body
        })
    }
}
