//! JIT compilation into this process: [`compile_jit`] and [`JitProgram`].

use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::default_libcall_names;
use kiln_loops::{BufId, Program};

use crate::module::{target_isa, translate, Exports};
use crate::shared::with_local_table;
use kiln_target::{Runtime, Target};
use crate::{CodegenError, CodegenOptions};

/// A compiled kernel or entry function: `(table) -> status`.
type KernelFn = unsafe extern "C" fn(*const *mut u8) -> u32;

/// Compile figures for one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelStats {
    /// The kernel's name in the loop IR.
    pub name: String,
    /// Its symbol in generated code.
    pub symbol: String,
    /// CLIF instructions as generated (before optimization).
    pub clif_insts: usize,
    /// Translation plus Cranelift compilation.
    pub compile_time: Duration,
    /// The earlier kernel whose function this one runs (the same loops over other buffers).
    pub shares: Option<usize>,
}

/// A program compiled into this process. The code is immutable once compiled; any number of
/// threads may [`run`](JitProgram::run) it at once, each on its own buffers.
pub struct JitProgram {
    /// Owns the executable memory. Only touched again by `Drop`.
    module: ManuallyDrop<JITModule>,
    kernels: Vec<KernelFn>,
    /// Each kernel's slots: the buffers its table holds (`crate::shared`).
    slots: Vec<Vec<BufId>>,
    buffers: usize,
    stats: Vec<KernelStats>,
    total: Duration,
}

// SAFETY: after `finalize_definitions` the module's memory is mapped read+execute and never
// written again. `JitProgram` exposes only `run`/`run_kernel`, which call that code through the
// copied function pointers and never touch the module's interior state (its symbol `RefCell`
// and memory provider are used only during compilation, before the value exists, and by `Drop`,
// which has exclusive access). The generated code keeps no state between calls: all memory it
// touches comes from the caller's table.
unsafe impl Send for JitProgram {}
// SAFETY: as for `Send`: shared access only calls immutable, reentrant code.
unsafe impl Sync for JitProgram {}

/// A JIT module for `target`, which must be this process's machine, with every runtime symbol
/// registered. A target without the runtime (`runtime=none`) compiles too: its code calls only
/// libc and libm, which the JIT finds in this process, so objects' code can be tested here.
pub(crate) fn new_module(target: &Target) -> Result<JITModule, CodegenError> {
    if target.runtime == Runtime::Static || target.triple.architecture != kiln_target::Triple::host().architecture {
        return Err(CodegenError::Isa(format!("{target}: JIT code runs in this process, whose target is {}", Target::host())));
    }
    let mut builder = JITBuilder::with_isa(target_isa(target, false)?, default_libcall_names());
    builder.symbols(kiln_runtime::symbols());
    Ok(JITModule::new(builder))
}

/// Compiles `program` to machine code for this process's machine ([`Target::host`]), with the
/// default [`CodegenOptions`].
pub fn compile_jit(program: &Program) -> Result<JitProgram, CodegenError> {
    compile_jit_with(program, &Target::host(), &CodegenOptions::default())
}

/// Compiles `program` to machine code in this process.
pub fn compile_jit_with(program: &Program, target: &Target, options: &CodegenOptions) -> Result<JitProgram, CodegenError> {
    let start = Instant::now();
    let mut module = new_module(target)?;
    let translated = translate(&mut module, program, options, &Exports::jit(target), &mut |module, id, _, ctx| match ctx {
        Some(ctx) => module.define_function(id, ctx).map_err(|e| CodegenError::Cranelift { kernel: String::new(), message: format!("{e:?}") }),
        None => Ok(()),
    });
    let translated = match translated {
        Ok(t) => t,
        Err(e) => {
            // SAFETY: nothing compiled into this module has been handed out or run.
            unsafe { module.free_memory() };
            return Err(e);
        }
    };
    if let Err(e) = module.finalize_definitions() {
        // SAFETY: as above.
        unsafe { module.free_memory() };
        return Err(CodegenError::Cranelift { kernel: "(module)".into(), message: e.to_string() });
    }
    let pointer = |id| {
        // SAFETY: every kernel and the entry were defined with the `KernelFn` signature
        // (`kernel_signature`: one pointer parameter, an i32 result, the platform C convention).
        unsafe { std::mem::transmute::<*const u8, KernelFn>(module.get_finalized_function(id)) }
    };
    let kernels = translated.kernels.iter().map(|&id| pointer(id)).collect();
    Ok(JitProgram { module: ManuallyDrop::new(module), kernels, slots: translated.slots, buffers: program.buffers.len(), stats: translated.stats, total: start.elapsed() })
}

impl JitProgram {
    /// Runs every kernel in order. `Err(code)` is the index into the program's `errors` of the
    /// first `Check` that failed; kernels after it do not run.
    ///
    /// # Panics
    ///
    /// If `table` does not have one entry per buffer of the program.
    ///
    /// # Safety
    ///
    /// `table[b]` must point to live memory of at least `buffers[b].bytes()` bytes for every
    /// buffer the program uses: readable for inputs and constants, readable and writable for
    /// outputs and intermediates. Buffers a kernel writes must not overlap buffers it reads at
    /// other indices, and no other thread may access written buffers during the call.
    pub unsafe fn run(&self, table: &[*mut u8]) -> Result<(), u32> {
        assert_eq!(table.len(), self.buffers, "the buffer table needs one entry per buffer");
        (0..self.kernels.len()).try_for_each(|k| {
            // SAFETY: the caller's contract covers every address the code computes from the
            // table; kernels go in order.
            unsafe { self.call(k, table) }
        })
    }

    /// Runs kernel `index` alone (for per-kernel timings), with `run`'s contract.
    ///
    /// # Panics
    ///
    /// If `index` is not a kernel or `table` is not one entry per buffer.
    ///
    /// # Safety
    ///
    /// As for [`run`](JitProgram::run); the kernels before `index` must have run when this one
    /// reads what they write.
    pub unsafe fn run_kernel(&self, index: usize, table: &[*mut u8]) -> Result<(), u32> {
        assert_eq!(table.len(), self.buffers, "the buffer table needs one entry per buffer");
        // SAFETY: as for `run`.
        unsafe { self.call(index, table) }
    }

    /// Calls kernel `k`'s function with the table of its slots.
    ///
    /// # Safety
    ///
    /// As for [`run_kernel`](JitProgram::run_kernel).
    unsafe fn call(&self, k: usize, table: &[*mut u8]) -> Result<(), u32> {
        // SAFETY: the slots' addresses come from the caller's table (`with_local_table`), which
        // the code reads for no other buffers.
        status(with_local_table(&self.slots[k], table, |local| unsafe { (self.kernels[k])(local) }))
    }

    /// Number of kernels.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// Number of buffers (entries of the table `run` takes).
    pub fn buffer_count(&self) -> usize {
        self.buffers
    }

    /// Per-kernel compile figures, in program order.
    pub fn kernel_stats(&self) -> &[KernelStats] {
        &self.stats
    }

    /// Wall time of [`compile_jit`], from the loop IR to finalized code.
    pub fn compile_time(&self) -> Duration {
        self.total
    }
}

fn status(s: u32) -> Result<(), u32> {
    if s == 0 { Ok(()) } else { Err(s - 1) }
}

impl Drop for JitProgram {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no `run` is in progress, and no function pointer escaped
        // this value, so nothing can call into the memory after it is freed.
        unsafe { ManuallyDrop::take(&mut self.module).free_memory() };
    }
}

impl std::fmt::Debug for JitProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitProgram").field("kernels", &self.kernels.len()).field("buffers", &self.buffers).field("compile_time", &self.total).finish()
    }
}
