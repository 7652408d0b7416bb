//! Col2Im: scatters column blocks back into an image, adding where blocks overlap (the
//! inverse of im2col, as in PyTorch's `col2im`).
//!
//! The input is `[N, C·K, L]` for blocks of `K = Π block_shape` elements at `L` positions;
//! the output is `[N, C, image_shape...]`. Block and image shapes may be run-time inputs:
//! the loops run over the static `K` and `L`, and the per-axis offsets are decomposed with
//! the run-time block sizes after checks that they multiply out to `K` and `L`.

use kiln_tir::{NodeId, Op};

use super::layout::store;
use super::{Body, and, in_range, int_param};
use kiln_loops::builder::linear;
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is a Col2Im.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let Op::Col2Im(c) = &cx.node(n).op else { return Ok(false) };
    let (dilations, pads, strides) = (c.dilations.clone(), c.pads.clone(), c.strides.clone());
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(true) };
    let s = y.rank().saturating_sub(2);
    let attr = |v: &[i64], i: usize, default: i64| v.get(i).copied().unwrap_or(default);
    if x.rank() != 3 || s == 0 || x.dims[0] != y.dims[0] || y.dims[1] == 0 || x.dims[1] % y.dims[1] != 0 {
        return Err(cx.unsupported(n, "invalid model: input or output shape"));
    }
    if (!dilations.is_empty() && dilations.len() != s) || (!strides.is_empty() && strides.len() != s) || (!pads.is_empty() && pads.len() != 2 * s) {
        return Err(cx.unsupported(n, "invalid model: dilations, pads or strides length"));
    }
    let (channels, blocks, positions) = (y.dims[1], x.dims[1] / y.dims[1], x.dims[2]);
    let mut b = Body::new(cx, n);
    let image = int_param(cx, n, 1, &mut b)?.ok_or_else(|| cx.unsupported(n, "input image_shape is missing"))?;
    let block = int_param(cx, n, 2, &mut b)?.ok_or_else(|| cx.unsupported(n, "input block_shape is missing"))?;
    if image.len() != s || block.len() != s {
        return Err(cx.unsupported(n, "invalid model: image_shape or block_shape length"));
    }
    let mut counts = Vec::with_capacity(s);
    let (mut k_total, mut l_total) = (Expr::idx(1), Expr::idx(1));
    for d in 0..s {
        let img = y.dims[2 + d] as i64;
        b.check(cx, n, image[d].clone().cmp(CmpOp::Eq, Expr::idx(img)), "image_shape does not match the output shape")?;
        b.check(cx, n, block[d].clone().cmp(CmpOp::Ge, Expr::idx(1)), "block sizes must be positive")?;
        let (dil, stride) = (attr(&dilations, d, 1), attr(&strides, d, 1));
        if dil < 1 || stride < 1 {
            return Err(cx.unsupported(n, "invalid model: dilations and strides must be positive"));
        }
        let span = img + attr(&pads, d, 0) + attr(&pads, s + d, 0) - 1;
        let reach = Expr::idx(span) - (block[d].clone() - 1i64) * dil;
        // Floor division, so a block larger than the padded image gives no positions.
        let count = reach.clone().cmp(CmpOp::Ge, Expr::idx(0)).select(reach / stride + 1i64, Expr::idx(0));
        let count = b.bind(ScalarType::I64, count);
        b.check(cx, n, count.clone().cmp(CmpOp::Ge, Expr::idx(1)), "blocks do not fit the padded image")?;
        k_total = k_total * block[d].clone();
        l_total = l_total * count.clone();
        counts.push(count);
    }
    b.check(cx, n, k_total.cmp(CmpOp::Eq, Expr::idx(blocks as i64)), "block_shape does not match the input's channels")?;
    b.check(cx, n, l_total.cmp(CmpOp::Eq, Expr::idx(positions as i64)), "the block count does not match the input's length")?;
    let ty = y.ty();
    b.nest(&[y.numel()], |_, i| vec![store(&y, i[0].clone(), Expr::int(ty, 0))]);
    let (xs, ys) = (x.strides(), y.strides());
    b.nest(&[x.dims[0], channels, blocks, positions], |_, v| {
        let (mut kr, mut lr) = (v[2].clone(), v[3].clone());
        let mut at = vec![Expr::idx(0); s];
        let mut inside = Expr::Const(Scalar::Bool(true));
        for d in (0..s).rev() {
            let (off, pos) = (kr.clone() % block[d].clone(), lr.clone() % counts[d].clone());
            kr = kr / block[d].clone();
            lr = lr / counts[d].clone();
            let p = pos * attr(&strides, d, 1) - attr(&pads, d, 0) + off * attr(&dilations, d, 1);
            inside = and(in_range(p.clone(), 0, Expr::idx(y.dims[2 + d] as i64)), inside);
            at[d] = p;
        }
        let mut out = vec![v[0].clone(), v[1].clone()];
        out.extend(at);
        let target = linear(&out, &ys);
        let src = linear(&[v[0].clone(), v[1].clone() * blocks as i64 + v[2].clone(), v[3].clone()], &xs);
        let sum = Expr::load(y.buf, target.clone()).bin(BinOp::Add, Expr::load(x.buf, src));
        vec![Stmt::If { cond: super::fold(inside), then: vec![store(&y, target, sum)], otherwise: Vec::new() }]
    });
    b.push(cx);
    Ok(true)
}
