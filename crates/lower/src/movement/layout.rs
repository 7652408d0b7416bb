//! Permutations and replications: Transpose, Concat, Split, Tile, Expand, DepthToSpace,
//! SpaceToDepth, and Trilu (a masked copy).

use kiln_tir::op::DepthToSpaceMode;
use kiln_tir::{NodeId, Op};

use super::{Body, and, int_param, norm_axis, or};
use kiln_loops::builder::{broadcast_index, linear, strides};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers `n` if it is one of this file's ops.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Transpose(t) => transpose(cx, n, &t.perm.clone())?,
        Op::Concat(c) => concat(cx, n, c.axis)?,
        Op::Split(s) => split(cx, n, s.axis, s.num_outputs)?,
        Op::Tile(_) => tile(cx, n)?,
        Op::Expand(_) => expand(cx, n)?,
        Op::DepthToSpace(d) => blocks(cx, n, d.blocksize, Blocks::DepthToSpace(d.mode))?,
        Op::SpaceToDepth(s) => blocks(cx, n, s.blocksize, Blocks::SpaceToDepth { crd: s.mode == DepthToSpaceMode::Crd })?,
        Op::Trilu(t) => trilu(cx, n, t.upper != 0)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// `y[index] = value`.
pub(super) fn store(y: &Operand, index: Expr, value: Expr) -> Stmt {
    Stmt::Store { buf: y.buf, index, value }
}

fn transpose(cx: &mut Lowerer<'_>, n: NodeId, perm: &[i64]) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let rank = x.rank();
    let perm: Vec<usize> = if perm.is_empty() {
        (0..rank).rev().collect()
    } else {
        let mut seen = vec![false; rank];
        let mut p = Vec::with_capacity(rank);
        for &a in perm {
            let a = norm_axis(cx, n, a, rank)?;
            if std::mem::replace(&mut seen[a], true) {
                return Err(cx.unsupported(n, format!("invalid model: perm {perm:?} repeats an axis")));
            }
            p.push(a);
        }
        if p.len() != rank {
            return Err(cx.unsupported(n, format!("invalid model: perm {perm:?} for rank {rank}")));
        }
        p
    };
    let (xs, ys) = (x.strides(), y.strides());
    let mut b = Body::new(cx, n);
    b.nest(&y.dims, |_, o| {
        let src = o.iter().zip(&perm).fold(Expr::idx(0), |acc, (oi, &p)| acc + oi.clone() * xs[p]);
        vec![store(&y, linear(o, &ys), Expr::load(x.buf, src))]
    });
    b.push(cx);
    Ok(())
}

fn concat(cx: &mut Lowerer<'_>, n: NodeId, axis: i64) -> Result<(), LowerError> {
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let axis = norm_axis(cx, n, axis, y.rank())?;
    let ys = y.strides();
    let mut b = Body::new(cx, n);
    let mut offset = 0u64;
    for i in 0..cx.node(n).inputs.len() {
        let x = cx.required(n, i)?;
        if x.rank() != y.rank() || x.dims.iter().enumerate().any(|(d, &e)| d != axis && e != y.dims[d]) {
            return Err(cx.unsupported(n, format!("invalid model: input {i} has shape {:?}, output {:?}", x.dims, y.dims)));
        }
        let xs = x.strides();
        let off = offset as i64;
        b.nest(&x.dims, |_, o| {
            let mut at = o.to_vec();
            at[axis] = at[axis].clone() + off;
            vec![store(&y, linear(&at, &ys), Expr::load(x.buf, linear(o, &xs)))]
        });
        offset += x.dims[axis];
    }
    if offset != y.dims[axis] {
        return Err(cx.unsupported(n, "invalid model: the inputs do not add up to the output along the axis"));
    }
    b.push(cx);
    Ok(())
}

fn split(cx: &mut Lowerer<'_>, n: NodeId, axis: i64, num_outputs: Option<i64>) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let axis = norm_axis(cx, n, axis, x.rank())?;
    let dim = x.dims[axis];
    let count = cx.node(n).outputs.len();
    let mut outs = Vec::with_capacity(count);
    for i in 0..count {
        outs.push(cx.output(n, i)?);
    }
    let mut b = Body::new(cx, n);
    let param = int_param(cx, n, 1, &mut b)?;
    // Part sizes: the used outputs' static dims; an unused part's size comes from a constant
    // `split`, the equal-parts rule, or what the others leave.
    let mut sizes: Vec<Option<u64>> = outs.iter().map(|o| o.as_ref().map(|o| o.dims[axis])).collect();
    if sizes.iter().any(Option::is_none) {
        let known: Option<Vec<u64>> = match &param {
            Some(p) => p.iter().map(|e| match e {
                Expr::Const(Scalar::Int(_, v)) if *v >= 0 => Some(*v as u64),
                _ => None,
            })
            .collect(),
            None => {
                let parts = num_outputs.map_or(count as u64, |k| k.max(1) as u64);
                let chunk = dim.div_ceil(parts);
                Some((0..parts).map(|i| chunk.min(dim.saturating_sub(i * chunk))).collect())
            }
        };
        match known {
            Some(k) if k.len() == count => sizes = sizes.iter().zip(k).map(|(s, k)| Some(s.unwrap_or(k))).collect(),
            _ if sizes.iter().filter(|s| s.is_none()).count() == 1 => {
                let used: u64 = sizes.iter().flatten().sum();
                let rest = dim.checked_sub(used).ok_or_else(|| cx.unsupported(n, "invalid model: parts exceed the input"))?;
                sizes = sizes.iter().map(|s| Some(s.unwrap_or(rest))).collect();
            }
            _ => return Err(cx.unsupported(n, "several unused outputs of a split with run-time sizes")),
        }
    }
    let sizes: Vec<u64> = sizes.into_iter().flatten().collect();
    if sizes.iter().sum::<u64>() != dim {
        return Err(cx.unsupported(n, format!("invalid model: parts {sizes:?} do not add up to {dim}")));
    }
    if let Some(p) = &param {
        if p.len() != count {
            return Err(cx.unsupported(n, format!("invalid model: {} split sizes for {count} outputs", p.len())));
        }
        for (e, &s) in p.iter().zip(&sizes) {
            b.check(cx, n, e.clone().cmp(CmpOp::Eq, Expr::idx(s as i64)), "split sizes do not match the output shapes")?;
        }
    }
    let xs = x.strides();
    let mut offset = 0i64;
    for (out, &size) in outs.iter().zip(&sizes) {
        if let Some(y) = out {
            let ys = y.strides();
            let off = offset;
            b.nest(&y.dims, |_, o| {
                let mut at = o.to_vec();
                at[axis] = at[axis].clone() + off;
                vec![store(y, linear(o, &ys), Expr::load(x.buf, linear(&at, &xs)))]
            });
        }
        offset += size as i64;
    }
    b.push(cx);
    Ok(())
}

fn tile(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let mut b = Body::new(cx, n);
    let reps = int_param(cx, n, 1, &mut b)?.ok_or_else(|| cx.unsupported(n, "input 1 (repeats) is missing"))?;
    if reps.len() != x.rank() || y.rank() != x.rank() {
        return Err(cx.unsupported(n, format!("invalid model: {} repeats for rank {}", reps.len(), x.rank())));
    }
    for (d, r) in reps.iter().enumerate() {
        let cond = (r.clone() * x.dims[d] as i64).cmp(CmpOp::Eq, Expr::idx(y.dims[d] as i64));
        b.check(cx, n, cond, "repeats do not match the output shape")?;
    }
    if y.numel() > 0 {
        let (xs, ys) = (x.strides(), y.strides());
        b.nest(&y.dims, |_, o| {
            let src = (0..x.rank()).fold(Expr::idx(0), |acc, d| {
                let i = if x.dims[d] == y.dims[d] { o[d].clone() } else if x.dims[d] == 1 { Expr::idx(0) } else { o[d].clone() % x.dims[d] as i64 };
                acc + i * xs[d]
            });
            vec![store(&y, linear(o, &ys), Expr::load(x.buf, src))]
        });
    }
    b.push(cx);
    Ok(())
}

fn expand(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let (r, xr) = (y.rank(), x.rank());
    // The input's dim aligned with output axis `d` (1 where the input has fewer axes).
    let aligned = |d: usize| if d + xr >= r { x.dims[d + xr - r] } else { 1 };
    if xr > r || (0..r).any(|d| aligned(d) != 1 && aligned(d) != y.dims[d]) {
        return Err(cx.unsupported(n, format!("invalid model: shape {:?} does not broadcast to {:?}", x.dims, y.dims)));
    }
    let mut b = Body::new(cx, n);
    let shape = int_param(cx, n, 1, &mut b)?.ok_or_else(|| cx.unsupported(n, "input 1 (shape) is missing"))?;
    if shape.len() > r {
        return Err(cx.unsupported(n, "invalid model: the shape is longer than the output's rank"));
    }
    for d in 0..r {
        let out = y.dims[d] as i64;
        let cond = match (d + shape.len()).checked_sub(r) {
            Some(j) => or(shape[j].clone().cmp(CmpOp::Eq, Expr::idx(out)), and(shape[j].clone().cmp(CmpOp::Eq, Expr::idx(1)), Expr::Const(Scalar::Bool(aligned(d) == y.dims[d])))),
            None => Expr::Const(Scalar::Bool(aligned(d) == y.dims[d])),
        };
        b.check(cx, n, cond, "the shape input does not match the output shape")?;
    }
    let ys = y.strides();
    b.nest(&y.dims, |_, o| vec![store(&y, linear(o, &ys), Expr::load(x.buf, broadcast_index(o, &x.dims)))]);
    b.push(cx);
    Ok(())
}

/// The two block rearrangements.
#[derive(Clone, Copy)]
enum Blocks {
    DepthToSpace(DepthToSpaceMode),
    SpaceToDepth { crd: bool },
}

fn blocks(cx: &mut Lowerer<'_>, n: NodeId, blocksize: i64, kind: Blocks) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let [bn, c, h, w] = x.dims[..] else {
        return Err(cx.unsupported(n, format!("invalid model: input must be 4-D, has shape {:?}", x.dims)));
    };
    let bs = u64::try_from(blocksize).ok().filter(|&b| b > 0).ok_or_else(|| cx.unsupported(n, format!("invalid model: blocksize {blocksize}")))?;
    let bi = bs as i64;
    let mut b = Body::new(cx, n);
    match kind {
        Blocks::DepthToSpace(mode) => {
            if c % (bs * bs) != 0 || y.dims != [bn, c / (bs * bs), h * bs, w * bs] {
                return Err(cx.unsupported(n, "invalid model: output shape"));
            }
            let cb = c / (bs * bs);
            // Output [n, c', h·b + i, w·b + j] laid out as [n, c', h, i, w, j].
            let dims = [bn, cb, h, bs, w, bs];
            let os = strides(&dims);
            b.nest(&dims, |_, v| {
                let [nn, cc, hh, i, ww, j] = [&v[0], &v[1], &v[2], &v[3], &v[4], &v[5]].map(Clone::clone);
                let ch = match mode {
                    DepthToSpaceMode::Dcr => (i * bi + j) * cb as i64 + cc,
                    DepthToSpaceMode::Crd => cc * (bi * bi) + i * bi + j,
                };
                let src = linear(&[nn, ch, hh, ww], &x.strides());
                vec![store(&y, linear(v, &os), Expr::load(x.buf, src))]
            });
        }
        Blocks::SpaceToDepth { crd } => {
            if h % bs != 0 || w % bs != 0 || y.dims != [bn, c * bs * bs, h / bs, w / bs] {
                return Err(cx.unsupported(n, "invalid model: output shape"));
            }
            // Input [n, c, h·b + i, w·b + j] laid out as [n, c, h, i, w, j].
            let dims = [bn, c, h / bs, bs, w / bs, bs];
            let is = strides(&dims);
            let ys = y.strides();
            b.nest(&dims, |_, v| {
                let [nn, cc, hh, i, ww, j] = [&v[0], &v[1], &v[2], &v[3], &v[4], &v[5]].map(Clone::clone);
                let ch = if crd { cc * (bi * bi) + i * bi + j } else { (i * bi + j) * c as i64 + cc };
                vec![store(&y, linear(&[nn, ch, hh, ww], &ys), Expr::load(x.buf, linear(v, &is)))]
            });
        }
    }
    b.push(cx);
    Ok(())
}

fn trilu(cx: &mut Lowerer<'_>, n: NodeId, upper: bool) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    if r < 2 {
        return Err(cx.unsupported(n, "invalid model: input must have rank 2 or more"));
    }
    let mut b = Body::new(cx, n);
    let k = match int_param(cx, n, 1, &mut b)? {
        Some(k) if k.len() == 1 => k[0].clone(),
        Some(_) => return Err(cx.unsupported(n, "invalid model: k must have one element")),
        None => Expr::idx(0),
    };
    let ty = x.ty();
    let xs = x.strides();
    b.nest(&x.dims, |_, o| {
        let diff = o[r - 1].clone() - o[r - 2].clone();
        let keep = if upper { diff.cmp(CmpOp::Ge, k) } else { diff.cmp(CmpOp::Le, k) };
        let at = linear(o, &xs);
        vec![store(&y, at.clone(), keep.select(Expr::load(x.buf, at), Expr::int(ty, 0)))]
    });
    b.push(cx);
    Ok(())
}
