//! DeformConv: a convolution whose kernel taps are displaced by learned offsets.
//!
//! Per batch item, a first pass gathers the input values under every displaced tap into a
//! scratch `[C_in, taps, positions]` buffer (bilinear interpolation, zero outside the input,
//! scaled by the optional mask), and a second pass multiplies it with the weights group by
//! group and adds the bias. Taps of one offset group share their positions, so the
//! interpolation weights are computed once per group and applied to each of its channels.
//! Any number of spatial dims is handled; the reference implements two.

use kiln_tir::op::DeformConv;
use kiln_tir::NodeId;

use super::grid::{linear_taps_zero, Taps};
use super::{bind, expect_dims, float_type, load_as, local, store, Body};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// An attribute list of one entry per spatial dim, or its default when empty.
fn per_dim(v: &[i64], r: usize, default: i64) -> Option<Vec<i64>> {
    match v.len() {
        0 => Some(vec![default; r]),
        l if l == r => Some(v.to_vec()),
        _ => None,
    }
}

/// Lowers DeformConv.
pub(super) fn deform_conv(cx: &mut Lowerer<'_>, n: NodeId, a: &DeformConv) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let w = cx.required(n, 1)?;
    let offset = cx.required(n, 2)?;
    let bias = cx.input(n, 3)?;
    let mask = cx.input(n, 4)?;
    let t = float_type(cx, n, &x, "input")?;
    let invalid = |cx: &Lowerer<'_>, what: &str| cx.unsupported(n, format!("invalid model: {what}"));
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(invalid(cx, "input and weight ranks"));
    }
    let r = x.rank() - 2;
    let (batch, ic) = (x.dims[0], x.dims[1]);
    let oc = w.dims[0];
    let image = x.dims[2..].to_vec();
    let kernel = w.dims[2..].to_vec();
    if !a.kernel_shape.is_empty() && a.kernel_shape.iter().map(|&k| k as u64).ne(kernel.iter().copied()) {
        return Err(invalid(cx, "kernel_shape differs from the weight's"));
    }
    let (Some(st), Some(dil)) = (per_dim(&a.strides, r, 1), per_dim(&a.dilations, r, 1)) else {
        return Err(invalid(cx, "strides or dilations"));
    };
    let pads = match a.pads.len() {
        0 => vec![0; 2 * r],
        l if l == 2 * r => a.pads.clone(),
        _ => return Err(invalid(cx, "pads")),
    };
    if a.group < 1 || a.offset_group < 1 {
        return Err(invalid(cx, "group or offset_group"));
    }
    let (group, og) = (a.group as u64, a.offset_group as u64);
    if ic != w.dims[1] * group || oc % group != 0 || ic % og != 0 {
        return Err(invalid(cx, "channel counts for the groups"));
    }
    let taps: u64 = kernel.iter().product();
    if offset.rank() != r + 2 || offset.dims[0] != batch || offset.dims[1] != og * taps * r as u64 {
        return Err(invalid(cx, "offset shape"));
    }
    let out_sp = offset.dims[2..].to_vec();
    if mask.as_ref().is_some_and(|m| m.dims != [&[batch, og * taps][..], &out_sp].concat()) {
        return Err(invalid(cx, "mask shape"));
    }
    if bias.as_ref().is_some_and(|b| b.dims != [oc]) {
        return Err(invalid(cx, "bias shape"));
    }
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &[&[batch, oc][..], &out_sp].concat())?;
    if y.numel() == 0 {
        return Ok(());
    }
    if image.contains(&0) {
        return Err(cx.unsupported(n, "sampling an empty input"));
    }
    let positions: u64 = out_sp.iter().product();
    let icg = ic / group; // input channels per group
    let ocg = oc / group; // output channels per group
    let icog = ic / og; // input channels per offset group
    let col = {
        let name = format!("{}_columns", cx.node(n).name);
        cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(t), len: ic * taps * positions, kind: BufferKind::Temp })
    };
    let (os, ps) = (offset.strides(), strides(&out_sp));
    let ks = strides(&kernel);
    let plane: u64 = image.iter().product();
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&[batch], |k, bn| {
        let bn = bn[0].clone();
        // Pass 1: the displaced, interpolated, masked input under every tap.
        let mut s = k.nest(&[&[og][..], &kernel, &out_sp].concat(), |k, idx| {
            let (g, kk, p) = (&idx[0], &idx[1..=r], &idx[r + 1..]);
            let mut s = Vec::new();
            let tap = linear(kk, &ks);
            let pos = linear(p, &ps);
            let mut axes = Vec::with_capacity(r);
            for i in 0..r {
                let channel = (g.clone() * taps as i64 + tap.clone()) * r as i64 + i as i64;
                let at = linear(&[bn.clone(), channel], &os[..2]) + pos.clone();
                let shift = load_as(&offset, at, t);
                let base = p[i].clone() * st[i] - pads[i] + kk[i].clone() * dil[i];
                let coord = bind(k, &mut s, t, base.cast(t) + shift);
                axes.push(linear_taps_zero(k, &mut s, t, coord, image[i]));
            }
            let combined = Taps::combine(k, &mut s, t, &axes, &image);
            let m = mask.as_ref().map(|m| {
                let at = (bn.clone() * (og * taps) as i64 + g.clone() * taps as i64 + tap.clone()) * positions as i64 + pos.clone();
                bind(k, &mut s, t, load_as(m, at, t))
            });
            s.extend(k.nest(&[icog], |_, c| {
                let ci = g.clone() * icog as i64 + c[0].clone();
                let src = (bn.clone() * ic as i64 + ci.clone()) * plane as i64;
                let v = combined.sum(t, |off| load_as(&x, src.clone() + off, t));
                let v = match &m {
                    Some(m) => v * m.clone(),
                    None => v,
                };
                vec![Stmt::Store { buf: col, index: (ci * taps as i64 + tap.clone()) * positions as i64 + pos.clone(), value: v }]
            }));
            s
        });
        // Pass 2: the grouped matrix product with the weights, plus the bias.
        s.extend(k.nest(&[oc, positions], |k, o| {
            let (co, p) = (&o[0], &o[1]);
            let mut s = Vec::new();
            let init = match &bias {
                Some(bb) => load_as(bb, co.clone(), t),
                None => Expr::float(t, 0.0),
            };
            let acc = local(k, &mut s, t, init);
            let g = bind(k, &mut s, ScalarType::I64, co.clone() / ocg as i64);
            s.extend(k.nest(&[icg, taps], |_, i| {
                let wv = load_as(&w, (co.clone() * icg as i64 + i[0].clone()) * taps as i64 + i[1].clone(), t);
                let ci = g.clone() * icg as i64 + i[0].clone();
                let cv = Expr::load(col, (ci * taps as i64 + i[1].clone()) * positions as i64 + p.clone());
                vec![Stmt::Assign(acc, Expr::Var(acc) + wv * cv)]
            }));
            s.push(store(&y, (bn.clone() * oc as i64 + co.clone()) * positions as i64 + p.clone(), Expr::Var(acc), t));
            s
        }));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}
