//! RotaryEmbedding: each head's first `rotary_embedding_dim` features are rotated in pairs,
//! `(x1, x2) → (cos·x1 − sin·x2, sin·x1 + cos·x2)`, the pairs being the two halves of the
//! rotated part or, when `interleaved`, its even and odd features; the rest are copied.
//! `cos` and `sin` are rows of the caches picked by `position_ids` (`[B, S]`, numpy indexing:
//! negative ids count from the end, others are checked at run time), or `[B, S, dim/2]`
//! caches used directly. Each product and sum is rounded to the data type, as the reference's
//! array arithmetic does.

use kiln_tir::op::RotaryEmbedding;
use kiln_tir::NodeId;

use super::{is_float, Num};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers one RotaryEmbedding node.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId, a: &RotaryEmbedding) -> Result<(), LowerError> {
    let (x, cos, sin) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.required(n, 2)?);
    let pos = cx.input(n, 3)?;
    let y = cx.required_output(n, 0)?;
    if !is_float(x.elem) || cos.elem != x.elem || sin.elem != x.elem || y.elem != x.elem || y.dims != x.dims {
        return Err(cx.unsupported(n, "input, caches and output must share one floating-point type and the output the input's shape"));
    }
    // (batch, heads, seq, head size) and the strides of batch, head, position.
    let (batch, heads, seq, head, st) = match (&x.dims[..], a.num_heads) {
        (&[b, h, s, d], None) => (b, h, s, d, [h * s * d, s * d, d]),
        (&[b, h, s, d], Some(nh)) if nh as u64 == h => (b, h, s, d, [h * s * d, s * d, d]),
        (&[b, s, hidden], Some(nh)) if nh > 0 && hidden % nh as u64 == 0 => {
            let h = nh as u64;
            (b, h, s, hidden / h, [s * hidden, hidden / h, hidden])
        }
        _ => return Err(cx.unsupported(n, "the input must be 4-D, or 3-D with num_heads dividing its hidden size")),
    };
    let rot = if a.rotary_embedding_dim == 0 { head } else { a.rotary_embedding_dim as u64 };
    if a.rotary_embedding_dim < 0 || rot > head || rot % 2 != 0 {
        return Err(cx.unsupported(n, "rotary_embedding_dim must be even and at most the head size"));
    }
    let half = rot / 2;
    // The cache row of position `(b, s)`: an index into the first axis, or `b·S + s`.
    let max_pos = match &pos {
        Some(p) => {
            if p.elem != ElemType::Scalar(ScalarType::I64) || p.dims != [batch, seq] || cos.rank() != 2 || cos.dims != sin.dims || cos.dims[1] != half {
                return Err(cx.unsupported(n, "with position_ids [B, S], the caches must be [positions, dim/2]"));
            }
            Some(cos.dims[0] as i64)
        }
        None => {
            if cos.dims != [batch, seq, half] || sin.dims != cos.dims {
                return Err(cx.unsupported(n, "without position_ids, the caches must be [B, S, dim/2]"));
            }
            None
        }
    };
    let error = cx.error(n, "a position_ids value is outside cos_cache");
    let mut k = cx.kernel(n);
    let num = Num::new(cx, &k.name, &[x.elem]);
    let t = x.elem;
    let at = |b: &Expr, h: &Expr, s: &Expr, d: Expr| b.clone() * st[0] as i64 + h.clone() * st[1] as i64 + s.clone() * st[2] as i64 + d;
    let interleaved = a.interleaved != 0;
    k.body = k.nest(&[batch, seq], |k, bs| {
        let (b, s) = (&bs[0], &bs[1]);
        let mut out = Vec::new();
        let row = match (max_pos, &pos) {
            (Some(m), Some(p)) => {
                let id = k.var(ScalarType::I64);
                out.push(Stmt::Let(id, Expr::load(p.buf, b.clone() * seq as i64 + s.clone())));
                let id = Expr::Var(id);
                out.push(Stmt::Check { cond: id.clone().cmp(CmpOp::Ge, Expr::idx(-m)).bin(BinOp::And, id.clone().cmp(CmpOp::Lt, Expr::idx(m))), error });
                let row = k.var(ScalarType::I64);
                out.push(Stmt::Let(row, id.clone().cmp(CmpOp::Lt, Expr::idx(0)).select(id.clone() + m, id)));
                Expr::Var(row)
            }
            _ => b.clone() * seq as i64 + s.clone(),
        };
        out.extend(k.nest(&[heads, half], |k, hk| {
            let (h, kk) = (&hk[0], &hk[1]);
            let (i1, i2) = if interleaved { (kk.clone() * 2, kk.clone() * 2 + 1) } else { (kk.clone(), kk.clone() + half as i64) };
            let cs = row.clone() * half as i64 + kk.clone();
            let (c, sn) = (num.load_op(&cos, cs.clone()), num.load_op(&sin, cs));
            let (x1, x2) = (num.load_op(&x, at(b, h, s, i1.clone())), num.load_op(&x, at(b, h, s, i2.clone())));
            let mut body = Vec::new();
            let (cx1, sx2) = (num.round(k, &mut body, t, c.clone() * x1.clone()), num.round(k, &mut body, t, sn.clone() * x2.clone()));
            let real = num.round(k, &mut body, t, cx1 - sx2);
            let (sx1, cx2) = (num.round(k, &mut body, t, sn * x1), num.round(k, &mut body, t, c * x2));
            let imag = num.round(k, &mut body, t, sx1 + cx2);
            body.push(num.store_op(&y, at(b, h, s, i1), real));
            body.push(num.store_op(&y, at(b, h, s, i2), imag));
            body
        }));
        if head > rot {
            out.extend(k.nest(&[heads, head - rot], |_, hd| {
                let i = at(b, &hd[0], s, hd[1].clone() + rot as i64);
                vec![Stmt::Store { buf: y.buf, index: i.clone(), value: Expr::load(x.buf, i) }]
            }));
        }
        out
    });
    cx.push(k);
    Ok(())
}
