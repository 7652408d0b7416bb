//! kiln's loop IR.
//!
//! A [`Program`] is what the tensor IR lowers to: buffers (inputs, outputs, constants,
//! intermediates) and kernels, each a loop nest of typed scalar statements that reads and
//! writes buffers by element index, or calls a runtime micro-kernel. The memory planner gives
//! intermediates offsets in one arena; the code generator turns kernels into machine code.
#![deny(missing_docs)]

pub mod build;
pub mod copies;
pub mod interp;
pub mod ir;
pub mod lower;
pub mod nchwc;
pub mod parallel;
pub mod prepack;
pub mod text;
pub mod verify;
pub mod plan;

pub use ir::*;
