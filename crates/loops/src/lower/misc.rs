//! Lowering of one op family (see `mod.rs`).

use kiln_tir::NodeId;

use super::{LowerError, Lowerer};

/// Lowers `n` if this family handles its op.
pub fn lower(_cx: &mut Lowerer<'_>, _n: NodeId) -> Result<bool, LowerError> {
    Ok(false)
}
