//! `fused_elementwise`: a chain of elementwise ops in one loop nest over the output.
//!
//! The body's ops lower through their usual element functions: while [`Capture`] is set,
//! [`map_n`](super::map_n) hands each op's closure the expressions of its operands (loads of
//! the enclosing program's buffers at the broadcast index, or earlier body results) and keeps
//! the result as an expression instead of storing it. Only the body's result is stored. If a
//! body op needs a kernel of its own (it does not lower through `map_n`), the body lowers op by
//! op instead, as if it had not been fused.

use kiln_tir::{NodeId, Op};

use super::{type_of, ElemResult, Scope};
use kiln_loops::builder::{broadcast_index, linear, strides};
use kiln_loops::ir::*;
use crate::{Capture, LowerError, Lowerer, Operand};

/// Lowers `n` if it is a `fused_elementwise`.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let Op::FusedElementwise(_) = cx.node(n).op else { return Ok(false) };
    let Some(body) = cx.node(n).regions.first().cloned() else {
        return Err(cx.unsupported(n, "the body region is missing"));
    };
    let (Some(out), [result]) = (cx.output(n, 0)?, &body.results[..]) else {
        return Err(cx.unsupported(n, "the body must have one result and the node one output"));
    };
    for (i, &p) in body.params.iter().enumerate() {
        let input = cx.required(n, i)?;
        cx.bind(p, input.buf);
    }
    let mut k = cx.kernel(n);
    let dims = out.dims.clone();
    let mut failed = None;
    let stmts = k.nest(&dims, |k, idx| {
        let lent = std::mem::replace(k, Kernel::new(String::new()));
        cx.capture = Some(Capture::new(lent, idx.to_vec(), dims.clone()));
        for &b in &body.nodes {
            if let Err(e) = cx.lower_node(b) {
                failed = Some(e);
                break;
            }
        }
        let cap = cx.capture.take().unwrap_or_else(|| unreachable!("set above"));
        *k = cap.kernel;
        if cap.escaped && failed.is_none() {
            failed = Some(cx.unsupported(n, "a body op needs a kernel of its own"));
        }
        let value = cx.bufs.get(result).and_then(|b| cap.exprs.get(b)).cloned();
        let mut stmts = cap.stmts;
        match value {
            Some(value) => stmts.push(Stmt::Store { buf: out.buf, index: linear(idx, &strides(&dims)), value }),
            None => {
                failed.get_or_insert_with(|| cx.unsupported(n, "the body's result is not an op of the body"));
            }
        }
        stmts
    });
    if failed.is_none() {
        k.body = stmts;
        cx.push(k);
        return Ok(true);
    }
    // Unfused: each body op its own kernel, then the result copied into the output.
    for &b in &body.nodes {
        cx.lower_node(b)?;
    }
    let inner = cx.value(*result)?;
    let mut copy = cx.kernel(n);
    copy.body = copy.nest(&[out.numel()], |_, i| vec![Stmt::Store { buf: out.buf, index: i[0].clone(), value: Expr::load(inner.buf, i[0].clone()) }]);
    cx.push(copy);
    Ok(true)
}

/// `map_n` while capturing: the element of `n` from its operands' expressions.
pub(super) fn element(cx: &mut Lowerer<'_>, n: NodeId, operands: &[Operand], f: impl FnOnce(&mut Scope<'_>, &[Expr]) -> ElemResult) -> Result<bool, LowerError> {
    let Some(out) = cx.output(n, 0)? else { return Ok(true) };
    let Some(cap) = cx.capture.as_mut() else { unreachable!("element runs while capturing") };
    let mut kernel = std::mem::replace(&mut cap.kernel, Kernel::new(String::new()));
    let mut s = Scope { k: &mut kernel, stmts: Vec::new() };
    let mut args = Vec::with_capacity(operands.len());
    let mut bad = None;
    for o in operands {
        if let Some(e) = cap.exprs.get(&o.buf) {
            args.push(e.clone());
            continue;
        }
        // A buffer of the program (a fused input or a constant), broadcast to the output.
        let rank = cap.dims.len();
        let fits = o.dims.len() <= rank && o.dims.iter().rev().zip(cap.dims.iter().rev()).all(|(&d, &o)| d == o || d == 1);
        if !fits {
            bad = Some(format!("operand dims {:?} do not broadcast to {:?}", o.dims, cap.dims));
            break;
        }
        let index = if o.numel() == 1 { Expr::idx(0) } else { broadcast_index(&cap.idx, &o.dims) };
        let v = s.k.var(o.ty());
        s.stmts.push(Stmt::Let(v, Expr::load(o.buf, index)));
        args.push(Expr::Var(v));
    }
    let value = match bad {
        Some(why) => Err(why),
        None => f(&mut s, &args).and_then(|value| match type_of(&value, &s.k.vars) {
            Some(t) if t != out.ty() => Err(format!("kiln bug: the element is {}, the output {}", t.name(), out.elem.name())),
            _ => Ok(s.bind(value)),
        }),
    };
    let stmts = s.stmts;
    let cap = cx.capture.as_mut().unwrap_or_else(|| unreachable!("still capturing"));
    cap.kernel = kernel;
    match value {
        Ok(value) => {
            cap.stmts.extend(stmts);
            cap.exprs.insert(out.buf, value);
            Ok(true)
        }
        Err(why) => Err(cx.unsupported(n, why)),
    }
}
