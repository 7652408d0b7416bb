//! kiln's reference evaluator: plain loops over tensor-IR ops.
//!
//! It serves two purposes: a test oracle for the compiler (compiled code is compared against
//! it), and folding small constant subgraphs at compile time. It favours obviously correct
//! code over speed, but its inner loops run over contiguous memory so the benchmark models
//! evaluate in seconds.
//!
//! Floats of every width compute in `f64` and round once to the output type; integers of
//! every width compute in `i128` and wrap to the output width. Bad input (an index out of
//! range, mismatched shapes, an integer division by zero) is an [`EvalError`], never a panic.
//!
//! ```
//! use kiln_eval::eval_op;
//! use kiln_tir::Tensor;
//! use kiln_tir::op::{Add, Op};
//!
//! let x = Tensor::from_f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
//! let y = Tensor::from_f32s(&[2], &[10.0, 20.0]);
//! let out = eval_op(&Op::Add(Add {}), &[Some(&x), Some(&y)], 1).unwrap();
//! assert_eq!(out[0], Tensor::from_f32s(&[2, 2], &[11.0, 22.0, 13.0, 24.0]));
//! ```
#![deny(missing_docs)]

mod args;
mod array;
mod binary;
mod cast;
pub mod compare;
mod control;
mod conv;
mod dispatch;
mod error;
pub mod fold;
pub use weights::fold_weights;
mod fused;
mod gather_scatter;
mod graph;
mod layout;
mod linalg;
mod math;
mod minifloat;
mod norm;
mod pool;
mod quant;
mod reduce;
mod select;
mod shape_ops;
mod strings;
mod unary;
mod weights;
mod window;

use std::panic::{AssertUnwindSafe, catch_unwind};

use kiln_tir::{Op, Tensor};

pub use error::{EvalError, Result};
pub use graph::{Budget, eval_graph, eval_graph_with};

use dispatch::dispatch;

/// Evaluates one op on concrete inputs (`None` is an omitted optional input) and returns its
/// first `num_outputs` outputs.
///
/// If, Loop and Scan need their regions and are evaluated only by [`eval_graph`].
pub fn eval_op(op: &Op, inputs: &[Option<&Tensor>], num_outputs: usize) -> Result<Vec<Tensor>> {
    let name = op.kind().text_name();
    // Bad input returns errors; a panic here is an evaluator bug, which the caller (often the
    // compiler folding constants) should see as an error rather than a crash.
    match catch_unwind(AssertUnwindSafe(|| dispatch(op, inputs, num_outputs))) {
        Ok(r) => r,
        Err(payload) => {
            let reason = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_string());
            Err(EvalError::Internal { op: name, reason })
        }
    }
}
