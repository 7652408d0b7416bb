//! The portable kernel: a 4 × 16 tile of plain Rust, vectorized by the compiler for the build's
//! baseline (SSE2 on x86-64, NEON on AArch64).

use super::blocked::{self, Blocking, Finish, Kernel, Problem, Source};
use super::direct;
use super::gemv;
use super::kernel::{self, Out, Steps, Update};
use super::pack::{self, View};
use super::simd::Portable;

/// Rows of the tile.
const MR: usize = 4;
/// Vectors (of 8 lanes) per tile row.
const NV: usize = 2;

/// The 4 × 16 kernel.
pub(crate) struct Tile4x16;

impl Kernel for Tile4x16 {
    type S = Portable;
    const MR: usize = MR;
    const NR: usize = NV * 8;
    // The kernel always reads MR rows: A is packed (and zero-padded).
    const A_IN_PLACE: bool = false;

    #[inline(always)]
    unsafe fn pack_a(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::panel::<MR>(dst, src, lanes, kc) }
    }

    #[inline(always)]
    unsafe fn pack_b(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::block::<{ NV * 8 }, false>(dst, src, lanes, kc) }
    }

    #[inline(always)]
    unsafe fn tile<B: Steps>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize) {
        // SAFETY: by the caller's contract. Edge tiles run the full kernel on zero padding.
        unsafe {
            let acc = kernel::accumulate::<Portable, B, MR, NV>(kc, a, b);
            kernel::store::<Portable, MR, NV>(&acc, c, up, mr, nr);
        }
    }
}

/// The blocked product with the 4 × 16 kernel.
///
/// # Safety
///
/// As [`blocked::run`].
pub(crate) unsafe fn gemm<B: Source, F: Finish>(pr: &Problem<B>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { blocked::run::<Tile4x16, B, F>(pr, bl, scratch, fin) }
}

/// The matrix–vector product.
///
/// # Safety
///
/// As [`gemv::run`].
pub(crate) unsafe fn gemv(g: &gemv::Gemv, scratch: &mut [f32]) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::run::<Portable>(g, scratch) }
}

/// The product of a row vector and a packed matrix, panels `panels`.
///
/// # Safety
///
/// As [`gemv::packed`].
pub(crate) unsafe fn gemv_packed(g: &gemv::PackedGemv, panels: std::ops::Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::packed::<Portable>(g, panels) }
}

/// The product of a convolution's planes read in place, with the 4x16 kernel.
///
/// # Safety
///
/// As [`direct::run`].
pub(crate) unsafe fn direct<F: Finish>(d: &direct::Direct, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { direct::run::<Tile4x16, F>(d, rows, cols, bl, scratch, fin) }
}
