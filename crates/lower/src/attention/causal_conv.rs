//! CausalConvWithState: a depthwise 1-D convolution over `past_state ++ input` (zeros when no
//! state is given) without padding, so output `l` sees inputs `l − k + 1 ..= l`; an optional
//! per-channel bias and a fused SiLU (`swish`); `present_state` is the last `k − 1` positions
//! of the concatenation.
//!
//! As in the reference, the convolution sums in `f32` (for half precision too) and rounds to
//! the data type once, the bias addition rounds again, and SiLU is computed in `f32` from that
//! rounded value.

use kiln_tir::op::{CausalConvWithState, ConvActivation};
use kiln_tir::NodeId;

use super::{is_float, Num};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers one CausalConvWithState node.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId, a: &CausalConvWithState) -> Result<(), LowerError> {
    let (x, w) = (cx.required(n, 0)?, cx.required(n, 1)?);
    let (bias, past) = (cx.input(n, 2)?, cx.input(n, 3)?);
    let silu = match a.activation {
        ConvActivation::None => false,
        ConvActivation::Silu | ConvActivation::Swish => true,
    };
    let &[batch, chans, len] = &x.dims[..] else {
        return Err(cx.unsupported(n, "the input must be [batch, channels, length]"));
    };
    let taps = match w.dims[..] {
        [c, 1, k] if c == chans && k > 0 => k,
        _ => return Err(cx.unsupported(n, "the weight must be [channels, 1, k] with k > 0")),
    };
    let keep = taps - 1;
    let same = |o: &Option<Operand>, dims: &[u64]| o.as_ref().is_none_or(|o| o.elem == x.elem && o.dims == dims);
    if !is_float(x.elem) || w.elem != x.elem || !same(&bias, &[chans]) || !same(&past, &[batch, chans, keep]) {
        return Err(cx.unsupported(n, "bias, past_state and weight must match the input's type and shape"));
    }
    let y = cx.required_output(n, 0)?;
    let state = cx.output(n, 1)?;
    if y.dims != x.dims || y.elem != x.elem || !same(&state, &[batch, chans, keep]) {
        return Err(cx.unsupported(n, "the outputs have unexpected shapes or types"));
    }
    let mut k = cx.kernel(n);
    let num = Num::new(cx, &k.name, &[x.elem]);
    let t = x.elem;
    // Element `p` of channel `(b, c)` of `past_state ++ input`, for `p` in `0..keep + len`.
    let padded = |b: &Expr, c: &Expr, p: Expr| -> Expr {
        let row = b.clone() * chans as i64 + c.clone();
        let from_x = num.load_op(&x, row.clone() * len as i64 + (p.clone() - keep as i64).max(Expr::idx(0)));
        if keep == 0 {
            return from_x;
        }
        let from_past = match &past {
            Some(s) => num.load_op(s, row * keep as i64 + p.clone().min(Expr::idx(keep as i64 - 1))),
            None => num.c(0.0),
        };
        p.cmp(CmpOp::Lt, Expr::idx(keep as i64)).select(from_past, from_x)
    };
    let mut body = k.nest(&[batch, chans, len], |k, ix| {
        let (b, c, l) = (&ix[0], &ix[1], &ix[2]);
        let acc = k.var(num.ty);
        let mut s = vec![Stmt::Local(acc, num.c(0.0))];
        s.extend(k.nest(&[taps], |_, j| {
            let term = num.load_op(&w, c.clone() * taps as i64 + j[0].clone()) * padded(b, c, l.clone() + j[0].clone());
            vec![Stmt::Assign(acc, Expr::Var(acc) + term)]
        }));
        let mut v = num.round(k, &mut s, t, Expr::Var(acc));
        if let Some(bias) = &bias {
            v = num.round(k, &mut s, t, v + num.load_op(bias, c.clone()));
        }
        if silu {
            let sig = num.c(1.0) / (num.c(1.0) + v.clone().un(UnOp::Neg).math(MathFn::Exp));
            v = v * sig;
        }
        s.push(num.store_op(&y, (b.clone() * chans as i64 + c.clone()) * len as i64 + l.clone(), v));
        s
    });
    if let Some(st) = &state {
        body.extend(k.nest(&[batch, chans, keep], |_, ix| {
            let (b, c) = (&ix[0], &ix[1]);
            let at = (b.clone() * chans as i64 + c.clone()) * keep as i64 + ix[2].clone();
            vec![num.store_op(st, at, padded(b, c, ix[2].clone() + len as i64))]
        }));
    }
    k.body = body;
    cx.push(k);
    Ok(())
}
