//! The loop-IR verifier.
//!
//! [`verify`] checks every invariant below and reports every violation it finds, each with
//! its location (a buffer, a kernel, or a kernel and a statement path such as `0.1.then.0`:
//! the first statement of the `then` block of the second statement inside the first one).
//!
//! **Program**
//! 1. **Inputs and outputs are numbered densely**: the positions of `Input` buffers are
//!    `0..n` with each position in exactly one buffer, and likewise for `Output` buffers.
//! 2. **Constants match their buffer**: a `Const` tensor has the buffer's element type and
//!    `len` elements, and its bytes, when present, are exactly that many elements (sub-byte
//!    types packed, the last byte padded).
//! 3. **Kernel names are non-empty and unique** (they become symbol names).
//!
//! **Kernels**
//! 4. **Buffer ids are in range** for loads, stores and call addresses.
//! 5. **Variables are declared, defined once, and defined before use**: each `$N` is below
//!    `Kernel::vars.len()`, at most one `For`, `Let` or `Local` defines it, and every use is
//!    in its scope: a loop variable in the loop's body, a `Let` or `Local` in the rest of its
//!    block and the blocks nested there.
//! 6. **`Assign` targets a `Local`** in scope.
//! 7. **Types agree**: a `Let`, `Local` or `Assign` value has the variable's type; a `For`
//!    variable is `i64`; binary operands have one type and suit the operation (arithmetic on
//!    numbers, bitwise on integers or bools, shifts on integers); comparisons compare one type;
//!    `Select` has a `bool` condition and arms of one type; unary operations suit their
//!    operand (`neg`/`abs` numeric, `not` bool or integer, rounding, `sqrt` and `isnan`
//!    float); `Math` takes one argument (`pow`: two) of one float type; `Bitcast` keeps the
//!    width; integer constants have an integer type and fit it; `If` and `Check` conditions
//!    are `bool`.
//! 8. **Buffer accesses are typed**: every index is `i64`, and a stored value has the
//!    buffer's value type ([`ElemType::value_type`]).
//! 9. **No store into `Input` or `Const` buffers**, including through a call's address that
//!    its signature says the routine writes.
//! 10. **Check error codes exist**: below `Program::errors.len()`.
//! 11. **Calls have their signature** (`crate::call`'s table; which operands are addresses
//!     and which values the IR's types already say): each value has its operand's type (`i64`
//!     or `f32`); each address is into a buffer of `f32` elements, or for `copy` of one
//!     whole-byte element type for both operands; and the constant codes exist (`epilogue` and
//!     `sgemm_fused`: bias mode 0–2, a positive period per row, activation 0–8; `conv2d`
//!     activation 0–8; `conv2d_nchwc` activation 0–2 and panel width 0, 64 or, depthwise, 16;
//!     `conv2d_packed` a constant positive panel width).
//! 12. **Static bounds**: an interval analysis over `i64` index expressions (loop variables
//!     range over `[0, extent-1]`, `Let`s carry their value's interval, `If` and `Check`
//!     conditions of the form `cmp(e, constant)` narrow `e`) must not prove an access out of
//!     bounds. An access is reported when its whole interval lies outside `[0, len-1]`, or
//!     when it is reached unconditionally and its interval is exact (affine in distinct loop
//!     variables, so every bound is attained) yet not inside `[0, len-1]`. For every routine
//!     with constant sizes the extent each address operand spans from its base is checked
//!     the same way (`verify/extents.rs`; `dwconv2d`: `planes·ih·iw` elements of X,
//!     `channels·kh·kw` of W, `planes·oh·ow` of Y; `epilogue` with constant rows and columns:
//!     `rows·cols` elements of Y and Z, `min(period, rows)` or `cols` of the bias; `im2col`:
//!     `channels·ih·iw` of X, `channels·kh·kw·oh·ow` of the matrix; `maxpool2d`: `planes·ih·iw`
//!     of X, `planes·oh·ow` of Y; likewise the others). An `epilogue` operand counts as read unless
//!     its flag is a constant saying it is not (an unknown bias mode checks the larger of the
//!     two extents), so the dummy address of an unused operand is never trusted blindly. This
//!     is the static half of "a compiled model never reads or writes outside its buffers";
//!     what it cannot prove is left to run-time checks.

use std::collections::HashSet;
use std::fmt;

use crate::ir::*;
use crate::text::names::{binop_name, cmp_name, math_name, unop_name};

mod calls;
mod extents;

/// One invariant violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// Where: `buffer @3`, `kernel relu_3`, or `kernel relu_3, statement 0.1`.
    pub location: String,
    /// Which invariant is broken, and how.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Checks every invariant in the module doc; returns all violations found.
pub fn verify(p: &Program) -> Result<(), Vec<VerifyError>> {
    let mut errors = Vec::new();
    check_buffers(p, &mut errors);
    let mut names = HashSet::new();
    for k in &p.kernels {
        let location = kernel_location(k);
        if k.name.is_empty() {
            errors.push(VerifyError { location: location.clone(), message: "kernel has an empty name".into() });
        } else if !names.insert(k.name.as_str()) {
            errors.push(VerifyError { location: location.clone(), message: "another kernel has the same name".into() });
        }
        let n = k.vars.len();
        let mut defined_anywhere = vec![false; n];
        mark_definitions(&k.body, &mut defined_anywhere);
        let mut cx = Cx {
            p,
            k,
            errors: &mut errors,
            path: Vec::new(),
            visible: vec![None; n],
            first_def: vec![None; n],
            defined_anywhere,
            ranges: vec![None; n],
            facts: Vec::new(),
            conditional: 0,
            unreachable: 0,
        };
        cx.block(&k.body);
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Marks every variable a `For`, `Let` or `Local` in `body` defines.
fn mark_definitions(body: &[Stmt], into: &mut [bool]) {
    for s in body {
        if let Stmt::For { var: v, .. } | Stmt::Let(v, _) | Stmt::Local(v, _) = s
            && let Some(slot) = into.get_mut(v.0 as usize)
        {
            *slot = true;
        }
        match s {
            Stmt::For { body, .. } => mark_definitions(body, into),
            Stmt::If { then, otherwise, .. } => [then, otherwise].into_iter().for_each(|b| mark_definitions(b, into)),
            _ => {}
        }
    }
}

fn check_buffers(p: &Program, errors: &mut Vec<VerifyError>) {
    let mut err = |b: usize, message: String| errors.push(VerifyError { location: format!("buffer @{b}"), message });
    let positions = |input: bool| -> Vec<(usize, usize)> {
        let pick = |k: &BufferKind| match *k {
            BufferKind::Input(n) if input => Some(n),
            BufferKind::Output(n) if !input => Some(n),
            _ => None,
        };
        p.buffers.iter().enumerate().filter_map(|(b, buf)| pick(&buf.kind).map(|n| (b, n))).collect()
    };
    for (what, positions) in [("input", positions(true)), ("output", positions(false))] {
        let mut owner = std::collections::BTreeMap::new();
        for (b, n) in positions {
            match owner.get(&n) {
                Some(first) => err(b, format!("{what} {n} is already buffer @{first}")),
                None => {
                    owner.insert(n, b);
                }
            }
        }
        if let Some((&last, &b)) = owner.last_key_value()
            && let Some(missing) = (0..last).find(|n| !owner.contains_key(n))
        {
            err(b, format!("{what} {last} exists but no buffer is {what} {missing}"));
        }
    }
    for (b, buf) in p.buffers.iter().enumerate() {
        let BufferKind::Const(t) = &buf.kind else { continue };
        if t.dtype.name() != buf.elem.name() {
            err(b, format!("constant tensor is {} but the buffer holds {}", t.dtype.name(), buf.elem.name()));
        }
        if t.numel() != Some(buf.len) {
            err(b, format!("constant tensor has {} elements but the buffer has {}", t.numel().map_or("too many".into(), |n| n.to_string()), buf.len));
        }
        match &t.data {
            kiln_tir::TensorData::Raw(bytes) if Some(bytes.len() as u64) != buf.len.checked_mul(u64::from(buf.elem.bits())).map(|bits| bits.div_ceil(8)) => {
                err(
                    b,
                    format!("constant holds {} bytes but {} elements of {} take {}", bytes.len(), buf.len, buf.elem.name(), buf.elem.storage_bytes(buf.len)),
                );
            }
            kiln_tir::TensorData::Strings(_) => err(b, "constant holds strings".into()),
            _ => {}
        }
    }
}

/// How a variable in scope was defined.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Def {
    For,
    Let,
    Local,
}

impl Def {
    fn name(self) -> &'static str {
        match self {
            Def::For => "a loop variable",
            Def::Let => "a `loop.let`",
            Def::Local => "a `loop.local`",
        }
    }
}

/// Infinity for [`Range`] bounds; any bound outside `i64` means "unknown on that side".
const INF: i128 = 1 << 100;

/// The values an `i64` expression can take: `lo..=hi`. `exact` means both bounds are attained
/// when the enclosing loops run in full: the expression is affine in the loop variables
/// `vars`, each appearing once.
#[derive(Clone, Debug, PartialEq)]
struct Range {
    lo: i128,
    hi: i128,
    exact: bool,
    vars: Vec<u32>,
}

impl Range {
    const TOP: Range = Range { lo: -INF, hi: INF, exact: false, vars: Vec::new() };

    fn constant(c: i64) -> Range {
        Range { lo: c.into(), hi: c.into(), exact: true, vars: Vec::new() }
    }

    fn known(&self) -> bool {
        self.lo >= i64::MIN.into() && self.hi <= i64::MAX.into()
    }

    fn as_constant(&self) -> Option<i64> {
        if self.lo == self.hi && self.known() { i64::try_from(self.lo).ok() } else { None }
    }

    /// A range within `i64`; one that may leave it (and so wrap) is unknown.
    fn make(lo: i128, hi: i128, exact: bool, vars: Vec<u32>) -> Range {
        let r = Range { lo, hi, exact, vars };
        if r.known() { r } else { Range::TOP }
    }

    fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    /// Exactness survives `a ∘ b` only for affine combinations of distinct variables.
    fn combine(a: &Range, b: &Range, lo: i128, hi: i128) -> Range {
        let exact = a.exact && b.exact && a.vars.iter().all(|v| !b.vars.contains(v));
        Range::make(lo, hi, exact, a.vars.iter().chain(&b.vars).copied().collect())
    }

    fn hull(a: &Range, b: &Range) -> Range {
        if a.known() && b.known() { Range::make(a.lo.min(b.lo), a.hi.max(b.hi), false, Vec::new()) } else { Range::TOP }
    }

    fn intersect(&self, lo: i128, hi: i128) -> Range {
        let (nlo, nhi) = (self.lo.max(lo), self.hi.min(hi));
        if (nlo, nhi) == (self.lo, self.hi) { self.clone() } else { Range { lo: nlo, hi: nhi, exact: false, vars: Vec::new() } }
    }
}

struct Cx<'a> {
    p: &'a Program,
    k: &'a Kernel,
    errors: &'a mut Vec<VerifyError>,
    /// Statement indices and `then`/`else` steps from the kernel body to here.
    path: Vec<String>,
    /// How each variable in scope was defined.
    visible: Vec<Option<Def>>,
    /// Where each variable was first defined.
    first_def: Vec<Option<String>>,
    /// Whether any statement of the kernel defines each variable.
    defined_anywhere: Vec<bool>,
    /// The interval of each `i64` loop variable or `Let` in scope.
    ranges: Vec<Option<Range>>,
    /// Intervals known from enclosing `If` and earlier `Check` conditions.
    facts: Vec<(&'a Expr, i128, i128)>,
    /// Enclosing `If` branches.
    conditional: u32,
    /// Enclosing loops that never run.
    unreachable: u32,
}

/// `1 buffer`, `2 buffers`.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn type_names(ts: &[ScalarType]) -> String {
    ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(" and ")
}

impl<'a> Cx<'a> {
    fn err(&mut self, message: impl Into<String>) {
        let location = format!("{}, statement {}", kernel_location(self.k), self.path.join("."));
        self.errors.push(VerifyError { location, message: message.into() });
    }

    /// The declared type of `v`, reporting a variable with none.
    fn var_type(&mut self, v: Var) -> Option<ScalarType> {
        let ty = self.k.vars.get(v.0 as usize).copied();
        if ty.is_none() {
            self.err(format!("${} has no type: the kernel declares {}", v.0, count(self.k.vars.len(), "variable")));
        }
        ty
    }

    fn buffer(&mut self, b: BufId) -> Option<&'a Buffer> {
        let buf = self.p.buffers.get(b.0 as usize);
        if buf.is_none() {
            self.err(format!("@{} does not exist: the program has {}", b.0, count(self.p.buffers.len(), "buffer")));
        }
        buf
    }

    /// Statements of one block; definitions and facts made here end with it.
    fn block(&mut self, body: &'a [Stmt]) {
        let (facts, mut defined) = (self.facts.len(), Vec::new());
        for (i, s) in body.iter().enumerate() {
            self.path.push(i.to_string());
            if let Some(v) = self.stmt(s) {
                defined.push(v);
            }
            self.path.pop();
        }
        for v in defined {
            self.visible[v] = None;
            self.ranges[v] = None;
        }
        self.facts.truncate(facts);
    }

    /// Defines `v`; returns its index if it is in range.
    fn define(&mut self, v: Var, how: Def) -> Option<usize> {
        let i = v.0 as usize;
        self.var_type(v)?;
        let here = self.path.join(".");
        match &self.first_def[i] {
            Some(first) => {
                let first = first.clone();
                self.err(format!("${} is already defined at statement {first}", v.0));
            }
            None => self.first_def[i] = Some(here),
        }
        self.visible[i] = Some(how);
        Some(i)
    }

    /// Checks `value` against `v`'s type.
    fn value_of(&mut self, v: Var, value: &'a Expr, what: &str) {
        if let (Some(want), Some(got)) = (self.k.vars.get(v.0 as usize).copied(), self.expr(value))
            && want != got
        {
            self.err(format!("{what} ${} is {} but its value is {}", v.0, want.name(), got.name()));
        }
    }

    fn cond(&mut self, e: &'a Expr, what: &str) {
        if let Some(t) = self.expr(e)
            && t != ScalarType::Bool
        {
            self.err(format!("{what} condition is {}, not bool", t.name()));
        }
    }

    /// Checks `index` is `i64`; returns its interval.
    fn index(&mut self, index: &'a Expr, what: &str) -> Range {
        if let Some(t) = self.expr(index)
            && t != ScalarType::I64
        {
            self.err(format!("{what} index is {}, not i64", t.name()));
        }
        self.range(index)
    }

    /// Returns the variable index `s` defines in the enclosing block.
    fn stmt(&mut self, s: &'a Stmt) -> Option<usize> {
        match s {
            Stmt::For { var, extent, body } => {
                if let Some(t) = self.k.vars.get(var.0 as usize)
                    && *t != ScalarType::I64
                {
                    self.err(format!("loop variable ${} is {}, not i64", var.0, t.name()));
                }
                let i = self.define(*var, Def::For);
                if let Some(i) = i {
                    self.ranges[i] = (*extent > 0).then(|| Range::make(0, i128::from(*extent) - 1, true, vec![var.0]));
                }
                self.unreachable += u32::from(*extent == 0);
                self.block(body);
                self.unreachable -= u32::from(*extent == 0);
                if let Some(i) = i {
                    self.visible[i] = None;
                    self.ranges[i] = None;
                }
                None
            }
            Stmt::Let(v, e) | Stmt::Local(v, e) => {
                let is_let = matches!(s, Stmt::Let(..));
                self.value_of(*v, e, if is_let { "loop.let" } else { "loop.local" });
                let i = self.define(*v, if is_let { Def::Let } else { Def::Local })?;
                if is_let && self.k.vars[i] == ScalarType::I64 {
                    self.ranges[i] = Some(self.range(e));
                }
                Some(i)
            }
            Stmt::Assign(v, e) => {
                match self.visible.get(v.0 as usize).copied() {
                    None => self.err(format!("assigns ${}, which has no type: the kernel declares {}", v.0, count(self.k.vars.len(), "variable"))),
                    Some(Some(Def::Local)) => {}
                    Some(Some(other)) => self.err(format!("assigns ${}, which is {}, not a `loop.local`", v.0, other.name())),
                    Some(None) => self.err(format!("assigns ${}, which is not a `loop.local` in scope", v.0)),
                }
                self.value_of(*v, e, "loop.assign");
                None
            }
            Stmt::Store { buf, index, value } => {
                let r = self.index(index, "store");
                let got = self.expr(value);
                let b = self.buffer(*buf)?;
                self.writable(*buf, b);
                if let Some(got) = got
                    && got != b.elem.value_type()
                {
                    self.err(format!("stores a {} into @{} of {} elements", got.name(), buf.0, b.elem.name()));
                }
                self.bounds("store", *buf, b, &r);
                None
            }
            Stmt::If { cond, then, otherwise } => {
                self.cond(cond, "loop.if");
                self.conditional += 1;
                for (branch, body, positive) in [("then", then, true), ("else", otherwise, false)] {
                    let facts = self.facts.len();
                    self.learn(cond, positive);
                    self.path.push(branch.to_string());
                    self.block(body);
                    self.path.pop();
                    self.facts.truncate(facts);
                }
                self.conditional -= 1;
                None
            }
            Stmt::Check { cond, error } => {
                self.cond(cond, "loop.check");
                if *error as usize >= self.p.errors.len() {
                    self.err(format!("error code {error} does not exist: the program has {}", count(self.p.errors.len(), "error")));
                }
                // Past a check, its condition holds for the rest of the block.
                self.learn(cond, true);
                None
            }
            Stmt::Call(call) => {
                self.call(call);
                None
            }
        }
    }

    fn writable(&mut self, id: BufId, b: &Buffer) {
        match b.kind {
            BufferKind::Input(_) => self.err(format!("writes @{}, an input buffer", id.0)),
            BufferKind::Const(_) => self.err(format!("writes @{}, a const buffer", id.0)),
            _ => {}
        }
    }

    /// Reports an access whose index interval `r` is provably out of bounds (see the module
    /// doc).
    fn bounds(&mut self, what: &str, id: BufId, b: &Buffer, r: &Range) {
        if self.unreachable > 0 || r.is_empty() || !r.known() {
            return;
        }
        let last = i128::from(b.len) - 1;
        let outside = r.hi < 0 || r.lo > last;
        let escapes = r.exact && self.conditional == 0 && (r.lo < 0 || r.hi > last);
        if outside || escapes {
            let at = if r.lo == r.hi { format!("index {}", r.lo) } else { format!("indices {}..={}", r.lo, r.hi) };
            self.err(format!("{what} at {at} is out of bounds: @{} {:?} has {} elements", id.0, b.name, b.len));
        }
    }

    /// Adds what `cond` (or its negation) says about `i64` expressions compared with constants.
    fn learn(&mut self, cond: &'a Expr, positive: bool) {
        match cond {
            Expr::Binary(BinOp::And, a, b) if positive => {
                self.learn(a, true);
                self.learn(b, true);
            }
            Expr::Binary(BinOp::Or, a, b) if !positive => {
                self.learn(a, false);
                self.learn(b, false);
            }
            Expr::Unary(UnOp::Not, a) => self.learn(a, !positive),
            Expr::Cmp(op, a, b) => {
                let op = if positive { *op } else { negate(*op) };
                if let Some(c) = self.range(b).as_constant() {
                    self.fact(a, op, c);
                } else if let Some(c) = self.range(a).as_constant() {
                    self.fact(b, flip(op), c);
                }
            }
            _ => {}
        }
    }

    /// Records `e op c`.
    fn fact(&mut self, e: &'a Expr, op: CmpOp, c: i64) {
        let c = i128::from(c);
        let (lo, hi) = match op {
            CmpOp::Eq => (c, c),
            CmpOp::Ne => return,
            CmpOp::Lt => (-INF, c - 1),
            CmpOp::Le => (-INF, c),
            CmpOp::Gt => (c + 1, INF),
            CmpOp::Ge => (c, INF),
        };
        self.facts.push((e, lo, hi));
    }

    /// The interval of an `i64` expression, narrowed by the facts about it (anything not
    /// `i64`, or what the analysis does not follow, is unknown).
    fn range(&self, e: &Expr) -> Range {
        let r = self.range_of(e);
        self.facts.iter().filter(|(f, _, _)| *f == e).fold(r, |r, &(_, lo, hi)| r.intersect(lo, hi))
    }

    fn range_of(&self, e: &Expr) -> Range {
        match e {
            Expr::Const(Scalar::Int(ScalarType::I64, c)) => Range::constant(*c),
            Expr::Var(v) => self.ranges.get(v.0 as usize).cloned().flatten().unwrap_or(Range::TOP),
            Expr::Unary(UnOp::Neg, a) => {
                let a = self.range(a);
                if a.known() { Range::make(-a.hi, -a.lo, a.exact, a.vars) } else { Range::TOP }
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.range(a), self.range(b));
                if !a.known() || !b.known() {
                    return Range::TOP;
                }
                if a.is_empty() || b.is_empty() {
                    return if a.is_empty() { a } else { b };
                }
                let products = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi];
                let (plo, phi) = (products.iter().min().copied().unwrap_or(0), products.iter().max().copied().unwrap_or(0));
                let c = b.as_constant().map(i128::from).filter(|&c| c > 0);
                match op {
                    BinOp::Add => Range::combine(&a, &b, a.lo + b.lo, a.hi + b.hi),
                    BinOp::Sub => Range::combine(&a, &b, a.lo - b.hi, a.hi - b.lo),
                    // Scaling by a constant keeps an affine range exact.
                    BinOp::Mul if plo == phi => Range::make(plo, phi, true, Vec::new()),
                    BinOp::Mul if a.as_constant().is_some() || b.as_constant().is_some() => Range::combine(&a, &b, plo, phi),
                    BinOp::Mul => Range::make(plo, phi, false, Vec::new()),
                    BinOp::Div => match c {
                        Some(c) => Range::make(a.lo / c, a.hi / c, a.exact, a.vars),
                        None => Range::TOP,
                    },
                    BinOp::Rem => match c {
                        Some(c) if a.lo >= 0 && a.hi < c => a,
                        Some(c) if a.lo >= 0 => Range::make(0, c - 1, false, Vec::new()),
                        Some(c) => Range::make(1 - c, c - 1, false, Vec::new()),
                        None => Range::TOP,
                    },
                    BinOp::Min => Range::make(a.lo.min(b.lo), a.hi.min(b.hi), false, Vec::new()),
                    BinOp::Max => Range::make(a.lo.max(b.lo), a.hi.max(b.hi), false, Vec::new()),
                    _ => Range::TOP,
                }
            }
            Expr::Select(_, a, b) => Range::hull(&self.range(a), &self.range(b)),
            _ => Range::TOP,
        }
    }

    /// The type of `e`, reporting every violation inside it; `None` if it has none.
    fn expr(&mut self, e: &'a Expr) -> Option<ScalarType> {
        match e {
            Expr::Const(s) => {
                if let Scalar::Int(t, v) = *s {
                    if matches!(t, ScalarType::Bool | ScalarType::F32 | ScalarType::F64) {
                        self.err(format!("integer constant {v} has type {}", t.name()));
                        return None;
                    }
                    if !fits(t, v) {
                        self.err(format!("constant {v} does not fit {}", t.name()));
                    }
                }
                Some(s.ty())
            }
            Expr::Var(v) => {
                let ty = self.var_type(*v)?;
                if self.visible[v.0 as usize].is_none() {
                    let why = match (self.defined_anywhere[v.0 as usize], &self.first_def[v.0 as usize]) {
                        (false, _) => "never defined",
                        (true, None) => "used before its definition",
                        (true, Some(_)) => "used outside the scope of its definition",
                    };
                    self.err(format!("${} is {why}", v.0));
                }
                Some(ty)
            }
            Expr::Load { buf, index } => {
                let r = self.index(index, "load");
                let b = self.buffer(*buf)?;
                self.bounds("load", *buf, b, &r);
                Some(b.elem.value_type())
            }
            Expr::Unary(op, a) => {
                let t = self.expr(a)?;
                let ok = match op {
                    UnOp::Neg | UnOp::Abs => t != ScalarType::Bool,
                    UnOp::Not => !t.is_float(),
                    _ => t.is_float(),
                };
                if !ok {
                    self.err(format!("`{}` of {}", unop_name(*op), t.name()));
                }
                Some(if *op == UnOp::IsNan { ScalarType::Bool } else { t })
            }
            Expr::Binary(op, a, b) => {
                let t = self.same(binop_name(*op), &[a, b])?;
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Div | BinOp::Rem => t != ScalarType::Bool,
                    BinOp::Mul | BinOp::Min | BinOp::Max => true,
                    BinOp::And | BinOp::Or | BinOp::Xor => !t.is_float(),
                    BinOp::Shl | BinOp::Shr => !t.is_float() && t != ScalarType::Bool,
                };
                if !ok {
                    self.err(format!("`{}` of {}", binop_name(*op), t.name()));
                }
                Some(t)
            }
            Expr::Cmp(op, a, b) => {
                self.same(cmp_name(*op), &[a, b]);
                Some(ScalarType::Bool)
            }
            Expr::Select(c, a, b) => {
                self.cond(c, "select");
                self.same("select", &[a, b])
            }
            Expr::Cast(t, CastMode::Default, a) => {
                self.expr(a);
                Some(*t)
            }
            Expr::Bitcast(t, a) => {
                let from = self.expr(a)?;
                if from.bytes() != t.bytes() {
                    self.err(format!("bitcast from {} to {} changes the width", from.name(), t.name()));
                }
                Some(*t)
            }
            Expr::Math(f, args) => {
                let want = if *f == MathFn::Pow { 2 } else { 1 };
                if args.len() != want {
                    self.err(format!("`{}` takes {want} argument{}, not {}", math_name(*f), if want == 1 { "" } else { "s" }, args.len()));
                }
                let args: Vec<&'a Expr> = args.iter().collect();
                let t = self.same(math_name(*f), &args)?;
                if !t.is_float() {
                    self.err(format!("`{}` of {}", math_name(*f), t.name()));
                }
                Some(t)
            }
        }
    }

    /// Checks that `args` (at least one) share a type and returns it.
    fn same(&mut self, what: &str, args: &[&'a Expr]) -> Option<ScalarType> {
        let types: Vec<Option<ScalarType>> = args.iter().map(|a| self.expr(a)).collect();
        let known: Vec<ScalarType> = types.iter().flatten().copied().collect();
        if known.len() < types.len() || known.is_empty() {
            return None;
        }
        if known.iter().any(|&t| t != known[0]) {
            self.err(format!("`{what}` operands differ: {}", type_names(&known)));
            return None;
        }
        Some(known[0])
    }
}

fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    }
}

/// `c op e` as `e op' c`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}

/// True if `v` is a value of integer type `t` (unsigned types by their bit pattern, so
/// `u64` takes any).
fn fits(t: ScalarType, v: i64) -> bool {
    let bits = 8 * t.bytes();
    match t {
        ScalarType::I64 | ScalarType::U64 => true,
        _ if t.is_signed_int() => (-(1i64 << (bits - 1))..1i64 << (bits - 1)).contains(&v),
        _ => (0..1i64 << bits).contains(&v),
    }
}

/// `kernel NAME`, and the ONNX nodes it computes when known: a verifier error is a kiln bug,
/// and the node tells a reporter which part of their model to attach.
fn kernel_location(k: &Kernel) -> String {
    match k.source.as_str() {
        "" => format!("kernel {}", k.name),
        source => format!("kernel {} (node \"{}\")", k.name, kiln_tir::echo::text(source)),
    }
}
