//! Kernels compiled once for every place they run.
//!
//! Models repeat their blocks: the layers of a transformer, the bottlenecks of a ResNet. Their
//! kernels are the same loops over different buffers. Each kernel's code therefore addresses
//! its buffers through a table of its own, in the order the kernel first mentions them (its
//! *slots*), and kernels whose loops, slot types and slot sizes agree share one compiled
//! function. A run hands each kernel a table holding its slots' addresses.

use std::collections::HashMap;

use kiln_loops::{BufId, BufferKind, Kernel, Program};

use crate::kernel::{visit_bufs, visit_bufs_mut};
use crate::CodegenError;

/// A kernel rewritten to address its slots, in a program holding just those buffers.
pub(crate) struct Localized {
    /// Slot `s` of the kernel's table holds buffer `slots[s]` of the whole program.
    pub slots: Vec<BufId>,
    /// The slots' buffers and the rewritten kernel (the program's only one).
    pub program: Program,
}

impl Localized {
    /// `kernel` of `program` over its slots.
    pub fn new(program: &Program, kernel: &Kernel) -> Result<Localized, CodegenError> {
        let mut slots: Vec<BufId> = Vec::new();
        let mut slot_of: HashMap<BufId, u32> = HashMap::new();
        for s in &kernel.body {
            visit_bufs(s, &mut |b| {
                slot_of.entry(b).or_insert_with(|| {
                    slots.push(b);
                    slots.len() as u32 - 1
                });
            });
        }
        let mut buffers = Vec::with_capacity(slots.len());
        for b in &slots {
            let buffer = program.buffers.get(b.0 as usize).ok_or_else(|| CodegenError::Invalid { kernel: kernel.name.clone(), message: format!("{b:?} does not exist ({} buffers)", program.buffers.len()) })?;
            buffers.push(buffer.clone());
        }
        let mut local = kernel.clone();
        for s in &mut local.body {
            visit_bufs_mut(s, &mut |b| *b = BufId(slot_of[b]));
        }
        Ok(Localized { slots, program: Program { buffers, kernels: vec![local], errors: Vec::new() } })
    }

    /// The rewritten kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.program.kernels[0]
    }

    /// What decides the kernel's code: its variables, statements, and each slot's element
    /// type, length and whether it is a constant (not its values). Equal texts are
    /// confirmed with [`Localized::same_code`], since distinct NaN constants print alike.
    pub fn key(&self) -> String {
        let kernel = self.kernel();
        let mut key = format!("{:?}{:?}", kernel.vars, kernel.body);
        for b in &self.program.buffers {
            // Code loads constants as read-only memory; it treats every other buffer alike.
            let kind = if matches!(b.kind, BufferKind::Const(_)) { 'c' } else { 'm' };
            key.push_str(&format!("|{:?}:{}:{kind}", b.elem, b.len));
        }
        key
    }

    /// Whether `other` compiles to the same code (given equal keys).
    pub fn same_code(&self, other: &Localized) -> bool {
        let (a, b) = (self.kernel(), other.kernel());
        a.vars == b.vars && a.body == b.body
    }
}

/// The table kernel code reads: the addresses of its slots, from the whole program's `table`.
/// Calls `run` with it.
pub(crate) fn with_local_table<R>(slots: &[BufId], table: &[*mut u8], run: impl FnOnce(*const *mut u8) -> R) -> R {
    const ON_STACK: usize = 32;
    let address = |b: &BufId| table.get(b.0 as usize).copied().unwrap_or(std::ptr::null_mut());
    if slots.len() <= ON_STACK {
        let mut local = [std::ptr::null_mut(); ON_STACK];
        for (l, b) in local.iter_mut().zip(slots) {
            *l = address(b);
        }
        run(local.as_ptr())
    } else {
        let local: Vec<*mut u8> = slots.iter().map(address).collect();
        run(local.as_ptr())
    }
}
