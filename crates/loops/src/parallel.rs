//! Which loop nests may run their iterations on several threads at once.
//!
//! A kernel's top-level loop (or, through loops of one iteration, the first loop of its
//! perfect nest that has more) is *parallel* when its iterations are independent: no iteration
//! reads or writes an element another one writes, and none reads a scalar another one sets.
//! The code generator then outlines the loop's body into a function over a range of iterations
//! and has the runtime split the range over the thread pool; every iteration computes what it
//! computes in order, so results are bit-identical whatever the thread count.
//!
//! The test is syntactic and conservative. The body may use only variables it defines (and the
//! loop's own), calls no runtime routine but `copy`, `sgemm` and `softmax` (the others split
//! their own work; these two, called from a part, run on its thread alone), and
//! writes no packed (sub-byte) buffer. Every access to a buffer the body writes must have an
//! index affine in the loop variable `v` and the inner loops' variables, `c·v + r` with one
//! stride `c > 0` for all of them, and the residuals `r` (over the inner loops' ranges, a
//! `copy` of `n` elements adding `n − 1`, an `sgemm` or `softmax` of constant sizes the span
//! of each matrix) must span fewer than `c` elements: iteration `v` then
//! touches only `[c·v + lo, c·v + hi]` with `hi − lo < c`, apart from every other iteration.
//! Buffers the body only reads are not constrained.
//!
//! The memory planner's in-place pairs keep this sound: a temp shares a written buffer's
//! memory only when every read of it is at the index the write is stored at.

use std::collections::HashMap;

use crate::affine::Affine;
use crate::ir::*;

/// A loop whose iterations may run in parallel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParallelLoop {
    /// The top-level statement of the kernel the loop is (or is nested in).
    pub stmt: usize,
    /// The loops of one iteration around it, outermost first: their variables are 0.
    pub fixed: Vec<Var>,
    /// The loop's variable.
    pub var: Var,
    /// Its trip count (at least 2).
    pub extent: u64,
    /// Elements one iteration accesses at most: each load and store counted once per
    /// iteration of the inner loops around it (both branches of a conditional counted), a
    /// `copy` as the elements it reads and writes.
    pub work: u64,
}

/// Every top-level loop of `kernel`, by statement index: the loop when it is parallel, or why
/// it is not.
pub fn analyze(p: &Program, kernel: &Kernel) -> Vec<(usize, Result<ParallelLoop, String>)> {
    kernel
        .body
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Stmt::For { .. }))
        .map(|(i, s)| (i, parallel_loop(p, i, s)))
        .collect()
}

/// The parallel loops of `kernel`, a kernel of `p`.
pub fn parallel_loops(p: &Program, kernel: &Kernel) -> Vec<ParallelLoop> {
    analyze(p, kernel).into_iter().filter_map(|(_, r)| r.ok()).collect()
}

/// The analysis as text, one line per top-level loop of each kernel (for `kiln dump` and the
/// file tests).
pub fn report(p: &Program) -> String {
    let mut out = String::new();
    for k in &p.kernels {
        for (i, r) in analyze(p, k) {
            let line = match r {
                Ok(l) => format!("kernel {}, statement {i}: parallel over {:?}: {} iterations, {} accesses each\n", k.name, l.var, l.extent, l.work),
                Err(why) => format!("kernel {}, statement {i}: sequential: {why}\n", k.name),
            };
            out.push_str(&line);
        }
    }
    out
}

fn parallel_loop(p: &Program, stmt: usize, s: &Stmt) -> Result<ParallelLoop, String> {
    let mut fixed = Vec::new();
    let mut s = s;
    let (var, extent, body) = loop {
        let Stmt::For { var, extent, body } = s else { return Err("not a loop".into()) };
        match (extent, &body[..]) {
            (1, [inner @ Stmt::For { .. }]) => {
                fixed.push(*var);
                s = inner;
            }
            (0 | 1, _) => return Err("one iteration or none".into()),
            _ => break (*var, *extent, body),
        }
    };
    let mut walk = Walk { split: var, env: HashMap::new(), ranges: HashMap::new(), accesses: Vec::new(), error: None };
    walk.env.insert(var, Some(Affine::var(var)));
    for &f in &fixed {
        walk.env.insert(f, Some(Affine::constant(0)));
    }
    let work = walk.block(body);
    if let Some(why) = walk.error {
        return Err(why);
    }
    walk.check_disjoint(p)?;
    Ok(ParallelLoop { stmt, fixed, var, extent, work })
}

/// The loads in `e`.
fn loads(e: &Expr) -> u64 {
    let mut n = u64::from(matches!(e, Expr::Load { .. }));
    e.for_each_operand(|a| n += loads(a));
    n
}

/// The loop body's variables and accesses, gathered in program order.
struct Walk {
    split: Var,
    /// Each variable in scope: its affine value, or `None` when it has none (a load, a mutable
    /// local, a non-affine expression).
    env: HashMap<Var, Option<Affine>>,
    /// The inner loops' variables and their extents.
    ranges: HashMap<Var, u64>,
    /// (buffer, affine index of the first element or `None`, elements, is a write).
    accesses: Vec<(BufId, Option<Affine>, u64, bool)>,
    /// The first reason the loop is not parallel.
    error: Option<String>,
}

impl Walk {
    fn fail(&mut self, why: String) {
        self.error.get_or_insert(why);
    }

    /// Walks `stmts` and returns the stores one pass over them executes at most.
    fn block(&mut self, stmts: &[Stmt]) -> u64 {
        let mut work = 0u64;
        for s in stmts {
            match s {
                Stmt::For { var, extent, body } => {
                    self.ranges.insert(*var, *extent);
                    self.env.insert(*var, Some(Affine::var(*var)));
                    work = work.saturating_add(self.block(body).saturating_mul(*extent));
                }
                Stmt::Let(v, e) => {
                    work = work.saturating_add(loads(e));
                    self.expr(e);
                    let a = self.affine(e);
                    self.env.insert(*v, a);
                }
                Stmt::Local(v, e) => {
                    work = work.saturating_add(loads(e));
                    self.expr(e);
                    self.env.insert(*v, None);
                }
                Stmt::Assign(v, e) => {
                    work = work.saturating_add(loads(e));
                    self.expr(e);
                    if !self.env.contains_key(v) {
                        self.fail(format!("assigns {v:?}, declared outside the loop"));
                    }
                }
                Stmt::Store { buf, index, value } => {
                    self.expr(index);
                    self.expr(value);
                    let a = self.affine(index);
                    self.accesses.push((*buf, a, 1, true));
                    work = work.saturating_add(1 + loads(value) + loads(index));
                }
                Stmt::If { cond, then, otherwise } => {
                    work = work.saturating_add(loads(cond));
                    self.expr(cond);
                    work = work.saturating_add(self.block(then)).saturating_add(self.block(otherwise));
                }
                Stmt::Check { cond, .. } => self.expr(cond),
                Stmt::Call(Call::Copy(c)) => {
                    [&c.dst.index, &c.src.index, &c.n].into_iter().for_each(|e| self.expr(e));
                    let Some(n) = self.affine(&c.n).filter(|n| n.coeffs.is_empty()).and_then(|n| u64::try_from(n.constant).ok()) else {
                        self.fail("copies a count that is not a constant".into());
                        continue;
                    };
                    let (d, s) = (self.affine(&c.dst.index), self.affine(&c.src.index));
                    self.accesses.push((c.dst.buf, d, n, true));
                    self.accesses.push((c.src.buf, s, n, false));
                    work = work.saturating_add(n.saturating_mul(2));
                }
                Stmt::Call(Call::Sgemm(g)) => {
                    let ints = [&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.trans_a, &g.trans_b];
                    ints.iter().for_each(|e| self.expr(e));
                    [&g.a.index, &g.b.index, &g.c.index].into_iter().for_each(|e| self.expr(e));
                    let Some([m, n, k, lda, ldb, ldc, ta, tb]) = self.constants(ints) else {
                        self.fail("calls `sgemm` with sizes that are not constants".into());
                        continue;
                    };
                    if m == 0 || n == 0 || k == 0 {
                        continue;
                    }
                    let span = |rows: u64, cols: u64, ld: u64, t: u64| if t != 0 { (cols - 1) * ld + rows } else { (rows - 1) * ld + cols };
                    let (ga, gb, gc) = (self.affine(&g.a.index), self.affine(&g.b.index), self.affine(&g.c.index));
                    self.accesses.push((g.a.buf, ga, span(m, k, lda, ta), false));
                    self.accesses.push((g.b.buf, gb, span(k, n, ldb, tb), false));
                    self.accesses.push((g.c.buf, gc, span(m, n, ldc, 0), true));
                    work = work.saturating_add(m.saturating_mul(n).saturating_mul(k));
                }
                Stmt::Call(Call::Softmax(c)) => {
                    [&c.x.index, &c.rows, &c.cols].into_iter().for_each(|e| self.expr(e));
                    let Some([rows, cols]) = self.constants([&c.rows, &c.cols]) else {
                        self.fail("calls `softmax` with sizes that are not constants".into());
                        continue;
                    };
                    let n = rows.saturating_mul(cols);
                    let x = self.affine(&c.x.index);
                    self.accesses.push((c.x.buf, x, n, true));
                    work = work.saturating_add(n.saturating_mul(2));
                }
                Stmt::Call(call) => self.fail(format!("calls the runtime's `{}`", call.kind().name())),
            }
        }
        work
    }

    /// The values of `es` when all are non-negative constants (a call's sizes; extents are
    /// then checked against `u64` overflow by the saturating products' users).
    fn constants<const N: usize>(&self, es: [&Expr; N]) -> Option<[u64; N]> {
        let mut out = [0u64; N];
        for (o, e) in out.iter_mut().zip(es) {
            let a = self.affine(e).filter(|a| a.coeffs.is_empty())?;
            *o = u64::try_from(a.constant).ok().filter(|&v| v < 1 << 40)?;
        }
        Some(out)
    }

    /// Records the loads of `e` and checks its variables are in scope.
    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Const(_) => {}
            Expr::Var(v) => {
                if !self.env.contains_key(v) {
                    self.fail(format!("reads {v:?}, defined outside the loop"));
                }
            }
            Expr::Load { buf, index } => {
                self.expr(index);
                let a = self.affine(index);
                self.accesses.push((*buf, a, 1, false));
            }
            _ => e.for_each_operand(|a| self.expr(a)),
        }
    }

    /// `e` as an affine form over loop variables, if it is one.
    fn affine(&self, e: &Expr) -> Option<Affine> {
        Affine::of(e, &|v| self.env.get(&v).cloned().flatten())
    }

    /// Checks that the iterations' footprints in every written buffer are apart.
    fn check_disjoint(&self, p: &Program) -> Result<(), String> {
        let mut written: Vec<BufId> = self.accesses.iter().filter(|a| a.3).map(|a| a.0).collect();
        written.sort_unstable();
        written.dedup();
        for b in written {
            // Elements sharing a byte would be read, modified and written by two threads.
            if p.buffers.get(b.0 as usize).is_none_or(|buf| buf.elem.is_packed()) {
                return Err(format!("writes {b:?}, whose elements share bytes (or which does not exist)"));
            }
            let mut stride = None;
            let (mut lo, mut hi) = (i128::MAX, i128::MIN);
            for (_, index, len, _) in self.accesses.iter().filter(|a| a.0 == b) {
                if *len == 0 {
                    continue;
                }
                let Some(index) = index else { return Err(format!("{b:?} is accessed at an index not affine in the loops")) };
                let c = index.coeff(self.split);
                if c <= 0 || stride.is_some_and(|s| s != c) {
                    return Err(format!("{b:?} is accessed with stride {c} in {:?}, not one positive stride", self.split));
                }
                stride = Some(c);
                let (l, h) = self.residual_range(index).ok_or_else(|| format!("{b:?} is indexed by a variable other than the loops'"))?;
                (lo, hi) = (lo.min(l), hi.max(h + i128::from(*len) - 1));
            }
            if let Some(c) = stride.filter(|&c| hi - lo >= c) {
                return Err(format!("iterations overlap in {b:?}: stride {c}, each iteration spans {} elements", hi - lo + 1));
            }
        }
        Ok(())
    }

    /// The range of `index − c·split` over the inner loops' variables.
    fn residual_range(&self, index: &Affine) -> Option<(i128, i128)> {
        let (mut lo, mut hi) = (index.constant, index.constant);
        for &(v, c) in &index.coeffs {
            if v == self.split {
                continue;
            }
            let extent = i128::from(*self.ranges.get(&v)?);
            if extent == 0 {
                continue;
            }
            let last = c * (extent - 1);
            lo += last.min(0);
            hi += last.max(0);
        }
        Some((lo, hi))
    }
}
