//! kiln's runtime library: the functions generated code calls by symbol.
//!
//! Every entry point is an `extern "C"` function with a stable, unmangled `kiln_rt_*` name:
//! scalar math Cranelift has no instruction for ([`math`]), the compute micro-kernels
//! ([`gemm`], the fused [`conv`], [`dwconv`], [`maxpool`]) and what surrounds them ([`im2col`], the fused ops'
//! [`epilogue`], the attention's row [`softmax`], layer and RMS [`norm`]alization, the movement ops' [`copy`], the [`topk`] selection), split over the intra-op thread [`pool`] (as are generated loops, through [`parallel`]), and the stores of narrow float formats ([`minifloat`]). The JIT registers
//! [`symbols`] with its module; an object file produced by the ahead-of-time path links the
//! same names from this crate's static library (`crate-type = ["rlib", "staticlib"]`).
//!
//! **Semantics match the loop-IR interpreter** (`kiln_loops::interp`) bit for bit: the `f32`
//! math functions compute in `f64` and round once, as the interpreter does, and
//! the interpreter's `sgemm` calls [`gemm::Sgemm::run`], the same code as
//! [`gemm::kiln_rt_sgemm`] (its `sgemm_fused` likewise [`gemm::SgemmFused::run`], `conv2d` [`conv::Conv2d::run`] (`conv2d_packed` [`conv::Conv2d::run_packed_with`]), `dwconv2d`
//! [`dwconv::DwConv2d::run`], `epilogue`
//! [`epilogue::Epilogue::run`], `im2col` [`im2col::Im2col::run`], `maxpool2d`
//! [`maxpool::MaxPool2d::run`], `softmax` [`softmax::Softmax::run`], `layernorm`
//! [`norm::LayerNorm::run`]). The one exception is `erf`, which the interpreter evaluates
//! by a different formula (see [`erf`]).
//!
//! ```
//! let y = kiln_runtime::math::kiln_rt_expf(1.0);
//! assert_eq!(y, std::f32::consts::E);
//! assert!(kiln_runtime::symbols().iter().any(|(name, _)| *name == "kiln_rt_sgemm"));
//! ```
#![deny(missing_docs)]

pub mod conv;
pub mod copy;
pub mod dwconv;
pub mod epilogue;
pub mod erf;
pub mod gemm;
pub mod im2col;
pub mod math;
pub mod maxpool;
pub mod memory;
pub mod minifloat;
pub mod nchwc;
pub mod norm;
pub mod parallel;
pub mod pool;
mod prefetch;
pub mod qdwconv;
pub mod qgemm;
pub mod requantize;
mod scratch;
pub mod stop;
pub mod softmax;
pub mod topk;
pub mod trace;
pub mod vmath;
pub mod window;

/// Every runtime symbol with its address, for a JIT to resolve imports without `dlsym`.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    let mut table = math::symbols();
    table.push(("kiln_rt_sgemm", gemm::kiln_rt_sgemm as *const u8));
    table.push(("kiln_rt_should_stop", stop::kiln_rt_should_stop as *const u8));
    table.push(("kiln_rt_sgemm_packed", gemm::kiln_rt_sgemm_packed as *const u8));
    table.push(("kiln_rt_sgemm_fused", gemm::kiln_rt_sgemm_fused as *const u8));
    table.push(("kiln_rt_conv2d", conv::kiln_rt_conv2d as *const u8));
    table.push(("kiln_rt_conv2d_packed", conv::kiln_rt_conv2d_packed as *const u8));
    table.push(("kiln_rt_dwconv2d", dwconv::kiln_rt_dwconv2d as *const u8));
    table.push(("kiln_rt_epilogue", epilogue::kiln_rt_epilogue as *const u8));
    table.push(("kiln_rt_im2col", im2col::kiln_rt_im2col as *const u8));
    table.push(("kiln_rt_im2col_bytes", im2col::bytes::kiln_rt_im2col_bytes as *const u8));
    table.push(("kiln_rt_maxpool2d", maxpool::kiln_rt_maxpool2d as *const u8));
    table.push(("kiln_rt_softmax", softmax::kiln_rt_softmax as *const u8));
    table.push(("kiln_rt_layernorm", norm::kiln_rt_layernorm as *const u8));
    table.push(("kiln_rt_copy", copy::kiln_rt_copy as *const u8));
    table.push(("kiln_rt_requantize", requantize::kiln_rt_requantize as *const u8));
    table.push(("kiln_rt_qgemm", qgemm::kiln_rt_qgemm as *const u8));
    table.push(("kiln_rt_qgemm_requantize", qgemm::kiln_rt_qgemm_requantize as *const u8));
    table.push(("kiln_rt_dwconv2d_requantize", qdwconv::kiln_rt_dwconv2d_requantize as *const u8));
    table.push(("kiln_rt_conv2d_nchwc", nchwc::conv::kiln_rt_conv2d_nchwc as *const u8));
    table.push(("kiln_rt_maxpool2d_nchwc", nchwc::maxpool::kiln_rt_maxpool2d_nchwc as *const u8));
    table.push(("kiln_rt_to_nchwc", nchwc::kiln_rt_to_nchwc as *const u8));
    table.push(("kiln_rt_from_nchwc", nchwc::kiln_rt_from_nchwc as *const u8));
    table.push(("kiln_rt_parallel_for", parallel::kiln_rt_parallel_for as *const u8));
    table.push(("kiln_rt_topk", topk::kiln_rt_topk as *const u8));
    table.extend(minifloat::symbols());
    table
}

/// Reproducible data in [−1, 1] with a few exact zeros, for the unit tests.
#[cfg(test)]
pub(crate) fn test_data(len: usize, seed: u64) -> Vec<f32> {
    kiln_testkit::Rng::new(seed | 1).unit_f32s(len)
}

#[cfg(test)]
mod tests {
    #[test]
    fn symbol_names_are_unique_and_prefixed() {
        let table = super::symbols();
        let mut names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
        assert!(names.iter().all(|n| n.starts_with("kiln_rt_")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), table.len());
        // 17 unary functions and pow and fmod, each in f32 and f64, sgemm, sgemm_packed, sgemm_fused,
        // conv2d, conv2d_packed, dwconv2d, epilogue, im2col, im2col_bytes, maxpool2d, softmax,
        // layernorm, copy, parallel_for, conv2d_nchwc, maxpool2d_nchwc, to_nchwc, from_nchwc,
        // should_stop, requantize, qgemm, qgemm_requantize, dwconv2d_requantize, topk, and five
        // narrow-float encoders.
        assert_eq!(table.len(), 2 * 19 + 24 + 5);
    }
}
