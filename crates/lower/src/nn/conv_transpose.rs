//! ConvTranspose as a gather: each output element sums the input elements whose scattered
//! taps land on it, `y[n, m, o] = b[m] + Σ_{c, t} x[n, c, i] · w[c, m, t]` over the taps `t`
//! with `o = i·stride + t·dilation − pad_begin` for an integer `i` inside the input.

use kiln_tir::op::{AutoPad, ConvTranspose};
use kiln_tir::NodeId;

use super::{all, guarded, in_range, spatial};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::linalg::zero;
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
    let (xst, kst, ost) = (strides(xin), strides(wk), strides(yout));
    let ty = y.ty();
    let mut k = cx.kernel(n);
    let mut dims = vec![batch, groups, mg];
    dims.extend(yout);
    let mut inner = vec![cg];
    inner.extend(wk);
    k.body = k.nest(&dims, |k, idx| {
        let (nn, g, o) = (&idx[0], &idx[1], &idx[3..]);
        let mm = g.clone() * mg as i64 + idx[2].clone();
        let acc = k.var(ty);
        let init = bias.as_ref().map_or_else(|| zero(ty), |b| Expr::load(b.buf, mm.clone()));
        let mut body = vec![Stmt::Local(acc, init)];
        body.extend(k.nest(&inner, |_, it| {
            let (ci, t) = (&it[0], &it[1..]);
            let cc = g.clone() * cg as i64 + ci.clone();
            let mut conds = Vec::new();
            let mut pos = Vec::new();
            for i in 0..r {
                let u = o[i].clone() + pad_begin[i] - t[i].clone() * dil[i];
                if st[i] == 1 {
                    conds.push(in_range(u.clone(), 0, xin[i] as i64));
                    pos.push(u);
                } else {
                    conds.push(in_range(u.clone(), 0, xin[i] as i64 * st[i]));
                    conds.push((u.clone() % st[i]).cmp(CmpOp::Eq, Expr::idx(0)));
                    pos.push(u / st[i]);
                }
            }
            let xv = Expr::load(x.buf, (nn.clone() * c as i64 + cc.clone()) * plane as i64 + linear(&pos, &xst));
            let wv = Expr::load(w.buf, (cc * mg as i64 + idx[2].clone()) * taps as i64 + linear(t, &kst));
            guarded(all(conds), vec![Stmt::Assign(acc, Expr::Var(acc) + xv * wv)])
        }));
        let at = (nn.clone() * m as i64 + mm) * out_plane as i64 + linear(o, &ost);
        body.push(Stmt::Store { buf: y.buf, index: at, value: Expr::Var(acc) });
        body
    });
    cx.push(k);
    Ok(())
}
