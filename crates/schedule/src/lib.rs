//! kiln's scheduling: target-specific rewrites of a lowered program and its memory plan.
//!
//! After lowering, a program is portable loop IR. Scheduling adapts it to the
//! [`Target`](kiln_target::Target) it will run on — convolution chains in the blocked channel
//! layout ([`nchwc`]), constant weights packed into the target's kernel panels ([`prepack`]) —
//! and then gives every intermediate buffer an arena offset ([`plan`]).
#![deny(missing_docs)]

pub mod nchwc;
pub mod plan;
pub mod prepack;

use kiln_loops::Program;
use kiln_runtime::gemm::Isa;
use kiln_target::{Architecture, Feature, Target};

/// Which of scheduling's rewrites may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Pack constant weights into the target kernels' panels.
    pub prepack: bool,
    /// Compute convolution chains in the blocked layout, when the target's kernels have it
    /// (with `prepack`, whose packed weights it reads).
    pub nchwc: bool,
}

/// Rewrites `program` for `target`: convolution chains into the blocked layout, then calls with
/// constant weights into their packed forms. The packing itself is returned, to be done (and
/// installed) when the caller chooses: beside code generation, which does not read it.
pub fn schedule(program: &mut Program, target: &Target, options: ScheduleOptions) -> Option<prepack::Deferred> {
    if !options.prepack {
        return None;
    }
    if options.nchwc && nchwc::pays_on(target) {
        nchwc::blocked(program);
    }
    prepack::prepack_deferred(program, prepack::Layouts::for_target(target)?)
}

/// The runtime kernels that code compiled for `target` runs, or `None` when it has no
/// runtime (every call then becomes generated code, and nothing is packed for a kernel).
pub fn kernels(target: &Target) -> Option<Isa> {
    if !target.has_runtime() {
        return None;
    }
    let vector = target.has(Feature::Avx2) && target.has(Feature::Fma);
    Some(match target.arch() {
        Architecture::X86_64 if vector && target.has(Feature::Avx512f) => Isa::Avx512,
        Architecture::X86_64 if vector => Isa::Avx2,
        _ => Isa::Portable,
    })
}
