//! Loop: one kernel holding `for i in 0..M` around the body's kernels, spliced in.
//!
//! Carried values live in state buffers (the Loop's outputs where they are used), filled from
//! the initial values before the loop; the body reads them through its parameters and, after
//! each iteration, its results are copied back ([`update_states`]). The iteration number and
//! the condition are one-element buffers. Scan outputs are copied into row `i` of their
//! output.
//!
//! The loop IR has counted loops only, so `M` must be a compile-time constant. The condition
//! is honoured with or without a condition input, as onnxruntime and the ONNX reference do
//! (the operator's table calls the body's condition ignored without one): unless it provably
//! stays true, each iteration runs under `if cond[0]`, and an iteration after it turned false
//! costs that test ([`MAX_GUARDED_TRIPS`] bounds them). A loop that may stop early has scan
//! outputs of run-time length, which are unsupported.

use kiln_tir::NodeId;

use super::region::{copy, splice, temp, update_states, value_type};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// The most iterations a loop with a run-time condition may run through: the loop IR has no
/// early exit, so each iteration after the condition turns false still costs a test.
pub(super) const MAX_GUARDED_TRIPS: u64 = 1 << 24;

/// Lowers Loop node `n`.
pub(super) fn lower_loop(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let node = cx.node(n);
    let [body] = &node.regions[..] else {
        return Err(cx.unsupported(n, "Loop needs one body"));
    };
    let carried = node.inputs.len().saturating_sub(2);
    if body.params.len() != carried + 2 || body.results.len() < carried + 1 || node.outputs.len() > body.results.len() - 1 {
        return Err(cx.unsupported(n, "the body's signature does not fit the node"));
    }
    let scans = body.results.len() - 1 - carried;
    let Some(_) = node.inputs.first().copied().flatten() else {
        return Err(cx.unsupported(n, "no trip count M: the loop IR has no loop with a run-time exit"));
    };
    let Some(m) = cx.const_input(n, 0).and_then(|t| t.to_i64s()).and_then(|v| v.first().copied()) else {
        return Err(cx.unsupported(n, "the trip count M is not a compile-time constant"));
    };
    let trips = m.max(0) as u64;
    let cond_in = cx.input(n, 1)?;
    if cond_in.as_ref().is_some_and(|c| c.numel() != 1 || c.ty() != ScalarType::Bool) {
        return Err(cx.unsupported(n, "the condition must be one bool"));
    }

    let mut k = cx.kernel(n);
    let name = k.name.clone();
    let zero = Expr::idx(0);
    let mut pre = Vec::new();

    // Carried values: state buffers, initialised before the loop.
    let mut states = Vec::with_capacity(carried);
    for i in 0..carried {
        let init = cx.required(n, 2 + i)?;
        let state = match cx.output(n, i)? {
            Some(out) => out,
            None => Operand { buf: temp(cx, format!("{name}_state{i}"), init.elem, init.numel()), dims: init.dims.clone(), elem: init.elem },
        };
        let param = value_type(cx, body.params[2 + i])?;
        if state.dims != init.dims || state.elem != init.elem || param != (init.dims.clone(), init.elem) {
            return Err(cx.unsupported(n, format!("carried value {i} changes type (initial {}{:?})", init.elem.name(), init.dims)));
        }
        pre.extend(copy(&mut k, init.buf, &zero, state.buf, &zero, init.numel()));
        states.push(state);
    }
    let scan_outs = (0..scans).map(|j| cx.output(n, carried + j)).collect::<Result<Vec<_>, _>>()?;
    if trips == 0 {
        k.body = pre;
        cx.push(k);
        return Ok(());
    }

    // The iteration number and the condition.
    let (iter_dims, iter_elem) = value_type(cx, body.params[0])?;
    let (cond_dims, cond_elem) = value_type(cx, body.params[1])?;
    if iter_dims.iter().product::<u64>() != 1 || !matches!(iter_elem.value_type(), ScalarType::I64 | ScalarType::I32) || cond_dims.iter().product::<u64>() != 1 || cond_elem != ElemType::Scalar(ScalarType::Bool) {
        return Err(cx.unsupported(n, "the body's iteration number and condition must be an integer and a bool scalar"));
    }
    let iter_buf = temp(cx, format!("{name}_iter"), iter_elem, 1);
    let cond = Operand { buf: temp(cx, format!("{name}_cond"), cond_elem, 1), dims: cond_dims, elem: cond_elem };
    let first = cond_in.as_ref().map_or(Expr::Const(Scalar::Bool(true)), |c| Expr::load(c.buf, zero.clone()));
    pre.push(Stmt::Store { buf: cond.buf, index: zero.clone(), value: first });
    cx.bind(body.params[0], iter_buf);
    cx.bind(body.params[1], cond.buf);
    for (i, s) in states.iter().enumerate() {
        cx.bind(body.params[2 + i], s.buf);
    }

    let i = k.var(ScalarType::I64);
    let iter_value = if iter_elem.value_type() == ScalarType::I64 { Expr::Var(i) } else { Expr::Var(i).cast(iter_elem.value_type()) };
    // Each iteration first asks whether the run has been cancelled or is past its deadline: a
    // loop's time is not bounded by its tensors' sizes.
    let stop_flag = temp(cx, format!("{name}_stop"), ElemType::Scalar(ScalarType::Bool), 1);
    let stopped = cx.error(n, "the run was stopped (cancelled, or past its deadline)");
    let mut step = vec![
        Stmt::Call(kiln_loops::call::ShouldStop { flag: Addr::new(stop_flag, zero.clone()) }.into()),
        Stmt::Check { cond: Expr::load(stop_flag, zero.clone()).cmp(CmpOp::Eq, Expr::Const(Scalar::Bool(false))), error: stopped },
        Stmt::Store { buf: iter_buf, index: zero.clone(), value: iter_value },
    ];
    let kernels = cx.lower_region(body)?;
    step.extend(splice(&mut k, kernels));

    // The loop runs all M iterations when the condition starts true and the body passes it
    // through or yields a constant true; otherwise each iteration is guarded.
    let is_true = |t: Option<&kiln_tir::Tensor>| t.and_then(|t| t.raw()).is_some_and(|b| b == [1]);
    let cond_result = cx.value(body.results[0])?;
    let stays_true = cond_result.buf == cond.buf || is_true(cx.g.const_value(body.results[0]));
    let starts_true = cond_in.is_none() || is_true(cx.const_input(n, 1));
    let guarded = !(stays_true && starts_true);
    if guarded && scan_outs.iter().any(Option::is_some) {
        return Err(cx.unsupported(n, "scan outputs of a loop whose condition may stop it early have a run-time length"));
    }
    if guarded && trips > MAX_GUARDED_TRIPS {
        return Err(cx.unsupported(n, format!("M = {m} with a run-time condition: the loop IR has no early exit, so at most {MAX_GUARDED_TRIPS} iterations are supported")));
    }
    // Scan outputs first: they may read a state the updates below overwrite.
    for (j, out) in scan_outs.iter().enumerate() {
        let Some(out) = out else { continue };
        let src = cx.value(body.results[1 + carried + j])?;
        if out.dims.first() != Some(&trips) || out.dims[1..] != src.dims[..] || out.elem != src.elem {
            return Err(cx.unsupported(n, format!("scan output {j} is {}{:?} for {trips} iterations of {}{:?}", out.elem.name(), out.dims, src.elem.name(), src.dims)));
        }
        let len = src.numel();
        step.extend(copy(&mut k, src.buf, &zero, out.buf, &(Expr::Var(i) * len as i64), len));
    }
    if cond_result.numel() != 1 || cond_result.elem != cond.elem {
        return Err(cx.unsupported(n, "the body's condition result must be one bool"));
    }
    let mut pairs = vec![(cond_result, cond.clone())];
    for (c, state) in states.iter().enumerate() {
        let src = cx.value(body.results[1 + c])?;
        if src.dims != state.dims || src.elem != state.elem {
            return Err(cx.unsupported(n, format!("carried value {c} changes type in the body ({}{:?} to {}{:?})", state.elem.name(), state.dims, src.elem.name(), src.dims)));
        }
        pairs.push((src, state.clone()));
    }
    step.extend(update_states(cx, &mut k, &pairs));

    let body_stmts = if guarded { vec![Stmt::If { cond: Expr::load(cond.buf, zero), then: step, otherwise: Vec::new() }] } else { step };
    pre.push(Stmt::For { var: i, extent: trips, body: body_stmts });
    k.body = pre;
    cx.push(k);
    Ok(())
}
