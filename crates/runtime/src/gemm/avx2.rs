//! AVX2 with FMA: 8-lane vectors, a 6 × 16 tile (12 of the 16 vector registers accumulate; two
//! hold a step of the `B` panel, one the broadcast `A` value).

use std::arch::x86_64::*;

use super::blocked::{self, Blocking, Finish, Kernel, Problem, Source};
use super::direct;
use super::gemv;
use super::kernel::{self, Out, Steps, Update};
use super::pack::{self, View};
use super::simd::Simd;

/// The AVX2 + FMA vector operations.
#[derive(Clone, Copy)]
pub(crate) struct Avx2;

impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: the caller enables avx2 and fma.
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: as above; 8 readable floats at `p`.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: as above; 8 writable floats at `p`.
        unsafe { _mm256_storeu_ps(p, v) }
    }

    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> __m256 {
        // SAFETY: as above; `n` readable floats at `p`, and masked-off lanes are not accessed.
        unsafe { _mm256_maskload_ps(p, first_lanes(n)) }
    }

    #[inline(always)]
    unsafe fn store_first(p: *mut f32, v: __m256, n: usize) {
        // SAFETY: as above; `n` writable floats at `p`, and masked-off lanes are not accessed.
        unsafe { _mm256_maskstore_ps(p, first_lanes(n), v) }
    }

    #[inline(always)]
    unsafe fn load_even(p: *const f32, n: usize) -> __m256 {
        // SAFETY: as above; `p[0..2n − 1]` readable, and masked-off lanes are not accessed (the
        // second address is only formed, never dereferenced, when it is past them).
        unsafe {
            let len = (2 * n).saturating_sub(1);
            let lo = _mm256_maskload_ps(p, first_lanes(len));
            let hi = _mm256_maskload_ps(p.wrapping_add(8), first_lanes(len.saturating_sub(8)));
            // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit pairs in order 0, 2, 1, 3.
            let s = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(s)))
        }
    }

    #[inline(always)]
    unsafe fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn transpose(src: *const f32, ss: isize, dst: *mut f32, ds: isize) {
        // SAFETY: as above; the block's rows and the result's rows are readable and writable.
        unsafe {
            let r = transpose8(std::array::from_fn(|i| _mm256_loadu_ps(src.offset(i as isize * ss))));
            for (j, v) in r.into_iter().enumerate() {
                _mm256_storeu_ps(dst.offset(j as isize * ds), v);
            }
        }
    }

    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        // SAFETY: as above.
        unsafe {
            let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)))
        }
    }

    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn relu(v: __m256) -> __m256 {
        // SAFETY: as above. All-ones lanes where `!(x <= 0)` (unordered: NaN too) keep `x`; the
        // others become the bits of `+0`.
        unsafe { _mm256_and_ps(_mm256_cmp_ps::<_CMP_NLE_UQ>(v, _mm256_setzero_ps()), v) }
    }

    #[inline(always)]
    unsafe fn clip(v: __m256, lo: f32, hi: f32) -> __m256 {
        // SAFETY: as above; `blendv` takes its second operand where the mask is set.
        unsafe {
            let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
            let u = _mm256_blendv_ps(lo, v, _mm256_cmp_ps::<_CMP_NLE_UQ>(v, lo));
            _mm256_blendv_ps(hi, u, _mm256_cmp_ps::<_CMP_NGE_UQ>(u, hi))
        }
    }
}

/// The mask selecting lanes `0..n` (all ones in each selected lane).
#[inline(always)]
unsafe fn first_lanes(n: usize) -> __m256i {
    // SAFETY: the caller enables avx2.
    unsafe { _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)) }
}

/// The transpose of the 8 × 8 block whose rows are `r`: row `j` of the result is lane `j` of
/// every row.
///
/// # Safety
///
/// The caller enables AVX.
#[inline(always)]
pub(crate) unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: by the caller's contract.
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

/// Rows of the tile.
const MR: usize = 6;
/// Vectors per tile row.
const NV: usize = 2;

/// The 6 × 16 kernel.
pub(crate) struct Tile6x16;

impl Kernel for Tile6x16 {
    type S = Avx2;
    const MR: usize = MR;
    const NR: usize = NV * 8;
    const A_IN_PLACE: bool = true;

    #[inline(always)]
    unsafe fn pack_a(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::panel::<MR>(dst, src, lanes, kc) }
    }

    #[inline(always)]
    unsafe fn pack_b(dst: *mut f32, src: View, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { pack::block::<{ NV * 8 }, true>(dst, src, lanes, kc) }
    }

    #[inline(always)]
    unsafe fn tile<B: Steps>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize) {
        // SAFETY: by the caller's contract; an edge tile runs the smallest kernel covering it.
        unsafe {
            match (mr, nr.div_ceil(8)) {
                (1, 1) => one::<B, 1, 1>(kc, a, b, c, up, mr, nr),
                (2, 1) => one::<B, 2, 1>(kc, a, b, c, up, mr, nr),
                (3, 1) => one::<B, 3, 1>(kc, a, b, c, up, mr, nr),
                (4, 1) => one::<B, 4, 1>(kc, a, b, c, up, mr, nr),
                (5, 1) => one::<B, 5, 1>(kc, a, b, c, up, mr, nr),
                (_, 1) => one::<B, MR, 1>(kc, a, b, c, up, mr, nr),
                (1, _) => one::<B, 1, NV>(kc, a, b, c, up, mr, nr),
                (2, _) => one::<B, 2, NV>(kc, a, b, c, up, mr, nr),
                (3, _) => one::<B, 3, NV>(kc, a, b, c, up, mr, nr),
                (4, _) => one::<B, 4, NV>(kc, a, b, c, up, mr, nr),
                (5, _) => one::<B, 5, NV>(kc, a, b, c, up, mr, nr),
                _ => one::<B, MR, NV>(kc, a, b, c, up, mr, nr),
            }
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
            kernel::accumulate::<Avx2, B, M, V>(kc, packed, b)
        } else {
            kernel::accumulate::<Avx2, B, M, V>(kc, a, b)
        };
        kernel::store::<Avx2, M, V>(&acc, c, up, mr, nr);
    }
}

/// The blocked product with the 6 × 16 kernel.
///
/// # Safety
///
/// As [`blocked::run`]; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm<B: Source, F: Finish>(pr: &Problem<B>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { blocked::run::<Tile6x16, B, F>(pr, bl, scratch, fin) }
}

/// The matrix–vector product.
///
/// # Safety
///
/// As [`gemv::run`]; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemv(g: &gemv::Gemv, scratch: &mut [f32]) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::run::<Avx2>(g, scratch) }
}

/// The product of a row vector and a packed matrix, panels `panels`.
///
/// # Safety
///
/// As [`gemv::packed`]; the CPU has the instruction set.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemv_packed(g: &gemv::PackedGemv, panels: std::ops::Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { gemv::packed::<Avx2>(g, panels) }
}

/// The product of a convolution's planes read in place, with the 6x16 kernel.
///
/// # Safety
///
/// As [`direct::run`]; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn direct<F: Finish>(d: &direct::Direct, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { direct::run::<Tile6x16, F>(d, rows, cols, bl, scratch, fin) }
}
