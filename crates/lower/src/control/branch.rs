//! If: both branches are lowered; every kernel of the `then` branch runs under
//! `if cond[0]`, every kernel of the `else` branch under `if !cond[0]`, and each branch ends
//! with a kernel copying its results into the If's outputs under the same guard. Kernels stay
//! separate (and in order), so the memory planner sees an ordinary kernel sequence. A
//! constant condition lowers only the branch it takes, unguarded, and the outputs become
//! views of that branch's results.

use kiln_tir::{NodeId, Region};

use super::region::{copy, value_type};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers If node `n`.
pub(super) fn lower_if(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let node = cx.node(n);
    let [then_branch, else_branch] = &node.regions[..] else {
        return Err(cx.unsupported(n, "If needs a then and an else branch"));
    };
    for r in [then_branch, else_branch] {
        if r.results.len() != node.outputs.len() {
            return Err(cx.unsupported(n, format!("a branch has {} results for {} outputs", r.results.len(), node.outputs.len())));
        }
    }
    let cond = cx.required(n, 0)?;
    if cond.numel() != 1 || cond.ty() != ScalarType::Bool {
        return Err(cx.unsupported(n, "the condition must be one bool"));
    }
    if let Some(t) = cx.const_input(n, 0) {
        let Some(&[byte]) = t.raw() else {
            return Err(cx.unsupported(n, "the constant condition has no bytes"));
        };
        let taken = if byte != 0 { then_branch } else { else_branch };
        let kernels = cx.lower_region(taken)?;
        kernels.into_iter().for_each(|k| cx.push(k));
        for (i, &res) in taken.results.iter().enumerate() {
            let src = cx.value(res)?;
            if let Some(out) = node.outputs[i] {
                let (dims, elem) = value_type(cx, out)?;
                check_result(cx, n, i, &src, &dims, elem)?;
                cx.alias_output(n, i, &src);
            }
        }
        return Ok(());
    }
    let outputs = (0..node.outputs.len()).map(|i| cx.output(n, i)).collect::<Result<Vec<_>, _>>()?;
    let on_true = Expr::load(cond.buf, Expr::idx(0));
    branch(cx, n, then_branch, &outputs, on_true.clone())?;
    branch(cx, n, else_branch, &outputs, on_true.un(UnOp::Not))?;
    Ok(())
}

/// An error unless a branch result has the output's static type.
fn check_result(cx: &Lowerer<'_>, n: NodeId, i: usize, src: &Operand, dims: &[u64], elem: ElemType) -> Result<(), LowerError> {
    if src.dims != dims || src.elem != elem {
        return Err(cx.unsupported(n, format!("branch result {i} is {}{:?}, the output {}{dims:?} (branch shapes must be static and equal)", src.elem.name(), src.dims, elem.name())));
    }
    Ok(())
}

/// Lowers one branch with every kernel guarded by `guard`, then copies its results out.
fn branch(cx: &mut Lowerer<'_>, n: NodeId, region: &Region, outputs: &[Option<Operand>], guard: Expr) -> Result<(), LowerError> {
    let guarded = |body: Vec<Stmt>| vec![Stmt::If { cond: guard.clone(), then: body, otherwise: Vec::new() }];
    for mut k in cx.lower_region(region)? {
        k.body = guarded(std::mem::take(&mut k.body));
        cx.push(k);
    }
    let mut k = cx.kernel(n);
    let mut body = Vec::new();
    for (i, (&res, out)) in region.results.iter().zip(outputs).enumerate() {
        let Some(out) = out else { continue };
        let src = cx.value(res)?;
        check_result(cx, n, i, &src, &out.dims, out.elem)?;
        body.extend(copy(&mut k, src.buf, &Expr::idx(0), out.buf, &Expr::idx(0), out.numel()));
    }
    k.body = guarded(body);
    cx.push(k);
    Ok(())
}
