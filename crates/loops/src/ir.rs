//! The loop IR: a [`Program`] is a list of kernels over a table of buffers.
//!
//! Kernels are statement trees: counted loops, scalar lets and mutable locals, stores into
//! buffers at computed element indices, conditionals, bounds checks that return an error
//! code, and calls to runtime functions (micro-kernels, transcendental math). Every scalar
//! expression has a type; index expressions are `i64` element offsets. Shapes are static:
//! loop extents are constants.

use std::fmt;

use kiln_tir::Tensor;

pub use crate::call::{Addr, Arg, Call, RuntimeFn};

/// A buffer of the program; prints as `@N`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// A scalar variable of a kernel (loop index, let or local); prints as `$N`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

impl fmt::Debug for BufId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}", self.0)
    }
}

/// The type of a scalar value in a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// A truth value (stored in buffers as one byte, 0 or 1).
    Bool,
    /// Signed integers.
    I8,
    /// Signed integers.
    I16,
    /// Signed integers.
    I32,
    /// Signed integers; also the type of every index.
    I64,
    /// Unsigned integers.
    U8,
    /// Unsigned integers.
    U16,
    /// Unsigned integers.
    U32,
    /// Unsigned integers.
    U64,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
}

/// How elements are stored in a buffer: each storage type is loaded as a value of its
/// [`value_type`](ElemType::value_type) and converted back when stored.
///
/// - Half-precision floats (`f16`, `bf16`) load as `f32` exactly and store rounded to
///   nearest-even (overflow gives infinity).
/// - The float8 formats and float4 e2m1 load as `f32` exactly; a store rounds to
///   nearest-even once and does **not** saturate: a value beyond the largest finite one
///   becomes infinity where the format has it (e5m2) and NaN where it does not (e4m3fn and
///   the `fnuz` formats); e2m1, which has neither, saturates to ±6. ONNX's saturating
///   conversions are a clamp written before the store (see `kiln_runtime::minifloat` for
///   every special case).
/// - float8 e8m0 (`2^(e−127)`, `0xff` NaN) loads as `f32` exactly; a store keeps the `f32`'s
///   exponent field, which is exact for every e8m0 value and rounds others toward the power
///   of two at or below their magnitude (sign ignored, infinity and NaN give NaN). Other
///   rounding modes are computed before the store.
/// - The 4- and 2-bit integers load as `i8` (sign-extended) or `u8`; a store keeps the low
///   bits of the value (integer narrowing wraps).
///
/// Sub-byte types are packed, lowest bits first: element `i` of a 4-bit type is the low
/// nibble of byte `i / 2` when `i` is even and the high one when it is odd; element `i` of a
/// 2-bit type is bits `2·(i % 4)..` of byte `i / 4`. A store into a packed buffer is a
/// read-modify-write of its byte, so two kernels must never write elements sharing a byte
/// concurrently (kernels run one at a time today; a parallel schedule must split packed
/// buffers on byte boundaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// Stored as the scalar type itself.
    Scalar(ScalarType),
    /// IEEE binary16, computed as `f32`.
    F16,
    /// bfloat16, computed as `f32`.
    BF16,
    /// float8 e4m3fn (no infinities, NaN `0x7f`/`0xff`, max 448), computed as `f32`.
    F8E4M3FN,
    /// float8 e4m3fnuz (no infinities or −0, NaN `0x80`, max 240), computed as `f32`.
    F8E4M3FNUZ,
    /// float8 e5m2 (IEEE-like, max 57344), computed as `f32`.
    F8E5M2,
    /// float8 e5m2fnuz (no infinities or −0, NaN `0x80`, max 57344), computed as `f32`.
    F8E5M2FNUZ,
    /// float8 e8m0: an unsigned power of two `2^(e−127)`, `0xff` NaN; computed as `f32`.
    F8E8M0,
    /// float4 e2m1 (no infinities or NaN, max 6), two per byte; computed as `f32`.
    F4E2M1,
    /// Signed 4-bit integers, two per byte; computed as `i8`.
    I4,
    /// Unsigned 4-bit integers, two per byte; computed as `u8`.
    U4,
    /// Signed 2-bit integers, four per byte; computed as `i8`.
    I2,
    /// Unsigned 2-bit integers, four per byte; computed as `u8`.
    U2,
}

impl ScalarType {
    /// Size in bytes (bool: 1).
    pub fn bytes(self) -> u32 {
        match self {
            ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    /// True for `f32` and `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// True for the signed integer types.
    pub fn is_signed_int(self) -> bool {
        matches!(self, ScalarType::I8 | ScalarType::I16 | ScalarType::I32 | ScalarType::I64)
    }

    /// The name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "i8",
            ScalarType::I16 => "i16",
            ScalarType::I32 => "i32",
            ScalarType::I64 => "i64",
            ScalarType::U8 => "u8",
            ScalarType::U16 => "u16",
            ScalarType::U32 => "u32",
            ScalarType::U64 => "u64",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }
}

impl ElemType {
    /// Every storage type other than the plain scalars.
    pub const NARROW: [ElemType; 12] = [
        ElemType::F16,
        ElemType::BF16,
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
        ElemType::F8E8M0,
        ElemType::F4E2M1,
        ElemType::I4,
        ElemType::U4,
        ElemType::I2,
        ElemType::U2,
    ];

    /// The type of a value loaded from such a buffer.
    pub fn value_type(self) -> ScalarType {
        match self {
            ElemType::Scalar(s) => s,
            ElemType::F16 | ElemType::BF16 => ScalarType::F32,
            ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ | ElemType::F8E8M0 | ElemType::F4E2M1 => ScalarType::F32,
            ElemType::I4 | ElemType::I2 => ScalarType::I8,
            ElemType::U4 | ElemType::U2 => ScalarType::U8,
        }
    }

    /// Size of one element in bits: 2, 4, or a whole number of bytes.
    pub fn bits(self) -> u32 {
        match self {
            ElemType::Scalar(s) => 8 * s.bytes(),
            ElemType::F16 | ElemType::BF16 => 16,
            ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ | ElemType::F8E8M0 => 8,
            ElemType::F4E2M1 | ElemType::I4 | ElemType::U4 => 4,
            ElemType::I2 | ElemType::U2 => 2,
        }
    }

    /// True for the sub-byte types, which share bytes between elements.
    pub fn is_packed(self) -> bool {
        self.bits() < 8
    }

    /// Bytes taken by `len` elements (sub-byte types round up to a whole byte); saturates
    /// rather than overflowing.
    pub fn storage_bytes(self, len: u64) -> u64 {
        len.saturating_mul(u64::from(self.bits())).div_ceil(8)
    }

    /// The name in the text form (the tensor IR's dtype name).
    pub fn name(self) -> &'static str {
        match self {
            ElemType::Scalar(s) => s.name(),
            ElemType::F16 => "f16",
            ElemType::BF16 => "bf16",
            ElemType::F8E4M3FN => "f8e4m3fn",
            ElemType::F8E4M3FNUZ => "f8e4m3fnuz",
            ElemType::F8E5M2 => "f8e5m2",
            ElemType::F8E5M2FNUZ => "f8e5m2fnuz",
            ElemType::F8E8M0 => "f8e8m0",
            ElemType::F4E2M1 => "f4e2m1",
            ElemType::I4 => "i4",
            ElemType::U4 => "u4",
            ElemType::I2 => "i2",
            ElemType::U2 => "u2",
        }
    }
}

/// A constant scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A truth value.
    Bool(bool),
    /// An integer of the given type; unsigned values are stored by bit pattern.
    Int(ScalarType, i64),
    /// An `f32`.
    F32(f32),
    /// An `f64`.
    F64(f64),
}

impl Scalar {
    /// The constant's type.
    pub fn ty(self) -> ScalarType {
        match self {
            Scalar::Bool(_) => ScalarType::Bool,
            Scalar::Int(t, _) => t,
            Scalar::F32(_) => ScalarType::F32,
            Scalar::F64(_) => ScalarType::F64,
        }
    }

    /// An `i64` index constant.
    pub fn index(v: i64) -> Scalar {
        Scalar::Int(ScalarType::I64, v)
    }
}

/// Unary operations. Float-only ones are marked; the rest apply to any numeric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-x` (wrapping for integers).
    Neg,
    /// `|x|` (wrapping for the minimum integer).
    Abs,
    /// Logical or bitwise not (bool: logical; integers: bitwise).
    Not,
    /// Float: round toward −∞.
    Floor,
    /// Float: round toward +∞.
    Ceil,
    /// Float: round half to even.
    Round,
    /// Float: round toward zero.
    Trunc,
    /// Float: square root.
    Sqrt,
    /// True if the float is NaN.
    IsNan,
}

/// Binary operations on two operands of the same type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `a + b` (wrapping for integers).
    Add,
    /// `a - b` (wrapping for integers).
    Sub,
    /// `a * b` (wrapping for integers).
    Mul,
    /// `a / b`: floats IEEE; integers truncate toward zero (the divisor must be checked non-zero).
    Div,
    /// Remainder with the sign of the dividend (C `%`, `fmod` for floats).
    Rem,
    /// Minimum; NaN if either float operand is NaN.
    Min,
    /// Maximum; NaN if either float operand is NaN.
    Max,
    /// Bitwise/logical and.
    And,
    /// Bitwise/logical or.
    Or,
    /// Bitwise/logical xor.
    Xor,
    /// Shift left (integers).
    Shl,
    /// Shift right: arithmetic for signed, logical for unsigned.
    Shr,
}

/// Comparisons; the result is `bool`. Float comparisons are ordered (false with NaN) except `Ne`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Scalar math the runtime provides (no Cranelift instruction exists for it). Each takes and
/// returns `f32` or `f64`, matching its arguments, computed in `f64` and rounded once, except
/// `f32` exp, tanh and erf: those are `kiln_runtime::vmath::exp`, `tanh` and `erf` (within 1.5,
/// 2 and 1.5 ulp), which generated code inlines and vectorizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    /// e^x
    Exp,
    /// ln x
    Log,
    /// x^y (two arguments)
    Pow,
    /// tanh x
    Tanh,
    /// erf x
    Erf,
    /// sin x
    Sin,
    /// cos x
    Cos,
    /// tan x
    Tan,
    /// asin x
    Asin,
    /// acos x
    Acos,
    /// atan x
    Atan,
    /// sinh x
    Sinh,
    /// cosh x
    Cosh,
    /// asinh x
    Asinh,
    /// acosh x
    Acosh,
    /// atanh x
    Atanh,
    /// ln(1 + e^x), computed without overflow
    Softplus,
    /// Round half to even (for f64; f32 has `UnOp::Round`).
    Rint,
}

/// How a float-to-integer or narrowing cast treats values that do not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CastMode {
    /// Integer narrowing wraps (two's complement); float → int truncates toward zero and
    /// saturates (NaN → 0); int → float rounds to nearest; float narrowing rounds to nearest.
    Default,
}

/// A scalar expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant.
    Const(Scalar),
    /// A variable's current value.
    Var(Var),
    /// Element `index` (an `i64` expression) of a buffer, as a value of the buffer's value type.
    Load {
        /// The buffer.
        buf: BufId,
        /// Element index.
        index: Box<Expr>,
    },
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation on operands of one type.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// A comparison of operands of one type.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// `cond ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A conversion to another scalar type.
    Cast(ScalarType, CastMode, Box<Expr>),
    /// Reinterprets the bits as another type of the same width.
    Bitcast(ScalarType, Box<Expr>),
    /// A runtime math function.
    Math(MathFn, Vec<Expr>),
}

impl Expr {
    /// Calls `f` on each direct operand of this expression (a load's index, an operation's
    /// arguments), in order.
    pub fn for_each_operand<'e>(&'e self, mut f: impl FnMut(&'e Expr)) {
        match self {
            Expr::Const(_) | Expr::Var(_) => {}
            Expr::Load { index, .. } => f(index),
            Expr::Unary(_, a) | Expr::Cast(_, _, a) | Expr::Bitcast(_, a) => f(a),
            Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
                f(a);
                f(b);
            }
            Expr::Select(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            Expr::Math(_, args) => args.iter().for_each(f),
        }
    }

    /// Whether the expression reads variable `v`.
    pub fn mentions(&self, v: Var) -> bool {
        match self {
            Expr::Var(x) => *x == v,
            Expr::Const(_) => false,
            Expr::Load { index, .. } => index.mentions(v),
            Expr::Unary(_, a) | Expr::Cast(_, _, a) | Expr::Bitcast(_, a) => a.mentions(v),
            Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => a.mentions(v) || b.mentions(v),
            Expr::Select(c, a, b) => c.mentions(v) || a.mentions(v) || b.mentions(v),
            Expr::Math(_, args) => args.iter().any(|a| a.mentions(v)),
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `for var in 0..extent { body }`; `var` is an `i64`.
    For {
        /// The induction variable.
        var: Var,
        /// Trip count.
        extent: u64,
        /// The loop body.
        body: Vec<Stmt>,
    },
    /// Binds an immutable variable.
    Let(Var, Expr),
    /// Declares a mutable local with its initial value (an accumulator).
    Local(Var, Expr),
    /// Assigns a mutable local.
    Assign(Var, Expr),
    /// Stores `value` at element `index` of `buf`, converted to the buffer's element type as
    /// [`ElemType`] describes (for packed types, a read-modify-write of the element's byte).
    Store {
        /// The buffer.
        buf: BufId,
        /// Element index.
        index: Expr,
        /// The value, of the buffer's value type.
        value: Expr,
    },
    /// A conditional.
    If {
        /// The condition (`bool`).
        cond: Expr,
        /// Runs when true.
        then: Vec<Stmt>,
        /// Runs when false.
        otherwise: Vec<Stmt>,
    },
    /// Ends the run with error `error` (an index into [`Program::errors`]) unless `cond` holds.
    Check {
        /// Must be true.
        cond: Expr,
        /// Which error to report.
        error: u32,
    },
    /// Calls a runtime routine (`crate::call`'s table) with its operands.
    Call(Call),
}

impl From<Call> for Stmt {
    fn from(call: Call) -> Stmt {
        Stmt::Call(call)
    }
}

/// What a buffer holds and where its memory comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// Graph input `n`, supplied by the caller.
    Input(usize),
    /// Graph output `n`, supplied by the caller.
    Output(usize),
    /// A constant; its bytes live in the model (usually the mapped file).
    Const(Tensor),
    /// An intermediate; the memory planner gives it an arena offset.
    Temp,
}

/// A buffer: a flat array of elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// A readable name (the tensor-IR value it holds).
    pub name: String,
    /// Element storage type.
    pub elem: ElemType,
    /// Number of elements.
    pub len: u64,
    /// Where it lives.
    pub kind: BufferKind,
}

impl Buffer {
    /// Size in bytes (sub-byte elements packed, the last byte padded).
    pub fn bytes(&self) -> u64 {
        self.elem.storage_bytes(self.len)
    }
}

/// A kernel: one statement tree, usually the lowering of one tensor-IR node.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// A readable name (`conv_3`); also the symbol name in generated code.
    pub name: String,
    /// Types of the kernel's variables, indexed by [`Var`].
    pub vars: Vec<ScalarType>,
    /// The statements.
    pub body: Vec<Stmt>,
    /// The ONNX nodes it computes (`a + b` for a fusion), for errors and profiles; empty when
    /// not known. Written `loc("...")` in the text form.
    pub source: String,
}

/// A whole lowered model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// Every buffer, indexed by [`BufId`].
    pub buffers: Vec<Buffer>,
    /// Kernels in execution order.
    pub kernels: Vec<Kernel>,
    /// Run-time error messages, indexed by [`Stmt::Check`]'s `error`; each names its node.
    pub errors: Vec<String>,
}

impl Program {
    /// Adds a buffer.
    pub fn add_buffer(&mut self, buffer: Buffer) -> BufId {
        self.buffers.push(buffer);
        BufId(self.buffers.len() as u32 - 1)
    }

    /// Adds an error message and returns its code.
    pub fn add_error(&mut self, message: String) -> u32 {
        self.errors.push(message);
        self.errors.len() as u32 - 1
    }

    /// The buffer record for `id`.
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }
}

impl Kernel {
    /// A kernel with no variables and an empty body.
    pub fn new(name: impl Into<String>) -> Kernel {
        Kernel { name: name.into(), vars: Vec::new(), body: Vec::new(), source: String::new() }
    }

    /// A fresh variable of type `ty`.
    pub fn var(&mut self, ty: ScalarType) -> Var {
        self.vars.push(ty);
        Var(self.vars.len() as u32 - 1)
    }
}
