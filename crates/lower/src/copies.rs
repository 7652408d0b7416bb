//! Copy loops become runtime `copy` calls.
//!
//! Movement ops (Transpose, Gather, Slice, Concat, ...) lower to loop nests whose innermost
//! loop moves a contiguous run: `for j in 0..n { dst[a + j] = src[b + j] }`. Cranelift emits
//! that as one scalar load and store per element with the whole index recomputed; the runtime's
//! `copy` moves the run with vector instructions. This pass finds such loops, hoists the
//! statements before the store that do not depend on `j` (a Gather's index and its bounds
//! check), and replaces the loop with the call.
//!
//! A loop qualifies when its body is `Let`s and `Check`s that do not mention `j`, then one
//! store of a plain load with the same element type (not a packed one), between two different
//! buffers, at indices `a + j` and `b + j` where `a` and `b` do not mention `j`, and the run
//! has at least [`MIN_RUN`] elements (the loop then runs at least once, so hoisting a check
//! keeps its meaning).

use kiln_loops::ir::*;

/// Shorter runs stay loops: the call costs about what a few scalar copies do.
const MIN_RUN: u64 = 16;

/// Rewrites every kernel of `p`.
pub fn copy_calls(p: &mut Program) {
    let elems: Vec<ElemType> = p.buffers.iter().map(|b| b.elem).collect();
    for k in &mut p.kernels {
        block(&mut k.body, &elems);
    }
}

fn block(stmts: &mut Vec<Stmt>, elems: &[ElemType]) {
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts.drain(..) {
        match &mut s {
            Stmt::For { var, extent, body } => {
                if let Some(mut replaced) = as_copy(*var, *extent, body, elems) {
                    out.append(&mut replaced);
                    continue;
                }
                block(body, elems);
            }
            Stmt::If { then, otherwise, .. } => {
                block(then, elems);
                block(otherwise, elems);
            }
            _ => {}
        }
        out.push(s);
    }
    *stmts = out;
}

/// The hoisted statements and the call, when `for var in 0..extent { body }` is a copy.
fn as_copy(var: Var, extent: u64, body: &[Stmt], elems: &[ElemType]) -> Option<Vec<Stmt>> {
    let (last, before) = body.split_last()?;
    let Stmt::Store { buf: dst, index: di, value: Expr::Load { buf: src, index: si } } = last else { return None };
    let (de, se) = (elems.get(dst.0 as usize)?, elems.get(src.0 as usize)?);
    if extent < MIN_RUN || dst == src || de != se || de.is_packed() {
        return None;
    }
    let invariant = before.iter().all(|s| match s {
        Stmt::Let(_, e) => !e.mentions(var),
        Stmt::Check { cond, .. } => !cond.mentions(var),
        _ => false,
    });
    let (a, b) = (base(di, var)?, base(si, var)?);
    if !invariant {
        return None;
    }
    let mut out = before.to_vec();
    let n = Expr::idx(i64::try_from(extent).ok()?);
    out.push(Stmt::Call(kiln_loops::call::Copy { dst: Addr::new(*dst, a), src: Addr::new(*src, b), n }.into()));
    Some(out)
}

/// `a` when `index` is `a + var` (or `var + a`, or `var` itself) and `a` does not mention `var`.
fn base(index: &Expr, var: Var) -> Option<Expr> {
    match index {
        Expr::Var(v) if *v == var => Some(Expr::idx(0)),
        Expr::Binary(BinOp::Add, a, b) => match (&**a, &**b) {
            (a, Expr::Var(v)) | (Expr::Var(v), a) if *v == var && !a.mentions(var) => Some(a.clone()),
            _ => None,
        },
        _ => None,
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn program(body: impl FnOnce(&mut Kernel, BufId, BufId, BufId) -> Vec<Stmt>) -> Program {
        let mut p = Program::default();
        let f32e = ElemType::Scalar(ScalarType::F32);
        let a = p.add_buffer(Buffer { name: "a".into(), elem: f32e, len: 1024, kind: BufferKind::Input(0) });
        let b = p.add_buffer(Buffer { name: "b".into(), elem: f32e, len: 1024, kind: BufferKind::Output(0) });
        let h = p.add_buffer(Buffer { name: "h".into(), elem: ElemType::F16, len: 1024, kind: BufferKind::Temp });
        let mut k = Kernel::new("k");
        k.body = body(&mut k, a, b, h);
        p.kernels.push(k);
        p
    }

    fn calls(p: &Program) -> usize {
        fn count(s: &[Stmt]) -> usize {
            s.iter()
                .map(|s| match s {
                    Stmt::Call(Call::Copy(_)) => 1,
                    Stmt::For { body, .. } => count(body),
                    Stmt::If { then, otherwise, .. } => count(then) + count(otherwise),
                    _ => 0,
                })
                .sum()
        }
        p.kernels.iter().map(|k| count(&k.body)).sum()
    }

    #[test]
    fn a_transposed_row_copy_becomes_a_call_with_its_hoisted_check() {
        let mut p = program(|k, a, b, _| {
            let (i, j, t) = (k.var(ScalarType::I64), k.var(ScalarType::I64), k.var(ScalarType::I64));
            let inner = vec![
                Stmt::Let(t, Expr::Var(i) * 3),
                Stmt::Check { cond: Expr::Var(t).cmp(CmpOp::Lt, Expr::idx(100)), error: 0 },
                Stmt::Store { buf: b, index: Expr::Var(i) * 32 + Expr::Var(j), value: Expr::load(a, Expr::Var(t) * 32 + Expr::Var(j)) },
            ];
            vec![Stmt::For { var: i, extent: 32, body: vec![Stmt::For { var: j, extent: 32, body: inner }] }]
        });
        copy_calls(&mut p);
        assert_eq!(calls(&p), 1);
        let Stmt::For { body, .. } = &p.kernels[0].body[0] else { panic!() };
        assert!(matches!(body[..], [Stmt::Let(..), Stmt::Check { .. }, Stmt::Call(Call::Copy(_))]), "{body:?}");
    }

    #[test]
    fn strided_converting_short_and_dependent_loops_stay() {
        let cases: [fn(&mut Kernel, BufId, BufId, BufId) -> Vec<Stmt>; 4] = [
            // Strided source.
            |k, a, b, _| {
                let j = k.var(ScalarType::I64);
                vec![Stmt::For { var: j, extent: 32, body: vec![Stmt::Store { buf: b, index: Expr::Var(j), value: Expr::load(a, Expr::Var(j) * 2) }] }]
            },
            // f32 into f16: a conversion, not a copy.
            |k, a, _, h| {
                let j = k.var(ScalarType::I64);
                vec![Stmt::For { var: j, extent: 32, body: vec![Stmt::Store { buf: h, index: Expr::Var(j), value: Expr::load(a, Expr::Var(j)) }] }]
            },
            // Too short.
            |k, a, b, _| {
                let j = k.var(ScalarType::I64);
                vec![Stmt::For { var: j, extent: 8, body: vec![Stmt::Store { buf: b, index: Expr::Var(j), value: Expr::load(a, Expr::Var(j)) }] }]
            },
            // A check that depends on j.
            |k, a, b, _| {
                let j = k.var(ScalarType::I64);
                let body = vec![Stmt::Check { cond: Expr::Var(j).cmp(CmpOp::Lt, Expr::idx(20)), error: 0 }, Stmt::Store { buf: b, index: Expr::Var(j), value: Expr::load(a, Expr::Var(j)) }];
                vec![Stmt::For { var: j, extent: 32, body }]
            },
        ];
        for (i, case) in cases.into_iter().enumerate() {
            let mut p = program(case);
            let before = p.clone();
            copy_calls(&mut p);
            assert_eq!(p, before, "case {i} changed");
        }
    }
}
