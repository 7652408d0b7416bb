//! Ops whose output has the input's elements in the same order: Reshape, Flatten, Squeeze,
//! Unsqueeze, Identity, and Dropout at inference. They lower to no kernel; the output is a
//! view of the input's buffer.

use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer};

/// Lowers `n` if it is a view op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Reshape(_) | Op::Flatten(_) | Op::Squeeze(_) | Op::Unsqueeze(_) | Op::Identity(_) => {}
        // Dropout without a training-mode input is the identity; its mask output is all true.
        Op::Dropout(_) if cx.node(n).inputs.get(2).copied().flatten().is_none() && cx.node(n).outputs.get(1).copied().flatten().is_none() => {}
        _ => return Ok(false),
    }
    let input = cx.required(n, 0)?;
    cx.alias_output(n, 0, &input);
    Ok(true)
}
