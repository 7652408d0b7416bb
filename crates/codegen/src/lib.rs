//! kiln's code generator: loop IR → Cranelift IR → machine code.
//!
//! Each [`Kernel`](kiln_loops::Kernel) becomes a function `extern "C" fn(table: *const *mut u8)
//! -> u32`; `table[b]` is the base address of buffer `@b` (inputs and outputs from the caller,
//! constants from the model's weight bytes, intermediates from the arena). The status is 0 on
//! success and `error + 1` when a `Check` fails. An entry function, [`ENTRY_SYMBOL`], calls the
//! kernels in order and returns the first non-zero status. A large top-level loop whose
//! iterations are independent (`kiln_loops::parallel`) becomes a function of its own,
//! `(table, lo, hi) -> status` over iterations `lo..hi`, which the kernel hands to the runtime's
//! `kiln_rt_parallel_for` to split over the thread pool.
//!
//! Code is generated through the [`cranelift_module::Module`] trait, so the same translation
//! drives the JIT ([`compile_jit`]) and object files ([`compile_object`]). Generated code bakes in no process
//! address: buffers come from the table, runtime functions (`kiln_runtime`) are imported
//! symbols.
//!
//! Semantics are the loop-IR interpreter's (`kiln_loops::interp`), bit for bit; the
//! differential tests in `tests/` run both on the same memory.
//!
//! ```
//! use kiln_loops::*;
//!
//! // out[i] = a[i] * 2 + 1 over four f32 elements.
//! let mut p = Program::default();
//! let f32_buf = |kind| Buffer { name: String::new(), elem: ElemType::Scalar(ScalarType::F32), len: 4, kind };
//! let a = p.add_buffer(f32_buf(BufferKind::Input(0)));
//! let out = p.add_buffer(f32_buf(BufferKind::Output(0)));
//! let mut k = Kernel::new("axpb");
//! k.body = k.nest(&[4], |_, i| {
//!     let x = Expr::load(a, i[0].clone()).bin(BinOp::Mul, Expr::f32(2.0)).bin(BinOp::Add, Expr::f32(1.0));
//!     vec![Stmt::Store { buf: out, index: i[0].clone(), value: x }]
//! });
//! p.kernels.push(k);
//!
//! let jit = kiln_codegen::compile_jit(&p)?;
//! let mut input = [1f32, 2.0, 3.0, 4.0];
//! let mut output = [0f32; 4];
//! let table = [input.as_mut_ptr().cast::<u8>(), output.as_mut_ptr().cast::<u8>()];
//! // SAFETY: the table holds one live buffer of the declared size per buffer of the program.
//! unsafe { jit.run(&table) }.expect("no checks can fail");
//! assert_eq!(output, [3.0, 5.0, 7.0, 9.0]);
//! # Ok::<(), kiln_codegen::CodegenError>(())
//! ```
#![deny(missing_docs)]

mod approx;
mod expr;
mod jit;
mod kernel;
mod math;
mod memory;
mod module;
mod object;
mod promote;
mod shared;
mod vector;

pub use jit::{compile_jit, compile_jit_with, JitProgram, KernelStats};
pub use object::{compile_object, is_c_identifier, ArenaPlan, ObjectCode, Weights, ARENA_ALIGN, BUFFER_ALIGN, STATUS_BAD_ARENA, STATUS_BAD_BUFFER, STATUS_BAD_WEIGHTS, WEIGHTS_MAGIC};

/// Choices of the code generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodegenOptions {
    /// Outline large parallel loops to be split over the runtime's thread pool. Off for code
    /// that will run on one thread, where the outlined functions would only cost compile time.
    pub parallel_loops: bool,
    /// Run innermost element-wise loops four iterations at a time in 128-bit vectors, where
    /// the target has them.
    pub vectors: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions { parallel_loops: true, vectors: true }
    }
}
pub use kernel::{call_alignment, used_buffers};
pub use module::{clif_text, ENTRY_SYMBOL};

/// Why a program could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The program is malformed: an unknown buffer or variable, operands of different types,
    /// a store of the wrong type. The loop-IR verifier should have caught it.
    #[error("kernel `{kernel}`: invalid loop IR: {message}")]
    Invalid {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        message: String,
    },
    /// A construct the code generator does not implement (and the interpreter rejects too).
    #[error("kernel `{kernel}`: unsupported: {what}")]
    Unsupported {
        /// The kernel.
        kernel: String,
        /// The construct.
        what: String,
    },
    /// Cranelift rejected a function or the module failed (a kiln bug).
    #[error("kernel `{kernel}`: cranelift: {message}")]
    Cranelift {
        /// The kernel (or `kiln_entry`).
        kernel: String,
        /// Cranelift's error text.
        message: String,
    },
    /// The host CPU is not supported by Cranelift.
    #[error("host ISA: {0}")]
    Isa(String),
}
