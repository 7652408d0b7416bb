//! The row softmax in AVX-512 instructions, bit for bit what [`super::row`] computes.
//!
//! The compiler's vectorization of `row` evaluates `vmath::exp` as written for every input:
//! clamps at both ends with a select for clamped arguments, the integer arithmetic of `2ⁿ`
//! split in two factors, and the final select, about thirty instructions per vector. A
//! softmax's arguments `x − max` are at most 0 or NaN, so here `n = round(x·log₂e)` is
//! `vrndscaleps`, `2ⁿ·e` one `vscalefps` (exact, or rounded once where the result is
//! subnormal, as the two factors are), and only the underflow below −104 is selected: the same
//! operations on the same values, in a third of the instructions. The lanes are the row's
//! sixteen accumulators, combined as `row` combines them.

use std::arch::x86_64::*;

use crate::vmath::{EXP_POLY, EXP_UNDER, LN2_HI, LN2_LO};

/// `e^w` for `w ≤ 0` or NaN, as `vmath::exp` computes it.
#[inline(always)]
unsafe fn exp_nonpositive(w: __m512) -> __m512 {
    // SAFETY: the caller enables AVX-512F.
    unsafe {
        let t = _mm512_mul_ps(w, _mm512_set1_ps(std::f32::consts::LOG2_E));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
        // `w − n·LN2_HI` is exact, so the fused form gives the same value.
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), w);
        let r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(LN2_LO)));
        let mut p = _mm512_set1_ps(EXP_POLY[0]);
        for &c in &EXP_POLY[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
        let y = _mm512_scalef_ps(e, n);
        let under = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(w, _mm512_set1_ps(EXP_UNDER));
        _mm512_mask_mov_ps(y, under, _mm512_setzero_ps())
    }
}

/// The lanes below `n` (at most 16).
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// The softmax of one row.
///
/// # Safety
///
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row(x: &mut [f32]) {
    let whole = x.len() / 16 * 16;
    let rest = first(x.len() - whole);
    let p = x.as_mut_ptr();
    // SAFETY: every access is inside the row: whole vectors below `whole`, the last masked.
    unsafe {
        // The maximum: `max_ps(c, m)` is `c > m ? c : m`, skipping NaN as `row` does.
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        for i in (0..whole).step_by(16) {
            m = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), m);
        }
        if rest != 0 {
            m = _mm512_mask_max_ps(m, rest, _mm512_maskz_loadu_ps(rest, p.add(whole)), m);
        }
        let m = super::combine(std::mem::transmute::<__m512, [f32; 16]>(m), |a, b| if b > a { b } else { a });
        let shift = _mm512_set1_ps(if m == f32::NEG_INFINITY { 0.0 } else { m });
        let mut s = _mm512_setzero_ps();
        for i in (0..whole).step_by(16) {
            let e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), shift));
            _mm512_storeu_ps(p.add(i), e);
            s = _mm512_add_ps(s, e);
        }
        if rest != 0 {
            let e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(rest, p.add(whole)), shift));
            _mm512_mask_storeu_ps(p.add(whole), rest, e);
            s = _mm512_mask_add_ps(s, rest, s, e);
        }
        let sum = super::combine(std::mem::transmute::<__m512, [f32; 16]>(s), |a, b| a + b);
        let scale = _mm512_set1_ps(if sum == 0.0 { 1.0 } else { 1.0 / sum });
        for i in (0..whole).step_by(16) {
            _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), scale));
        }
        if rest != 0 {
            _mm512_mask_storeu_ps(p.add(whole), rest, _mm512_mul_ps(_mm512_maskz_loadu_ps(rest, p.add(whole)), scale));
        }
    }
}
