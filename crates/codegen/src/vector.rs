//! Innermost loops as 128-bit vector loops.
//!
//! An innermost `For` (or an outlined loop's part) whose body is only `let`s, stores and max/min
//! updates of accumulators, whose stores are contiguous in the loop variable, and whose values
//! are of types up to 32 bits runs four iterations at a time, then the last `extent mod 4` one
//! at a time as before. Each lane computes exactly what its scalar iteration would, so results
//! are bit-identical (NaN payloads aside, which Cranelift leaves unspecified: x86-64's vector
//! min and max give the negative quiet NaN):
//!
//! - `f32` values are `f32x4`; integers of up to 32 bits are `i32x4` holding the value in the
//!   normal form of [`crate::expr`] (sign- or zero-extended from the type's width), renormalized
//!   after every operation that can leave it; `bool` is an `i32x4` mask (all ones or zero).
//! - An index is an `i64` affine in the loop variable. A load at stride 1 reads four
//!   consecutive elements (narrow ones with one scalar load of 4 or 8 bytes, widened); an
//!   expression that does not vary with the loop (stride 0) is computed as a scalar once per
//!   vector iteration and splat.
//! - A loop is left scalar when it reads a buffer it stores at any index but the stored one
//!   (a later lane could see an earlier lane's store), and for anything without an exact vector
//!   form here: 64-bit values, integer division and shifts, math functions but `f32` exp and
//!   tanh (`crate::approx`), conditionals, accumulators other than max and min (a sum in
//!   another order would round differently), checks and calls.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, BlockArg, Endianness, InstBuilder, MemFlagsData, Type, Value};
use kiln_loops::{BinOp, BufId, CastMode, CmpOp, ElemType, Expr, MathFn, Scalar, ScalarType, Stmt, UnOp, Var};

use crate::expr::cl_type;
use crate::kernel::Cx;
use crate::CodegenError;

/// Iterations per vector iteration.
pub(crate) const LANES: i64 = 4;

/// Whether values of `t` have a vector form.
fn has_lanes(t: ScalarType) -> bool {
    matches!(t, ScalarType::Bool | ScalarType::I8 | ScalarType::U8 | ScalarType::I16 | ScalarType::U16 | ScalarType::I32 | ScalarType::U32 | ScalarType::F32)
}

/// The vector type holding four values of `t`.
fn vector_type(t: ScalarType) -> Type {
    if t == ScalarType::F32 { types::F32X4 } else { types::I32X4 }
}

/// Whether every value in `range` truncates to a value of integer type `to` of at most 32 bits
/// (in its normal form, so that no renormalization follows).
fn fits(to: ScalarType, (lo, hi): (f64, f64)) -> bool {
    let (min, max) = match to {
        ScalarType::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
        ScalarType::U8 => (0.0, f64::from(u8::MAX)),
        ScalarType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
        ScalarType::U16 => (0.0, f64::from(u16::MAX)),
        ScalarType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        _ => return false,
    };
    // Truncation moves a value toward zero by less than one.
    min - 1.0 < lo && hi < max + 1.0
}

fn is_index(t: ScalarType) -> bool {
    matches!(t, ScalarType::I64 | ScalarType::U64)
}

/// What the body of a loop over `var` is, once it is known to vectorize.
pub(crate) struct Plan {
    var: Var,
    /// The stride of each `i64` variable the body defines, in elements per iteration.
    strides: HashMap<Var, i64>,
    /// The body's `let`s whose values vary with the loop: they are vectors.
    vectors: HashSet<Var>,
    /// Accumulators declared before the loop that the body only updates as `acc = max(acc, e)`
    /// or `min`: four partial results, combined after the vector iterations (the order of a
    /// max or min does not change its result, NaN and signed zeros included).
    reductions: Vec<(Var, BinOp, ScalarType)>,
    /// The body's `f32` lets known to be clamped to constants, never NaN ([`clamped`]): their
    /// conversions to integers wide enough need no saturation.
    clamped: HashMap<Var, (f64, f64)>,
}

/// The bounds of an `f32` expression that clamps a value to constants with selects, as lowering
/// writes a clamp (`select(lt(lo, x), x, lo)`, then `select(lt(x, hi), x, hi)`, or with
/// `ge`/`gt` conditions), when no NaN gets through: `[lo, hi]`, either end possibly infinite,
/// given the clamped lets before.
fn clamped(e: &Expr, known: &HashMap<Var, (f64, f64)>) -> Option<(f64, f64)> {
    let constant = |e: &Expr| match e {
        Expr::Const(Scalar::F32(c)) if c.is_finite() => Some(f64::from(*c)),
        _ => None,
    };
    // The bounds of `e`, or `None` for "any value, NaN too".
    let bounds = |e: &Expr| match e {
        Expr::Var(v) => known.get(v).copied(),
        other => clamped(other, known),
    };
    let Expr::Select(c, a, b) = e else { return None };
    let Expr::Cmp(op, l, r) = &**c else { return None };
    match (op, constant(l), constant(r)) {
        // `lo < x ? x : lo`: NaN and anything below give `lo`.
        (CmpOp::Lt, Some(lo), None) if l == b && r == a => Some((lo, bounds(a).map_or(f64::INFINITY, |(_, hi)| hi.max(lo)))),
        // `x ≥ lo ? x : lo`: the same.
        (CmpOp::Ge, None, Some(lo)) if l == a && r == b => Some((lo, bounds(a).map_or(f64::INFINITY, |(_, hi)| hi.max(lo)))),
        // `x < hi ? x : hi` (NaN gives `hi`) and `x > hi ? hi : x` (NaN gives NaN): bounded
        // below only as `x` is.
        (CmpOp::Lt, None, Some(hi)) if l == a && r == b => bounds(a).map(|(lo, _)| (lo.min(hi), hi)),
        (CmpOp::Gt, None, Some(hi)) if l == b && r == a => bounds(b).map(|(lo, _)| (lo.min(hi), hi)),
        _ => None,
    }
}

impl Plan {
    /// Whether the loop updates accumulators declared before it.
    pub(crate) fn has_reductions(&self) -> bool {
        !self.reductions.is_empty()
    }

    /// Whether `e` changes from one iteration to the next.
    fn varies(&self, e: &Expr) -> bool {
        match e {
            Expr::Var(v) => *v == self.var || self.vectors.contains(v) || self.strides.get(v).is_some_and(|s| *s != 0),
            _ => {
                let mut any = false;
                e.for_each_operand(|a| any |= self.varies(a));
                any
            }
        }
    }

    /// How far an `i64` expression moves per iteration, if it is affine in the loop variable.
    fn stride(&self, e: &Expr) -> Option<i64> {
        if !self.varies(e) {
            return Some(0);
        }
        let constant = |e: &Expr| match e {
            Expr::Const(Scalar::Int(t, c)) if is_index(*t) => Some(*c),
            _ => None,
        };
        match e {
            Expr::Var(v) if *v == self.var => Some(1),
            Expr::Var(v) => self.strides.get(v).copied(),
            Expr::Binary(BinOp::Add, a, b) => self.stride(a)?.checked_add(self.stride(b)?),
            Expr::Binary(BinOp::Sub, a, b) => self.stride(a)?.checked_sub(self.stride(b)?),
            Expr::Binary(BinOp::Mul, a, b) => match (constant(a), constant(b)) {
                (Some(c), _) => self.stride(b)?.checked_mul(c),
                (_, Some(c)) => self.stride(a)?.checked_mul(c),
                _ => None,
            },
            _ => None,
        }
    }
}

impl Cx<'_, '_> {
    /// The declared type of `v`, if it is declared.
    fn var_type(&self, v: Var) -> Option<ScalarType> {
        self.kernel.vars.get(v.0 as usize).copied()
    }

    fn elem_of(&self, buf: BufId) -> Option<ElemType> {
        self.program.buffers.get(buf.0 as usize).map(|b| b.elem)
    }

    /// The type of `e` as scalar code computes it (`None` if it is ill-typed or unknown).
    fn type_of(&self, e: &Expr) -> Option<ScalarType> {
        Some(match e {
            Expr::Const(s) => s.ty(),
            Expr::Var(v) => self.var_type(*v)?,
            Expr::Load { buf, .. } => self.elem_of(*buf)?.value_type(),
            Expr::Unary(UnOp::IsNan, _) | Expr::Cmp(..) => ScalarType::Bool,
            Expr::Unary(_, a) | Expr::Binary(_, a, _) => self.type_of(a)?,
            Expr::Select(_, a, _) => self.type_of(a)?,
            Expr::Cast(t, _, _) | Expr::Bitcast(t, _) => *t,
            Expr::Math(_, args) => self.type_of(args.first()?)?,
        })
    }

    /// The plan to run the loop over `var` with `body` four iterations at a time, if it can.
    pub(crate) fn vector_plan(&self, var: Var, body: &[Stmt]) -> Option<Plan> {
        let mut plan = Plan { var, strides: HashMap::new(), vectors: HashSet::new(), reductions: Vec::new(), clamped: HashMap::new() };
        let mut stored: HashMap<BufId, &Expr> = HashMap::new();
        let mut loads = Vec::new();
        for s in body {
            match s {
                Stmt::Let(v, e) => {
                    let t = self.var_type(*v)?;
                    if is_index(t) {
                        let stride = plan.stride(e)?;
                        plan.strides.insert(*v, stride);
                    } else if plan.varies(e) {
                        if self.lanes_of(e, &plan, &mut loads)? != t {
                            return None;
                        }
                        plan.vectors.insert(*v);
                        if let Some(range) = clamped(e, &plan.clamped).filter(|_| t == ScalarType::F32) {
                            plan.clamped.insert(*v, range);
                        }
                    }
                }
                Stmt::Store { buf, index, value } => {
                    let ElemType::Scalar(t) = self.elem_of(*buf)? else { return None };
                    if !has_lanes(t) || plan.stride(index)? != 1 || stored.insert(*buf, index).is_some() {
                        return None;
                    }
                    if self.lanes_of(value, &plan, &mut loads)? != t {
                        return None;
                    }
                }
                Stmt::Assign(acc, Expr::Binary(op @ (BinOp::Max | BinOp::Min), a, b)) => {
                    let e = match (&**a, &**b) {
                        (Expr::Var(v), e) | (e, Expr::Var(v)) if v == acc => e,
                        _ => return None,
                    };
                    let t = self.var_type(*acc)?;
                    if t == ScalarType::Bool || plan.reductions.iter().any(|r| r.0 == *acc) || self.lanes_of(e, &plan, &mut loads)? != t {
                        return None;
                    }
                    plan.reductions.push((*acc, *op, t));
                }
                _ => return None,
            }
        }
        // An accumulator appears only in its own update, once.
        if plan.reductions.iter().any(|&(acc, ..)| body.iter().map(|s| stmt_mentions(s, acc)).sum::<usize>() != 1) {
            return None;
        }
        // A lane may only read what it stores itself.
        let reads_other = loads.iter().any(|(buf, index)| stored.get(buf).is_some_and(|s| *s != *index));
        let uniform_reads_stored = body.iter().any(|s| uniform_loads(s, &plan).iter().any(|b| stored.contains_key(b)));
        let work = !stored.is_empty() || !plan.reductions.is_empty();
        (work && !reads_other && !uniform_reads_stored).then_some(plan)
    }

    /// The type of value expression `e` if it has a vector form; records its varying loads.
    fn lanes_of<'e>(&self, e: &'e Expr, plan: &Plan, loads: &mut Vec<(BufId, &'e Expr)>) -> Option<ScalarType> {
        if !plan.varies(e) {
            return self.type_of(e).filter(|t| has_lanes(*t));
        }
        let t = match e {
            Expr::Const(_) => return None,
            Expr::Var(v) => plan.vectors.contains(v).then(|| self.var_type(*v))??,
            Expr::Load { buf, index } => {
                let ElemType::Scalar(t) = self.elem_of(*buf)? else { return None };
                if plan.stride(index)? != 1 {
                    return None;
                }
                loads.push((*buf, index));
                t
            }
            Expr::Unary(op, a) => {
                let t = self.lanes_of(a, plan, loads)?;
                let ok = match t {
                    ScalarType::Bool => *op == UnOp::Not,
                    ScalarType::F32 => matches!(op, UnOp::Neg | UnOp::Abs | UnOp::Floor | UnOp::Ceil | UnOp::Round | UnOp::Trunc | UnOp::Sqrt | UnOp::IsNan),
                    _ => matches!(op, UnOp::Neg | UnOp::Abs | UnOp::Not),
                };
                if !ok {
                    return None;
                }
                if *op == UnOp::IsNan { ScalarType::Bool } else { t }
            }
            Expr::Binary(op, a, b) => {
                let t = self.lanes_of(a, plan, loads)?;
                if self.lanes_of(b, plan, loads)? != t {
                    return None;
                }
                let ok = match t {
                    ScalarType::Bool => matches!(op, BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Min | BinOp::Max | BinOp::Mul),
                    ScalarType::F32 => matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max),
                    _ => matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Min | BinOp::Max),
                };
                ok.then_some(t)?
            }
            Expr::Cmp(op, a, b) => {
                let t = self.lanes_of(a, plan, loads)?;
                if self.lanes_of(b, plan, loads)? != t || (t == ScalarType::Bool && !matches!(op, CmpOp::Eq | CmpOp::Ne)) {
                    return None;
                }
                ScalarType::Bool
            }
            Expr::Select(c, a, b) => {
                if self.lanes_of(c, plan, loads)? != ScalarType::Bool {
                    return None;
                }
                let t = self.lanes_of(a, plan, loads)?;
                (self.lanes_of(b, plan, loads)? == t).then_some(t)?
            }
            Expr::Cast(to, CastMode::Default, a) => {
                let from = self.lanes_of(a, plan, loads)?;
                // u32 has no exact conversion to or from f32 in four lanes.
                let u32_float = (from == ScalarType::U32 && *to == ScalarType::F32) || (from == ScalarType::F32 && *to == ScalarType::U32);
                (has_lanes(*to) && !u32_float).then_some(*to)?
            }
            Expr::Math(MathFn::Exp | MathFn::Tanh | MathFn::Erf, args) if args.len() == 1 => (self.lanes_of(&args[0], plan, loads)? == ScalarType::F32).then_some(ScalarType::F32)?,
            Expr::Bitcast(..) | Expr::Math(..) => return None,
        };
        has_lanes(t).then_some(t)
    }

    /// `for var in lo..hi { body }`, four iterations at a time while four remain, then one at a
    /// time.
    pub(crate) fn vector_loop(&mut self, plan: &Plan, lo: Value, hi: Value, body: &[Stmt]) -> Result<(), CodegenError> {
        let (var, _) = self.var(plan.var)?;
        // An empty range (`hi ≤ lo`) has no whole vectors, and its tail runs nothing.
        let len = self.b.ins().isub(hi, lo);
        let zero = self.b.ins().iconst(types::I64, 0);
        let len = self.b.ins().smax(len, zero);
        let whole = self.b.ins().band_imm_u(len, !(LANES - 1));
        let split = self.b.ins().iadd(lo, whole);
        // Each accumulator's value in all four lanes: max and min are idempotent.
        let mut partial = HashMap::new();
        for &(acc, _, t) in &plan.reductions {
            let (scalar, _) = self.var(acc)?;
            let current = self.b.use_var(scalar);
            let lanes = self.splat(current, t);
            let v = self.b.declare_var(vector_type(t));
            self.b.def_var(v, lanes);
            partial.insert(acc, v);
        }
        self.counted(lo, split, LANES, |cx, i| {
            cx.b.def_var(var, i);
            let mut values = HashMap::new();
            body.iter().try_for_each(|s| cx.vector_stmt(s, plan, &mut values, &partial))
        })?;
        for &(acc, op, t) in &plan.reductions {
            let lanes = self.b.use_var(partial[&acc]);
            let mut r = self.b.ins().extractlane(lanes, 0);
            for k in 1..LANES as u8 {
                let x = self.b.ins().extractlane(lanes, k);
                r = self.combine(op, t, r, x);
            }
            let (scalar, _) = self.var(acc)?;
            let r = if t.is_float() || cl_type(t) == types::I32 { r } else { self.b.ins().ireduce(cl_type(t), r) };
            self.b.def_var(scalar, r);
        }
        self.counted(split, hi, 1, |cx, i| {
            cx.b.def_var(var, i);
            cx.stmts(body)
        })
    }

    /// A bottom-tested loop over `lo, lo + step, ...` below `hi`, `body` given the counter.
    pub(crate) fn counted(&mut self, lo: Value, hi: Value, step: i64, mut body: impl FnMut(&mut Self, Value) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        let head = self.b.create_block();
        let exit = self.b.create_block();
        let i = self.b.append_block_param(head, types::I64);
        let any = self.b.ins().icmp(IntCC::SignedLessThan, lo, hi);
        self.b.ins().brif(any, head, &[BlockArg::Value(lo)], exit, &[]);
        self.b.switch_to_block(head);
        body(self, i)?;
        let next = self.b.ins().iadd_imm_u(i, step);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, hi);
        self.b.ins().brif(more, head, &[BlockArg::Value(next)], exit, &[]);
        self.b.seal_block(head);
        self.b.seal_block(exit);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// `op` (max or min) of two lanes of type `t` as extracted: `f32`, or `i32` in normal form.
    fn combine(&mut self, op: BinOp, t: ScalarType, x: Value, y: Value) -> Value {
        let ins = self.b.ins();
        match (op, t) {
            (BinOp::Max, ScalarType::F32) => ins.fmax(x, y),
            (_, ScalarType::F32) => ins.fmin(x, y),
            (BinOp::Max, ScalarType::U32) => ins.umax(x, y),
            (_, ScalarType::U32) => ins.umin(x, y),
            (BinOp::Max, _) => ins.smax(x, y),
            _ => ins.smin(x, y),
        }
    }

    pub(crate) fn vector_stmt(&mut self, s: &Stmt, plan: &Plan, values: &mut HashMap<Var, Value>, partial: &HashMap<Var, cranelift_frontend::Variable>) -> Result<(), CodegenError> {
        match s {
            Stmt::Assign(acc, Expr::Binary(op, a, b)) if partial.contains_key(acc) => {
                let e = if matches!(&**a, Expr::Var(v) if v == acc) { b } else { a };
                let t = self.var(*acc)?.1;
                let (x, _) = self.vexpr(e, plan, values)?;
                let current = self.b.use_var(partial[acc]);
                let next = self.vbinary(*op, t, current, x);
                self.b.def_var(partial[acc], next);
                Ok(())
            }
            Stmt::Let(v, e) if plan.vectors.contains(v) => {
                let (x, _) = self.vexpr(e, plan, values)?;
                values.insert(*v, x);
                Ok(())
            }
            Stmt::Store { buf, index, value } => {
                let (x, t) = self.vexpr(value, plan, values)?;
                if let Some((held, v)) = self.held
                    && held == *buf
                {
                    self.b.def_var(v, x);
                    return Ok(());
                }
                let addr = self.address(*buf, index)?;
                self.vector_store(t, addr, x);
                Ok(())
            }
            // Indices and values the same in every lane: as scalar code, for the first lane.
            other => self.stmts(std::slice::from_ref(other)),
        }
    }

    /// Four lanes of `e` and their element type.
    fn vexpr(&mut self, e: &Expr, plan: &Plan, values: &HashMap<Var, Value>) -> Result<(Value, ScalarType), CodegenError> {
        if !plan.varies(e) {
            let (x, t) = self.expr(e)?;
            return Ok((self.splat(x, t), t));
        }
        Ok(match e {
            Expr::Var(v) => {
                let x = values.get(v).copied().ok_or_else(|| self.invalid(format!("{v:?} has no vector value")))?;
                (x, self.var(*v)?.1)
            }
            Expr::Load { buf, index } => {
                let ElemType::Scalar(t) = self.elem_of(*buf).ok_or_else(|| self.invalid(format!("{buf:?} does not exist")))? else {
                    return Err(self.invalid("a vector load of a converted element type"));
                };
                if let Some((held, v)) = self.held
                    && held == *buf
                {
                    return Ok((self.b.use_var(v), t));
                }
                let addr = self.address(*buf, index)?;
                let flags = self.read_flags(*buf);
                (self.vector_load(t, flags, addr), t)
            }
            Expr::Unary(op, a) => {
                let (x, t) = self.vexpr(a, plan, values)?;
                self.vunary(*op, t, x)
            }
            Expr::Binary(op, a, b) => {
                let (x, t) = self.vexpr(a, plan, values)?;
                let (y, _) = self.vexpr(b, plan, values)?;
                (self.vbinary(*op, t, x, y), t)
            }
            Expr::Cmp(op, a, b) => {
                let (x, t) = self.vexpr(a, plan, values)?;
                let (y, _) = self.vexpr(b, plan, values)?;
                (self.vcompare(*op, t, x, y), ScalarType::Bool)
            }
            Expr::Select(c, a, b) => {
                let (m, _) = self.vexpr(c, plan, values)?;
                let (x, t) = self.vexpr(a, plan, values)?;
                let (y, _) = self.vexpr(b, plan, values)?;
                let m = if t == ScalarType::F32 { self.b.ins().bitcast(types::F32X4, lanes(), m) } else { m };
                (self.b.ins().bitselect(m, x, y), t)
            }
            Expr::Cast(to, _, a) => {
                let (x, from) = self.vexpr(a, plan, values)?;
                let range = match &**a {
                    Expr::Var(v) => plan.clamped.get(v).copied(),
                    other => clamped(other, &plan.clamped),
                };
                match range {
                    Some(range) if from == ScalarType::F32 && fits(*to, range) => (self.truncate_in_range(x), *to),
                    _ => (self.vcast(*to, from, x), *to),
                }
            }
            Expr::Math(f @ (MathFn::Exp | MathFn::Tanh | MathFn::Erf), args) if args.len() == 1 => {
                let (x, _) = self.vexpr(&args[0], plan, values)?;
                (self.approx(*f, x, types::F32X4), ScalarType::F32)
            }
            other => return Err(self.invalid(format!("no vector form for {other:?}"))),
        })
    }

    /// Scalar `x` of type `t` in all four lanes of its vector form.
    fn splat(&mut self, x: Value, t: ScalarType) -> Value {
        let w = match t {
            ScalarType::F32 | ScalarType::I32 | ScalarType::U32 => x,
            ScalarType::Bool => {
                let w = self.b.ins().uextend(types::I32, x);
                self.b.ins().ineg(w)
            }
            t if t.is_signed_int() => self.b.ins().sextend(types::I32, x),
            _ => self.b.ins().uextend(types::I32, x),
        };
        self.b.ins().splat(vector_type(t), w)
    }

    fn splat_i32(&mut self, v: i64) -> Value {
        let c = self.b.ins().iconst(types::I32, v & 0xffff_ffff);
        self.b.ins().splat(types::I32X4, c)
    }

    /// Lanes of type `t` wrapped back to `t`'s width (its normal form in an `i32` lane).
    fn normalize(&mut self, t: ScalarType, x: Value) -> Value {
        match t {
            ScalarType::I8 | ScalarType::I16 => {
                let up = if t == ScalarType::I8 { 24 } else { 16 };
                let n = self.b.ins().iconst(types::I32, up);
                let x = self.b.ins().ishl(x, n);
                self.b.ins().sshr(x, n)
            }
            ScalarType::U8 | ScalarType::U16 => {
                let mask = self.splat_i32(if t == ScalarType::U8 { 0xff } else { 0xffff });
                self.b.ins().band(x, mask)
            }
            _ => x,
        }
    }

    pub(crate) fn vector_load(&mut self, t: ScalarType, flags: MemFlagsData, addr: Value) -> Value {
        match t {
            ScalarType::F32 => self.b.ins().load(types::F32X4, flags, addr, 0),
            ScalarType::I32 | ScalarType::U32 => self.b.ins().load(types::I32X4, flags, addr, 0),
            ScalarType::I16 | ScalarType::U16 => {
                let bits = self.b.ins().load(types::I64, flags, addr, 0);
                let v = self.b.ins().scalar_to_vector(types::I64X2, bits);
                let v = self.b.ins().bitcast(types::I16X8, lanes(), v);
                if t == ScalarType::I16 { self.b.ins().swiden_low(v) } else { self.b.ins().uwiden_low(v) }
            }
            _ => {
                let bits = self.b.ins().load(types::I32, flags, addr, 0);
                let v = self.b.ins().scalar_to_vector(types::I32X4, bits);
                let v = self.b.ins().bitcast(types::I8X16, lanes(), v);
                let signed = t == ScalarType::I8;
                let v = if signed { self.b.ins().swiden_low(v) } else { self.b.ins().uwiden_low(v) };
                let v = if signed { self.b.ins().swiden_low(v) } else { self.b.ins().uwiden_low(v) };
                if t == ScalarType::Bool {
                    // Any non-zero byte is true.
                    let zero = self.splat_i32(0);
                    self.b.ins().icmp(IntCC::NotEqual, v, zero)
                } else {
                    v
                }
            }
        }
    }

    pub(crate) fn vector_store(&mut self, t: ScalarType, addr: Value, x: Value) {
        let flags = buffer_flags();
        let x = if t == ScalarType::Bool {
            let one = self.splat_i32(1);
            self.b.ins().band(x, one)
        } else {
            x
        };
        match t {
            ScalarType::F32 | ScalarType::I32 | ScalarType::U32 => {
                self.b.ins().store(flags, x, addr, 0);
            }
            ScalarType::I16 | ScalarType::U16 => {
                // In range already, so the saturating narrowings only drop the high halves.
                let v = if t == ScalarType::I16 { self.b.ins().snarrow(x, x) } else { self.b.ins().unarrow(x, x) };
                let v = self.b.ins().bitcast(types::I64X2, lanes(), v);
                let bits = self.b.ins().extractlane(v, 0);
                self.b.ins().store(flags, bits, addr, 0);
            }
            _ => {
                let v = self.b.ins().snarrow(x, x);
                let v = if t == ScalarType::I8 { self.b.ins().snarrow(v, v) } else { self.b.ins().unarrow(v, v) };
                let v = self.b.ins().bitcast(types::I32X4, lanes(), v);
                let bits = self.b.ins().extractlane(v, 0);
                self.b.ins().store(flags, bits, addr, 0);
            }
        }
    }

    fn vunary(&mut self, op: UnOp, t: ScalarType, x: Value) -> (Value, ScalarType) {
        let ins = self.b.ins();
        let v = match (op, t) {
            (UnOp::Not, ScalarType::Bool) => ins.bnot(x),
            (UnOp::Neg, ScalarType::F32) => ins.fneg(x),
            (UnOp::Abs, ScalarType::F32) => ins.fabs(x),
            (UnOp::Floor, _) => ins.floor(x),
            (UnOp::Ceil, _) => ins.ceil(x),
            (UnOp::Round, _) => ins.nearest(x),
            (UnOp::Trunc, _) => ins.trunc(x),
            (UnOp::Sqrt, _) => ins.sqrt(x),
            (UnOp::IsNan, _) => {
                let m = ins.fcmp(FloatCC::Unordered, x, x);
                return (m, ScalarType::Bool);
            }
            (UnOp::Neg, _) => {
                let v = ins.ineg(x);
                self.normalize(t, v)
            }
            (UnOp::Abs, t) if t.is_signed_int() => {
                let v = ins.iabs(x);
                self.normalize(t, v)
            }
            (UnOp::Abs, _) => x,
            _ => {
                let v = ins.bnot(x);
                self.normalize(t, v)
            }
        };
        (v, t)
    }

    fn vbinary(&mut self, op: BinOp, t: ScalarType, x: Value, y: Value) -> Value {
        let ins = self.b.ins();
        if t == ScalarType::Bool {
            return match op {
                BinOp::Or | BinOp::Max => ins.bor(x, y),
                BinOp::Xor => ins.bxor(x, y),
                _ => ins.band(x, y),
            };
        }
        if t == ScalarType::F32 {
            return match op {
                BinOp::Add => ins.fadd(x, y),
                BinOp::Sub => ins.fsub(x, y),
                BinOp::Mul => ins.fmul(x, y),
                BinOp::Div => ins.fdiv(x, y),
                BinOp::Min => ins.fmin(x, y),
                _ => ins.fmax(x, y),
            };
        }
        // Narrow values in normal form compare correctly as signed 32-bit lanes.
        let unsigned = t == ScalarType::U32;
        let v = match op {
            BinOp::Add => ins.iadd(x, y),
            BinOp::Sub => ins.isub(x, y),
            BinOp::Mul => ins.imul(x, y),
            BinOp::And => return ins.band(x, y),
            BinOp::Or => return ins.bor(x, y),
            BinOp::Xor => return ins.bxor(x, y),
            BinOp::Min if unsigned => return ins.umin(x, y),
            BinOp::Min => return ins.smin(x, y),
            BinOp::Max if unsigned => return ins.umax(x, y),
            _ => return ins.smax(x, y),
        };
        self.normalize(t, v)
    }

    fn vcompare(&mut self, op: CmpOp, t: ScalarType, x: Value, y: Value) -> Value {
        if t == ScalarType::F32 {
            let cc = match op {
                CmpOp::Eq => FloatCC::Equal,
                CmpOp::Ne => FloatCC::NotEqual,
                CmpOp::Lt => FloatCC::LessThan,
                CmpOp::Le => FloatCC::LessThanOrEqual,
                CmpOp::Gt => FloatCC::GreaterThan,
                CmpOp::Ge => FloatCC::GreaterThanOrEqual,
            };
            return self.b.ins().fcmp(cc, x, y);
        }
        let unsigned = t == ScalarType::U32;
        let cc = match (op, unsigned) {
            (CmpOp::Eq, _) => IntCC::Equal,
            (CmpOp::Ne, _) => IntCC::NotEqual,
            (CmpOp::Lt, false) => IntCC::SignedLessThan,
            (CmpOp::Le, false) => IntCC::SignedLessThanOrEqual,
            (CmpOp::Gt, false) => IntCC::SignedGreaterThan,
            (CmpOp::Ge, false) => IntCC::SignedGreaterThanOrEqual,
            (CmpOp::Lt, true) => IntCC::UnsignedLessThan,
            (CmpOp::Le, true) => IntCC::UnsignedLessThanOrEqual,
            (CmpOp::Gt, true) => IntCC::UnsignedGreaterThan,
            (CmpOp::Ge, true) => IntCC::UnsignedGreaterThanOrEqual,
        };
        self.b.ins().icmp(cc, x, y)
    }

    /// The conversions of [`crate::expr`], lane by lane.
    /// `f32` lanes known to lie in an integer type's range (no NaN) truncated to `i32`: one
    /// `cvttps2dq` on x86-64, where `fcvt_to_sint_sat` adds the NaN and overflow fix-ups.
    fn truncate_in_range(&mut self, x: Value) -> Value {
        if self.module.isa().triple().architecture == target_lexicon::Architecture::X86_64 {
            self.b.ins().x86_cvtt2dq(types::I32X4, x)
        } else {
            self.b.ins().fcvt_to_sint_sat(types::I32X4, x)
        }
    }

    fn vcast(&mut self, to: ScalarType, from: ScalarType, x: Value) -> Value {
        if to == from {
            return x;
        }
        match (from, to) {
            (ScalarType::F32, ScalarType::Bool) => {
                let zero = self.b.ins().f32const(0.0);
                let zero = self.b.ins().splat(types::F32X4, zero);
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            (_, ScalarType::Bool) => {
                let zero = self.splat_i32(0);
                self.b.ins().icmp(IntCC::NotEqual, x, zero)
            }
            (ScalarType::F32, _) => {
                // Truncate and saturate to i32 (NaN → 0), then clamp to the type's range.
                let w = self.b.ins().fcvt_to_sint_sat(types::I32X4, x);
                let (lo, hi) = match to {
                    ScalarType::I8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
                    ScalarType::I16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
                    ScalarType::U8 => (0, i64::from(u8::MAX)),
                    ScalarType::U16 => (0, i64::from(u16::MAX)),
                    _ => return w,
                };
                let lo = self.splat_i32(lo);
                let hi = self.splat_i32(hi);
                let w = self.b.ins().smax(w, lo);
                self.b.ins().smin(w, hi)
            }
            (ScalarType::Bool, ScalarType::F32) => {
                let one = self.splat_i32(1);
                let w = self.b.ins().band(x, one);
                self.b.ins().fcvt_from_sint(types::F32X4, w)
            }
            (_, ScalarType::F32) => self.b.ins().fcvt_from_sint(types::F32X4, x),
            (ScalarType::Bool, _) => {
                let one = self.splat_i32(1);
                self.b.ins().band(x, one)
            }
            // The low bits of the exact value, read as `to`: wrapping narrowing, and widening
            // by `from`'s signedness (its normal form is already extended that way).
            _ => self.normalize(to, x),
        }
    }
}

/// How many times `s` mentions variable `v`.
fn stmt_mentions(s: &Stmt, v: Var) -> usize {
    fn expr(e: &Expr, v: Var) -> usize {
        let mut n = usize::from(matches!(e, Expr::Var(x) if *x == v));
        e.for_each_operand(|a| n += expr(a, v));
        n
    }
    match s {
        Stmt::Let(_, e) | Stmt::Assign(_, e) | Stmt::Local(_, e) | Stmt::Check { cond: e, .. } => expr(e, v),
        Stmt::Store { index, value, .. } => expr(index, v) + expr(value, v),
        _ => 0,
    }
}

/// Whether scalar code of `s` loads from a buffer at an index that does not vary: returns those
/// buffers.
fn uniform_loads(s: &Stmt, plan: &Plan) -> Vec<BufId> {
    fn walk(e: &Expr, plan: &Plan, out: &mut Vec<BufId>) {
        if let Expr::Load { buf, index } = e
            && !plan.varies(index)
        {
            out.push(*buf);
        }
        e.for_each_operand(|a| walk(a, plan, out));
    }
    let mut out = Vec::new();
    match s {
        Stmt::Let(_, e) | Stmt::Assign(_, e) => walk(e, plan, &mut out),
        Stmt::Store { index, value, .. } => {
            walk(index, plan, &mut out);
            walk(value, plan, &mut out);
        }
        _ => {}
    }
    out
}

/// The flags of vector buffer accesses: as scalar ones (`crate::memory`), any alignment.
fn buffer_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap().with_endianness(Endianness::Little)
}

/// The flags of bitcasts between vector types: lanes in little-endian order.
fn lanes() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}
