//! AVX-512F: 16-lane vectors, an 8 × 48 tile (24 of the 32 vector registers accumulate; three
//! hold a step of the `B` panel; the `A` values are broadcast from memory into the FMAs).

use std::arch::x86_64::*;

use super::blocked::{self, Blocking, Finish, Kernel, Problem, Source};
use super::direct;
use super::kernel::{self, Out, Steps, Straddle, Update};
use super::pack::{self, View};
use super::simd::Simd;
use super::gemv;

/// The AVX-512F vector operations.
#[derive(Clone, Copy)]
pub(crate) struct Avx512;

impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        // SAFETY: the caller enables avx512f.
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: as above; 16 readable floats at `p`.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: as above; 16 writable floats at `p`.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> __m512 {
        // SAFETY: as above; `n` readable floats at `p`, and masked-off lanes are not accessed.
        unsafe { _mm512_maskz_loadu_ps(first_lanes(n), p) }
    }

    #[inline(always)]
    unsafe fn store_first(p: *mut f32, v: __m512, n: usize) {
        // SAFETY: as above; `n` writable floats at `p`, and masked-off lanes are not accessed.
        unsafe { _mm512_mask_storeu_ps(p, first_lanes(n), v) }
    }

    #[inline(always)]
    unsafe fn load_even(p: *const f32, n: usize) -> __m512 {
        // SAFETY: as above; `p[0..2n − 1]` readable, and masked-off lanes are not accessed (the
        // second address is only formed, never dereferenced, when it is past them).
        unsafe {
            let len = (2 * n).saturating_sub(1);
            let lo = _mm512_maskz_loadu_ps(first_lanes(len), p);
            let hi = _mm512_maskz_loadu_ps(first_lanes(len.saturating_sub(16)), p.wrapping_add(16));
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            _mm512_permutex2var_ps(lo, even, hi)
        }
    }

    #[inline(always)]
    unsafe fn mul_add(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    unsafe fn transpose(src: *const f32, ss: isize, dst: *mut f32, ds: isize) {
        // Four 8 × 8 quarters with AVX (which AVX-512F implies): quarter `(a, b)` of the block
        // is quarter `(b, a)` of the result.
        // SAFETY: as above; the block's rows and the result's rows are readable and writable.
        unsafe {
            for a in 0..2 {
                for b in 0..2 {
                    let from = src.offset(8 * a * ss + 8 * b);
                    let r = super::avx2::transpose8(std::array::from_fn(|i| _mm256_loadu_ps(from.offset(i as isize * ss))));
                    let to = dst.offset(8 * b * ds + 8 * a);
                    for (j, v) in r.into_iter().enumerate() {
                        _mm256_storeu_ps(to.offset(j as isize * ds), v);
                    }
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        // SAFETY: as above.
        unsafe { _mm512_reduce_add_ps(v) }
    }

    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_add_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn relu(v: __m512) -> __m512 {
        // SAFETY: as above. Lanes where `!(x <= 0)` (unordered: NaN too) keep `x`; the others
        // become `+0`.
        unsafe { _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(v, _mm512_setzero_ps()), v) }
    }

    #[inline(always)]
    unsafe fn clip(v: __m512, lo: f32, hi: f32) -> __m512 {
        // SAFETY: as above; `mask_blend` takes its second operand where the mask is set.
        unsafe {
            let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
            let u = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(v, lo), lo, v);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_NGE_UQ>(u, hi), hi, u)
        }
    }
}

/// The mask selecting lanes `0..n`.
#[inline(always)]
fn first_lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// Rows of the tile.
const MR: usize = 8;
/// Vectors per tile row.
const NV: usize = 3;

/// The 8 × 48 kernel.
pub(crate) struct Tile8x48;

impl Kernel for Tile8x48 {
    type S = Avx512;
    const MR: usize = MR;
    const NR: usize = NV * 16;
    const A_IN_PLACE: bool = true;

    #[inline(always)]
    unsafe fn pack_a(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::panel_avx::<MR>(dst, src, lanes, kc) }
    }

    #[inline(always)]
    unsafe fn pack_b(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::block::<{ NV * 16 }, true>(dst, src, lanes, kc) }
    }

    const STRADDLES: bool = true;

    #[inline(always)]
    unsafe fn tile_straddle(kc: usize, a: View, b: Straddle, c: Out, up: Update, mr: usize, nr: usize) {
        // SAFETY: by the caller's contract; the driver's caller enables AVX-512F.
        unsafe { straddle(kc, a, b, c, up, mr, nr) }
    }

    #[inline(always)]
    unsafe fn tile<B: Steps>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize) {
        // SAFETY: by the caller's contract; an edge tile runs the smallest kernel covering it.
        unsafe {
            match nr.div_ceil(16) {
                1 => rows::<B, 1>(kc, a, b, c, up, mr, nr),
                2 => rows::<B, 2>(kc, a, b, c, up, mr, nr),
                _ => rows::<B, NV>(kc, a, b, c, up, mr, nr),
            }
        }
    }
}

/// A two-vector tile across two panels (`Kernel::tile_straddle`), out of line.
///
/// # Safety
///
/// As [`Kernel::tile`]; the CPU has AVX-512F.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn straddle(kc: usize, a: View, b: Straddle, c: Out, up: Update, mr: usize, nr: usize) {
    // SAFETY: by the caller's contract.
    unsafe { rows::<Straddle, 2>(kc, a, b, c, up, mr, nr) }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<B: Steps, const V: usize>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        match mr {
            1 => one::<B, 1, V>(kc, a, b, c, up, mr, nr),
            2 => one::<B, 2, V>(kc, a, b, c, up, mr, nr),
            3 => one::<B, 3, V>(kc, a, b, c, up, mr, nr),
            4 => one::<B, 4, V>(kc, a, b, c, up, mr, nr),
            5 => one::<B, 5, V>(kc, a, b, c, up, mr, nr),
            6 => one::<B, 6, V>(kc, a, b, c, up, mr, nr),
            7 => one::<B, 7, V>(kc, a, b, c, up, mr, nr),
            _ => one::<B, MR, V>(kc, a, b, c, up, mr, nr),
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn one<B: Steps, const M: usize, const V: usize>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        let packed = View { ptr: a.ptr, lane_stride: 1, step_stride: MR as isize };
        let acc = if a.lane_stride == packed.lane_stride && a.step_stride == packed.step_stride {
            // The packed layout, with constant strides.
            kernel::accumulate::<Avx512, B, M, V>(kc, packed, b)
        } else {
            kernel::accumulate::<Avx512, B, M, V>(kc, a, b)
        };
        kernel::store::<Avx512, M, V>(&acc, c, up, mr, nr);
    }
}

/// The blocked product with the 8 × 48 kernel.
///
/// # Safety
///
/// As [`blocked::run`]; the CPU has AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn gemm<B: Source, F: Finish>(pr: &Problem<B>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { blocked::run::<Tile8x48, B, F>(pr, bl, scratch, fin) }
}

/// The matrix–vector product.
///
/// # Safety
///
/// As [`gemv::run`]; the CPU has AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn gemv(g: &gemv::Gemv, scratch: &mut [f32]) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::run::<Avx512>(g, scratch) }
}

/// The product of a row vector and a packed matrix, panels `panels`.
///
/// # Safety
///
/// As [`gemv::packed`]; the CPU has the instruction set.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn gemv_packed(g: &gemv::PackedGemv, panels: std::ops::Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::packed::<Avx512>(g, panels) }
}

/// The product of a convolution's planes read in place, with the 8x48 kernel.
///
/// # Safety
///
/// As [`direct::run`]; the CPU has AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn direct<F: Finish>(d: &direct::Direct, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { direct::run::<Tile8x48, F>(d, rows, cols, bl, scratch, fin) }
}
