//! Requantization: integer accumulators, `i32` or held as integer-valued `f32` (QLinearConv's,
//! computed by the `f32` products where that is exact), scaled, shifted by the output zero
//! point, rounded and saturated to 8-bit integers.
//!
//! `y = sat(round(x · s + zero))` with the product and sum in `f64`, as the ONNX reference
//! computes `res · (x_scale · w_scale / y_scale) + y_zero_point` (an `int32` array times a
//! `float32` one is `float64` in numpy): the product of an accumulator below 2^24 and an `f32`
//! scale is exact, the sum with the zero point rounds as numpy's does, and the last rounding is
//! half to even. Saturation is Rust's `as` (NaN to 0),
//! the loop IR's float-to-integer cast. With AVX-512 the rows are vectors of 16 (two of `f64`);
//! otherwise the loop runs in a function compiled for AVX2 so the rounding is one instruction.

use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};

/// One requantization over a row-major `rows × cols` matrix, the scale `s[r mod period]` per
/// row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requantize {
    /// Rows (a convolution's images × output channels).
    pub rows: usize,
    /// Columns (its output pixels).
    pub cols: usize,
    /// Scales: row `r` takes `s[r mod period]`; positive.
    pub period: usize,
    /// The output zero point.
    pub zero: i32,
    /// `i8` output; `u8` otherwise.
    pub signed: bool,
    /// `i32` accumulators; `f32` otherwise.
    pub int_x: bool,
}

impl Requantize {
    /// Elements of `x` and `y`, or `None` past `isize` bytes.
    pub fn len(&self) -> Option<usize> {
        self.rows.checked_mul(self.cols).filter(|&n| n.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize))
    }

    /// Applies it with the detected instruction set.
    ///
    /// # Panics
    ///
    /// If the sizes are invalid (a zero period, too many elements) or a slice is too short.
    /// `x` holds the accumulators' little-endian bytes, four per element.
    pub fn run(&self, x: &[u8], s: &[f32], y: &mut [u8]) {
        let n = self.len().expect("requantize sizes");
        assert!(self.period > 0 && x.len() >= 4 * n && y.len() >= n && s.len() >= self.period.min(self.rows), "requantize operands are too short for {self:?}");
        // SAFETY: the slices hold every element addressed, `y` is exclusively borrowed.
        unsafe { self.run_raw(x.as_ptr(), s.as_ptr(), y.as_mut_ptr()) }
    }

    /// # Safety
    ///
    /// `x` readable and `y` writable for `rows·cols` elements, `s` readable for
    /// `min(period, rows)`; `y` overlaps neither; valid sizes. No alignment is required.
    unsafe fn run_raw(&self, x: *const u8, s: *const f32, y: *mut u8) {
        let Some(n) = self.len() else { return };
        if n == 0 || self.period == 0 {
            return;
        }
        let isa = Isa::detected();
        let parts = if n >= 1 << 15 { pool::threads().min(self.rows) } else { 1 };
        let ptrs = SharedPtr((x, s, y));
        pool::for_each(parts.max(1), &|i| {
            let (x, s, y) = ptrs.get();
            let r = pool::part(self.rows, parts.max(1), 1, i);
            // SAFETY: each part is its own rows of `x` and `y`.
            unsafe {
                for row in r {
                    let at = row * self.cols;
                    let scale = f64::from(s.add(row % self.period).read_unaligned());
                    rows(isa, self, x.add(4 * at), scale, y.add(at));
                }
            }
        });
    }
}

/// One row with the instruction set `isa`.
///
/// # Safety
///
/// As [`Requantize::run_raw`] for one row of `cols` elements; the CPU runs `isa`.
unsafe fn rows(isa: Isa, q: &Requantize, x: *const u8, scale: f64, y: *mut u8) {
    // SAFETY: by the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => row_avx512(q, x, scale, y),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => row_avx2(q, x, scale, y),
            _ => row(q, x, scale, y),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_avx512(q: &Requantize, x: *const u8, scale: f64, y: *mut u8) {
    use std::arch::x86_64::*;
    let s = [_mm512_set1_pd(scale); 2];
    let fast = scale.is_finite() && zero_in_range(q.zero, q.signed);
    let (sf, zf, zero) = (_mm512_set1_ps(scale as f32), q.zero as f32, f64::from(q.zero));
    let mut i = 0;
    while i < q.cols {
        let live = if q.cols - i >= 16 { u16::MAX } else { (1u16 << (q.cols - i)) - 1 };
        // SAFETY: by the caller's contract, for the live lanes of these 16 elements.
        unsafe {
            let at = x.add(4 * i);
            let bytes = if q.int_x {
                avx512::levels_i32(_mm512_maskz_loadu_epi32(live, at.cast()), sf, &s, q.zero, q.signed, fast)
            } else {
                let mut ties = avx512::Ties::new();
                let v = _mm512_maskz_loadu_ps(live, at.cast());
                let quick = ties.levels_of_f32(v, sf, zf, q.signed);
                if fast && !ties.declines() { quick } else { _mm512_cvtepi32_epi8(avx512::levels(avx512::halves_f32(v), s, zero, q.signed)) }
            };
            avx512::store(y.add(i), live, bytes);
        }
        i += 16;
    }
}

/// [`level`] on 16 lanes.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    /// Lanes 0–7 and 8–15 of `v` in `f64`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn halves_i32(v: __m512i) -> [__m512d; 2] {
        [_mm512_cvtepi32_pd(_mm512_castsi512_si256(v)), _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64::<1>(v))]
    }

    /// Lanes 0–7 and 8–15 of `v` in `f64`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn halves_f32(v: __m512) -> [__m512d; 2] {
        [_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))))]
    }

    /// `sat(round(v · s + zero))` of the two halves' lanes as `i32` lanes (the bytes are their
    /// low bytes): the product and sum in `f64`, clamped to the `i8` (`signed`) or `u8` range
    /// (integers, so clamping before rounding half to even is clamping after), NaN to 0, as
    /// [`level`](super::level).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn levels(v: [__m512d; 2], s: [__m512d; 2], zero: f64, signed: bool) -> __m512i {
        let (lo, hi) = if signed { (-128.0, 127.0) } else { (0.0, 255.0) };
        let (zero, lo, hi) = (_mm512_set1_pd(zero), _mm512_set1_pd(lo), _mm512_set1_pd(hi));
        let a = half(v[0], s[0], zero, lo, hi);
        let b = half(v[1], s[1], zero, lo, hi);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
    }

    /// [`levels`] of `i32` lanes as bytes, out of line: the path the `f32` stage's declined
    /// vectors take, kept out of the loops that call it so that it does not take their
    /// registers.
    #[cold]
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn levels_declined(v: __m512i, s: &[__m512d; 2], zero: f64, signed: bool) -> __m128i {
        _mm512_cvtepi32_epi8(levels(halves_i32(v), *s, zero, signed))
    }

    /// One vector of `i32` accumulators as bytes: the `f32` stage when `fast` (a finite scale
    /// and a zero point in range) and no lane declines ([`Ties`]), else the definition's.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn levels_i32(v: __m512i, sf: __m512, s: &[__m512d; 2], zero: i32, signed: bool, fast: bool) -> __m128i {
        let mut ties = Ties::new();
        let bytes = ties.levels(v, sf, zero as f32, signed);
        if fast && !ties.declines() { bytes } else { levels_declined(v, s, f64::from(zero), signed) }
    }

    /// Distance from a half-integer below which a vector declines when an accumulator is past
    /// `f32`'s integers: above that computation's error bound (see [`Ties`]), far below the
    /// gaps between halves.
    const TIE: f32 = 1.0 / 2048.0;

    /// The `f32` requantization of several vectors, and the evidence that every lane of them
    /// rounded as the `f64` definition ([`levels`]) does; when [`Ties::declines`], the caller
    /// takes `levels` instead for all of them. Scales must be finite (a NaN or infinite one
    /// must take `levels`) and the zero point inside the output's range
    /// ([`super::zero_in_range`]).
    ///
    /// A lane computes `x = fl(fl(v)·s + zero)` with one fused multiply-add, clamps its top
    /// to the range's, rounds it half to even and narrows it with saturation. The definition
    /// rounds `t′ = fl64(v·s + zero)`, where `v·s` is exact.
    ///
    /// - While every accumulator is below 2^24 in magnitude, `fl(v) = v` and `x` is `t =
    ///   v·s + zero` rounded once to `f32`, as `t′` is to `f64`. Rounding is monotone and
    ///   fixes every half-integer of the range, so `x` and `t′` lie between the same two
    ///   half-integers as `t` and round as it does, unless one of them is a half-integer
    ///   `t` is not; and `t′ = h` puts `t` within `2^-53·|h|` of `h`, so `x = h` too. A lane
    ///   declines only when `x` is exactly a half-integer.
    /// - Past 2^24, `x` is within `2·2^-24·1280 < 2^-12.6` of `t` where `|v·s| ≤ 1024`, and
    ///   a lane declines within [`TIE`] (`2^-11`) of a half-integer; where `|v·s| > 1024`,
    ///   `|t| > 768` and `x` lies past the same end of the range, so both saturate alike.
    ///
    /// A value below the range converts to an integer below it (or to the conversion's
    /// overflow value, `i32::MIN`) that the saturating narrowing sends to the range's bottom,
    /// as clamping would.
    #[derive(Clone, Copy)]
    pub(crate) struct Ties {
        /// Per lane, the largest distance from a value to its rounded integer.
        frac: __m512,
        /// Per lane, the largest magnitude of an accumulator converted to `f32`.
        size: __m512,
    }

    impl Ties {
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn new() -> Ties {
            Ties { frac: _mm512_setzero_ps(), size: _mm512_setzero_ps() }
        }

        /// The 16 bytes (`i8` when `signed`, else `u8`) of the `i32` accumulators `v` with the
        /// scales `s`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn levels(&mut self, v: __m512i, s: __m512, zero: f32, signed: bool) -> __m128i {
            let f = _mm512_cvtepi32_ps(v);
            self.size = _mm512_max_ps(self.size, _mm512_abs_ps(f));
            self.round(_mm512_fmadd_ps(f, s, _mm512_set1_ps(zero)), signed)
        }

        /// [`Ties::levels`] of `f32` accumulators, each exact in `f32`; a NaN lane declines
        /// (the definition sends it to 0, not to the range's end as the clamp here would).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn levels_of_f32(&mut self, v: __m512, s: __m512, zero: f32, signed: bool) -> __m128i {
            let x = _mm512_fmadd_ps(v, s, _mm512_set1_ps(zero));
            self.frac = _mm512_mask_mov_ps(self.frac, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), _mm512_set1_ps(1.0));
            self.round(x, signed)
        }

        #[inline]
        #[target_feature(enable = "avx512f")]
        fn round(&mut self, x: __m512, signed: bool) -> __m128i {
            let x = _mm512_min_ps(x, _mm512_set1_ps(if signed { 127.0 } else { 255.0 }));
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
            self.frac = _mm512_max_ps(self.frac, _mm512_abs_ps(_mm512_sub_ps(x, r)));
            let i = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
            if signed { _mm512_cvtsepi32_epi8(i) } else { _mm512_cvtepi32_epi8(_mm512_max_epi32(i, _mm512_setzero_si512())) }
        }

        /// Whether a lane may have rounded otherwise than the definition.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn declines(&self) -> bool {
            let inexact = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.size, _mm512_set1_ps(16_777_216.0)) != 0;
            let limit = if inexact { 0.5 - TIE } else { 0.5 };
            _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.frac, _mm512_set1_ps(limit)) != 0
        }
    }

    /// The 16 bytes `bytes` stored to `y`'s live lanes: in one 16-byte write when every lane is
    /// live (a masked narrowing store is several times slower on AMD's cores), through a
    /// staging array otherwise.
    ///
    /// # Safety
    ///
    /// `y` writable for the live lanes, which are the low bits of `live`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn store(y: *mut u8, live: u16, bytes: __m128i) {
        // SAFETY: by the caller's contract.
        unsafe {
            if live == u16::MAX {
                _mm_storeu_si128(y.cast(), bytes);
            } else {
                let mut staged = [0u8; 16];
                _mm_storeu_si128(staged.as_mut_ptr().cast(), bytes);
                std::ptr::copy_nonoverlapping(staged.as_ptr(), y, (live.trailing_ones() as usize).min(16));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn half(v: __m512d, s: __m512d, zero: __m512d, lo: __m512d, hi: __m512d) -> __m256i {
        let x = _mm512_add_pd(_mm512_mul_pd(v, s), zero);
        // `max` turns a NaN into `lo`; the ordered mask sends it to 0 instead.
        let clamped = _mm512_min_pd(_mm512_max_pd(x, lo), hi);
        let ordered = _mm512_cmp_pd_mask::<_CMP_ORD_Q>(x, x);
        _mm512_maskz_cvt_roundpd_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(ordered, clamped)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(q: &Requantize, x: *const u8, scale: f64, y: *mut u8) {
    // SAFETY: by the caller's contract.
    unsafe { row(q, x, scale, y) }
}

/// # Safety
///
/// `x` readable and `y` writable for `q.cols` elements, apart.
#[inline(always)]
unsafe fn row(q: &Requantize, x: *const u8, scale: f64, y: *mut u8) {
    let zero = f64::from(q.zero);
    // SAFETY: by the caller's contract; byte slices need no alignment.
    let (x, y) = unsafe { (std::slice::from_raw_parts(x, 4 * q.cols), std::slice::from_raw_parts_mut(y, q.cols)) };
    let int_x = q.int_x;
    let value = |i: usize| {
        let bytes = [x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]];
        if int_x { f64::from(i32::from_le_bytes(bytes)) } else { f64::from(f32::from_le_bytes(bytes)) }
    };
    if q.signed {
        for (i, out) in y.iter_mut().enumerate() {
            *out = level(value(i), scale, zero, true);
        }
    } else {
        for (i, out) in y.iter_mut().enumerate() {
            *out = level(value(i), scale, zero, false);
        }
    }
}

/// Whether the zero point lies in the output's range: with finite scales, the condition of
/// the `f32` requantization (`avx512::levels_f32`).
pub(crate) fn zero_in_range(zero: i32, signed: bool) -> bool {
    if signed { (-128..=127).contains(&zero) } else { (0..=255).contains(&zero) }
}

/// `sat(round(v · scale + zero))` as an `i8` (when `signed`) or `u8` byte: the definition
/// every requantizing routine computes.
#[inline(always)]
pub(crate) fn level(v: f64, scale: f64, zero: f64, signed: bool) -> u8 {
    let r = (v * scale + zero).round_ties_even();
    if signed { (r as i8) as u8 } else { r as u8 }
}

/// `y[r, c] = sat(round(x[r, c] · s[r mod period] + zero))`: [`Requantize`] for generated code,
/// `x` of `i32` when `int_x` is non-zero, else `f32`; `y` of `i8` when `signed` is non-zero,
/// else `u8`. Nothing happens when a size is negative,
/// `period ≤ 0`, the zero point does not fit `i32`, or the matrix is over `isize` bytes.
///
/// # Safety
///
/// `x` readable and `y` writable for `rows·cols` elements, `s` readable for `min(period, rows)`;
/// `y` overlaps neither. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_requantize(x: *const u8, s: *const f32, y: *mut u8, rows: i64, cols: i64, period: i64, zero: i64, signed: i64, int_x: i64) {
    let (Ok(rows), Ok(cols), Ok(period), Ok(zero)) = (usize::try_from(rows), usize::try_from(cols), usize::try_from(period), i32::try_from(zero)) else { return };
    let q = Requantize { rows, cols, period, zero, signed: signed != 0, int_x: int_x != 0 };
    // SAFETY: by the caller's contract.
    unsafe { q.run_raw(x, s, y) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value from the definition in `f64`, on special accumulators and scales, signed and
    /// not, with several rows sharing scales.
    #[test]
    fn matches_the_definition() {
        let x: Vec<f32> = [0.0, -0.0, 1.0, -1.0, 12345.0, -16_777_215.0, 16_777_215.0, 255.0, 7.0, -300.0, f32::NAN, 3.0].repeat(3);
        let ints: Vec<i32> = [0, 1, -1, 12345, i32::MIN, i32::MAX, 255, 7, -300, 1 << 30, -(1 << 25) - 1, 3].repeat(3);
        let s = [0.5f32, 0.013_f32, 1.0e-6, 2.0];
        for (int_x, values) in [(false, x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()), (true, ints.iter().map(|&v| f64::from(v)).collect())] {
        let bytes: Vec<u8> = if int_x { ints.iter().flat_map(|v| v.to_le_bytes()).collect() } else { x.iter().flat_map(|v| v.to_le_bytes()).collect() };
        for signed in [false, true] {
            for zero in [0, 10, -128, 200] {
                let q = Requantize { rows: 6, cols: 6, period: 4, zero, signed, int_x };
                let mut y = vec![0u8; 36];
                q.run(&bytes, &s, &mut y);
                for (i, &got) in y.iter().enumerate() {
                    let v = (values[i] * f64::from(s[(i / 6) % 4]) + f64::from(zero)).round_ties_even();
                    let want = if signed { (v as i8) as u8 } else { v as u8 };
                    assert_eq!(got, want, "element {i}, signed {signed}, zero {zero}, int_x {int_x}");
                }
            }
        }
        }
    }

    /// One vector through the `f32` stage: its bytes, or `None` when it declines.
    #[cfg(target_arch = "x86_64")]
    fn staged(lanes: Lanes<'_>, scale: f32, zero: i32, signed: bool) -> Option<[u8; 16]> {
        use std::arch::x86_64::*;
        let mut out = [0u8; 16];
        // SAFETY: AVX-512F is present (the callers test); each slice holds 16 lanes.
        unsafe {
            let mut ties = avx512::Ties::new();
            let bytes = match lanes {
                Lanes::I32(v) => ties.levels(_mm512_loadu_si512(v.as_ptr().cast()), _mm512_set1_ps(scale), zero as f32, signed),
                Lanes::F32(v) => ties.levels_of_f32(_mm512_loadu_ps(v.as_ptr()), _mm512_set1_ps(scale), zero as f32, signed),
            };
            _mm_storeu_si128(out.as_mut_ptr().cast(), bytes);
            (!ties.declines()).then_some(out)
        }
    }

    #[derive(Clone, Copy)]
    enum Lanes<'a> {
        I32(&'a [i32]),
        F32(&'a [f32]),
    }

    /// The `f32` requantization against the definition wherever it answers, on accumulators
    /// around every rounding boundary (exact halves included: scales that are powers of two or
    /// thirds put accumulators on them), across the range and at the `i32` extremes; it must
    /// answer on most vectors.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn levels_in_f32_match_the_definition_where_they_answer() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let scales = [0.5f32, 0.25, 1.0 / 3.0, 0.013, 2.7e-4, 1.9e-6, 3.0, 117.0, 0.0, -0.02];
        let (mut answered, mut vectors) = (0, 0);
        for &scale in &scales {
            for (zero, signed) in [(0, false), (128, false), (255, false), (0, true), (-128, true), (127, true), (5, true)] {
                let mut v: Vec<i32> = vec![i32::MIN, i32::MAX, i32::MIN + 1, -(1 << 24) - 1, (1 << 24) + 1, 0, 1, -1];
                // Around each boundary h: the accumulators nearest (h − zero)/scale.
                for h2 in -260..=520 {
                    let at = (f64::from(h2) / 2.0 - f64::from(zero)) / f64::from(scale);
                    if at.is_finite() && at.abs() < 2e9 {
                        v.extend((-3..=3).map(|d| at.round() as i32 + d));
                    }
                }
                v.extend((-5000..5000).map(|i| i * 37));
                while v.len() % 16 != 0 {
                    v.push(7);
                }
                for chunk in v.chunks_exact(16) {
                    vectors += 1;
                    let Some(got) = staged(Lanes::I32(chunk), scale, zero, signed) else { continue };
                    answered += 1;
                    for (&acc, &lane) in chunk.iter().zip(&got) {
                        let want = level(f64::from(acc), f64::from(scale), f64::from(zero), signed);
                        assert_eq!(lane, want, "acc {acc}, scale {scale}, zero {zero}, signed {signed}");
                    }
                }
                // The same as `f32` accumulators, with fractions, infinities and a NaN among them.
                let mut xs: Vec<f32> = v.iter().map(|&a| a as f32).collect();
                xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.5, -0.5, 1.0e30, -3.75, 1.0e-30, 0.0, -0.0, 2.5, 127.5, 255.5, -128.5, 7.0, 8.0]);
                for chunk in xs.chunks_exact(16) {
                    let Some(got) = staged(Lanes::F32(chunk), scale, zero, signed) else { continue };
                    for (&x, &lane) in chunk.iter().zip(&got) {
                        let want = level(f64::from(x), f64::from(scale), f64::from(zero), signed);
                        assert_eq!(lane, want, "f32 acc {x}, scale {scale}, zero {zero}, signed {signed}");
                    }
                }
            }
        }
        assert!(answered * 2 > vectors, "only {answered} of {vectors} vectors in f32");
    }

    /// With every accumulator below 2^24, a vector declines exactly when one of its lanes'
    /// `f32` values, its top clamped, is a half-integer: on random products and scales, almost
    /// never.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exact_accumulators_decline_only_on_halves() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut declined, mut vectors) = (0, 0);
        for _ in 0..4000 {
            let scale = (1.0e-4 + (next() % 10_000) as f64 * 1.0e-6) as f32;
            let (signed, zero) = if next() % 2 == 0 { (true, (next() % 256) as i32 - 128) } else { (false, (next() % 256) as i32) };
            let v: Vec<i32> = (0..16).map(|_| (next() % (1 << 22)) as i32 - (1 << 21)).collect();
            let hi = if signed { 127.0f32 } else { 255.0 };
            let on_half = v.iter().any(|&a| {
                let x = (a as f32).mul_add(scale, zero as f32).min(hi);
                (x - x.round_ties_even()).abs() == 0.5
            });
            let got = staged(Lanes::I32(&v), scale, zero, signed);
            assert_eq!(got.is_none(), on_half, "{v:?} scale {scale} zero {zero}");
            vectors += 1;
            declined += usize::from(got.is_none());
        }
        assert!(declined * 100 < vectors, "{declined} of {vectors} vectors declined");
    }

    #[test]
    fn the_c_entry_point_refuses_nonsense() {
        let (x, s) = ([1.0f32; 4], [1.0f32; 2]);
        for (rows, cols, period, zero) in [(-1, 2, 1, 0), (2, -2, 1, 0), (2, 2, 0, 0), (2, 2, 1, i64::MAX)] {
            let mut y = [7u8; 4];
            // SAFETY: each case is refused before addressing anything.
            unsafe { kiln_rt_requantize(x.as_ptr().cast(), s.as_ptr(), y.as_mut_ptr(), rows, cols, period, zero, 0, 0) };
            assert_eq!(y, [7; 4]);
        }
    }
}
