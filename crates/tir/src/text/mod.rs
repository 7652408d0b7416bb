//! The text form of the tensor IR: a printer and a parser that round-trip.
//!
//! [`print()`] writes a [`Graph`](crate::Graph) the way MLIR writes a module, and [`parse()`] reads
//! it back; print → parse → print is byte-identical. The parser never panics: any input either
//! gives a graph or a [`ParseError`] with a line, a column and a message.
//!
//! ```text
//! graph @main(%0: f32[batch, 3, 224, 224] "input") -> (f32[batch, 64, 112, 112] "output") {
//!   %1 = weight "conv1.weight" : f32[64, 3, 7, 7] bytes 37632
//!   %2 = const dense<f32[]: [0.5]>
//!   %3 = tensor.conv(%0, %1, _) {pads = [3, 3, 3, 3], strides = [2, 2]} : f32[batch, 64, 112, 112] loc("/conv1/Conv")
//!   %4, _ = tensor.dropout(%3) : f32[batch, 64, 112, 112]
//!   %5 = tensor.mul(%4, %2) : f32[batch, 64, 112, 112]
//!   return %5
//! }
//! ```
//!
//! - **Values** print as `%N`, numbered in definition order (graph parameters, constants, then
//!   each node's outputs followed by its regions' contents). The parser accepts any numbering
//!   (each number defined once in the whole text) and the printer renumbers canonically.
//! - **Graph signature**: parameters with their types and quoted ONNX names; the results' types
//!   and names follow `->`, and `return` lists the result values, whose types must match.
//! - **Constants** with at most 8 elements and their bytes present print inline:
//!   `const dense<i64[2]: [1, -1]>`. Others print by reference,
//!   `weight "NAME" : TYPE bytes N`, and parse back with
//!   [`TensorData::Absent`](crate::TensorData::Absent). `N` must be the size the type implies;
//!   string weights have no `bytes`, since an absent string tensor cannot remember it.
//! - **Elements**: integers in decimal, `true`/`false`, `f32`/`f64` in Rust's shortest
//!   round-trip form (`0.1`, `1e-5`, `nan`, `inf`, `-inf`; a NaN with a payload as hex bits),
//!   other float formats as hex bits (`0x3c00`), complex as `(re, im)`, strings quoted. A
//!   tensor without data is `dense<f32[3]>`.
//! - **Nodes**: `OUTPUTS = tensor.OP(INPUTS) {ATTRS} : OUTPUT TYPES loc("NAME") { REGIONS }`.
//!   Absent optional inputs and outputs are `_`; the attribute dict (non-default attributes,
//!   in table order), the types, `loc` and the region block are omitted when empty.
//! - **Attributes**: `3`, `1.0`, `1e-5`, `"str"`, `[1, 2]`, `[1.0, 2.5]`, `["a", "b"]`, a
//!   dtype name (`f32`), or `dense<...>`; `[]` reads as an empty int list, which every list
//!   attribute accepts. A NaN attribute prints as `nan` whatever its payload.
//! - **Regions** are named as [`OpKind::region_names`](crate::OpKind::region_names) lists
//!   them: `then_branch() { ... yield %7 }`, `body(%10: i64[], %11: bool[]) { ... }`. They may
//!   use values of enclosing regions.
//! - **Dims** print as [`Dim`](crate::Dim) spells them (`batch`, `seq*4+1`); a symbol that is
//!   not an identifier prints quoted (`"batch size"`).
//! - **Strings** (names, attributes, elements) escape `"`, `\`, `\n`, `\t`, `\r`, other control
//!   characters as `\u{..}`, and bytes that are not UTF-8 as `\xHH`. `//` starts a comment.
//!
//! The lexing core ([`lex`]) and the token cursor ([`cursor`]) are public so that the loop IR's
//! text form spells names, numbers, strings, comments and error positions exactly as this one.
//!
//! Internal value names are not printed, so the parser leaves them empty; graph inputs,
//! outputs and weights keep theirs. The graph's `@name` is not stored either: the printer
//! always writes `@main`.
//!
//! ```
//! let src = "graph @main(%0: f32[2] \"x\") -> (f32[2] \"y\") {\n  %1 = tensor.relu(%0) : f32[2]\n  return %1\n}\n";
//! let graph = kiln_tir::text::parse(src)?;
//! assert_eq!(kiln_tir::text::print(&graph), src);
//! # Ok::<(), kiln_tir::text::ParseError>(())
//! ```

pub mod cursor;
pub mod lex;
mod literal;
mod parse;
mod print;
#[cfg(test)]
mod tests;
mod token;

pub use cursor::ParseError;
pub use parse::parse;
pub use print::{print, print_assumptions};
