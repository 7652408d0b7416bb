//! Statements: one kernel becomes one Cranelift function `(table) -> status`, and each of its
//! top-level loops split over threads one more, `(table, lo, hi) -> status`, which the kernel
//! hands to the runtime's `kiln_rt_parallel_for` in the loop's place.
//!
//! Loop-IR variables are `cranelift_frontend` variables, so lets, mutable locals and loop
//! indices all become SSA values and block parameters without a stack slot. A `For` is a
//! bottom-tested counted loop whose counter is a block parameter of the body (the loop
//! variable is set from it at the top of every iteration, as the interpreter does). A failed
//! `Check` branches to a cold block returning `error + 1`, one per error code.

use std::collections::BTreeMap;

use cranelift_codegen::ir::{types, AbiParam, Block, BlockArg, FuncRef, Function, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{FuncId, Module};
use kiln_loops::parallel::ParallelLoop;
use kiln_loops::call::{Elems, Operand, OperandKind, OperandMut};
use kiln_loops::{BufId, Expr, Kernel, Program, ScalarType, Stmt, Var};

use crate::expr::cl_type;
use crate::CodegenError;

/// Translation state of one function: a kernel, or a parallel loop of one outlined.
pub(crate) struct Cx<'a, 'f> {
    /// The module (for runtime imports).
    pub module: &'a mut dyn Module,
    /// The function being built.
    pub b: FunctionBuilder<'f>,
    /// The whole program (buffer records).
    pub program: &'a Program,
    /// The kernel being translated.
    pub kernel: &'a Kernel,
    /// One frontend variable per loop-IR variable.
    vars: Vec<Variable>,
    /// The entry block.
    entry: Block,
    /// The buffer table (the function's first parameter).
    table: Value,
    /// Base address of each buffer the kernel uses, loaded once in the entry block.
    pub bases: Vec<Option<Value>>,
    /// The block returning `error + 1`, per error code.
    fail: BTreeMap<u32, Block>,
    /// The block returning its parameter as the status (a parallel loop's failure).
    ret: Option<Block>,
    /// Runtime functions imported into this function so far.
    pub funcs: BTreeMap<&'static str, FuncRef>,
    /// The kernel's top-level statements run by an outlined function, by statement index.
    outlined: &'a [(FuncId, ParallelLoop)],
    /// Calls go to libc and libm only (a target without kiln's runtime).
    pub libc: bool,
    /// Innermost loops may run as 128-bit vector loops (`crate::vector`).
    simd: bool,
    /// While a promoted nest's body is translated, its stored buffer and the variable holding
    /// the current vector of it (`crate::promote`).
    pub held: Option<(BufId, Variable)>,
}

/// How a function is translated, from its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mode {
    /// Calls go to libc and libm only (a target without kiln's runtime).
    pub libc: bool,
    /// Innermost loops may run as 128-bit vector loops.
    pub simd: bool,
}

/// The signature of an outlined loop: `(table: *const *mut u8, lo: i64, hi: i64) -> u32`.
pub(crate) fn outlined_signature(module: &dyn Module) -> Signature {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(module.target_config().pointer_type()));
    sig.params.extend([AbiParam::new(types::I64), AbiParam::new(types::I64)]);
    sig.returns.push(AbiParam::new(types::I32));
    sig
}

/// Elements a split part of a parallel loop should access at least: splitting costs a few
/// microseconds, about what this many loads and stores take.
const PART_MIN_ACCESSES: u64 = 1 << 14;

/// The parallel loops of `kernel` worth splitting: at least two parts' worth of accesses.
pub(crate) fn loops_to_split(program: &Program, kernel: &Kernel) -> Vec<ParallelLoop> {
    kiln_loops::parallel::parallel_loops(program, kernel).into_iter().filter(|l| l.extent.saturating_mul(l.work) >= 2 * PART_MIN_ACCESSES).collect()
}

/// Translates `kernel` into `func` (whose signature is already set); the top-level loops in
/// `outlined` call their outlined functions through the runtime's `parallel_for`.
pub(crate) fn translate_kernel(module: &mut dyn Module, func: &mut Function, fctx: &mut FunctionBuilderContext, program: &Program, kernel: &Kernel, outlined: &[(FuncId, ParallelLoop)], mode: Mode) -> Result<(), CodegenError> {
    let mut cx = Cx::new(module, func, fctx, program, kernel, &kernel.body, outlined, mode)?;
    cx.top_level(&kernel.body)?;
    cx.finish()
}

/// Translates the loop `lp` of `kernel` into `func` (with [`outlined_signature`]): its
/// iterations `lo..hi`, the loops of one iteration around it at 0.
pub(crate) fn translate_outlined(module: &mut dyn Module, func: &mut Function, fctx: &mut FunctionBuilderContext, program: &Program, kernel: &Kernel, lp: &ParallelLoop, mode: Mode) -> Result<(), CodegenError> {
    let stmt = kernel.body.get(lp.stmt).ok_or_else(|| CodegenError::Invalid { kernel: kernel.name.clone(), message: format!("no statement {}", lp.stmt) })?;
    let mut cx = Cx::new(module, func, fctx, program, kernel, std::slice::from_ref(stmt), &[], mode)?;
    let (lo, hi) = match cx.b.block_params(cx.entry) {
        &[_, lo, hi] => (lo, hi),
        _ => return Err(cx.invalid("an outlined loop takes the table, lo and hi")),
    };
    for &v in &lp.fixed {
        let (var, _) = cx.var(v)?;
        let zero = cx.b.ins().iconst(types::I64, 0);
        cx.b.def_var(var, zero);
    }
    let mut s = stmt;
    while let Stmt::For { var, body, .. } = s {
        if *var == lp.var {
            cx.range_loop(*var, lo, hi, body)?;
            return cx.finish();
        }
        match &body[..] {
            [inner] => s = inner,
            _ => break,
        }
    }
    Err(cx.invalid(format!("statement {} has no loop over {:?}", lp.stmt, lp.var)))
}

impl<'a, 'f> Cx<'a, 'f> {
    /// A function's entry block: the table parameter, the variables, and the base address of
    /// every buffer `body` uses.
    #[allow(clippy::too_many_arguments)]
    fn new(module: &'a mut dyn Module, func: &'f mut Function, fctx: &'f mut FunctionBuilderContext, program: &'a Program, kernel: &'a Kernel, body: &[Stmt], outlined: &'a [(FuncId, ParallelLoop)], mode: Mode) -> Result<Self, CodegenError> {
        let mut used = vec![false; program.buffers.len()];
        let mut bad = None;
        for s in body {
            visit_bufs(s, &mut |b| match used.get_mut(b.0 as usize) {
                Some(u) => *u = true,
                None => bad = Some(b),
            });
        }
        if let Some(b) = bad {
            return Err(CodegenError::Invalid { kernel: kernel.name.clone(), message: format!("{b:?} does not exist ({} buffers)", program.buffers.len()) });
        }

        let ptr = module.target_config().pointer_type();
        let mut b = FunctionBuilder::new(func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let table = b.block_params(entry)[0];
        let vars = kernel.vars.iter().map(|&t| b.declare_var(cl_type(t))).collect();
        // The table does not change during a run and every entry is read before any store.
        let table_flags = MemFlagsData::trusted().with_readonly().with_can_move();
        let mut bases = vec![None; program.buffers.len()];
        for (i, _) in used.iter().enumerate().filter(|(_, u)| **u) {
            let offset = i32::try_from(i * ptr.bytes() as usize).map_err(|_| CodegenError::Invalid { kernel: kernel.name.clone(), message: "too many buffers".into() })?;
            bases[i] = Some(b.ins().load(ptr, table_flags, table, offset));
        }
        Ok(Cx { module, b, program, kernel, vars, entry, table, bases, fail: BTreeMap::new(), ret: None, funcs: BTreeMap::new(), outlined, libc: mode.libc, simd: mode.simd, held: None })
    }

    /// Returns 0 where the body ends, adds the failure blocks and finalizes the function.
    fn finish(mut self) -> Result<(), CodegenError> {
        let ok = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[ok]);
        for (error, block) in std::mem::take(&mut self.fail) {
            self.b.switch_to_block(block);
            self.b.seal_block(block);
            let code = self.b.ins().iconst(types::I32, i64::from(error) + 1);
            self.b.ins().return_(&[code]);
        }
        if let Some(block) = self.ret {
            self.b.switch_to_block(block);
            self.b.seal_block(block);
            let status = self.b.block_params(block)[0];
            self.b.ins().return_(&[status]);
        }
        self.b.finalize(self.module.target_config());
        Ok(())
    }
}

/// Which of `program`'s buffers some kernel mentions, by buffer index: constants left out are
/// weights no code reads (packed into new buffers, say).
pub fn used_buffers(program: &Program) -> Vec<bool> {
    let mut used = vec![false; program.buffers.len()];
    for stmt in program.kernels.iter().flat_map(|k| &k.body) {
        visit_bufs(stmt, &mut |b| {
            if let Some(u) = used.get_mut(b.0 as usize) {
                *u = true;
            }
        });
    }
    used
}

/// The alignment in bytes each of `program`'s buffers needs for the runtime calls that take its
/// address: a routine reads `f32` and `i32` operands as typed slices, bytes at any address.
/// Generated code loads and stores at any address, so a buffer no call takes needs 1.
pub fn call_alignment(program: &Program) -> Vec<usize> {
    fn visit(stmts: &[Stmt], need: &mut [usize]) {
        for s in stmts {
            match s {
                Stmt::For { body, .. } => visit(body, need),
                Stmt::If { then, otherwise, .. } => {
                    visit(then, need);
                    visit(otherwise, need);
                }
                Stmt::Call(call) => {
                    for (operand, spec) in call.operands().into_iter().zip(call.kind().signature()) {
                        let (Operand::Addr(a), OperandKind::Addr(_, elems)) = (operand, spec.kind) else { continue };
                        let align = match elems {
                            Elems::F32 | Elems::I32 => 4,
                            Elems::Int8 | Elems::Bytes => 1,
                        };
                        if let Some(n) = need.get_mut(a.buf.0 as usize) {
                            *n = (*n).max(align);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let mut need = vec![1; program.buffers.len()];
    for k in &program.kernels {
        visit(&k.body, &mut need);
    }
    need
}

/// Calls `f` on every buffer a statement mentions.
pub(crate) fn visit_bufs(s: &Stmt, f: &mut dyn FnMut(BufId)) {
    match s {
        Stmt::For { body, .. } => body.iter().for_each(|s| visit_bufs(s, f)),
        Stmt::Let(_, e) | Stmt::Local(_, e) | Stmt::Assign(_, e) | Stmt::Check { cond: e, .. } => visit_expr_bufs(e, f),
        Stmt::Store { buf, index, value } => {
            f(*buf);
            visit_expr_bufs(index, f);
            visit_expr_bufs(value, f);
        }
        Stmt::If { cond, then, otherwise } => {
            visit_expr_bufs(cond, f);
            then.iter().chain(otherwise).for_each(|s| visit_bufs(s, f));
        }
        Stmt::Call(call) => {
            for operand in call.operands() {
                if let Operand::Addr(a) = operand {
                    f(a.buf);
                }
                visit_expr_bufs(operand.expr(), f);
            }
        }
    }
}

fn visit_expr_bufs(e: &Expr, f: &mut dyn FnMut(BufId)) {
    match e {
        Expr::Const(_) | Expr::Var(_) => {}
        Expr::Load { buf, index } => {
            f(*buf);
            visit_expr_bufs(index, f);
        }
        Expr::Unary(_, a) | Expr::Cast(_, _, a) | Expr::Bitcast(_, a) => visit_expr_bufs(a, f),
        Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
            visit_expr_bufs(a, f);
            visit_expr_bufs(b, f);
        }
        Expr::Select(c, a, b) => {
            visit_expr_bufs(c, f);
            visit_expr_bufs(a, f);
            visit_expr_bufs(b, f);
        }
        Expr::Math(_, args) => args.iter().for_each(|a| visit_expr_bufs(a, f)),
    }
}

/// Calls `f` on every buffer a statement mentions, which it may rename.
pub(crate) fn visit_bufs_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut BufId)) {
    match s {
        Stmt::For { body, .. } => body.iter_mut().for_each(|s| visit_bufs_mut(s, f)),
        Stmt::Let(_, e) | Stmt::Local(_, e) | Stmt::Assign(_, e) | Stmt::Check { cond: e, .. } => visit_expr_bufs_mut(e, f),
        Stmt::Store { buf, index, value } => {
            f(buf);
            visit_expr_bufs_mut(index, f);
            visit_expr_bufs_mut(value, f);
        }
        Stmt::If { cond, then, otherwise } => {
            visit_expr_bufs_mut(cond, f);
            then.iter_mut().chain(otherwise).for_each(|s| visit_bufs_mut(s, f));
        }
        Stmt::Call(call) => {
            for operand in call.operands_mut() {
                if let OperandMut::Addr(a) = operand {
                    f(&mut a.buf);
                    visit_expr_bufs_mut(&mut a.index, f);
                } else {
                    visit_expr_bufs_mut(operand.expr(), f);
                }
            }
        }
    }
}

fn visit_expr_bufs_mut(e: &mut Expr, f: &mut dyn FnMut(&mut BufId)) {
    match e {
        Expr::Const(_) | Expr::Var(_) => {}
        Expr::Load { buf, index } => {
            f(buf);
            visit_expr_bufs_mut(index, f);
        }
        Expr::Unary(_, a) | Expr::Cast(_, _, a) | Expr::Bitcast(_, a) => visit_expr_bufs_mut(a, f),
        Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
            visit_expr_bufs_mut(a, f);
            visit_expr_bufs_mut(b, f);
        }
        Expr::Select(c, a, b) => {
            visit_expr_bufs_mut(c, f);
            visit_expr_bufs_mut(a, f);
            visit_expr_bufs_mut(b, f);
        }
        Expr::Math(_, args) => args.iter_mut().for_each(|a| visit_expr_bufs_mut(a, f)),
    }
}

impl Cx<'_, '_> {
    /// An [`CodegenError::Invalid`] for this kernel.
    pub fn invalid(&self, message: impl Into<String>) -> CodegenError {
        CodegenError::Invalid { kernel: self.kernel.name.clone(), message: message.into() }
    }

    /// An [`CodegenError::Unsupported`] for this kernel.
    pub fn unsupported(&self, what: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported { kernel: self.kernel.name.clone(), what: what.into() }
    }

    /// The frontend variable for `v` and its declared type.
    pub fn var(&self, v: Var) -> Result<(Variable, ScalarType), CodegenError> {
        match (self.vars.get(v.0 as usize), self.kernel.vars.get(v.0 as usize)) {
            (Some(&var), Some(&t)) => Ok((var, t)),
            _ => Err(self.invalid(format!("{v:?} is not declared"))),
        }
    }

    pub(crate) fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    /// The kernel's top-level statements, with the outlined loops split over the thread pool.
    fn top_level(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        for (i, s) in stmts.iter().enumerate() {
            match self.outlined.iter().find(|(_, l)| l.stmt == i) {
                Some((id, lp)) => self.parallel_for(*id, lp)?,
                None => self.stmt(s)?,
            }
        }
        Ok(())
    }

    /// `kiln_rt_parallel_for(body, table, extent, grain)`, returning its status when it fails.
    fn parallel_for(&mut self, id: FuncId, lp: &ParallelLoop) -> Result<(), CodegenError> {
        let ptr = self.module.target_config().pointer_type();
        let body = self.module.declare_func_in_func(id, self.b.func);
        let body = self.b.ins().func_addr(ptr, body);
        let f = self.runtime("kiln_rt_parallel_for", &[ptr, ptr, types::I64, types::I64], &[types::I32])?;
        let extent = self.b.ins().iconst(types::I64, lp.extent as i64);
        // Iterations per part, so each part is worth its split.
        let grain = self.b.ins().iconst(types::I64, PART_MIN_ACCESSES.div_ceil(lp.work.max(1)) as i64);
        let call = self.b.ins().call(f, &[body, self.table, extent, grain]);
        let status = self.b.inst_results(call)[0];
        let ret = match self.ret {
            Some(b) => b,
            None => {
                let b = self.b.create_block();
                self.b.append_block_param(b, types::I32);
                self.b.set_cold_block(b);
                self.ret = Some(b);
                b
            }
        };
        let cont = self.b.create_block();
        self.b.ins().brif(status, ret, &[BlockArg::Value(status)], cont, &[]);
        self.b.seal_block(cont);
        self.b.switch_to_block(cont);
        Ok(())
    }

    /// `for v in lo..hi { body }` with bounds known at run time (an outlined loop's part).
    fn range_loop(&mut self, v: Var, lo: Value, hi: Value, body: &[Stmt]) -> Result<(), CodegenError> {
        let (var, ty) = self.var(v)?;
        if ty != ScalarType::I64 {
            return Err(self.invalid(format!("loop variable {v:?} is {}, not i64", ty.name())));
        }
        if self.simd
            && let Some(plan) = self.vector_plan(v, body)
        {
            return self.vector_loop(&plan, lo, hi, body);
        }
        let head = self.b.create_block();
        let exit = self.b.create_block();
        let i = self.b.append_block_param(head, types::I64);
        let any = self.b.ins().icmp(IntCC::SignedLessThan, lo, hi);
        self.b.ins().brif(any, head, &[BlockArg::Value(lo)], exit, &[]);
        self.b.switch_to_block(head);
        self.b.def_var(var, i);
        self.stmts(body)?;
        let next = self.b.ins().iadd_imm_u(i, 1);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, hi);
        self.b.ins().brif(more, head, &[BlockArg::Value(next)], exit, &[]);
        self.b.seal_block(head);
        self.b.seal_block(exit);
        self.b.switch_to_block(exit);
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        match s {
            Stmt::For { var, extent, body } => self.for_loop(*var, *extent, body),
            Stmt::Let(v, e) | Stmt::Local(v, e) | Stmt::Assign(v, e) => {
                let (var, ty) = self.var(*v)?;
                let x = self.typed(e, ty).map_err(|err| self.context(err, &format!("the value of {v:?}")))?;
                self.b.def_var(var, x);
                Ok(())
            }
            Stmt::Store { buf, index, value } => self.store(*buf, index, value),
            Stmt::If { cond, then, otherwise } => self.if_else(cond, then, otherwise),
            Stmt::Check { cond, error } => self.check(cond, *error),
            Stmt::Call(call) => self.call(call),
        }
    }

    /// Adds `what` to a type error's message.
    fn context(&self, err: CodegenError, what: &str) -> CodegenError {
        match err {
            CodegenError::Invalid { kernel, message } => CodegenError::Invalid { kernel, message: format!("{what}: {message}") },
            other => other,
        }
    }

    fn for_loop(&mut self, v: Var, extent: u64, body: &[Stmt]) -> Result<(), CodegenError> {
        let (var, ty) = self.var(v)?;
        if ty != ScalarType::I64 {
            return Err(self.invalid(format!("loop variable {v:?} is {}, not i64", ty.name())));
        }
        match extent {
            0 => return Ok(()),
            1 => {
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(var, zero);
                return self.stmts(body);
            }
            _ => {}
        }
        if self.simd
            && extent >= crate::vector::LANES as u64
            && let Some(plan) = self.vector_plan(v, body)
        {
            let lo = self.b.ins().iconst(types::I64, 0);
            let hi = self.b.ins().iconst(types::I64, extent as i64);
            return self.vector_loop(&plan, lo, hi, body);
        }
        if self.simd
            && let Some(p) = self.promotion(v, extent, body)
        {
            return self.promoted(&p);
        }
        let head = self.b.create_block();
        let exit = self.b.create_block();
        let i = self.b.append_block_param(head, types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().jump(head, &[BlockArg::Value(zero)]);
        self.b.switch_to_block(head);
        self.b.def_var(var, i);
        self.stmts(body)?;
        let next = self.b.ins().iadd_imm_u(i, 1);
        let more = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, next, extent as i64);
        self.b.ins().brif(more, head, &[BlockArg::Value(next)], exit, &[]);
        self.b.seal_block(head);
        self.b.seal_block(exit);
        self.b.switch_to_block(exit);
        Ok(())
    }

    fn if_else(&mut self, cond: &Expr, then: &[Stmt], otherwise: &[Stmt]) -> Result<(), CodegenError> {
        let c = self.typed(cond, ScalarType::Bool).map_err(|e| self.context(e, "an if condition"))?;
        let then_block = self.b.create_block();
        let merge = self.b.create_block();
        let else_block = if otherwise.is_empty() { merge } else { self.b.create_block() };
        self.b.ins().brif(c, then_block, &[], else_block, &[]);
        self.b.seal_block(then_block);
        self.b.switch_to_block(then_block);
        self.stmts(then)?;
        self.b.ins().jump(merge, &[]);
        if !otherwise.is_empty() {
            self.b.seal_block(else_block);
            self.b.switch_to_block(else_block);
            self.stmts(otherwise)?;
            self.b.ins().jump(merge, &[]);
        }
        self.b.seal_block(merge);
        self.b.switch_to_block(merge);
        Ok(())
    }

    fn check(&mut self, cond: &Expr, error: u32) -> Result<(), CodegenError> {
        if error == u32::MAX {
            return Err(self.invalid("error code u32::MAX cannot be reported (status is code + 1)"));
        }
        let c = self.typed(cond, ScalarType::Bool).map_err(|e| self.context(e, "a check condition"))?;
        let fail = match self.fail.get(&error) {
            Some(&b) => b,
            None => {
                let b = self.b.create_block();
                self.b.set_cold_block(b);
                self.fail.insert(error, b);
                b
            }
        };
        let cont = self.b.create_block();
        self.b.ins().brif(c, cont, &[], fail, &[]);
        self.b.seal_block(cont);
        self.b.switch_to_block(cont);
        Ok(())
    }
}
