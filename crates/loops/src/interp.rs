//! A loop-IR interpreter: the semantics of every statement and expression, spelled out.
//!
//! It is a test oracle for the code generator and lets lowering be tested without it. It
//! checks what generated code assumes: every load and store is in bounds, integer division
//! has a non-zero divisor. A violation is an error here (a lowering bug), never a panic.

use kiln_runtime::minifloat;

use crate::ir::*;

mod calls;
mod windowed;

/// A scalar value at run time. Integers are kept sign- or zero-extended to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    /// A truth value.
    Bool(bool),
    /// An integer of the given type.
    Int(ScalarType, i64),
    /// An `f32`.
    F32(f32),
    /// An `f64`.
    F64(f64),
}

/// Why interpretation stopped.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// A `Check` failed: the program's run-time error `code`.
    #[error("run-time error {code}: {message}")]
    Check {
        /// The error code.
        code: u32,
        /// Its message.
        message: String,
    },
    /// The program is wrong: an out-of-bounds access, a type mismatch, division by zero.
    #[error("kernel `{kernel}`: {message}")]
    Fault {
        /// The kernel.
        kernel: String,
        /// What went wrong.
        message: String,
    },
}

fn normalize(ty: ScalarType, v: i64) -> i64 {
    match ty {
        ScalarType::I8 => v as i8 as i64,
        ScalarType::I16 => v as i16 as i64,
        ScalarType::I32 => v as i32 as i64,
        ScalarType::U8 => v as u8 as i64,
        ScalarType::U16 => v as u16 as i64,
        ScalarType::U32 => v as u32 as i64,
        _ => v,
    }
}

impl Val {
    /// The value's type.
    pub fn ty(self) -> ScalarType {
        match self {
            Val::Bool(_) => ScalarType::Bool,
            Val::Int(t, _) => t,
            Val::F32(_) => ScalarType::F32,
            Val::F64(_) => ScalarType::F64,
        }
    }

    fn from_scalar(s: Scalar) -> Val {
        match s {
            Scalar::Bool(b) => Val::Bool(b),
            Scalar::Int(t, v) => Val::Int(t, normalize(t, v)),
            Scalar::F32(f) => Val::F32(f),
            Scalar::F64(f) => Val::F64(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Val::Bool(b) => f64::from(u8::from(b)),
            Val::Int(t, v) if t == ScalarType::U64 => v as u64 as f64,
            Val::Int(_, v) => v as f64,
            Val::F32(f) => f64::from(f),
            Val::F64(f) => f,
        }
    }

    /// Converts with [`CastMode::Default`] semantics.
    pub fn cast(self, to: ScalarType) -> Val {
        match to {
            ScalarType::Bool => Val::Bool(match self {
                Val::Bool(b) => b,
                Val::Int(_, v) => v != 0,
                Val::F32(f) => f != 0.0,
                Val::F64(f) => f != 0.0,
            }),
            ScalarType::F32 => match self {
                Val::Int(t, v) if t == ScalarType::U64 => Val::F32(v as u64 as f32),
                Val::Int(_, v) => Val::F32(v as f32),
                Val::F64(f) => Val::F32(f as f32),
                other => Val::F32(other.as_f64() as f32),
            },
            ScalarType::F64 => Val::F64(self.as_f64()),
            t => {
                let v = match self {
                    Val::Bool(b) => i64::from(b),
                    Val::Int(_, v) => v,
                    // Float → int truncates toward zero and saturates at the target's range.
                    Val::F32(_) | Val::F64(_) => {
                        let f = self.as_f64();
                        let (lo, hi) = int_range(t);
                        if f.is_nan() {
                            0
                        } else if t == ScalarType::U64 {
                            (f.trunc().clamp(0.0, u64::MAX as f64) as u64) as i64
                        } else {
                            (f.trunc().clamp(lo as f64, hi as f64)) as i64
                        }
                    }
                };
                Val::Int(t, normalize(t, v))
            }
        }
    }
}

/// The sign-exponent-mantissa format of a float8 or float4 storage type (not e8m0).
fn minifloat_format(elem: ElemType) -> Option<minifloat::Format> {
    Some(match elem {
        ElemType::F8E4M3FN => minifloat::E4M3FN,
        ElemType::F8E4M3FNUZ => minifloat::E4M3FNUZ,
        ElemType::F8E5M2 => minifloat::E5M2,
        ElemType::F8E5M2FNUZ => minifloat::E5M2FNUZ,
        ElemType::F4E2M1 => minifloat::E2M1,
        _ => return None,
    })
}

fn int_range(t: ScalarType) -> (i64, i64) {
    match t {
        ScalarType::I8 => (i8::MIN.into(), i8::MAX.into()),
        ScalarType::I16 => (i16::MIN.into(), i16::MAX.into()),
        ScalarType::I32 => (i32::MIN.into(), i32::MAX.into()),
        ScalarType::U8 => (0, u8::MAX.into()),
        ScalarType::U16 => (0, u16::MAX.into()),
        ScalarType::U32 => (0, u32::MAX.into()),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Runs `program` on `memory`: one byte vector per buffer, each `buffer.bytes()` long.
pub fn run(program: &Program, memory: &mut [Vec<u8>]) -> Result<(), InterpError> {
    for kernel in &program.kernels {
        let mut m = Machine { program, memory, vars: vec![None; kernel.vars.len()], kernel };
        m.block(&kernel.body)?;
    }
    Ok(())
}

struct Machine<'a> {
    program: &'a Program,
    memory: &'a mut [Vec<u8>],
    vars: Vec<Option<Val>>,
    kernel: &'a Kernel,
}

impl Machine<'_> {
    fn fault<T>(&self, message: impl Into<String>) -> Result<T, InterpError> {
        Err(InterpError::Fault { kernel: self.kernel.name.clone(), message: message.into() })
    }

    fn block(&mut self, stmts: &[Stmt]) -> Result<(), InterpError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), InterpError> {
        match s {
            Stmt::For { var, extent, body } => {
                for i in 0..*extent {
                    self.set(*var, Val::Int(ScalarType::I64, i as i64))?;
                    self.block(body)?;
                }
            }
            Stmt::Let(v, e) | Stmt::Local(v, e) | Stmt::Assign(v, e) => {
                let x = self.expr(e)?;
                self.set(*v, x)?;
            }
            Stmt::Store { buf, index, value } => {
                let i = self.index(index)?;
                let x = self.expr(value)?;
                self.store(*buf, i, x)?;
            }
            Stmt::If { cond, then, otherwise } => {
                if self.truth(cond)? {
                    self.block(then)?;
                } else {
                    self.block(otherwise)?;
                }
            }
            Stmt::Check { cond, error } => {
                if !self.truth(cond)? {
                    let message = self.program.errors.get(*error as usize).cloned().unwrap_or_default();
                    return Err(InterpError::Check { code: *error, message });
                }
            }
            Stmt::Call(call) => self.call(call)?,
        }
        Ok(())
    }

    fn set(&mut self, v: Var, x: Val) -> Result<(), InterpError> {
        let Some(&ty) = self.kernel.vars.get(v.0 as usize) else {
            return self.fault(format!("{v:?} is not declared"));
        };
        if ty != x.ty() {
            return self.fault(format!("{v:?} is {} but gets a {}", ty.name(), x.ty().name()));
        }
        self.vars[v.0 as usize] = Some(x);
        Ok(())
    }

    fn truth(&mut self, e: &Expr) -> Result<bool, InterpError> {
        match self.expr(e)? {
            Val::Bool(b) => Ok(b),
            other => self.fault(format!("condition is {}, not bool", other.ty().name())),
        }
    }

    fn index(&mut self, e: &Expr) -> Result<i64, InterpError> {
        match self.expr(e)? {
            Val::Int(ScalarType::I64, i) => Ok(i),
            other => self.fault(format!("index is {}, not i64", other.ty().name())),
        }
    }

    /// The byte offset of element `i` of `buf`, the bit offset of the element within that
    /// byte (non-zero only for packed types), and the element type.
    fn slot(&self, buf: BufId, i: i64) -> Result<(usize, u32, ElemType), InterpError> {
        let Some(b) = self.program.buffers.get(buf.0 as usize) else {
            return self.fault(format!("{buf:?} does not exist"));
        };
        if i < 0 || i as u64 >= b.len {
            return self.fault(format!("index {i} is outside {buf:?} ({} elements, `{}`)", b.len, b.name));
        }
        let bit = i as u64 * u64::from(b.elem.bits());
        Ok(((bit / 8) as usize, (bit % 8) as u32, b.elem))
    }

    fn load(&self, buf: BufId, i: i64) -> Result<Val, InterpError> {
        let (at, shift, elem) = self.slot(buf, i)?;
        let bytes = &self.memory[buf.0 as usize];
        let n = elem.bits().div_ceil(8) as usize;
        let Some(raw) = bytes.get(at..at + n) else {
            return self.fault(format!("{buf:?} has {} bytes of memory, less than its length", bytes.len()));
        };
        let mut b8 = [0u8; 8];
        b8[..n].copy_from_slice(raw);
        let mut u = u64::from_le_bytes(b8);
        if elem.is_packed() {
            u = (u >> shift) & ((1 << elem.bits()) - 1);
        }
        Ok(match elem {
            ElemType::F16 => Val::F32(half::f16::from_bits(u as u16).to_f32()),
            ElemType::BF16 => Val::F32(half::bf16::from_bits(u as u16).to_f32()),
            ElemType::F8E8M0 => Val::F32(minifloat::e8m0_decode(u as u8)),
            ElemType::I4 | ElemType::I2 => {
                // Sign-extend from the element's width.
                let shift = 64 - elem.bits();
                Val::Int(ScalarType::I8, ((u << shift) as i64) >> shift)
            }
            ElemType::U4 | ElemType::U2 => Val::Int(ScalarType::U8, u as i64),
            ElemType::Scalar(ScalarType::Bool) => Val::Bool(u != 0),
            ElemType::Scalar(ScalarType::F32) => Val::F32(f32::from_bits(u as u32)),
            ElemType::Scalar(ScalarType::F64) => Val::F64(f64::from_bits(u)),
            ElemType::Scalar(t) => {
                // Sign-extend signed types from their width.
                let shift = 64 - 8 * n as u32;
                let v = if t.is_signed_int() { ((u << shift) as i64) >> shift } else { u as i64 };
                Val::Int(t, v)
            }
            ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ | ElemType::F4E2M1 => match minifloat_format(elem) {
                Some(f) => Val::F32(f.decode(u as u32)),
                None => return self.fault(format!("no decoding for {}", elem.name())),
            },
        })
    }

    fn store(&mut self, buf: BufId, i: i64, x: Val) -> Result<(), InterpError> {
        let (at, shift, elem) = self.slot(buf, i)?;
        if x.ty() != elem.value_type() {
            return self.fault(format!("storing a {} into {buf:?} of {}", x.ty().name(), elem.name()));
        }
        let bits: u64 = match (elem, x) {
            (ElemType::F16, Val::F32(f)) => u64::from(half::f16::from_f32(f).to_bits()),
            (ElemType::BF16, Val::F32(f)) => u64::from(half::bf16::from_f32(f).to_bits()),
            (ElemType::F8E8M0, Val::F32(f)) => u64::from(minifloat::e8m0_encode(f)),
            (ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ | ElemType::F4E2M1, Val::F32(f)) => match minifloat_format(elem) {
                Some(m) => u64::from(m.encode(f)),
                None => return self.fault(format!("no encoding for {}", elem.name())),
            },
            (_, Val::Bool(b)) => u64::from(b),
            (_, Val::Int(_, v)) => v as u64,
            (_, Val::F32(f)) => u64::from(f.to_bits()),
            (_, Val::F64(f)) => f.to_bits(),
        };
        let n = elem.bits().div_ceil(8) as usize;
        let mem = &mut self.memory[buf.0 as usize];
        if mem.len() < at + n {
            return self.fault(format!("{buf:?} has less memory than its length"));
        }
        if elem.is_packed() {
            // Read-modify-write of the byte holding the element.
            let mask = ((1u16 << elem.bits()) - 1) as u8;
            mem[at] = (mem[at] & !(mask << shift)) | ((bits as u8 & mask) << shift);
        } else {
            mem[at..at + n].copy_from_slice(&bits.to_le_bytes()[..n]);
        }
        Ok(())
    }

    /// `len` consecutive `f32` elements of `buf` from element `start`, bounds- and type-checked
    /// (for a runtime call, named `what`).
    fn f32_span(&self, what: &str, buf: BufId, start: i64, len: usize) -> Result<Vec<f32>, InterpError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let (at, _, elem) = self.slot(buf, start)?;
        self.slot(buf, start.saturating_add(i64::try_from(len - 1).unwrap_or(i64::MAX)))?;
        if elem != ElemType::Scalar(ScalarType::F32) {
            return self.fault(format!("{what} on {buf:?} of {}, not f32", elem.name()));
        }
        let Some(bytes) = self.memory[buf.0 as usize].get(at..at + 4 * len) else {
            return self.fault(format!("{buf:?} has less memory than its length"));
        };
        Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// Stores `xs` into `f32` buffer `buf` from element `start` (checked by [`Self::f32_span`]).
    fn store_f32_span(&mut self, buf: BufId, start: i64, xs: &[f32]) -> Result<(), InterpError> {
        if xs.is_empty() {
            return Ok(());
        }
        let (at, _, _) = self.slot(buf, start)?;
        let Some(bytes) = self.memory[buf.0 as usize].get_mut(at..at + 4 * xs.len()) else {
            return self.fault(format!("{buf:?} has less memory than its length"));
        };
        for (b, x) in bytes.chunks_exact_mut(4).zip(xs) {
            b.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    }

    fn expr(&mut self, e: &Expr) -> Result<Val, InterpError> {
        Ok(match e {
            Expr::Const(s) => Val::from_scalar(*s),
            Expr::Var(v) => match self.vars.get(v.0 as usize).copied().flatten() {
                Some(x) => x,
                None => return self.fault(format!("{v:?} is read before it is set")),
            },
            Expr::Load { buf, index } => {
                let i = self.index(index)?;
                self.load(*buf, i)?
            }
            Expr::Unary(op, a) => {
                let a = self.expr(a)?;
                self.unary(*op, a)?
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if a.ty() != b.ty() {
                    return self.fault(format!("{op:?} of {} and {}", a.ty().name(), b.ty().name()));
                }
                self.binary(*op, a, b)?
            }
            Expr::Cmp(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if a.ty() != b.ty() {
                    return self.fault(format!("{op:?} of {} and {}", a.ty().name(), b.ty().name()));
                }
                Val::Bool(compare(*op, a, b))
            }
            Expr::Select(c, a, b) => {
                let c = self.truth(c)?;
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if a.ty() != b.ty() {
                    return self.fault("select arms differ in type");
                }
                if c { a } else { b }
            }
            Expr::Cast(ty, CastMode::Default, a) => self.expr(a)?.cast(*ty),
            Expr::Bitcast(ty, a) => {
                let a = self.expr(a)?;
                if a.ty().bytes() != ty.bytes() {
                    return self.fault("bitcast between different widths");
                }
                let bits = match a {
                    Val::Bool(b) => u64::from(b),
                    Val::Int(_, v) => v as u64,
                    Val::F32(f) => u64::from(f.to_bits()),
                    Val::F64(f) => f.to_bits(),
                };
                match ty {
                    ScalarType::F32 => Val::F32(f32::from_bits(bits as u32)),
                    ScalarType::F64 => Val::F64(f64::from_bits(bits)),
                    ScalarType::Bool => Val::Bool(bits & 1 != 0),
                    t => Val::Int(*t, normalize(*t, bits as i64)),
                }
            }
            Expr::Math(f, args) => {
                let vals = args.iter().map(|a| self.expr(a)).collect::<Result<Vec<_>, _>>()?;
                math(*f, &vals).map_or_else(|m| self.fault(m), Ok)?
            }
        })
    }

    fn unary(&self, op: UnOp, a: Val) -> Result<Val, InterpError> {
        Ok(match (op, a) {
            (UnOp::Neg, Val::Int(t, v)) => Val::Int(t, normalize(t, v.wrapping_neg())),
            (UnOp::Neg, Val::F32(f)) => Val::F32(-f),
            (UnOp::Neg, Val::F64(f)) => Val::F64(-f),
            (UnOp::Abs, Val::Int(t, v)) => Val::Int(t, normalize(t, if t.is_signed_int() { v.wrapping_abs() } else { v })),
            (UnOp::Abs, Val::F32(f)) => Val::F32(f.abs()),
            (UnOp::Abs, Val::F64(f)) => Val::F64(f.abs()),
            (UnOp::Not, Val::Bool(b)) => Val::Bool(!b),
            (UnOp::Not, Val::Int(t, v)) => Val::Int(t, normalize(t, !v)),
            (UnOp::IsNan, Val::F32(f)) => Val::Bool(f.is_nan()),
            (UnOp::IsNan, Val::F64(f)) => Val::Bool(f.is_nan()),
            (UnOp::Not, a) => return self.fault(format!("Not of {}", a.ty().name())),
            (op, Val::F32(f)) => Val::F32(float_un(op, f64::from(f)) as f32),
            (op, Val::F64(f)) => Val::F64(float_un(op, f)),
            (op, a) => return self.fault(format!("{op:?} of {}", a.ty().name())),
        })
    }

    fn binary(&self, op: BinOp, a: Val, b: Val) -> Result<Val, InterpError> {
        Ok(match (a, b) {
            (Val::Bool(x), Val::Bool(y)) => Val::Bool(match op {
                BinOp::And | BinOp::Min | BinOp::Mul => x && y,
                BinOp::Or | BinOp::Max => x || y,
                BinOp::Xor => x != y,
                _ => return self.fault(format!("{op:?} of bools")),
            }),
            (Val::Int(t, x), Val::Int(_, y)) => {
                let unsigned = !t.is_signed_int();
                let (ux, uy) = (x as u64, y as u64);
                let v = match op {
                    BinOp::Add => x.wrapping_add(y),
                    BinOp::Sub => x.wrapping_sub(y),
                    BinOp::Mul => x.wrapping_mul(y),
                    BinOp::Div | BinOp::Rem if y == 0 => return self.fault("integer division by zero"),
                    BinOp::Div if unsigned => (ux / uy) as i64,
                    BinOp::Div => x.wrapping_div(y),
                    BinOp::Rem if unsigned => (ux % uy) as i64,
                    BinOp::Rem => x.wrapping_rem(y),
                    BinOp::Min if unsigned => ux.min(uy) as i64,
                    BinOp::Min => x.min(y),
                    BinOp::Max if unsigned => ux.max(uy) as i64,
                    BinOp::Max => x.max(y),
                    BinOp::And => x & y,
                    BinOp::Or => x | y,
                    BinOp::Xor => x ^ y,
                    BinOp::Shl => ux.checked_shl(uy.min(64) as u32).unwrap_or(0) as i64,
                    BinOp::Shr if unsigned => ux.checked_shr(uy.min(64) as u32).unwrap_or(0) as i64,
                    BinOp::Shr => x >> uy.min(63),
                };
                Val::Int(t, normalize(t, v))
            }
            (Val::F32(x), Val::F32(y)) => Val::F32(float_bin(op, f64::from(x), f64::from(y)).map_or_else(|| self.fault(format!("{op:?} of floats")), Ok)? as f32),
            (Val::F64(x), Val::F64(y)) => Val::F64(float_bin(op, x, y).map_or_else(|| self.fault(format!("{op:?} of floats")), Ok)?),
            _ => return self.fault(format!("{op:?} of {} and {}", a.ty().name(), b.ty().name())),
        })
    }
}

fn compare(op: CmpOp, a: Val, b: Val) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (a, b) {
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(&y)),
        (Val::Int(t, x), Val::Int(_, y)) if !t.is_signed_int() => Some((x as u64).cmp(&(y as u64))),
        (Val::Int(_, x), Val::Int(_, y)) => Some(x.cmp(&y)),
        _ => a.as_f64().partial_cmp(&b.as_f64()),
    };
    match (op, ord) {
        (CmpOp::Ne, None) => true,
        (_, None) => false,
        (CmpOp::Eq, Some(o)) => o == Ordering::Equal,
        (CmpOp::Ne, Some(o)) => o != Ordering::Equal,
        (CmpOp::Lt, Some(o)) => o == Ordering::Less,
        (CmpOp::Le, Some(o)) => o != Ordering::Greater,
        (CmpOp::Gt, Some(o)) => o == Ordering::Greater,
        (CmpOp::Ge, Some(o)) => o != Ordering::Less,
    }
}

fn float_un(op: UnOp, f: f64) -> f64 {
    match op {
        UnOp::Floor => f.floor(),
        UnOp::Ceil => f.ceil(),
        UnOp::Round => f.round_ties_even(),
        UnOp::Trunc => f.trunc(),
        UnOp::Sqrt => f.sqrt(),
        _ => f,
    }
}

fn float_bin(op: BinOp, x: f64, y: f64) -> Option<f64> {
    Some(match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Rem => x % y,
        // NaN propagates; −0 is below +0, as in generated code.
        BinOp::Min => if x.is_nan() || y.is_nan() { f64::NAN } else if x == y { if x.is_sign_negative() { x } else { y } } else { x.min(y) },
        BinOp::Max => if x.is_nan() || y.is_nan() { f64::NAN } else if x == y { if x.is_sign_positive() { x } else { y } } else { x.max(y) },
        _ => return None,
    })
}

fn math(f: MathFn, args: &[Val]) -> Result<Val, String> {
    let is32 = matches!(args.first(), Some(Val::F32(_)));
    // f32 exp, tanh and erf are kiln's own approximations, which generated code inlines.
    if let (Some(&Val::F32(x)), MathFn::Exp | MathFn::Tanh | MathFn::Erf) = (args.first(), f) {
        use kiln_runtime::vmath;
        return Ok(Val::F32(match f {
            MathFn::Exp => vmath::exp(x),
            MathFn::Tanh => vmath::tanh(x),
            _ => vmath::erf(x),
        }));
    }
    let x = args.first().map(|a| a.as_f64()).ok_or("math function without arguments")?;
    let r = match f {
        MathFn::Exp => x.exp(),
        MathFn::Log => x.ln(),
        MathFn::Pow => x.powf(args.get(1).ok_or("pow takes two arguments")?.as_f64()),
        MathFn::Tanh => x.tanh(),
        MathFn::Erf => kiln_runtime::erf::erf(x),
        MathFn::Sin => x.sin(),
        MathFn::Cos => x.cos(),
        MathFn::Tan => x.tan(),
        MathFn::Asin => x.asin(),
        MathFn::Acos => x.acos(),
        MathFn::Atan => x.atan(),
        MathFn::Sinh => x.sinh(),
        MathFn::Cosh => x.cosh(),
        MathFn::Asinh => x.asinh(),
        MathFn::Acosh => x.acosh(),
        MathFn::Atanh => x.atanh(),
        MathFn::Softplus => if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() },
        MathFn::Rint => x.round_ties_even(),
    };
    Ok(if is32 { Val::F32(r as f32) } else { Val::F64(r) })
}
