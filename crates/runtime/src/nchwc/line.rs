//! A line of the blocked layout, one pixel's 16 channels of a block, as the vector routines hold
//! it: one AVX-512 register ([`Wide`]) or two AVX2 ones ([`Pair`]). The routines are written
//! once over [`Line`] and compiled into a function per instruction set; the operations are the
//! same instruction lane by lane in both (`vfmadd`, `vmaxps` returning its second operand for a
//! NaN, `vroundps` to nearest even), so both give the same bits.

use std::arch::x86_64::*;

use crate::epilogue::{Activation, QuantDequant, SIXTH};
use crate::gemm::avx2::Avx2;
use crate::gemm::avx512::Avx512;
use crate::gemm::simd::Simd;

/// 16 floats in registers.
///
/// # Safety
///
/// Every operation needs the CPU to have the instruction set of its implementation, and is
/// inlined into a function compiled for it; pointers need no alignment.
pub(crate) trait Line: Copy {
    /// Vector registers per line: tiles are sized by it (AVX-512 has 32 registers of one line,
    /// AVX2 16 of half a line).
    const REGS: usize;
    unsafe fn zero() -> Self;
    /// `x` in every lane.
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    /// Lanes `0..n` from `p`, the others zero; nothing past them is read.
    unsafe fn load_first(p: *const f32, n: usize) -> Self;
    unsafe fn store(p: *mut f32, v: Self);
    /// Lanes `0..n` to `p`; nothing past them is written.
    unsafe fn store_first(p: *mut f32, v: Self, n: usize);
    /// `a·b + c`, rounded once.
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self;
    /// [`Line::mul_add`] in lanes `0..8`; the others are not computed (their values are
    /// unspecified).
    unsafe fn mul_add_low(a: Self, b: Self, c: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    /// `a > b ? a : b`, lane by lane (`b` when either is a NaN).
    unsafe fn max(a: Self, b: Self) -> Self;
    /// The activation, as [`super::activate_one`] computes it per lane; `act` is one the
    /// blocked routines [apply](super::applies).
    unsafe fn activate(v: Self, act: Activation) -> Self;
}

/// A line in one AVX-512 register.
pub(crate) type Wide = __m512;

impl Line for __m512 {
    const REGS: usize = 1;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: by the trait's contract (all below).
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> Self {
        unsafe { Avx512::load_first(p, n) }
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        unsafe { _mm512_storeu_ps(p, v) }
    }

    #[inline(always)]
    unsafe fn store_first(p: *mut f32, v: Self, n: usize) {
        unsafe { Avx512::store_first(p, v, n) }
    }

    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    unsafe fn mul_add_low(a: Self, b: Self, c: Self) -> Self {
        // The low halves on a 256-bit unit, at half the cost of the whole vector on a core
        // with two 256-bit FMA pipes.
        unsafe { _mm512_castps256_ps512(_mm256_fmadd_ps(_mm512_castps512_ps256(a), _mm512_castps512_ps256(b), _mm512_castps512_ps256(c))) }
    }

    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { _mm512_add_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        unsafe { _mm512_sub_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        unsafe { _mm512_max_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn activate(v: Self, act: Activation) -> Self {
        unsafe {
            match act {
                Activation::Relu => Avx512::relu(v),
                Activation::Clip { min, max } => Avx512::clip(v, min, max),
                // The epilogue's `x · clip(x·(1/6) + ½, 0, 1)`, the product and sum rounded apart.
                Activation::HardSwish => _mm512_mul_ps(v, Avx512::clip(_mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(SIXTH)), _mm512_set1_ps(0.5)), 0.0, 1.0)),
                _ => match QuantDequant::of(act) {
                    Some(q) => {
                        let (zp, scale) = (_mm512_set1_ps(q.zero_point), _mm512_set1_ps(q.scale));
                        let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_div_ps(v, scale));
                        let u = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zp), _mm512_setzero_ps()), _mm512_set1_ps(q.top));
                        _mm512_mul_ps(_mm512_sub_ps(u, zp), scale)
                    }
                    None => v,
                },
            }
        }
    }
}

/// A line in two AVX2 registers: lanes 0–7 and 8–15.
#[derive(Clone, Copy)]
pub(crate) struct Pair(__m256, __m256);

impl Line for Pair {
    const REGS: usize = 2;

    #[inline(always)]
    unsafe fn zero() -> Self {
        unsafe { Pair(_mm256_setzero_ps(), _mm256_setzero_ps()) }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe {
            let v = _mm256_set1_ps(x);
            Pair(v, v)
        }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { Pair(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
    }

    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> Self {
        // Masked moves only where a half is partial: AMD's cores take many cycles over one.
        unsafe {
            match n {
                16.. => Self::load(p),
                8.. => Pair(_mm256_loadu_ps(p), Avx2::load_first(p.add(8), n - 8)),
                _ => Pair(Avx2::load_first(p, n), _mm256_setzero_ps()),
            }
        }
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        unsafe {
            _mm256_storeu_ps(p, v.0);
            _mm256_storeu_ps(p.add(8), v.1);
        }
    }

    #[inline(always)]
    unsafe fn store_first(p: *mut f32, v: Self, n: usize) {
        // As in `load_first`.
        unsafe {
            match n {
                16.. => Self::store(p, v),
                8.. => {
                    _mm256_storeu_ps(p, v.0);
                    Avx2::store_first(p.add(8), v.1, n - 8);
                }
                _ => Avx2::store_first(p, v.0, n),
            }
        }
    }

    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        unsafe { Pair(_mm256_fmadd_ps(a.0, b.0, c.0), _mm256_fmadd_ps(a.1, b.1, c.1)) }
    }

    #[inline(always)]
    unsafe fn mul_add_low(a: Self, b: Self, c: Self) -> Self {
        unsafe { Pair(_mm256_fmadd_ps(a.0, b.0, c.0), c.1) }
    }

    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { Pair(_mm256_add_ps(a.0, b.0), _mm256_add_ps(a.1, b.1)) }
    }

    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        unsafe { Pair(_mm256_sub_ps(a.0, b.0), _mm256_sub_ps(a.1, b.1)) }
    }

    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        unsafe { Pair(_mm256_max_ps(a.0, b.0), _mm256_max_ps(a.1, b.1)) }
    }

    #[inline(always)]
    unsafe fn activate(v: Self, act: Activation) -> Self {
        unsafe {
            match act {
                Activation::Relu => Pair(Avx2::relu(v.0), Avx2::relu(v.1)),
                Activation::Clip { min, max } => Pair(Avx2::clip(v.0, min, max), Avx2::clip(v.1, min, max)),
                Activation::HardSwish => Pair(hard_swish(v.0), hard_swish(v.1)),
                _ => match QuantDequant::of(act) {
                    Some(q) => Pair(quant_dequant(v.0, q), quant_dequant(v.1, q)),
                    None => v,
                },
            }
        }
    }
}

/// HardSwish on 8 lanes, as the Avx512 line computes it.
///
/// # Safety
///
/// The CPU has AVX.
#[inline(always)]
unsafe fn hard_swish(v: __m256) -> __m256 {
    // SAFETY: by the caller's contract.
    unsafe { _mm256_mul_ps(v, Avx2::clip(_mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(SIXTH)), _mm256_set1_ps(0.5)), 0.0, 1.0)) }
}

/// The quantize-dequantize pair of [`Line::activate`] on 8 lanes.
///
/// # Safety
///
/// The CPU has AVX.
#[inline(always)]
unsafe fn quant_dequant(v: __m256, q: QuantDequant) -> __m256 {
    // SAFETY: by the caller's contract.
    unsafe {
        let (zp, scale) = (_mm256_set1_ps(q.zero_point), _mm256_set1_ps(q.scale));
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_div_ps(v, scale));
        let u = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, zp), _mm256_setzero_ps()), _mm256_set1_ps(q.top));
        _mm256_mul_ps(_mm256_sub_ps(u, zp), scale)
    }
}
