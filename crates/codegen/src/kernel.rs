//! Statements: one kernel becomes one Cranelift function `(table) -> status`.
//!
//! Loop-IR variables are `cranelift_frontend` variables, so lets, mutable locals and loop
//! indices all become SSA values and block parameters without a stack slot. A `For` is a
//! bottom-tested counted loop whose counter is a block parameter of the body (the loop
//! variable is set from it at the top of every iteration, as the interpreter does). A failed
//! `Check` branches to a cold block returning `error + 1`, one per error code.

use std::collections::BTreeMap;

use cranelift_codegen::ir::{types, Block, BlockArg, FuncRef, Function, InstBuilder, MemFlagsData, Value};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::Module;
use kiln_loops::{Arg, BufId, Expr, Kernel, Program, ScalarType, Stmt, Var};

use crate::expr::cl_type;
use crate::CodegenError;

/// Translation state of one kernel.
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
    /// Base address of each buffer the kernel uses, loaded once in the entry block.
    pub bases: Vec<Option<Value>>,
    /// The block returning `error + 1`, per error code.
    fail: BTreeMap<u32, Block>,
    /// Runtime functions imported into this function so far.
    pub funcs: BTreeMap<&'static str, FuncRef>,
}

/// Translates `kernel` into `func` (whose signature is already set).
pub(crate) fn translate_kernel(module: &mut dyn Module, func: &mut Function, fctx: &mut FunctionBuilderContext, program: &Program, kernel: &Kernel) -> Result<(), CodegenError> {
    let mut used = vec![false; program.buffers.len()];
    let mut bad = None;
    for s in &kernel.body {
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

    let mut cx = Cx { module, b, program, kernel, vars, bases, fail: BTreeMap::new(), funcs: BTreeMap::new() };
    cx.stmts(&kernel.body)?;
    let ok = cx.b.ins().iconst(types::I32, 0);
    cx.b.ins().return_(&[ok]);
    for (error, block) in std::mem::take(&mut cx.fail) {
        cx.b.switch_to_block(block);
        cx.b.seal_block(block);
        let code = cx.b.ins().iconst(types::I32, i64::from(error) + 1);
        cx.b.ins().return_(&[code]);
    }
    cx.b.finalize(cx.module.target_config());
    Ok(())
}

/// Calls `f` on every buffer a statement mentions.
fn visit_bufs(s: &Stmt, f: &mut dyn FnMut(BufId)) {
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
        Stmt::Call(_, args) => {
            for a in args {
                match a {
                    Arg::Addr(buf, e) => {
                        f(*buf);
                        visit_expr_bufs(e, f);
                    }
                    Arg::Value(e) => visit_expr_bufs(e, f),
                }
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

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        stmts.iter().try_for_each(|s| self.stmt(s))
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
            Stmt::Call(f, args) => self.call(*f, args),
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
