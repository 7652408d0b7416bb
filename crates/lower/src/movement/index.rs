//! Data-dependent indexing: Gather, GatherElements, GatherND, ScatterElements, ScatterND and
//! OneHot, and TensorScatter (a KV-cache write). Every index read from a tensor wraps negative values and is checked in range
//! before it addresses a buffer.

use kiln_tir::op::{ScatterReduction, TensorScatterMode};
use kiln_tir::{NodeId, Op};

use super::layout::store;
use super::{Body, convert, in_range, load_i64, norm_axis, tensor_scalar, wrap_index};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers `n` if it is one of this file's ops.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Gather(g) => gather(cx, n, g.axis)?,
        Op::GatherElements(g) => elements(cx, n, g.axis, None)?,
        Op::ScatterElements(s) => elements(cx, n, s.axis, Some(s.reduction))?,
        Op::GatherND(g) => nd(cx, n, g.batch_dims, None)?,
        Op::ScatterND(s) => nd(cx, n, 0, Some(s.reduction))?,
        Op::OneHot(o) => one_hot(cx, n, o.axis)?,
        Op::TensorScatter(t) => tensor_scatter(cx, n, t.axis, t.mode == TensorScatterMode::Circular)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Binds the index stored at `at` in `ind`, wrapped against `dim`, and checks it in range.
fn checked_index(k: &mut Kernel, stmts: &mut Vec<Stmt>, ind: &Operand, at: Expr, dim: u64, error: u32) -> Expr {
    let v = k.var(ScalarType::I64);
    stmts.push(Stmt::Let(v, wrap_index(load_i64(ind, at), Expr::idx(dim as i64))));
    stmts.push(Stmt::Check { cond: in_range(Expr::Var(v), 0, Expr::idx(dim as i64)), error });
    Expr::Var(v)
}

fn invalid(cx: &Lowerer<'_>, n: NodeId, what: &str) -> LowerError {
    cx.unsupported(n, format!("invalid model: {what}"))
}

fn gather(cx: &mut Lowerer<'_>, n: NodeId, axis: i64) -> Result<(), LowerError> {
    let data = cx.required(n, 0)?;
    let ind = cx.required(n, 1)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let a = norm_axis(cx, n, axis, data.rank())?;
    let q = ind.rank();
    let want: Vec<u64> = [&data.dims[..a], &ind.dims[..], &data.dims[a + 1..]].concat();
    if y.dims != want {
        return Err(invalid(cx, n, "output shape"));
    }
    let error = cx.error(n, "index out of range");
    let (ds, is, ys) = (data.strides(), ind.strides(), y.strides());
    let dim = data.dims[a];
    let mut b = Body::new(cx, n);
    b.nest(&y.dims, |k, o| {
        let mut stmts = Vec::new();
        let v = checked_index(k, &mut stmts, &ind, linear(&o[a..a + q], &is), dim, error);
        let mut at: Vec<Expr> = o[..a].to_vec();
        at.push(v);
        at.extend_from_slice(&o[a + q..]);
        stmts.push(store(&y, linear(o, &ys), Expr::load(data.buf, linear(&at, &ds))));
        stmts
    });
    b.push(cx);
    Ok(())
}

/// `old ⊕ new` for a scatter reduction.
fn combine(red: ScatterReduction, ty: ScalarType, old: Expr, new: Expr) -> Expr {
    let bool_ty = ty == ScalarType::Bool;
    match red {
        ScatterReduction::None => new,
        ScatterReduction::Add if bool_ty => old.bin(BinOp::Or, new),
        ScatterReduction::Add => old.bin(BinOp::Add, new),
        ScatterReduction::Mul if bool_ty => old.bin(BinOp::And, new),
        ScatterReduction::Mul => old.bin(BinOp::Mul, new),
        ScatterReduction::Max => old.max(new),
        ScatterReduction::Min => old.min(new),
    }
}

/// Copies `data` into `y` (the first half of every scatter).
fn copy(b: &mut Body, data: &Operand, y: &Operand) {
    b.nest(&[data.numel()], |_, i| vec![store(y, i[0].clone(), Expr::load(data.buf, i[0].clone()))]);
}

/// GatherElements (`reduction` is `None`) and ScatterElements.
fn elements(cx: &mut Lowerer<'_>, n: NodeId, axis: i64, reduction: Option<ScatterReduction>) -> Result<(), LowerError> {
    let data = cx.required(n, 0)?;
    let ind = cx.required(n, 1)?;
    let upd = match reduction {
        Some(_) => Some(cx.required(n, 2)?),
        None => None,
    };
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = data.rank();
    let a = norm_axis(cx, n, axis, r)?;
    if ind.rank() != r || (0..r).any(|d| d != a && ind.dims[d] > data.dims[d]) {
        return Err(invalid(cx, n, "indices shape"));
    }
    let ok = match &upd {
        Some(u) => u.dims == ind.dims && y.dims == data.dims,
        None => y.dims == ind.dims,
    };
    if !ok {
        return Err(invalid(cx, n, "updates or output shape"));
    }
    let error = cx.error(n, "index out of range");
    let (ds, is, ys) = (data.strides(), ind.strides(), y.strides());
    let dim = data.dims[a];
    let ty = y.ty();
    let mut b = Body::new(cx, n);
    if upd.is_some() {
        copy(&mut b, &data, &y);
    }
    b.nest(&ind.dims, |k, o| {
        let mut stmts = Vec::new();
        let v = checked_index(k, &mut stmts, &ind, linear(o, &is), dim, error);
        let mut at = o.to_vec();
        at[a] = v;
        stmts.push(match (&upd, reduction) {
            (Some(u), Some(red)) => {
                let target = linear(&at, &ys);
                let new = Expr::load(u.buf, linear(o, &is));
                store(&y, target.clone(), combine(red, ty, Expr::load(y.buf, target), new))
            }
            _ => store(&y, linear(o, &ys), Expr::load(data.buf, linear(&at, &ds))),
        });
        stmts
    });
    b.push(cx);
    Ok(())
}

/// GatherND (`reduction` is `None`) and ScatterND.
fn nd(cx: &mut Lowerer<'_>, n: NodeId, batch_dims: i64, reduction: Option<ScatterReduction>) -> Result<(), LowerError> {
    let data = cx.required(n, 0)?;
    let ind = cx.required(n, 1)?;
    let upd = match reduction {
        Some(_) => Some(cx.required(n, 2)?),
        None => None,
    };
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let (r, q) = (data.rank(), ind.rank());
    let bd = usize::try_from(batch_dims).map_err(|_| invalid(cx, n, "batch_dims"))?;
    let Some(&m) = ind.dims.last() else { return Err(invalid(cx, n, "indices must have rank 1 or more")) };
    let m = m as usize;
    if bd >= q || bd + m > r || data.dims[..bd] != ind.dims[..bd] {
        return Err(invalid(cx, n, "indices shape"));
    }
    // The iteration space: the index tuples' positions, then the slice each one addresses.
    let space: Vec<u64> = [&ind.dims[..q - 1], &data.dims[bd + m..]].concat();
    let ok = match &upd {
        Some(u) => u.dims == space && y.dims == data.dims,
        None => y.dims == space,
    };
    if !ok {
        return Err(invalid(cx, n, "updates or output shape"));
    }
    let error = cx.error(n, "index out of range");
    let ds = data.strides();
    let ps = strides(&ind.dims[..q - 1]);
    let ss = strides(&space);
    let ty = y.ty();
    let mut b = Body::new(cx, n);
    if upd.is_some() {
        copy(&mut b, &data, &y);
    }
    b.nest(&space, |k, o| {
        let mut stmts = Vec::new();
        let tuple = linear(&o[..q - 1], &ps) * m as i64;
        let mut at: Vec<Expr> = o[..bd].to_vec();
        for j in 0..m {
            at.push(checked_index(k, &mut stmts, &ind, tuple.clone() + j as i64, data.dims[bd + j], error));
        }
        at.extend_from_slice(&o[q - 1..]);
        let target = linear(&at, &ds);
        stmts.push(match (&upd, reduction) {
            (Some(u), Some(red)) => {
                let new = Expr::load(u.buf, linear(o, &ss));
                store(&y, target.clone(), combine(red, ty, Expr::load(y.buf, target), new))
            }
            _ => store(&y, linear(o, &ss), Expr::load(data.buf, target)),
        });
        stmts
    });
    b.push(cx);
    Ok(())
}

fn one_hot(cx: &mut Lowerer<'_>, n: NodeId, axis: i64) -> Result<(), LowerError> {
    let ind = cx.required(n, 0)?;
    let depth = cx.required(n, 1)?;
    let values = cx.required(n, 2)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let q = ind.rank();
    let a = norm_axis(cx, n, axis, q + 1)?;
    if y.rank() != q + 1 || y.dims[..a] != ind.dims[..a] || y.dims[a + 1..] != ind.dims[a..] || depth.numel() != 1 || values.numel() != 2 {
        return Err(invalid(cx, n, "input or output shapes"));
    }
    let ty = y.ty();
    let mut b = Body::new(cx, n);
    // Non-integer depths and indices are truncated to integers, as ONNX specifies.
    let depth = match cx.const_input(n, 1) {
        Some(t) => tensor_scalar(t, 0, ScalarType::I64).ok_or_else(|| cx.unsupported(n, "depth of unsupported type"))?,
        None => b.bind(ScalarType::I64, convert(Expr::load(depth.buf, Expr::idx(0)), depth.ty(), ScalarType::I64)),
    };
    b.check(cx, n, depth.clone().cmp(CmpOp::Eq, Expr::idx(y.dims[a] as i64)), "depth does not match the output shape")?;
    let pick = |b: &mut Body, i: i64| b.bind(ty, convert(Expr::load(values.buf, Expr::idx(i)), values.ty(), ty));
    let (off, on) = (pick(&mut b, 0), pick(&mut b, 1));
    let (is, ys) = (ind.strides(), y.strides());
    let ind_ty = ind.ty();
    b.nest(&y.dims, |k, o| {
        let at: Vec<Expr> = o[..a].iter().chain(&o[a + 1..]).cloned().collect();
        let v = k.var(ScalarType::I64);
        let raw = convert(Expr::load(ind.buf, linear(&at, &is)), ind_ty, ScalarType::I64);
        vec![
            Stmt::Let(v, wrap_index(raw, depth.clone())),
            store(&y, linear(o, &ys), Expr::Var(v).cmp(CmpOp::Eq, o[a].clone()).select(on.clone(), off.clone())),
        ]
    });
    b.push(cx);
    Ok(())
}

/// TensorScatter: writes `update` into a copy of `past_cache` along `axis`, starting at each
/// batch entry's write index (wrapping around the cache in circular mode).
fn tensor_scatter(cx: &mut Lowerer<'_>, n: NodeId, axis: i64, circular: bool) -> Result<(), LowerError> {
    let cache = cx.required(n, 0)?;
    let upd = cx.required(n, 1)?;
    let starts = cx.input(n, 2)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = cache.rank();
    let a = norm_axis(cx, n, axis, r)?;
    let fits = upd.rank() == r && (0..r).all(|d| if d == a { upd.dims[d] <= cache.dims[d] } else { upd.dims[d] == cache.dims[d] });
    if a == 0 || !fits || y.dims != cache.dims || starts.as_ref().is_some_and(|s| s.numel() != cache.dims[0]) {
        return Err(invalid(cx, n, "input or output shapes"));
    }
    let error = cx.error(n, "write index out of range");
    let max = cache.dims[a] as i64;
    let (ys, us) = (y.strides(), upd.strides());
    let mut b = Body::new(cx, n);
    copy(&mut b, &cache, &y);
    b.nest(&upd.dims, |k, o| {
        let mut stmts = Vec::new();
        let first = starts.as_ref().map_or(Expr::idx(0), |s| load_i64(s, o[0].clone()));
        let t = k.var(ScalarType::I64);
        let pos = first + o[a].clone();
        stmts.push(Stmt::Let(t, if circular { (pos % max + max) % max } else { pos }));
        stmts.push(Stmt::Check { cond: in_range(Expr::Var(t), 0, Expr::idx(max)), error });
        let mut at = o.to_vec();
        at[a] = Expr::Var(t);
        stmts.push(store(&y, linear(&at, &ys), Expr::load(upd.buf, linear(o, &us))));
        stmts
    });
    b.push(cx);
    Ok(())
}
