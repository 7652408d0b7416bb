//! The printer: a [`Program`] to its text form.
//!
//! A program that breaks its own invariants (a variable with no declared type, an integer
//! constant of a float type, a size that overflows) still prints; the offending spot is
//! marked in a way the parser rejects with a position.

use std::collections::HashSet;
use std::fmt::Write;

use super::lex::{is_ident, write_quoted};
use super::literal::write_scalar;
use super::names::{binop_name, cmp_name, math_name, unop_name};
use crate::call::Operand;
use crate::ir::*;

/// Prints `p` in the text form; [`parse`](super::parse()) reads it back.
pub fn print(p: &Program) -> String {
    let mut out = String::new();
    for (i, b) in p.buffers.iter().enumerate() {
        buffer(&mut out, i, b);
    }
    for (i, message) in p.errors.iter().enumerate() {
        let _ = write!(out, "error {i} ");
        write_quoted(&mut out, message);
        out.push('\n');
    }
    for k in &p.kernels {
        if !out.is_empty() {
            out.push('\n');
        }
        Printer { out: &mut out, kernel: k }.kernel();
    }
    out
}

/// `buffer @N "NAME" : ELEM[LEN] KIND`.
fn buffer(out: &mut String, i: usize, b: &Buffer) {
    let _ = write!(out, "buffer @{i} ");
    write_quoted(out, &b.name);
    let _ = write!(out, " : {}[{}] ", b.elem.name(), b.len);
    let _ = match &b.kind {
        BufferKind::Input(n) => write!(out, "input {n}"),
        BufferKind::Output(n) => write!(out, "output {n}"),
        BufferKind::Temp => write!(out, "temp"),
        BufferKind::Const(_) => match b.len.checked_mul(u64::from(b.elem.bits())) {
            Some(bits) => write!(out, "const bytes {}", bits.div_ceil(8)),
            None => write!(out, "const bytes <overflow>"),
        },
    };
    out.push('\n');
}

/// Every variable a `For`, `Let` or `Local` defines, anywhere in `body`.
pub(crate) fn defined_vars(body: &[Stmt], into: &mut HashSet<Var>) {
    for s in body {
        match s {
            Stmt::For { var, body, .. } => {
                into.insert(*var);
                defined_vars(body, into);
            }
            Stmt::Let(v, _) | Stmt::Local(v, _) => {
                into.insert(*v);
            }
            Stmt::If { then, otherwise, .. } => {
                defined_vars(then, into);
                defined_vars(otherwise, into);
            }
            Stmt::Assign(..) | Stmt::Store { .. } | Stmt::Check { .. } | Stmt::Call(..) => {}
        }
    }
}

struct Printer<'a> {
    out: &'a mut String,
    kernel: &'a Kernel,
}

impl Printer<'_> {
    /// `kernel NAME [vars(...)] [loc("SOURCE")] { BODY }`; `vars` lists variables no statement
    /// defines.
    fn kernel(&mut self) {
        let k = self.kernel;
        self.out.push_str("kernel ");
        if is_ident(&k.name) {
            self.out.push_str(&k.name);
        } else {
            write_quoted(self.out, &k.name);
        }
        let mut defined = HashSet::new();
        defined_vars(&k.body, &mut defined);
        let free: Vec<u32> = (0..k.vars.len() as u32).filter(|&v| !defined.contains(&Var(v))).collect();
        if !free.is_empty() {
            self.out.push_str(" vars(");
            for (i, &v) in free.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                self.typed_var(Var(v));
            }
            self.out.push(')');
        }
        if !k.source.is_empty() {
            self.out.push_str(" loc(");
            write_quoted(self.out, &k.source);
            self.out.push(')');
        }
        self.out.push_str(" {\n");
        self.block(&k.body, 1);
        self.out.push_str("}\n");
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn block(&mut self, body: &[Stmt], depth: usize) {
        for s in body {
            self.stmt(s, depth);
        }
    }

    /// `$N: TYPE`, with the type from [`Kernel::vars`].
    fn typed_var(&mut self, v: Var) {
        let _ = match self.kernel.vars.get(v.0 as usize) {
            Some(t) => write!(self.out, "${}: {}", v.0, t.name()),
            None => write!(self.out, "${}: <undeclared>", v.0),
        };
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        self.indent(depth);
        match s {
            Stmt::For { var, extent, body } => {
                self.out.push_str("loop.for ");
                // The type is implied for the usual `i64` induction variable.
                if self.kernel.vars.get(var.0 as usize) == Some(&ScalarType::I64) {
                    let _ = write!(self.out, "${}", var.0);
                } else {
                    self.typed_var(*var);
                }
                let _ = writeln!(self.out, " in 0..{extent} {{");
                self.block(body, depth + 1);
                self.indent(depth);
                self.out.push_str("}\n");
            }
            Stmt::Let(v, e) | Stmt::Local(v, e) => {
                self.out.push_str(if matches!(s, Stmt::Let(..)) { "loop.let " } else { "loop.local " });
                self.typed_var(*v);
                self.out.push_str(" = ");
                self.expr(e);
                self.out.push('\n');
            }
            Stmt::Assign(v, e) => {
                let _ = write!(self.out, "loop.assign ${} = ", v.0);
                self.expr(e);
                self.out.push('\n');
            }
            Stmt::Store { buf, index, value } => {
                let _ = write!(self.out, "loop.store @{}[", buf.0);
                self.expr(index);
                self.out.push_str("] = ");
                self.expr(value);
                self.out.push('\n');
            }
            Stmt::If { cond, then, otherwise } => {
                self.out.push_str("loop.if ");
                self.expr(cond);
                self.out.push_str(" {\n");
                self.block(then, depth + 1);
                self.indent(depth);
                if otherwise.is_empty() {
                    self.out.push_str("}\n");
                } else {
                    self.out.push_str("} else {\n");
                    self.block(otherwise, depth + 1);
                    self.indent(depth);
                    self.out.push_str("}\n");
                }
            }
            Stmt::Check { cond, error } => {
                self.out.push_str("loop.check ");
                self.expr(cond);
                let _ = writeln!(self.out, ", error {error}");
            }
            Stmt::Call(call) => {
                let f = call.kind();
                let _ = write!(self.out, "loop.call {}(", f.name());
                for (i, (spec, a)) in f.signature().iter().zip(call.operands()).enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    let _ = write!(self.out, "{}: ", spec.name);
                    match a {
                        Operand::Addr(a) => {
                            let _ = write!(self.out, "addr @{}[", a.buf.0);
                            self.expr(&a.index);
                            self.out.push(']');
                        }
                        Operand::Value(e) => self.expr(e),
                    }
                }
                self.out.push_str(")\n");
            }
        }
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Const(s) => write_scalar(self.out, *s),
            Expr::Var(v) => {
                let _ = write!(self.out, "${}", v.0);
            }
            Expr::Load { buf, index } => {
                let _ = write!(self.out, "load @{}[", buf.0);
                self.expr(index);
                self.out.push(']');
            }
            Expr::Unary(op, a) => self.call(unop_name(*op), &[a]),
            Expr::Binary(op, a, b) => self.call(binop_name(*op), &[a, b]),
            Expr::Cmp(op, a, b) => self.call(cmp_name(*op), &[a, b]),
            Expr::Select(c, a, b) => self.call("select", &[c, a, b]),
            Expr::Cast(t, CastMode::Default, a) => {
                let _ = write!(self.out, "cast<{}>", t.name());
                self.call("", &[a]);
            }
            Expr::Bitcast(t, a) => {
                let _ = write!(self.out, "bitcast<{}>", t.name());
                self.call("", &[a]);
            }
            Expr::Math(f, args) => {
                let args: Vec<&Expr> = args.iter().collect();
                self.call(math_name(*f), &args);
            }
        }
    }

    /// `NAME(ARG, ...)`.
    fn call(&mut self, name: &str, args: &[&Expr]) {
        self.out.push_str(name);
        self.out.push('(');
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.expr(a);
        }
        self.out.push(')');
    }
}
