//! kiln's loop IR.
//!
//! A [`Program`] is what the tensor IR lowers to (`kiln-lower`): buffers (inputs, outputs,
//! constants, intermediates) and kernels, each a loop nest of typed scalar statements that
//! reads and writes buffers by element index, or calls a runtime micro-kernel (the routines and
//! their operands are one table, [`call`]). This crate holds the IR alone: its builders, text
//! form, verifier, interpreter and the parallel-loop analysis.
#![deny(missing_docs)]

pub mod affine;
pub mod builder;
pub mod call;
pub mod interp;
pub mod ir;
pub mod parallel;
pub mod text;
pub mod verify;

pub use ir::*;
