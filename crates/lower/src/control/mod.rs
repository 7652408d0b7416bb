//! Control flow: If, Loop and Scan, whose nested regions are lowered with the same machinery
//! as the graph ([`Lowerer::lower_region`]) and then placed.
//!
//! | file | op | how the region's kernels are placed |
//! | --- | --- | --- |
//! | `branch.rs` | If | each kernel guarded by the condition, kernels kept separate |
//! | `iterate.rs` | Loop | spliced into one kernel, inside `for i in 0..M` |
//! | `scan.rs` | Scan | spliced into one kernel, inside `for t in 0..L` |
//! | `region.rs` | — | splicing (variable renumbering), copies, state updates |
//!
//! A kernel is one function, so a region that repeats must become statements of one kernel:
//! [`region::splice`] renumbers each region kernel's variables into the enclosing kernel.
//! Region parameters are bound to buffers the enclosing op fills ([`Lowerer::bind`]); nested
//! control flow composes, since an inner op leaves ordinary kernels behind for the outer one
//! to guard or splice.

mod branch;
mod iterate;
mod region;
mod scan;

use kiln_tir::{NodeId, Op};

use super::{LowerError, Lowerer};

/// Lowers `n` if it is If, Loop or Scan.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::If(_) => branch::lower_if(cx, n)?,
        Op::Loop(_) => iterate::lower_loop(cx, n)?,
        Op::Scan(a) => scan::lower_scan(cx, n, a)?,
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
