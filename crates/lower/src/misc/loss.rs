//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! Both pick, for every position `(i, d1, ..., dk)` of the target, the class `t` it names and
//! compute `loss = -w[t] · p[i, t, d...]`, where `p` is the input (NLL) or its log-softmax
//! along the class axis (SCE), and `w[t]` is the class weight (1 without a weight input).
//! A position whose target equals `ignore_index` has loss 0 and weight 0, and its target is
//! never used as an index; every other target must lie in `0..C` (checked at run time).
//! `mean` divides the summed loss by the summed weights of the positions not ignored (their
//! count without a weight input). ONNX's Python reference departs from this in one corner:
//! NLL with `ignore_index = -1` and no weight averages over all positions, ignored ones too;
//! kiln follows the spec's function body and PyTorch.

use kiln_tir::NodeId;
use kiln_tir::op::LossReduction;

use super::{bind, expect_dims, float_type, in_range, load_as, local, or, store, Body};
use kiln_loops::builder::linear;
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Which loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// NegativeLogLikelihoodLoss: the input holds log-probabilities.
    Nll,
    /// SoftmaxCrossEntropyLoss: the input holds scores; output 1 (optional) is their log-softmax.
    SoftmaxCrossEntropy,
}

/// Lowers a loss node.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId, kind: Kind, ignore_index: Option<i64>, reduction: LossReduction) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let target = cx.required(n, 1)?;
    let weight = cx.input(n, 2)?;
    let t = float_type(cx, n, &x, "input")?;
    if x.rank() < 2 {
        return Err(cx.unsupported(n, "invalid model: the input needs a batch and a class axis"));
    }
    let (batch, classes) = (x.dims[0], x.dims[1]);
    let spatial: u64 = x.dims[2..].iter().product();
    let want_target: Vec<u64> = [&x.dims[..1], &x.dims[2..]].concat();
    if target.dims != want_target {
        return Err(cx.unsupported(n, format!("invalid model: target shape {:?} for input shape {:?}", target.dims, x.dims)));
    }
    if target.ty().is_float() || target.ty() == ScalarType::Bool {
        return Err(cx.unsupported(n, format!("invalid model: target of type {}", target.elem.name())));
    }
    if let Some(w) = weight.as_ref().filter(|w| w.dims != [classes]) {
        return Err(cx.unsupported(n, format!("invalid model: weight shape {:?} for {classes} classes", w.dims)));
    }
    let y = cx.required_output(n, 0)?;
    match reduction {
        LossReduction::None => expect_dims(cx, n, &y, &target.dims)?,
        _ => expect_dims(cx, n, &y, &[])?,
    }
    let log_prob = match kind {
        Kind::SoftmaxCrossEntropy => cx.output(n, 1)?,
        Kind::Nll => None,
    };
    if let Some(lp) = &log_prob {
        expect_dims(cx, n, lp, &x.dims)?;
    }
    let mut b = Body::new(cx, n);
    let acc = match reduction {
        LossReduction::None => None,
        _ => {
            let sum = local(&mut b.k, &mut b.stmts, t, Expr::float(t, 0.0));
            let wsum = local(&mut b.k, &mut b.stmts, t, Expr::float(t, 0.0));
            Some((sum, wsum))
        }
    };
    let error = cx.error(n, "target class out of range");
    let xs = [classes as i64 * spatial as i64, spatial as i64, 1];
    let nest = b.k.nest(&[batch, spatial], |k, o| {
        let (i, d) = (&o[0], &o[1]);
        let mut s = Vec::new();
        // Where class `c` of this position lives in the input.
        let at = |c: Expr| linear(&[i.clone(), c, d.clone()], &xs);
        let pos = i.clone() * spatial as i64 + d.clone();
        let raw = bind(k, &mut s, ScalarType::I64, load_as(&target, pos.clone(), ScalarType::I64));
        let ignored = ignore_index.map(|ii| raw.clone().cmp(CmpOp::Eq, Expr::idx(ii)));
        let ok = in_range(raw.clone(), 0, classes as i64);
        let ok = match &ignored {
            Some(ig) => or(ig.clone(), ok),
            None => ok,
        };
        s.push(Stmt::Check { cond: ok, error });
        let (class, ignored) = match ignored {
            Some(ig) => {
                let ig = bind(k, &mut s, ScalarType::Bool, ig);
                (bind(k, &mut s, ScalarType::I64, ig.clone().select(Expr::idx(0), raw)), Some(ig))
            }
            None => (raw, None),
        };
        // The log-probability of `class` (and the log-softmax pieces for SCE).
        let picked = match kind {
            Kind::Nll => load_as(&x, at(class.clone()), t),
            Kind::SoftmaxCrossEntropy => {
                let m = local(k, &mut s, t, Expr::float(t, f64::NEG_INFINITY));
                s.extend(k.nest(&[classes], |_, c| vec![Stmt::Assign(m, Expr::Var(m).max(load_as(&x, at(c[0].clone()), t)))]));
                let sum = local(k, &mut s, t, Expr::float(t, 0.0));
                s.extend(k.nest(&[classes], |_, c| vec![Stmt::Assign(sum, Expr::Var(sum) + (load_as(&x, at(c[0].clone()), t) - Expr::Var(m)).math(MathFn::Exp))]));
                let shift = bind(k, &mut s, t, Expr::Var(m) + Expr::Var(sum).math(MathFn::Log));
                if let Some(lp) = &log_prob {
                    s.extend(k.nest(&[classes], |_, c| vec![store(lp, at(c[0].clone()), load_as(&x, at(c[0].clone()), t) - shift.clone(), t)]));
                }
                load_as(&x, at(class.clone()), t) - shift
            }
        };
        let w = match &weight {
            Some(w) => load_as(w, class.clone(), t),
            None => Expr::float(t, 1.0),
        };
        let w = match &ignored {
            Some(ig) => ig.clone().select(Expr::float(t, 0.0), w),
            None => w,
        };
        let w = bind(k, &mut s, t, w);
        let loss = Expr::float(t, 0.0) - w.clone() * picked;
        let loss = match &ignored {
            Some(ig) => ig.clone().select(Expr::float(t, 0.0), loss),
            None => loss,
        };
        match acc {
            None => s.push(store(&y, pos, loss, t)),
            Some((sum, wsum)) => {
                s.push(Stmt::Assign(sum, Expr::Var(sum) + loss));
                s.push(Stmt::Assign(wsum, Expr::Var(wsum) + w));
            }
        }
        s
    });
    b.stmts.extend(nest);
    match (reduction, acc) {
        (LossReduction::Sum, Some((sum, _))) => b.stmts.push(store(&y, Expr::idx(0), Expr::Var(sum), t)),
        (LossReduction::Mean, Some((sum, wsum))) => b.stmts.push(store(&y, Expr::idx(0), Expr::Var(sum) / Expr::Var(wsum), t)),
        _ => {}
    }
    b.push(cx);
    Ok(())
}
