//! Accumulators kept in vector registers across the loops around a vector loop.
//!
//! A reduction whose kept axis is innermost (a channel reduction in the blocked layout,
//! `for y { for x { for lane in 0..16 { out[c + lane] = out[c + lane] + in[..] } } }`) sums
//! through memory: each iteration of the outer loops loads what the one before stored, so
//! every addition waits for a store to reach the next load. When the innermost loop vectorizes,
//! has a short constant extent, and stores one buffer at elements that the loops around it do
//! not move, those elements are loaded into vector variables before the loops, updated there
//! (the innermost loop unrolled, one variable per vector) and stored after them. Every lane
//! computes the same operations in the same order as before, and no element is touched that
//! the loops would not touch.

use cranelift_codegen::ir::{types, InstBuilder};
use cranelift_frontend::Variable;
use kiln_loops::{BufId, ElemType, Expr, ScalarType, Stmt, Var};

use crate::kernel::Cx;
use crate::vector::{Plan, LANES};
use crate::CodegenError;

/// The most vectors held across the loops (x86-64 has 16 vector registers for Cranelift).
const MAX_VECTORS: u64 = 8;

/// A nest whose innermost loop's stored elements stay in registers.
pub(crate) struct Promotion<'s> {
    /// The loops around the innermost one, outermost first.
    outer: Vec<(Var, u64)>,
    /// The innermost loop: its variable, extent and body, and its vector plan.
    var: Var,
    extent: u64,
    body: &'s [Stmt],
    plan: Plan,
    /// The stored buffer and element index.
    buf: BufId,
    index: &'s Expr,
    /// The innermost body's lets that `index` depends on, in order.
    index_lets: Vec<&'s Stmt>,
}

impl Cx<'_, '_> {
    /// The promotion of the nest `for v in 0..extent { body }`, if it has one: a perfect nest
    /// of loops with nonzero extents whose innermost loop vectorizes with no accumulator,
    /// stores one `f32` buffer at one index, and has at most [`MAX_VECTORS`] whole vectors,
    /// the index depending on no variable of the loops around it.
    pub(crate) fn promotion<'s>(&self, v: Var, extent: u64, body: &'s [Stmt]) -> Option<Promotion<'s>> {
        let mut outer = vec![(v, extent)];
        let mut inner = body;
        while let [Stmt::For { var, extent, body }] = inner {
            outer.push((*var, *extent));
            inner = body;
        }
        let (var, extent) = outer.pop()?;
        let whole = extent % LANES as u64 == 0 && extent / (LANES as u64) <= MAX_VECTORS;
        if outer.is_empty() || !whole || outer.iter().any(|&(_, e)| e == 0) || extent == 0 {
            return None;
        }
        let plan = self.vector_plan(var, inner)?;
        if plan.has_reductions() {
            return None;
        }
        let mut stores = inner.iter().filter_map(|s| match s {
            Stmt::Store { buf, index, .. } => Some((*buf, index)),
            _ => None,
        });
        let (buf, index) = stores.next()?;
        if stores.next().is_some() || self.program.buffers.get(buf.0 as usize)?.elem != ElemType::Scalar(ScalarType::F32) {
            return None;
        }
        // The lets the index needs: index arithmetic on the innermost variable and on variables
        // defined outside the nest.
        let mut needed: Vec<Var> = Vec::new();
        let mut index_lets = Vec::new();
        vars_of(index, &mut needed);
        for s in inner.iter().rev() {
            if let Stmt::Let(w, e) = s
                && needed.contains(w)
            {
                let t = self.kernel.vars.get(w.0 as usize)?;
                if !matches!(t, ScalarType::I64 | ScalarType::U64) || loads(e) {
                    return None;
                }
                vars_of(e, &mut needed);
                index_lets.push(s);
            }
        }
        index_lets.reverse();
        if outer.iter().any(|(w, _)| needed.contains(w)) {
            return None;
        }
        Some(Promotion { outer, var, extent, body: inner, plan, buf, index, index_lets })
    }

    /// The nest `p` with its stored vectors in variables.
    pub(crate) fn promoted(&mut self, p: &Promotion<'_>) -> Result<(), CodegenError> {
        let mut held = Vec::new();
        for q in 0..p.extent / LANES as u64 {
            let addr = self.promoted_address(p, q)?;
            let flags = self.read_flags(p.buf);
            let x = self.vector_load(ScalarType::F32, flags, addr);
            let v = self.b.declare_var(types::F32X4);
            self.b.def_var(v, x);
            held.push(v);
        }
        self.promoted_loops(p, &p.outer, &held)?;
        for (q, &v) in held.iter().enumerate() {
            let addr = self.promoted_address(p, q as u64)?;
            let x = self.b.use_var(v);
            self.vector_store(ScalarType::F32, addr, x);
        }
        Ok(())
    }

    /// The address of vector `q` of the stored elements.
    fn promoted_address(&mut self, p: &Promotion<'_>, q: u64) -> Result<cranelift_codegen::ir::Value, CodegenError> {
        let (var, _) = self.var(p.var)?;
        let at = self.b.ins().iconst(types::I64, (q * LANES as u64) as i64);
        self.b.def_var(var, at);
        for s in &p.index_lets {
            self.stmts(std::slice::from_ref(*s))?;
        }
        self.address(p.buf, p.index)
    }

    /// The loops `outer` around the innermost body, unrolled into one copy per held vector.
    fn promoted_loops(&mut self, p: &Promotion<'_>, outer: &[(Var, u64)], held: &[Variable]) -> Result<(), CodegenError> {
        let Some(&(v, extent)) = outer.first() else {
            for (q, &h) in held.iter().enumerate() {
                let (var, _) = self.var(p.var)?;
                let at = self.b.ins().iconst(types::I64, q as i64 * LANES);
                self.b.def_var(var, at);
                self.held = Some((p.buf, h));
                let mut values = Default::default();
                let done = p.body.iter().try_for_each(|s| self.vector_stmt(s, &p.plan, &mut values, &Default::default()));
                self.held = None;
                done?;
            }
            return Ok(());
        };
        let (var, _) = self.var(v)?;
        let lo = self.b.ins().iconst(types::I64, 0);
        let hi = self.b.ins().iconst(types::I64, extent as i64);
        self.counted(lo, hi, 1, |cx, i| {
            cx.b.def_var(var, i);
            cx.promoted_loops(p, &outer[1..], held)
        })
    }
}

/// Appends the variables `e` reads to `out`.
fn vars_of(e: &Expr, out: &mut Vec<Var>) {
    match e {
        Expr::Var(v) => out.push(*v),
        _ => e.for_each_operand(|a| vars_of(a, out)),
    }
}

/// Whether `e` reads memory.
fn loads(e: &Expr) -> bool {
    let mut any = matches!(e, Expr::Load { .. });
    e.for_each_operand(|a| any |= loads(a));
    any
}
