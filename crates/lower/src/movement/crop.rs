//! Windows onto the input: Slice, Pad, CenterCropPad, ReverseSequence and Compress.

use kiln_tir::op::PadMode;
use kiln_tir::{NodeId, Op};

use super::layout::store;
use super::{Body, clamp, in_range, int_param, load_i64, norm_axis, tensor_scalar, wrap_index};
use kiln_loops::builder::linear;
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is one of this file's ops.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Slice(_) => slice(cx, n)?,
        Op::Pad(p) => pad(cx, n, p.mode)?,
        Op::CenterCropPad(c) => center_crop_pad(cx, n, &c.axes.clone())?,
        Op::ReverseSequence(r) => reverse_sequence(cx, n, r.time_axis, r.batch_axis)?,
        Op::Compress(c) => compress(cx, n, c.axis)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Normalized axes from an axes parameter (each checked in range and distinct, at run time if
/// need be), or `0..count` when it is omitted.
fn axes_param(cx: &mut Lowerer<'_>, n: NodeId, i: usize, count: usize, rank: usize, b: &mut Body) -> Result<Vec<Expr>, LowerError> {
    let Some(axes) = int_param(cx, n, i, b)? else {
        return Ok((0..count as i64).map(Expr::idx).collect());
    };
    if axes.len() != count {
        return Err(cx.unsupported(n, format!("invalid model: {} axes for {count} values", axes.len())));
    }
    let r = rank as i64;
    let axes: Vec<Expr> = axes.into_iter().map(|a| b.bind(ScalarType::I64, wrap_index(a, Expr::idx(r)))).collect();
    for (j, a) in axes.iter().enumerate() {
        b.check(cx, n, in_range(a.clone(), 0, Expr::idx(r)), "axis out of range")?;
        for other in &axes[..j] {
            b.check(cx, n, a.clone().cmp(CmpOp::Ne, other.clone()), "repeated axis")?;
        }
    }
    Ok(axes)
}

/// The value of `vals` at the position where `axes` names axis `d`, or `default`.
fn pick(axes: &[Expr], vals: &[Expr], d: usize, default: Expr) -> Expr {
    axes.iter().zip(vals).fold(default, |acc, (a, v)| a.clone().cmp(CmpOp::Eq, Expr::idx(d as i64)).select(v.clone(), acc))
}

fn slice(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    if y.rank() != r {
        return Err(cx.unsupported(n, "invalid model: output rank"));
    }
    let mut b = Body::new(cx, n);
    let missing = |cx: &Lowerer<'_>, what: &str| cx.unsupported(n, format!("input {what} is missing"));
    let starts = int_param(cx, n, 1, &mut b)?.ok_or_else(|| missing(cx, "starts"))?;
    let ends = int_param(cx, n, 2, &mut b)?.ok_or_else(|| missing(cx, "ends"))?;
    let k = starts.len();
    let axes = axes_param(cx, n, 3, k, r, &mut b)?;
    let steps = int_param(cx, n, 4, &mut b)?.unwrap_or_else(|| vec![Expr::idx(1); k]);
    if ends.len() != k || steps.len() != k {
        return Err(cx.unsupported(n, "invalid model: starts, ends, axes and steps differ in length"));
    }
    if y.numel() == 0 {
        b.push(cx);
        return Ok(());
    }
    // Per axis: the first input coordinate and the step, after ONNX's clamping rules.
    let mut first = Vec::with_capacity(r);
    let mut step = Vec::with_capacity(r);
    for d in 0..r {
        let dim = x.dims[d] as i64;
        let st = b.bind(ScalarType::I64, pick(&axes, &steps, d, Expr::idx(1)));
        b.check(cx, n, st.clone().cmp(CmpOp::Ne, Expr::idx(0)), "slice step is zero")?;
        // Steps longer than the axis all take one element; clamping keeps the arithmetic small.
        let st = b.bind(ScalarType::I64, clamp(st, Expr::idx(-dim - 1), Expr::idx(dim + 1)));
        let s = b.bind(ScalarType::I64, wrap_index(pick(&axes, &starts, d, Expr::idx(0)), Expr::idx(dim)));
        let e = b.bind(ScalarType::I64, wrap_index(pick(&axes, &ends, d, Expr::idx(dim)), Expr::idx(dim)));
        let pos = b.bind(ScalarType::Bool, st.clone().cmp(CmpOp::Gt, Expr::idx(0)));
        let s = b.bind(ScalarType::I64, pos.clone().select(clamp(s.clone(), Expr::idx(0), Expr::idx(dim)), clamp(s, Expr::idx(0), Expr::idx(dim - 1))));
        let e = b.bind(ScalarType::I64, pos.clone().select(clamp(e.clone(), Expr::idx(0), Expr::idx(dim)), clamp(e, Expr::idx(-1), Expr::idx(dim - 1))));
        let up = e.clone().cmp(CmpOp::Gt, s.clone()).select((e.clone() - s.clone() - 1i64) / st.clone().max(Expr::idx(1)) + 1i64, Expr::idx(0));
        let down = s.clone().cmp(CmpOp::Gt, e.clone()).select((s.clone() - e - 1i64) / (Expr::idx(0) - st.clone()).max(Expr::idx(1)) + 1i64, Expr::idx(0));
        let len = pos.select(up, down);
        b.check(cx, n, len.cmp(CmpOp::Eq, Expr::idx(y.dims[d] as i64)), "slice bounds do not match the output shape")?;
        first.push(s);
        step.push(st);
    }
    let (xs, ys) = (x.strides(), y.strides());
    b.nest(&y.dims, |_, o| {
        let src = (0..r).fold(Expr::idx(0), |acc, d| acc + (first[d].clone() + o[d].clone() * step[d].clone()) * xs[d]);
        vec![store(&y, linear(o, &ys), Expr::load(x.buf, src))]
    });
    b.push(cx);
    Ok(())
}

fn pad(cx: &mut Lowerer<'_>, n: NodeId, mode: PadMode) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    if y.rank() != r {
        return Err(cx.unsupported(n, "invalid model: output rank"));
    }
    let ty = x.ty();
    let mut b = Body::new(cx, n);
    let pads = int_param(cx, n, 1, &mut b)?.ok_or_else(|| cx.unsupported(n, "input pads is missing"))?;
    let naxes = if cx.node(n).inputs.get(3).copied().flatten().is_some() { pads.len() / 2 } else { r };
    if pads.len() != 2 * naxes {
        return Err(cx.unsupported(n, format!("invalid model: {} pads for {naxes} axes", pads.len())));
    }
    let axes = axes_param(cx, n, 3, naxes, r, &mut b)?;
    let fill = match cx.input(n, 2)? {
        Some(v) if v.numel() > 0 => match cx.const_input(n, 2) {
            Some(t) => tensor_scalar(t, 0, ty).ok_or_else(|| cx.unsupported(n, "constant_value of unsupported type"))?,
            None => {
                let e = super::convert(Expr::load(v.buf, Expr::idx(0)), v.ty(), ty);
                b.bind(ty, e)
            }
        },
        _ => Expr::int(ty, 0),
    };
    let mut begin = Vec::with_capacity(r);
    for d in 0..r {
        let pb = b.bind(ScalarType::I64, pick(&axes, &pads[..naxes], d, Expr::idx(0)));
        let pe = pick(&axes, &pads[naxes..], d, Expr::idx(0));
        let size = pb.clone() + pe + x.dims[d] as i64;
        b.check(cx, n, size.cmp(CmpOp::Eq, Expr::idx(y.dims[d] as i64)), "pads do not match the output shape")?;
        if x.dims[d] == 0 && y.dims[d] > 0 && mode != PadMode::Constant {
            return Err(cx.unsupported(n, format!("invalid model: cannot pad an empty axis in {} mode", mode.as_str())));
        }
        begin.push(pb);
    }
    let (xs, ys) = (x.strides(), y.strides());
    let empty = x.numel() == 0;
    let unpadded = |d: usize| matches!(begin[d], Expr::Const(Scalar::Int(_, 0))) && y.dims[d] == x.dims[d];
    // The input index along axis `d` of output index `o`, and with constant padding whether it
    // is inside the input.
    let source = |d: usize, o: Expr| -> (Expr, Option<Expr>) {
        let dim = x.dims[d] as i64;
        let i = o - begin[d].clone();
        let at = match mode {
            PadMode::Constant => return (clamp(i.clone(), Expr::idx(0), Expr::idx(dim - 1)), Some(in_range(i, 0, Expr::idx(dim)))),
            PadMode::Edge => clamp(i, Expr::idx(0), Expr::idx(dim - 1)),
            PadMode::Wrap => (i % dim + dim) % dim,
            PadMode::Reflect if dim == 1 => Expr::idx(0),
            PadMode::Reflect => {
                let period = 2 * (dim - 1);
                let m = (i % period + period) % period;
                m.clone().cmp(CmpOp::Ge, Expr::idx(dim)).select(Expr::idx(period) - m.clone(), m)
            }
        };
        (at, None)
    };
    // The outer axes' part of the source offset and whether they are inside, for output `o`.
    let outer = |o: &[Expr]| {
        let mut inside = Expr::Const(Scalar::Bool(true));
        let mut src = Expr::idx(0);
        for (d, o) in o.iter().enumerate() {
            if unpadded(d) {
                src = src + o.clone() * xs[d];
                continue;
            }
            let (at, within) = source(d, o.clone());
            if let Some(within) = within {
                inside = super::and(inside, within);
            }
            src = src + at * xs[d];
        }
        (src, inside)
    };
    let last = r.checked_sub(1).filter(|&d| !empty && !unpadded(d));
    match last.map(|d| (d, &begin[d])) {
        // With a constant padding of the last axis, each output row is its padded ends, element
        // by element, around a run copied straight from the input row, which runs in vectors.
        Some((last, &Expr::Const(Scalar::Int(_, pb)))) => {
            let (dim, out) = (x.dims[last] as i64, y.dims[last] as i64);
            let (lo, hi) = (pb.clamp(0, out), pb.saturating_add(dim).clamp(0, out));
            b.nest(&y.dims[..last], |k, o| {
                let (src, inside) = outer(o);
                let row = linear(o, &ys[..last]);
                let columns = |k: &mut Kernel, from: i64, to: i64, value: &dyn Fn(Expr) -> Expr| {
                    k.nest(&[(to - from).max(0) as u64], |_, c| {
                        let col = c[0].clone() + from;
                        vec![store(&y, row.clone() + col.clone(), value(col))]
                    })
                };
                let edge = |col: Expr| {
                    let (at, within) = source(last, col);
                    let inside = within.map_or(inside.clone(), |w| super::and(inside.clone(), w));
                    super::fold(inside.select(Expr::load(x.buf, src.clone() + at), fill.clone()))
                };
                let mut s = columns(k, 0, lo, &edge);
                let copy = columns(k, lo, hi, &|col| Expr::load(x.buf, src.clone() + col - pb));
                match super::fold(inside.clone()) {
                    Expr::Const(Scalar::Bool(true)) => s.extend(copy),
                    cond => s.push(Stmt::If { cond, then: copy, otherwise: columns(k, lo, hi, &|_| fill.clone()) }),
                }
                s.extend(columns(k, hi, out, &edge));
                s
            });
        }
        _ => b.nest(&y.dims, |_, o| {
            let (src, inside) = outer(o);
            let value = if empty { fill.clone() } else { super::fold(inside.select(Expr::load(x.buf, src), fill.clone())) };
            vec![store(&y, linear(o, &ys), value)]
        }),
    }
    b.push(cx);
    Ok(())
}

fn center_crop_pad(cx: &mut Lowerer<'_>, n: NodeId, axes: &[i64]) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    let axes: Vec<usize> = if axes.is_empty() { (0..r).collect() } else { axes.iter().map(|&a| norm_axis(cx, n, a, r)).collect::<Result<_, _>>()? };
    let mut b = Body::new(cx, n);
    let shape = int_param(cx, n, 1, &mut b)?.ok_or_else(|| cx.unsupported(n, "input shape is missing"))?;
    if shape.len() != axes.len() || y.rank() != r {
        return Err(cx.unsupported(n, format!("invalid model: {} sizes for {} axes", shape.len(), axes.len())));
    }
    for d in 0..r {
        let target = axes.iter().position(|&a| a == d).map_or(Expr::idx(x.dims[d] as i64), |j| shape[j].clone());
        b.check(cx, n, target.cmp(CmpOp::Eq, Expr::idx(y.dims[d] as i64)), "the shape input does not match the output shape")?;
    }
    let (xs, ys) = (x.strides(), y.strides());
    let ty = x.ty();
    b.nest(&y.dims, |_, o| {
        let mut inside = Expr::Const(Scalar::Bool(true));
        let mut src = Expr::idx(0);
        for d in 0..r {
            let (i, out) = (x.dims[d] as i64, y.dims[d] as i64);
            let at = if i >= out {
                o[d].clone() + (i - out) / 2
            } else {
                let at = o[d].clone() - (out - i) / 2;
                inside = super::and(inside, in_range(at.clone(), 0, Expr::idx(i)));
                clamp(at, Expr::idx(0), Expr::idx(i - 1))
            };
            src = src + at * xs[d];
        }
        let value = if x.numel() == 0 { Expr::int(ty, 0) } else { super::fold(inside.select(Expr::load(x.buf, src), Expr::int(ty, 0))) };
        vec![store(&y, linear(o, &ys), value)]
    });
    b.push(cx);
    Ok(())
}

fn reverse_sequence(cx: &mut Lowerer<'_>, n: NodeId, time_axis: i64, batch_axis: i64) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let lens = cx.required(n, 1)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    let (ta, ba) = (norm_axis(cx, n, time_axis, r)?, norm_axis(cx, n, batch_axis, r)?);
    if r < 2 || ta == ba || ta > 1 || ba > 1 || lens.numel() != x.dims[ba] {
        return Err(cx.unsupported(n, "invalid model: axes or sequence_lens shape"));
    }
    let t = x.dims[ta] as i64;
    let err = cx.error(n, "sequence length out of range");
    let mut b = Body::new(cx, n);
    b.nest(&[x.dims[ba]], |_, i| vec![Stmt::Check { cond: in_range(load_i64(&lens, i[0].clone()), 0, Expr::idx(t + 1)), error: err }]);
    let xs = x.strides();
    b.nest(&x.dims, |k, o| {
        let l = k.var(ScalarType::I64);
        let tt = o[ta].clone();
        let src_t = tt.clone().cmp(CmpOp::Lt, Expr::Var(l)).select(Expr::Var(l) - 1i64 - tt.clone(), tt);
        let mut at = o.to_vec();
        at[ta] = src_t;
        vec![Stmt::Let(l, load_i64(&lens, o[ba].clone())), store(&y, linear(o, &xs), Expr::load(x.buf, linear(&at, &xs)))]
    });
    b.push(cx);
    Ok(())
}

fn compress(cx: &mut Lowerer<'_>, n: NodeId, axis: Option<i64>) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let cond = cx.required(n, 1)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    // The input as [outer, axis, inner]; without an axis it is flattened.
    let (outer, dim, inner) = match axis {
        None => (1, x.numel(), 1),
        Some(a) => {
            let a = norm_axis(cx, n, a, x.rank())?;
            (x.dims[..a].iter().product(), x.dims[a], x.dims[a + 1..].iter().product::<u64>())
        }
    };
    let out_len = y.numel().checked_div(outer * inner).unwrap_or(0);
    if out_len * outer * inner != y.numel() {
        return Err(cx.unsupported(n, "invalid model: output shape"));
    }
    let (too_many, too_few) = (cx.error(n, "more selected slices than the output holds"), cx.error(n, "fewer selected slices than the output holds"));
    let mut b = Body::new(cx, n);
    let count = b.k.var(ScalarType::I64);
    b.stmts.push(Stmt::Local(count, Expr::idx(0)));
    let c = Expr::Var(count);
    let (dim_i, out_i, inner_i) = (dim as i64, out_len as i64, inner as i64);
    let cond_ty = cond.ty();
    b.nest(&[dim.min(cond.numel())], |k, i| {
        let copy = k.nest(&[outer, inner], |_, v| {
            let to = (v[0].clone() * out_i + c.clone()) * inner_i + v[1].clone();
            let from = (v[0].clone() * dim_i + i[0].clone()) * inner_i + v[1].clone();
            vec![Stmt::Store { buf: y.buf, index: to, value: Expr::load(x.buf, from) }]
        });
        let mut then = vec![Stmt::Check { cond: c.clone().cmp(CmpOp::Lt, Expr::idx(out_i)), error: too_many }];
        then.extend(copy);
        then.push(Stmt::Assign(count, c.clone() + 1i64));
        let selected = Expr::load(cond.buf, i[0].clone()).cmp(CmpOp::Ne, Expr::int(cond_ty, 0));
        vec![Stmt::If { cond: selected, then, otherwise: Vec::new() }]
    });
    b.stmts.push(Stmt::Check { cond: c.cmp(CmpOp::Eq, Expr::idx(out_i)), error: too_few });
    b.push(cx);
    Ok(())
}
