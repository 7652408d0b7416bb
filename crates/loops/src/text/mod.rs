//! The text form of the loop IR: a printer and a parser that round-trip.
//!
//! [`print()`] writes a [`Program`](crate::Program) in the manner of MLIR and Cranelift's
//! `.clif`, and [`parse()`] reads it back; print → parse → print is byte-identical. The parser
//! never panics: any input either gives a program or a [`ParseError`] with a line, a column and
//! a message.
//!
//! ```text
//! buffer @0 "input" : f32[1024] input 0
//! buffer @1 "conv1.weight" : f32[64] const bytes 256
//! buffer @2 "relu_out" : f32[1024] temp
//! buffer @3 "output" : f32[1024] output 0
//! error 0 "node \"g\" (tensor.gather): index out of range"
//!
//! kernel relu_3 {
//!   loop.for $0 in 0..16 {
//!     loop.for $1 in 0..64 {
//!       loop.let $2: i64 = add(mul($0, 64i64), $1)
//!       loop.store @2[$2] = max(add(load @0[$2], load @1[$1]), 0.0f32)
//!     }
//!   }
//! }
//! ```
//!
//! - **Buffers** print in [`BufId`](crate::BufId) order as `buffer @N "NAME" : ELEM[LEN]
//!   KIND`, the kind being `input N`, `output N`, `temp` or `const bytes N`. `ELEM` is a
//!   scalar type or a storage type (`f16`, `bf16`, `f8e4m3fn`, `f8e4m3fnuz`, `f8e5m2`,
//!   `f8e5m2fnuz`, `f8e8m0`, `f4e2m1`, `i4`, `u4`, `i2`, `u2`: the tensor IR's names). A
//!   constant's bytes are not printed; it parses back as a one-dimensional tensor of `LEN`
//!   elements with [`TensorData::Absent`](kiln_tir::TensorData::Absent), and `N` must be the
//!   size the type implies (sub-byte types packed, rounded up to whole bytes).
//! - **Errors** (the messages of [`Stmt::Check`](crate::Stmt::Check)) print in code order as
//!   `error N "MESSAGE"`.
//! - **Kernels**: `kernel NAME { STATEMENTS }`; a name that is not an identifier is quoted.
//! - **Variables** are `$N` and are declared with their type where they are defined:
//!   `loop.let $3: f32 = ...`, `loop.local $4: f32 = ...`, `loop.for $0 in 0..N` (an `i64`;
//!   any other type is written `loop.for $0: f32 in ...`). The parser rebuilds
//!   [`Kernel::vars`](crate::Kernel::vars) from the declarations, so the numbers must run from
//!   `$0` without gaps; variables no statement defines are declared in the kernel header,
//!   `kernel k vars($5: f32) { ... }`.
//! - **Statements**: `loop.for`, `loop.let`, `loop.local`, `loop.assign $N = EXPR`,
//!   `loop.store @N[INDEX] = EXPR`, `loop.if COND { ... } else { ... }` (no `else` when it is
//!   empty), `loop.check COND, error N`, and `loop.call NAME(OPERAND: ARG, ...)`: a routine of
//!   [`crate::call`]'s table with every operand of its signature, named, in order, each
//!   `addr @N[INDEX]` or a value as the signature says (`loop.call softmax(x: addr @2[0i64],
//!   rows: 4i64, cols: 16i64)`).
//! - **Expressions** are prefix calls: `add(a, b)`, `lt(a, b)`, `select(c, a, b)`, `neg(x)`,
//!   `exp(x)`, `cast<f32>(x)`, `bitcast<i32>(x)`, `load @N[INDEX]`, a variable `$N` or a
//!   constant.
//! - **Constants** carry their type: `7i64`, `255u8`, `true`; floats in Rust's shortest
//!   round-trip form with the suffix attached (`0.0f32`, `1e-5f32`, `-0.0f64`), the
//!   non-finite ones as words (`inf_f32`, `-inf_f64`, `nan_f32`), and a NaN other than the
//!   canonical one by its bits (`0x7fc00001_f32`), so every float round-trips bit-exactly.
//!   Unsigned integers print as the unsigned reading of their bit pattern.
//! - **Strings** escape `"`, `\`, `\n`, `\t`, `\r` and other control characters as `\u{..}`.
//!   `//` starts a comment.
//!
//! The parser checks only what the data structure needs (see `parse.rs`); the
//! [`verifier`](crate::verify) checks the rest.
//!
//! ```
//! let src = "buffer @0 \"x\" : f32[4] input 0\nbuffer @1 \"y\" : f32[4] output 0\n\nkernel neg_1 {\n  loop.for $0 in 0..4 {\n    loop.store @1[$0] = neg(load @0[$0])\n  }\n}\n";
//! let program = kiln_loops::text::parse(src)?;
//! assert_eq!(kiln_loops::text::print(&program), src);
//! # Ok::<(), kiln_loops::text::ParseError>(())
//! ```

mod lex;
mod literal;
pub(crate) mod names;
mod parse;
mod print;
#[cfg(test)]
mod tests;

pub use parse::{ParseError, parse};
pub use print::print;
