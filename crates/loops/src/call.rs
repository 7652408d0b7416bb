//! Runtime calls: the routines generated code calls for their effect on buffers (GEMM,
//! convolution and pooling micro-kernels, normalizations, copies), declared once.
//!
//! `call/table.rs` has one row per routine: its Rust name, its text name, the runtime symbol it
//! calls, and its operands in the order the symbol takes them, each with a name and an
//! [`OperandKind`]. The macro in `call/define.rs` turns the table into a struct per routine
//! with one named field per operand, the [`Call`] enum of them, the fieldless [`RuntimeFn`]
//! kinds, and each kind's [`signature`](RuntimeFn::signature), from which the verifier, the
//! interpreter, the text form and the code generator all read the routine's ABI.
//!
//! ```
//! use kiln_loops::call::{self, Addr, Call, RuntimeFn};
//! use kiln_loops::{BufId, Expr};
//!
//! let softmax = Call::from(call::Softmax { x: Addr::at(BufId(0), 0), rows: Expr::idx(2), cols: Expr::idx(8) });
//! assert_eq!(softmax.kind(), RuntimeFn::Softmax);
//! assert_eq!(softmax.kind().symbol(), "kiln_rt_softmax");
//! let names: Vec<&str> = softmax.kind().signature().iter().map(|o| o.name).collect();
//! assert_eq!(names, ["x", "rows", "cols"]);
//! ```

#[macro_use]
mod define;
mod convert;
mod table;
#[cfg(test)]
mod tests;

pub use table::*;

use crate::ir::{BufId, Expr};

/// The address of element `index` (an `i64` expression) of a buffer: a pointer operand.
#[derive(Clone, Debug, PartialEq)]
pub struct Addr {
    /// The buffer.
    pub buf: BufId,
    /// The element the pointer addresses.
    pub index: Expr,
}

impl Addr {
    /// The address of element `index` of `buf`.
    pub fn new(buf: BufId, index: Expr) -> Addr {
        Addr { buf, index }
    }

    /// The address of constant element `index` of `buf`.
    pub fn at(buf: BufId, index: i64) -> Addr {
        Addr { buf, index: Expr::idx(index) }
    }
}

/// One operand of a call, untyped: what [`Call::from_operands`] takes.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A buffer address.
    Addr(Addr),
    /// A scalar value.
    Value(Expr),
}

/// An operand of a call, borrowed (see [`Call::operands`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand<'a> {
    /// A buffer address.
    Addr(&'a Addr),
    /// A scalar value.
    Value(&'a Expr),
}

/// An operand of a call, borrowed mutably (see [`Call::operands_mut`]).
#[derive(Debug)]
pub enum OperandMut<'a> {
    /// A buffer address.
    Addr(&'a mut Addr),
    /// A scalar value.
    Value(&'a mut Expr),
}

impl<'a> Operand<'a> {
    /// The expressions the operand holds: an address's index, or the value.
    pub fn expr(self) -> &'a Expr {
        match self {
            Operand::Addr(a) => &a.index,
            Operand::Value(e) => e,
        }
    }
}

impl<'a> OperandMut<'a> {
    /// The expression the operand holds: an address's index, or the value.
    pub fn expr(self) -> &'a mut Expr {
        match self {
            OperandMut::Addr(a) => &mut a.index,
            OperandMut::Value(e) => e,
        }
    }
}

impl Call {
    /// The operand named `name` in the routine's signature, if it has one.
    pub fn operand(&self, name: &str) -> Option<Operand<'_>> {
        let at = self.kind().signature().iter().position(|o| o.name == name)?;
        self.operands().into_iter().nth(at)
    }

    /// The operand named `name`, mutably, if the routine has one.
    pub fn operand_mut(&mut self, name: &str) -> Option<OperandMut<'_>> {
        let at = self.kind().signature().iter().position(|o| o.name == name)?;
        self.operands_mut().into_iter().nth(at)
    }
}

/// What a routine does with the memory an address operand points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads it.
    Read,
    /// Writes it (without reading what was there).
    Write,
    /// Reads and writes it (in place, or accumulating into it).
    ReadWrite,
}

/// Which elements an address operand's buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elems {
    /// `f32`.
    F32,
    /// Any element type of whole bytes (not a packed one), the same for every such operand of
    /// the call; the routine moves them as bytes.
    Bytes,
    /// `i8` or `u8`.
    Int8,
    /// `i32`.
    I32,
}

/// The kind of an operand, as a routine's signature gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperandKind {
    /// The address of an element of a buffer (a pointer), the routine's use of the memory from
    /// there, and the elements it holds.
    Addr(Access, Elems),
    /// An `i64` value (a size, a flag or a code).
    I64,
    /// An `f32` value.
    F32,
}

impl OperandKind {
    /// Whether the operand is a buffer address.
    pub fn is_addr(self) -> bool {
        matches!(self, OperandKind::Addr(..))
    }

    /// Whether the routine may write through the operand.
    pub fn writes(self) -> bool {
        matches!(self, OperandKind::Addr(Access::Write | Access::ReadWrite, _))
    }
}

/// One operand of a routine's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OperandSpec {
    /// Its name: the struct field, and the name the text form writes before it.
    pub name: &'static str,
    /// What it is.
    pub kind: OperandKind,
}

/// A field of a routine's struct: an [`Addr`] or an [`Expr`], converted to and from the
/// untyped forms by the code `define_calls!` generates.
trait Field: Sized {
    /// What the operand must be, for error messages.
    const WHAT: &'static str;
    fn view(&self) -> Operand<'_>;
    fn view_mut(&mut self) -> OperandMut<'_>;
    fn from_arg(arg: Arg) -> Option<Self>;
    fn into_arg(self) -> Arg;
}

impl Field for Addr {
    const WHAT: &'static str = "a buffer address";

    fn view(&self) -> Operand<'_> {
        Operand::Addr(self)
    }

    fn view_mut(&mut self) -> OperandMut<'_> {
        OperandMut::Addr(self)
    }

    fn from_arg(arg: Arg) -> Option<Addr> {
        match arg {
            Arg::Addr(a) => Some(a),
            Arg::Value(_) => None,
        }
    }

    fn into_arg(self) -> Arg {
        Arg::Addr(self)
    }
}

impl Field for Expr {
    const WHAT: &'static str = "a value";

    fn view(&self) -> Operand<'_> {
        Operand::Value(self)
    }

    fn view_mut(&mut self) -> OperandMut<'_> {
        OperandMut::Value(self)
    }

    fn from_arg(arg: Arg) -> Option<Expr> {
        match arg {
            Arg::Value(e) => Some(e),
            Arg::Addr(_) => None,
        }
    }

    fn into_arg(self) -> Arg {
        Arg::Value(self)
    }
}

/// The next of `args` as field `name` of `routine`'s struct.
fn take<T: Field>(args: &mut std::vec::IntoIter<Arg>, routine: &str, name: &str) -> Result<T, String> {
    let arg = args.next().ok_or_else(|| format!("{routine} is missing operand `{name}`"))?;
    T::from_arg(arg).ok_or_else(|| format!("{routine} operand `{name}` must be {}", T::WHAT))
}

/// `routine`'s arity error: it takes `signature`, not `got` operands.
fn arity(routine: &str, signature: &[OperandSpec], got: usize) -> String {
    let names: Vec<&str> = signature.iter().map(|o| o.name).collect();
    format!("{routine} takes {} operands ({}), not {got}", signature.len(), names.join(", "))
}
