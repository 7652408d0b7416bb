//! Scalar expressions. Every value lives in the Cranelift type of its width (`bool` is an `i8`
//! holding 0 or 1; signed and unsigned integers share a type), so integer arithmetic wraps at
//! the type's width as the interpreter's normalization does; signedness picks the instruction
//! for division, remainder, shifts, min/max, comparisons and conversions.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use kiln_loops::{BinOp, CastMode, CmpOp, Expr, Scalar, ScalarType, UnOp};

use crate::kernel::Cx;
use crate::CodegenError;

/// The Cranelift type holding values of `t`.
pub(crate) fn cl_type(t: ScalarType) -> Type {
    match t {
        ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => types::I8,
        ScalarType::I16 | ScalarType::U16 => types::I16,
        ScalarType::I32 | ScalarType::U32 => types::I32,
        ScalarType::I64 | ScalarType::U64 => types::I64,
        ScalarType::F32 => types::F32,
        ScalarType::F64 => types::F64,
    }
}

fn is_int(t: ScalarType) -> bool {
    !t.is_float() && t != ScalarType::Bool
}

/// `v` wrapped to the width of `t`, sign- or zero-extended (the interpreter's normal form).
fn normalize(t: ScalarType, v: i64) -> i64 {
    match t {
        ScalarType::I8 => v as i8 as i64,
        ScalarType::I16 => v as i16 as i64,
        ScalarType::I32 => v as i32 as i64,
        ScalarType::U8 => v as u8 as i64,
        ScalarType::U16 => v as u16 as i64,
        ScalarType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// The value of an integer constant expression of type `t`, if `e` is one.
fn const_int(e: &Expr, t: ScalarType) -> Option<i64> {
    match e {
        Expr::Const(Scalar::Int(ct, v)) if *ct == t => Some(normalize(t, *v)),
        _ => None,
    }
}

impl Cx<'_, '_> {
    /// Translates `e`, checking it has type `want`.
    pub fn typed(&mut self, e: &Expr, want: ScalarType) -> Result<Value, CodegenError> {
        let (v, t) = self.expr(e)?;
        if t != want {
            return Err(self.invalid(format!("expected {}, found {}", want.name(), t.name())));
        }
        Ok(v)
    }

    /// Translates `e` to a value and its type.
    pub fn expr(&mut self, e: &Expr) -> Result<(Value, ScalarType), CodegenError> {
        Ok(match e {
            Expr::Const(s) => (self.constant(*s)?, s.ty()),
            Expr::Var(v) => {
                let (var, t) = self.var(*v)?;
                (self.b.use_var(var), t)
            }
            Expr::Load { buf, index } => self.load(*buf, index)?,
            Expr::Unary(op, a) => {
                let (x, t) = self.expr(a)?;
                self.unary(*op, x, t)?
            }
            Expr::Binary(op, a, b) => {
                let (x, t) = self.expr(a)?;
                let y = self.typed(b, t).map_err(|e| self.invalid(format!("{op:?}: {e}")))?;
                (self.binary(*op, t, x, y, const_int(b, t))?, t)
            }
            Expr::Cmp(op, a, b) => {
                let (x, t) = self.expr(a)?;
                let y = self.typed(b, t).map_err(|e| self.invalid(format!("{op:?}: {e}")))?;
                (self.compare(*op, t, x, y), ScalarType::Bool)
            }
            Expr::Select(c, a, b) => {
                let c = self.typed(c, ScalarType::Bool)?;
                let (x, t) = self.expr(a)?;
                let y = self.typed(b, t).map_err(|e| self.invalid(format!("select arms: {e}")))?;
                (self.b.ins().select(c, x, y), t)
            }
            Expr::Cast(to, CastMode::Default, a) => {
                let (x, from) = self.expr(a)?;
                (self.cast(*to, from, x), *to)
            }
            Expr::Bitcast(to, a) => {
                let (x, from) = self.expr(a)?;
                (self.bitcast(*to, from, x)?, *to)
            }
            Expr::Math(f, args) => self.math(*f, args)?,
        })
    }

    /// An integer constant of `t` (bit pattern `v`, wrapped to the width).
    pub fn int_const(&mut self, t: ScalarType, v: i64) -> Value {
        let ty = cl_type(t);
        let bits = ty.bits();
        let masked = if bits >= 64 { v } else { v & ((1i64 << bits) - 1) };
        self.b.ins().iconst(ty, masked)
    }

    fn constant(&mut self, s: Scalar) -> Result<Value, CodegenError> {
        Ok(match s {
            Scalar::Bool(b) => self.b.ins().iconst(types::I8, i64::from(b)),
            Scalar::Int(t, v) if is_int(t) => self.int_const(t, v),
            Scalar::Int(t, _) => return Err(self.invalid(format!("integer constant of type {}", t.name()))),
            Scalar::F32(f) => self.b.ins().f32const(f),
            Scalar::F64(f) => self.b.ins().f64const(f),
        })
    }

    fn unary(&mut self, op: UnOp, x: Value, t: ScalarType) -> Result<(Value, ScalarType), CodegenError> {
        let ins = self.b.ins();
        let v = match (op, t) {
            (UnOp::Not, ScalarType::Bool) => ins.bxor_imm_u(x, 1),
            (UnOp::Neg, t) if is_int(t) => ins.ineg(x),
            (UnOp::Abs, t) if t.is_signed_int() => ins.iabs(x),
            (UnOp::Abs, t) if is_int(t) => x,
            (UnOp::Not, t) if is_int(t) => ins.bnot(x),
            (UnOp::Neg, t) if t.is_float() => ins.fneg(x),
            (UnOp::Abs, t) if t.is_float() => ins.fabs(x),
            (UnOp::Floor, t) if t.is_float() => ins.floor(x),
            (UnOp::Ceil, t) if t.is_float() => ins.ceil(x),
            (UnOp::Round, t) if t.is_float() => ins.nearest(x),
            (UnOp::Trunc, t) if t.is_float() => ins.trunc(x),
            (UnOp::Sqrt, t) if t.is_float() => ins.sqrt(x),
            (UnOp::IsNan, t) if t.is_float() => return Ok((ins.fcmp(FloatCC::Unordered, x, x), ScalarType::Bool)),
            (op, t) => return Err(self.unsupported(format!("{op:?} of {}", t.name()))),
        };
        Ok((v, t))
    }

    /// `x op y` on operands of type `t`; `y_const` is `y`'s value when it is a constant.
    fn binary(&mut self, op: BinOp, t: ScalarType, x: Value, y: Value, y_const: Option<i64>) -> Result<Value, CodegenError> {
        if t == ScalarType::Bool {
            let ins = self.b.ins();
            return Ok(match op {
                BinOp::And | BinOp::Min | BinOp::Mul => ins.band(x, y),
                BinOp::Or | BinOp::Max => ins.bor(x, y),
                BinOp::Xor => ins.bxor(x, y),
                _ => return Err(self.unsupported(format!("{op:?} of bools"))),
            });
        }
        if t.is_float() {
            let ins = self.b.ins();
            return Ok(match op {
                BinOp::Add => ins.fadd(x, y),
                BinOp::Sub => ins.fsub(x, y),
                BinOp::Mul => ins.fmul(x, y),
                BinOp::Div => ins.fdiv(x, y),
                BinOp::Min => ins.fmin(x, y),
                BinOp::Max => ins.fmax(x, y),
                BinOp::Rem => return self.fmod(t, x, y),
                _ => return Err(self.unsupported(format!("{op:?} of {}", t.name()))),
            });
        }
        let signed = t.is_signed_int();
        let width = i64::from(cl_type(t).bits());
        Ok(match op {
            BinOp::Add => self.b.ins().iadd(x, y),
            BinOp::Sub => self.b.ins().isub(x, y),
            BinOp::Mul => self.b.ins().imul(x, y),
            BinOp::And => self.b.ins().band(x, y),
            BinOp::Or => self.b.ins().bor(x, y),
            BinOp::Xor => self.b.ins().bxor(x, y),
            BinOp::Min if signed => self.b.ins().smin(x, y),
            BinOp::Min => self.b.ins().umin(x, y),
            BinOp::Max if signed => self.b.ins().smax(x, y),
            BinOp::Max => self.b.ins().umax(x, y),
            BinOp::Div | BinOp::Rem => self.divide(op == BinOp::Div, signed, t, x, y, y_const),
            // Shifts by the width or more: the interpreter shifts the 64-bit normal form, so a
            // left or logical shift gives 0 and an arithmetic one the sign; Cranelift would
            // take the amount modulo the width.
            BinOp::Shl | BinOp::Shr => match y_const {
                Some(s) if (0..width).contains(&s) => match (op, signed) {
                    (BinOp::Shl, _) => self.b.ins().ishl_imm_u(x, s),
                    (_, true) => self.b.ins().sshr_imm_u(x, s),
                    (_, false) => self.b.ins().ushr_imm_u(x, s),
                },
                _ if op == BinOp::Shr && signed => {
                    let max = self.int_const(t, width - 1);
                    let s = self.b.ins().umin(y, max);
                    self.b.ins().sshr(x, s)
                }
                _ => {
                    let shifted = if op == BinOp::Shl { self.b.ins().ishl(x, y) } else { self.b.ins().ushr(x, y) };
                    let too_far = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, width);
                    let zero = self.int_const(t, 0);
                    self.b.ins().select(too_far, zero, shifted)
                }
            },
        })
    }

    /// Integer division or remainder, truncating. Cranelift traps on a zero divisor and on
    /// `MIN / -1`; the interpreter wraps the latter (`MIN / -1 = MIN`, `MIN % -1 = 0`) and
    /// rejects the former, which lowering must have checked. Generated code never traps: a
    /// zero divisor is replaced by 1 (the result is then meaningless but defined).
    fn divide(&mut self, div: bool, signed: bool, t: ScalarType, x: Value, y: Value, y_const: Option<i64>) -> Value {
        let safe_const = matches!(y_const, Some(c) if c != 0 && (c != -1 || !signed));
        if safe_const {
            let ins = self.b.ins();
            return match (div, signed) {
                (true, true) => ins.sdiv(x, y),
                (true, false) => ins.udiv(x, y),
                (false, true) => ins.srem(x, y),
                (false, false) => ins.urem(x, y),
            };
        }
        let one = self.int_const(t, 1);
        let is_zero = self.b.ins().icmp_imm_u(IntCC::Equal, y, 0);
        if !signed {
            let d = self.b.ins().select(is_zero, one, y);
            return if div { self.b.ins().udiv(x, d) } else { self.b.ins().urem(x, d) };
        }
        let is_minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let replace = self.b.ins().bor(is_zero, is_minus_one);
        let d = self.b.ins().select(replace, one, y);
        if div {
            // x / -1 = -x (wrapping); x / 1 = x.
            let q = self.b.ins().sdiv(x, d);
            let neg = self.b.ins().ineg(x);
            self.b.ins().select(is_minus_one, neg, q)
        } else {
            // x % 1 = 0 = x % -1.
            self.b.ins().srem(x, d)
        }
    }

    fn compare(&mut self, op: CmpOp, t: ScalarType, x: Value, y: Value) -> Value {
        if t.is_float() {
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
        let signed = t.is_signed_int();
        let cc = match (op, signed) {
            (CmpOp::Eq, _) => IntCC::Equal,
            (CmpOp::Ne, _) => IntCC::NotEqual,
            (CmpOp::Lt, true) => IntCC::SignedLessThan,
            (CmpOp::Le, true) => IntCC::SignedLessThanOrEqual,
            (CmpOp::Gt, true) => IntCC::SignedGreaterThan,
            (CmpOp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
            (CmpOp::Lt, false) => IntCC::UnsignedLessThan,
            (CmpOp::Le, false) => IntCC::UnsignedLessThanOrEqual,
            (CmpOp::Gt, false) => IntCC::UnsignedGreaterThan,
            (CmpOp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
        };
        self.b.ins().icmp(cc, x, y)
    }

    /// Integer `x` of type `from` as the Cranelift type `to`: narrowed by truncation, widened
    /// by sign or zero extension according to `from`'s signedness.
    pub fn resize(&mut self, x: Value, from: ScalarType, to: Type) -> Value {
        let have = cl_type(from);
        if have.bits() > to.bits() {
            self.b.ins().ireduce(to, x)
        } else if have.bits() < to.bits() {
            if from.is_signed_int() { self.b.ins().sextend(to, x) } else { self.b.ins().uextend(to, x) }
        } else {
            x
        }
    }

    /// [`CastMode::Default`] conversion (see its doc and `Val::cast` in the interpreter).
    fn cast(&mut self, to: ScalarType, from: ScalarType, x: Value) -> Value {
        if to == from {
            return x;
        }
        let to_ty = cl_type(to);
        match (from.is_float(), to) {
            (true, ScalarType::Bool) => {
                let zero = if from == ScalarType::F32 { self.b.ins().f32const(0.0) } else { self.b.ins().f64const(0.0) };
                // NaN != 0 is true, as in the interpreter.
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            (false, ScalarType::Bool) => self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0),
            (true, ScalarType::F32) => self.b.ins().fdemote(types::F32, x),
            (true, ScalarType::F64) => self.b.ins().fpromote(types::F64, x),
            (false, ScalarType::F32 | ScalarType::F64) => {
                // One rounding from the exact integer; narrow types widen first.
                if from == ScalarType::U64 {
                    self.b.ins().fcvt_from_uint(to_ty, x)
                } else {
                    let wide = if from == ScalarType::U32 { types::I64 } else { types::I32.max_bits_with(cl_type(from)) };
                    let w = self.resize(x, if from == ScalarType::Bool { ScalarType::U8 } else { from }, wide);
                    self.b.ins().fcvt_from_sint(to_ty, w)
                }
            }
            (false, _) => self.resize(x, if from == ScalarType::Bool { ScalarType::U8 } else { from }, to_ty),
            (true, _) => self.float_to_int(to, x),
        }
    }

    /// Float → integer: truncate toward zero, saturate at `to`'s range, NaN → 0.
    fn float_to_int(&mut self, to: ScalarType, x: Value) -> Value {
        let ins = self.b.ins();
        match to {
            ScalarType::I64 => ins.fcvt_to_sint_sat(types::I64, x),
            ScalarType::U64 => ins.fcvt_to_uint_sat(types::I64, x),
            ScalarType::I32 => ins.fcvt_to_sint_sat(types::I32, x),
            ScalarType::U32 => ins.fcvt_to_uint_sat(types::I32, x),
            ScalarType::I8 | ScalarType::I16 => {
                let (lo, hi) = if to == ScalarType::I8 { (i8::MIN as i64, i8::MAX as i64) } else { (i16::MIN as i64, i16::MAX as i64) };
                let w = ins.fcvt_to_sint_sat(types::I32, x);
                let lo = self.b.ins().iconst(types::I32, lo & 0xffff_ffff);
                let hi = self.b.ins().iconst(types::I32, hi);
                let w = self.b.ins().smax(w, lo);
                let w = self.b.ins().smin(w, hi);
                self.b.ins().ireduce(cl_type(to), w)
            }
            _ => {
                let hi = if to == ScalarType::U8 { u8::MAX as i64 } else { u16::MAX as i64 };
                let w = ins.fcvt_to_uint_sat(types::I32, x);
                let hi = self.b.ins().iconst(types::I32, hi);
                let w = self.b.ins().umin(w, hi);
                self.b.ins().ireduce(cl_type(to), w)
            }
        }
    }

    /// Reinterprets the bits of `x` as `to` (same width).
    fn bitcast(&mut self, to: ScalarType, from: ScalarType, x: Value) -> Result<Value, CodegenError> {
        if to.bytes() != from.bytes() {
            return Err(self.invalid(format!("bitcast from {} to {} changes the width", from.name(), to.name())));
        }
        Ok(if to == ScalarType::Bool {
            // The interpreter keeps the lowest bit.
            self.b.ins().band_imm_u(x, 1)
        } else if cl_type(to) == cl_type(from) {
            x
        } else {
            self.b.ins().bitcast(cl_type(to), MemFlagsData::new(), x)
        })
    }
}

/// Picks the wider of two integer types.
trait MaxBits {
    fn max_bits_with(self, other: Type) -> Type;
}

impl MaxBits for Type {
    fn max_bits_with(self, other: Type) -> Type {
        if other.bits() > self.bits() { other } else { self }
    }
}
