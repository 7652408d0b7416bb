//! BatchNormalization over channel axis 1, at inference (running statistics given) and in
//! training mode (batch statistics, plus updated running statistics).

use kiln_tir::{NodeId, Op};

use super::{expect_dims, expect_float, inv_std, moments, stats_type};
use kiln_loops::ir::*;
use crate::reduce::{bind, convert, load_as, Split};
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is BatchNormalization.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let Op::BatchNormalization(attr) = &cx.node(n).op else {
        return Ok(false);
    };
    let (epsilon, momentum, training) = (attr.epsilon, attr.momentum, attr.training_mode != 0);
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    if x.rank() < 2 {
        return Err(cx.unsupported(n, "input of rank < 2"));
    }
    let c = x.dims[1];
    let params: Vec<_> = (1..5).map(|i| cx.required(n, i)).collect::<Result<_, _>>()?;
    if params.iter().any(|p| p.numel() != c || !p.ty().is_float()) {
        return Err(cx.unsupported(n, "scale, bias, mean and var are not float vectors of the channel count"));
    }
    let (scale, bias, mean_in, var_in) = (&params[0], &params[1], &params[2], &params[3]);
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    let ct = stats_type(x.ty(), false);
    // A view of x as [N, C, spatial].
    let view = [x.dims[0], c, x.dims[2..].iter().product()];
    let mut k = cx.kernel(n);
    let body = if !training {
        let split = Split::new(&view, vec![false, false, true]);
        k.nest(&split.outer_dims(), |k, o| {
            let ch = &o[1];
            let mut s = Vec::new();
            let inv = bind(k, &mut s, ct, inv_std(load_as(var_in, ch.clone(), ct), epsilon, ct));
            let m = bind(k, &mut s, ct, load_as(mean_in, ch.clone(), ct));
            let g = bind(k, &mut s, ct, load_as(scale, ch.clone(), ct));
            let b = bind(k, &mut s, ct, load_as(bias, ch.clone(), ct));
            s.extend(k.nest(&split.inner_dims(), |_, j| {
                let at = split.index(o, j);
                let v = (load_as(&x, at.clone(), ct) - m) * inv * g + b;
                vec![Stmt::Store { buf: y.buf, index: at, value: convert(v, ct, y.ty()) }]
            }));
            s
        })
    } else {
        let running_mean = cx.output(n, 1)?;
        let running_var = cx.output(n, 2)?;
        if cx.node(n).outputs.len() > 3 {
            return Err(cx.unsupported(n, "saved mean and variance outputs"));
        }
        for r in running_mean.iter().chain(&running_var) {
            expect_dims(cx, n, r, &[c])?;
        }
        let split = Split::new(&view, vec![true, false, true]);
        k.nest(&split.outer_dims(), |k, o| {
            let ch = &o[0];
            let (mut s, mean, var) = moments(k, &x, &split, o, ct);
            let keep = Expr::float(ct, f64::from(momentum));
            let take = Expr::float(ct, 1.0 - f64::from(momentum));
            for (out, old, new) in [(&running_mean, mean_in, &mean), (&running_var, var_in, &var)] {
                if let Some(out) = out {
                    let v = load_as(old, ch.clone(), ct) * keep.clone() + new.clone() * take.clone();
                    s.push(Stmt::Store { buf: out.buf, index: ch.clone(), value: convert(v, ct, out.ty()) });
                }
            }
            let inv = bind(k, &mut s, ct, inv_std(var, epsilon, ct));
            let g = bind(k, &mut s, ct, load_as(scale, ch.clone(), ct));
            let b = bind(k, &mut s, ct, load_as(bias, ch.clone(), ct));
            s.extend(k.nest(&split.inner_dims(), |_, j| {
                let at = split.index(o, j);
                let v = (load_as(&x, at.clone(), ct) - mean) * inv * g + b;
                vec![Stmt::Store { buf: y.buf, index: at, value: convert(v, ct, y.ty()) }]
            }));
            s
        })
    };
    k.body = body;
    cx.push(k);
    Ok(true)
}
