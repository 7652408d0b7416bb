//! The parser: text back to a [`Program`], with positioned errors and no panics on any input.
//!
//! The parser checks syntax and what the data structure itself needs: buffers and errors
//! numbered in order, one type per variable, variables numbered densely from `$0`, a const
//! buffer's byte count, a call's operands named in its signature's order, each an address or a
//! value as the signature says. Everything else (buffer ids in range, scoping, types of expressions)
//! is the verifier's business, so that malformed programs can be written down and verified.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use kiln_tir::text::cursor::{Cursor, PResult};
use kiln_tir::text::lex::line_col;
use kiln_tir::{DType, Tensor, TensorData};

use super::lex::Tok;
use super::literal::parse_scalar;
use super::names::{Func, elem_type, func, scalar_type};
use crate::ir::*;

// Both text forms report errors through the tensor IR's cursor, so they share its error type.
pub use kiln_tir::text::ParseError;

/// Parses the text form of a program.
pub fn parse(src: &str) -> Result<Program, ParseError> {
    let p = Parser { cur: Cursor::new(src), program: Program::default(), decls: HashMap::new(), uses: Vec::new() };
    p.program().map_err(|f| f.locate(src))
}

/// Statement nesting allowed, so that hostile input cannot exhaust the stack.
const MAX_BLOCK_DEPTH: usize = 64;
/// Expression nesting allowed, for the same reason.
const MAX_EXPR_DEPTH: usize = 256;

/// Parser state: the token cursor, and the current kernel's variables.
struct Parser<'a> {
    cur: Cursor<'a, Tok<'a>>,
    program: Program,
    /// Each variable's type and where it was first declared.
    decls: HashMap<u32, (ScalarType, usize)>,
    /// Every variable use, in source order.
    uses: Vec<(u32, usize)>,
}

/// The grammar reads the lookahead as `self.tok` and moves with `self.bump()`: both belong to
/// the cursor this parser shares with the tensor IR's.
impl<'a> Deref for Parser<'a> {
    type Target = Cursor<'a, Tok<'a>>;

    fn deref(&self) -> &Self::Target {
        &self.cur
    }
}

impl DerefMut for Parser<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cur
    }
}

impl<'a> Parser<'a> {
    /// After `loop.call`: `NAME(OPERAND: ARG, ...)`, the operands named in the routine's
    /// signature order, each `addr @N[INDEX]` or a value as the signature says.
    fn call(&mut self) -> PResult<Call> {
        let at = self.start;
        let f = match self.tok {
            Tok::Ident(name) => match RuntimeFn::from_name(name) {
                Some(f) => f,
                None => return self.fail(at, format!("unknown runtime routine `{name}`")),
            },
            _ => return self.unexpected("a runtime routine such as `sgemm`"),
        };
        self.bump();
        self.expect(b'(')?;
        let mut args = Vec::new();
        for (i, spec) in f.signature().iter().enumerate() {
            if i > 0 && !self.eat(b',') {
                return self.fail(self.start, format!("{} is missing operand `{}`", f.name(), spec.name));
            }
            match self.tok {
                Tok::Ident(name) if name == spec.name => {
                    self.bump();
                }
                Tok::Ident(name) => return self.fail(self.start, format!("{} operand {} is `{}`, not `{name}`", f.name(), i + 1, spec.name)),
                _ => return self.unexpected(&format!("operand `{}`", spec.name)),
            }
            self.expect(b':')?;
            let is_addr = self.tok == Tok::Ident("addr");
            if is_addr != spec.kind.is_addr() {
                let want = if spec.kind.is_addr() { "a buffer address" } else { "a value" };
                return self.fail(self.start, format!("{} operand `{}` must be {want}", f.name(), spec.name));
            }
            if is_addr {
                self.bump();
                let buf = self.buf()?;
                self.expect(b'[')?;
                let index = self.expr(0)?;
                self.expect(b']')?;
                args.push(Arg::Addr(Addr { buf, index }));
            } else {
                args.push(Arg::Value(self.expr(0)?));
            }
        }
        if !self.eat(b')') {
            let n = f.signature().len();
            return self.fail(self.start, format!("{} takes {n} operands, not more", f.name()));
        }
        Call::from_operands(f, args).or_else(|e| self.fail(at, e))
    }

    fn string(&mut self) -> PResult<String> {
        if let Tok::Str(_) = self.tok
            && let Tok::Str(s) = self.bump()
        {
            return Ok(s);
        }
        self.unexpected("a string")
    }

    /// A decimal integer without sign or suffix.
    fn uint(&mut self, what: &str) -> PResult<u64> {
        let at = self.start;
        match self.tok {
            Tok::Num(s) if s.bytes().all(|b| b.is_ascii_digit()) => match s.parse::<u64>() {
                Ok(n) => {
                    self.bump();
                    Ok(n)
                }
                Err(_) => self.fail(at, format!("{what} `{s}` is too large")),
            },
            _ => self.unexpected(what),
        }
    }

    /// [`Parser::uint`] that must fit in `T`.
    fn small_uint<T: TryFrom<u64>>(&mut self, what: &str) -> PResult<T> {
        let at = self.start;
        let n = self.uint(what)?;
        T::try_from(n).or_else(|_| self.fail(at, format!("{what} {n} is too large")))
    }

    fn scalar_type(&mut self) -> PResult<ScalarType> {
        if let Tok::Ident(name) = self.tok
            && let Some(t) = scalar_type(name)
        {
            self.bump();
            return Ok(t);
        }
        self.unexpected("a scalar type such as `f32` or `i64`")
    }

    fn buf(&mut self) -> PResult<BufId> {
        match self.tok {
            Tok::Buf(n) => {
                self.bump();
                Ok(BufId(n))
            }
            _ => self.unexpected("a buffer such as `@0`"),
        }
    }

    fn var(&mut self) -> PResult<(u32, usize)> {
        match self.tok {
            Tok::Var(n) => {
                let at = self.start;
                self.bump();
                Ok((n, at))
            }
            _ => self.unexpected("a variable such as `$0`"),
        }
    }

    /// Records that `$n` has type `ty`; a second declaration must agree.
    fn declare(&mut self, n: u32, ty: ScalarType, at: usize) -> PResult<()> {
        match self.decls.get(&n) {
            Some(&(old, first)) if old != ty => {
                let (line, column) = line_col(self.src, first);
                self.fail(at, format!("${n} is declared `{}` here but `{}` at line {line}, column {column}", ty.name(), old.name()))
            }
            Some(_) => Ok(()),
            None => {
                self.decls.insert(n, (ty, at));
                Ok(())
            }
        }
    }

    /// `(buffer | error | kernel)*`, in any order.
    fn program(mut self) -> PResult<Program> {
        loop {
            match self.tok {
                Tok::Eof => return Ok(self.program),
                Tok::Ident("buffer") => self.buffer()?,
                Tok::Ident("error") => self.error_message()?,
                Tok::Ident("kernel") => self.kernel()?,
                _ => return self.unexpected("`buffer`, `error` or `kernel`"),
            }
        }
    }

    /// `buffer @N "NAME" : ELEM[LEN] (input N | output N | temp | const bytes N)`.
    fn buffer(&mut self) -> PResult<()> {
        self.bump();
        let want = self.program.buffers.len();
        match self.tok {
            Tok::Buf(n) if n as usize == want => {
                self.bump();
            }
            Tok::Buf(n) => return self.fail(self.start, format!("buffers are numbered in order: expected `@{want}`, found `@{n}`")),
            _ => return self.unexpected(&format!("`@{want}`")),
        }
        let name = self.string()?;
        self.expect(b':')?;
        let elem = match self.tok {
            Tok::Ident(t) => match elem_type(t) {
                Some(e) => e,
                None => return self.fail(self.start, format!("unknown element type `{t}`")),
            },
            _ => return self.unexpected("an element type such as `f32`"),
        };
        self.bump();
        self.expect(b'[')?;
        let len_at = self.start;
        let len = self.uint("a length")?;
        self.expect(b']')?;
        let kind_at = self.start;
        let kind = match self.tok {
            Tok::Ident("input") => {
                self.bump();
                BufferKind::Input(self.small_uint("an input position")?)
            }
            Tok::Ident("output") => {
                self.bump();
                BufferKind::Output(self.small_uint("an output position")?)
            }
            Tok::Ident("temp") => {
                self.bump();
                BufferKind::Temp
            }
            Tok::Ident("const") => {
                self.bump();
                self.expect_keyword("bytes")?;
                let Some(want) = len.checked_mul(u64::from(elem.bits())).map(|bits| bits.div_ceil(8)) else {
                    return self.fail(len_at, "buffer size overflows");
                };
                let at = self.start;
                let bytes = self.uint("a byte count")?;
                if bytes != want {
                    return self.fail(at, format!("a `{}[{len}]` const holds {want} bytes, not {bytes}", elem.name()));
                }
                let Some(dtype) = DType::from_name(elem.name()) else {
                    return self.fail(kind_at, format!("no tensor type for `{}`", elem.name()));
                };
                BufferKind::Const(Tensor { dtype, shape: vec![len], data: TensorData::Absent })
            }
            _ => return self.unexpected("`input`, `output`, `temp` or `const`"),
        };
        self.program.buffers.push(Buffer { name, elem, len, kind });
        Ok(())
    }

    /// `error N "MESSAGE"`.
    fn error_message(&mut self) -> PResult<()> {
        self.bump();
        let want = self.program.errors.len();
        let at = self.start;
        let n = self.uint("an error code")?;
        if n != want as u64 {
            return self.fail(at, format!("errors are numbered in order: expected {want}, found {n}"));
        }
        let message = self.string()?;
        self.program.errors.push(message);
        Ok(())
    }

    /// `kernel NAME [vars($N: TYPE, ...)] [loc("SOURCE")] { STATEMENTS }`.
    fn kernel(&mut self) -> PResult<()> {
        self.bump();
        let name_at = self.start;
        let name = match self.tok {
            Tok::Ident(s) => {
                self.bump();
                s.to_string()
            }
            Tok::Str(_) => self.string()?,
            _ => return self.unexpected("a kernel name"),
        };
        self.decls.clear();
        self.uses.clear();
        if self.tok == Tok::Ident("vars") {
            self.bump();
            self.expect(b'(')?;
            let mut first = true;
            while !self.eat(b')') {
                if !std::mem::take(&mut first) {
                    self.expect(b',')?;
                }
                let (n, at) = self.var()?;
                self.expect(b':')?;
                let ty = self.scalar_type()?;
                self.declare(n, ty, at)?;
            }
        }
        let mut source = String::new();
        if self.tok == Tok::Ident("loc") {
            self.bump();
            self.expect(b'(')?;
            source = self.string()?;
            self.expect(b')')?;
        }
        self.expect(b'{')?;
        let body = self.block(0)?;
        if let Some(&(n, at)) = self.uses.iter().find(|(n, _)| !self.decls.contains_key(n)) {
            return self.fail(at, format!("undefined variable ${n}"));
        }
        // Kernel::vars is indexed by number, so the numbers must cover 0..count exactly.
        let count = self.decls.len();
        if let Some(missing) = (0..count as u32).find(|n| !self.decls.contains_key(n)) {
            return self.fail(name_at, format!("variable ${missing} is never declared; a kernel's variables are numbered from $0 without gaps"));
        }
        let mut vars = vec![ScalarType::I64; count];
        for (&n, &(ty, _)) in &self.decls {
            vars[n as usize] = ty;
        }
        self.program.kernels.push(Kernel { name, vars, body, source });
        Ok(())
    }

    /// Statements up to and including the closing `}`.
    fn block(&mut self, depth: usize) -> PResult<Vec<Stmt>> {
        if depth >= MAX_BLOCK_DEPTH {
            return self.fail(self.start, "statements nested too deeply");
        }
        let mut out = Vec::new();
        while !self.eat(b'}') {
            out.push(self.stmt(depth)?);
        }
        Ok(out)
    }

    fn stmt(&mut self, depth: usize) -> PResult<Stmt> {
        let Tok::Ident(kw) = self.tok else {
            return self.unexpected("a statement or `}`");
        };
        let kw_at = self.start;
        self.bump();
        Ok(match kw {
            "loop.for" => {
                let (n, at) = self.var()?;
                let ty = if self.eat(b':') { self.scalar_type()? } else { ScalarType::I64 };
                self.declare(n, ty, at)?;
                self.expect_keyword("in")?;
                if self.tok != Tok::Num("0") {
                    return self.unexpected("`0` (loops count from zero)");
                }
                self.bump();
                if self.tok != Tok::DotDot {
                    return self.unexpected("`..`");
                }
                self.bump();
                let extent = self.uint("a trip count")?;
                self.expect(b'{')?;
                Stmt::For { var: Var(n), extent, body: self.block(depth + 1)? }
            }
            "loop.let" | "loop.local" => {
                let (n, at) = self.var()?;
                self.expect(b':')?;
                let ty = self.scalar_type()?;
                self.declare(n, ty, at)?;
                self.expect(b'=')?;
                let e = self.expr(0)?;
                if kw == "loop.let" { Stmt::Let(Var(n), e) } else { Stmt::Local(Var(n), e) }
            }
            "loop.assign" => {
                let (n, at) = self.var()?;
                self.uses.push((n, at));
                self.expect(b'=')?;
                Stmt::Assign(Var(n), self.expr(0)?)
            }
            "loop.store" => {
                let buf = self.buf()?;
                self.expect(b'[')?;
                let index = self.expr(0)?;
                self.expect(b']')?;
                self.expect(b'=')?;
                Stmt::Store { buf, index, value: self.expr(0)? }
            }
            "loop.if" => {
                let cond = self.expr(0)?;
                self.expect(b'{')?;
                let then = self.block(depth + 1)?;
                let mut otherwise = Vec::new();
                if self.tok == Tok::Ident("else") {
                    self.bump();
                    self.expect(b'{')?;
                    otherwise = self.block(depth + 1)?;
                }
                Stmt::If { cond, then, otherwise }
            }
            "loop.check" => {
                let cond = self.expr(0)?;
                self.expect(b',')?;
                self.expect_keyword("error")?;
                Stmt::Check { cond, error: self.small_uint("an error code")? }
            }
            "loop.call" => Stmt::Call(self.call()?),
            _ => return self.fail(kw_at, format!("unknown statement `{kw}`")),
        })
    }

    /// `load @N[INDEX]`, `cast<T>(x)`, `bitcast<T>(x)`, `NAME(ARGS)`, `$N` or a constant.
    fn expr(&mut self, depth: usize) -> PResult<Expr> {
        if depth >= MAX_EXPR_DEPTH {
            return self.fail(self.start, "expression nested too deeply");
        }
        let at = self.start;
        let name = match self.tok {
            Tok::Var(n) => {
                self.bump();
                self.uses.push((n, at));
                return Ok(Expr::Var(Var(n)));
            }
            Tok::Num(text) => return self.constant(text, at),
            Tok::Ident(name) => name,
            _ => return self.unexpected("an expression"),
        };
        match name {
            "true" | "false" => return self.constant(name, at),
            _ if name.starts_with("nan_") || name.starts_with("inf_") => return self.constant(name, at),
            _ => {}
        }
        self.bump();
        match name {
            "load" => {
                let buf = self.buf()?;
                self.expect(b'[')?;
                let index = self.expr(depth + 1)?;
                self.expect(b']')?;
                Ok(Expr::load(buf, index))
            }
            "cast" | "bitcast" => {
                self.expect(b'<')?;
                let ty = self.scalar_type()?;
                self.expect(b'>')?;
                let [a] = self.args(depth, name, at)?;
                Ok(if name == "cast" { Expr::Cast(ty, CastMode::Default, Box::new(a)) } else { Expr::Bitcast(ty, Box::new(a)) })
            }
            _ => match func(name) {
                Some(Func::Unary(op)) => {
                    let [a] = self.args(depth, name, at)?;
                    Ok(a.un(op))
                }
                Some(Func::Binary(op)) => {
                    let [a, b] = self.args(depth, name, at)?;
                    Ok(a.bin(op, b))
                }
                Some(Func::Cmp(op)) => {
                    let [a, b] = self.args(depth, name, at)?;
                    Ok(a.cmp(op, b))
                }
                Some(Func::Select) => {
                    let [c, a, b] = self.args(depth, name, at)?;
                    Ok(c.select(a, b))
                }
                // Arity is the verifier's to check, so a wrong count can be written down.
                Some(Func::Math(f)) => Ok(Expr::Math(f, self.arg_list(depth)?)),
                None => self.fail(at, format!("unknown function `{name}`")),
            },
        }
    }

    fn constant(&mut self, text: &str, at: usize) -> PResult<Expr> {
        match parse_scalar(text) {
            Ok(s) => {
                self.bump();
                Ok(Expr::Const(s))
            }
            Err(msg) => self.fail(at, msg),
        }
    }

    /// `(EXPR, ...)`.
    fn arg_list(&mut self, depth: usize) -> PResult<Vec<Expr>> {
        self.expect(b'(')?;
        let mut args = Vec::new();
        while !self.eat(b')') {
            if !args.is_empty() {
                self.expect(b',')?;
            }
            args.push(self.expr(depth + 1)?);
        }
        Ok(args)
    }

    /// Exactly `N` arguments of `name`.
    fn args<const N: usize>(&mut self, depth: usize, name: &str, at: usize) -> PResult<[Expr; N]> {
        let args = self.arg_list(depth)?;
        let got = args.len();
        args.try_into().or_else(|_| self.fail(at, format!("`{name}` takes {N} argument{}, not {got}", if N == 1 { "" } else { "s" })))
    }
}
