//! Placing a lowered region's kernels: guarding them with a condition, splicing them into one
//! kernel (renumbering their variables), and the buffer copies that move values in and out.

use std::collections::HashSet;

use kiln_tir::ValueId;

use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// A new intermediate buffer.
pub(super) fn temp(cx: &mut Lowerer<'_>, name: String, elem: ElemType, len: u64) -> BufId {
    cx.program.add_buffer(Buffer { name, elem, len, kind: BufferKind::Temp })
}

/// The static dims and element type of value `v` (a region parameter or result).
pub(super) fn value_type(cx: &Lowerer<'_>, v: ValueId) -> Result<(Vec<u64>, ElemType), LowerError> {
    cx.static_type(v)
}

/// Statements copying `len` elements from `src` at `src_at + e` to `dst` at `dst_at + e`
/// (both buffers of one element type).
pub(super) fn copy(k: &mut Kernel, src: BufId, src_at: &Expr, dst: BufId, dst_at: &Expr, len: u64) -> Vec<Stmt> {
    k.nest(&[len], |_, i| vec![Stmt::Store { buf: dst, index: dst_at.clone() + i[0].clone(), value: Expr::load(src, src_at.clone() + i[0].clone()) }])
}

/// The statements of `kernels`, in order, as statements of `k`: each kernel's variables are
/// renumbered past the ones `k` already has.
pub(super) fn splice(k: &mut Kernel, kernels: Vec<Kernel>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for sub in kernels {
        let base = k.vars.len() as u32;
        k.vars.extend_from_slice(&sub.vars);
        let mut body = sub.body;
        shift_block(&mut body, base);
        out.extend(body);
    }
    out
}

fn shift_block(stmts: &mut [Stmt], base: u32) {
    for s in stmts {
        match s {
            Stmt::For { var, body, .. } => {
                var.0 += base;
                shift_block(body, base);
            }
            Stmt::Let(v, e) | Stmt::Local(v, e) | Stmt::Assign(v, e) => {
                v.0 += base;
                shift_expr(e, base);
            }
            Stmt::Store { index, value, .. } => {
                shift_expr(index, base);
                shift_expr(value, base);
            }
            Stmt::If { cond, then, otherwise } => {
                shift_expr(cond, base);
                shift_block(then, base);
                shift_block(otherwise, base);
            }
            Stmt::Check { cond, .. } => shift_expr(cond, base),
            Stmt::Call(call) => {
                for operand in call.operands_mut() {
                    shift_expr(operand.expr(), base);
                }
            }
        }
    }
}

fn shift_expr(e: &mut Expr, base: u32) {
    match e {
        Expr::Const(_) => {}
        Expr::Var(v) => v.0 += base,
        Expr::Load { index, .. } => shift_expr(index, base),
        Expr::Unary(_, a) | Expr::Cast(_, _, a) | Expr::Bitcast(_, a) => shift_expr(a, base),
        Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
            shift_expr(a, base);
            shift_expr(b, base);
        }
        Expr::Select(c, a, b) => {
            shift_expr(c, base);
            shift_expr(a, base);
            shift_expr(b, base);
        }
        Expr::Math(_, args) => args.iter_mut().for_each(|a| shift_expr(a, base)),
    }
}

/// Copies each `(source, state)` pair's source into its state buffer, as one simultaneous
/// assignment: a source that is itself another state (a body result aliasing a parameter,
/// as in a swap) is staged through a temp first, so every source is read before any state is
/// written. Pairs whose source already is the state need nothing.
pub(super) fn update_states(cx: &mut Lowerer<'_>, k: &mut Kernel, pairs: &[(Operand, Operand)]) -> Vec<Stmt> {
    let targets: HashSet<BufId> = pairs.iter().map(|(_, s)| s.buf).collect();
    let (mut stage, mut write) = (Vec::new(), Vec::new());
    let zero = Expr::idx(0);
    for (src, state) in pairs {
        if src.buf == state.buf {
            continue;
        }
        let len = state.numel();
        if targets.contains(&src.buf) {
            let name = format!("{}_next", cx.program.buffer(state.buf).name);
            let t = temp(cx, name, state.elem, len);
            stage.extend(copy(k, src.buf, &zero, t, &zero, len));
            write.extend(copy(k, t, &zero, state.buf, &zero, len));
        } else {
            write.extend(copy(k, src.buf, &zero, state.buf, &zero, len));
        }
    }
    stage.extend(write);
    stage
}

