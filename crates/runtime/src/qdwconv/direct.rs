//! Quantized depthwise planes of column stride 1 or 2 computed from their bytes with AVX-512.
//!
//! Each plane is first copied into a padded plane whose border holds the input's zero point,
//! wide enough that every load below lies inside it. An output row is then computed 16 columns
//! at a time (four vectors at once: along a row, or down four rows when a row has fewer): each tap's 16 inputs are one load
//! (for stride 2 the even bytes of a 32-byte load), widened to `i32` lanes and multiplied by
//! the tap's weight and accumulated with `vpdpwssd` (pairs of `i16` products), the weight in
//! each lane's low half and zero in its high half, so every product and sum is exact in `i32`
//! whatever the weights.
//!
//! Every tap adds `w'·x`, the padding's `x` being the zero point, so the zero point's share
//! `x_zero·Σ w'` leaves once, with the bias: the sum is `Σ w'·(x − x_zero)` with the padding
//! adding nothing, as in the definition. The output stage is [`crate::requantize`]'s `f32` one,
//! a vector declined by its tie test taking the `f64` one.
//!
//! Against the `f32` planes' three passes (shift, convolve, requantize) this is one pass that
//! reads a quarter of the bytes.

use std::arch::x86_64::*;

use super::QDwConv2d;
use crate::requantize::avx512::{levels_i32, store};

/// Taps a plane of this path may have (its weights live on the stack).
const MAX_TAPS: usize = 64;

/// Whether `q`'s planes take this path on this CPU: output rows of at least a vector (on
/// narrower ones most lanes would idle, where the `f32` routine runs a small plane as one flat
/// run), column stride 1 or 2, at most [`MAX_TAPS`] taps, an input zero point inside the
/// input's range (the padding's bytes), AVX-512 with byte, word and VNNI instructions.
pub(super) fn applies(q: &QDwConv2d) -> bool {
    let w = &q.win;
    let zero_fits = if q.x_signed { (-128..=127).contains(&q.x_zero) } else { (0..=255).contains(&q.x_zero) };
    w.ow >= 16
        && matches!(w.sw, 1 | 2)
        && w.kh.checked_mul(w.kw).is_some_and(|t| (1..=MAX_TAPS).contains(&t))
        && zero_fits
        && Padded::new(q).is_some()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// The padded plane's geometry: row `r` holds input row `r − ph`, column `c` input column
/// `c − pw`.
#[derive(Clone, Copy)]
pub(super) struct Padded {
    /// Bytes per row.
    pub width: usize,
    /// Rows.
    pub rows: usize,
}

impl Padded {
    /// The geometry for `q`'s planes, `None` when its size overflows.
    pub(super) fn new(q: &QDwConv2d) -> Option<Padded> {
        let w = &q.win;
        let span = 16 * w.sw;
        let vectors = w.ow.div_ceil(16).max(1);
        // The last vector's last tap loads `span` bytes from column `(v − 1)·16·sw + (kw − 1)·dw`.
        let reach = (vectors - 1).checked_mul(span)?.checked_add(w.kw.saturating_sub(1).checked_mul(w.dw)?)?.checked_add(span)?;
        let width = w.pw.checked_add(w.w)?.max(reach);
        let rows = w.oh.saturating_sub(1).checked_mul(w.sh)?.checked_add(w.kh.saturating_sub(1).checked_mul(w.dh)?)?.checked_add(1)?;
        width.checked_mul(rows).filter(|&n| n <= isize::MAX as usize)?;
        Some(Padded { width, rows })
    }

    /// Bytes of the padded plane.
    pub(super) fn len(&self) -> usize {
        self.width * self.rows
    }
}

/// Fills `pad` with `q`'s input zero point: the border every plane copied into it keeps.
pub(super) fn fill(q: &QDwConv2d, pad: &mut [u8]) {
    pad.fill(q.x_zero as u8);
}

/// One plane: `x` its input, `w` its `kh·kw` shifted weights, `bias` its bias (0 without),
/// `scale` its requantization scale, `y` its output, `pad` the padded plane of geometry `g`
/// whose border [`fill`] set. Returns `false`, having written nothing, when a weight is not an
/// integer of magnitude below 2^15 (the caller then takes the `f32` path, which defines what
/// such weights do).
///
/// # Safety
///
/// `applies(q)`; `x` readable for a plane, `w` for `kh·kw` floats, `y` writable for a plane.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn plane(q: &QDwConv2d, g: Padded, pad: &mut [u8], x: *const u8, w: *const f32, bias: i32, scale: f32, y: *mut u8) -> bool {
    let win = &q.win;
    let taps = win.kh * win.kw;
    let mut wt = [0i32; MAX_TAPS];
    let mut sum = 0i32;
    for (t, slot) in wt.iter_mut().enumerate().take(taps) {
        // SAFETY: `w` holds `taps` floats.
        let v = unsafe { w.add(t).read_unaligned() };
        if !(v.trunc() == v && v.abs() < 32768.0) {
            return false;
        }
        let v = v as i32;
        *slot = v & 0xFFFF;
        sum = sum.wrapping_add(v);
    }
    let n = win.w.min(g.width - win.pw);
    for iy in 0..win.h.min(g.rows.saturating_sub(win.ph)) {
        // SAFETY: row `iy` of the plane holds `w ≥ n` bytes; padded row `iy + ph` holds `n`
        // after its `pw`.
        unsafe { super::permute::copy_row(x.add(iy * win.w), pad.as_mut_ptr().add((iy + win.ph) * g.width + win.pw), n, 0) };
    }
    let out = Out { term: _mm512_set1_epi32(bias.wrapping_sub(q.x_zero.wrapping_mul(sum))), fast: scale.is_finite() && crate::requantize::zero_in_range(q.zero, q.y_signed), sf: _mm512_set1_ps(scale), sd: [_mm512_set1_pd(f64::from(scale)); 2], zero: q.zero, signed: q.y_signed };
    let pad = pad.as_ptr();
    let mask = |n: usize| if n >= 16 { u16::MAX } else { (1u16 << n) - 1 };
    let tail = mask(win.ow - 16 * (win.ow.div_ceil(16) - 1));
    let across = Step { input: win.sh * g.width, output: win.ow };
    let mut oy = 0;
    // SAFETY: the padded plane holds rows `oy·sh + ky·dh` and each vector's loads; output
    // row `oy` holds `ow` bytes, the vectors' live lanes.
    unsafe {
        // Rows narrower than four vectors go four rows at a time, so that vectors share the
        // weights' broadcasts and their sums overlap.
        if win.ow < 64 {
            while oy + 4 <= win.oh {
                for ox0 in (0..win.ow).step_by(16) {
                    let m = if ox0 + 16 >= win.ow { tail } else { u16::MAX };
                    vectors::<4>(q, g.width, pad.add(oy * across.input + ox0 * win.sw), &wt, across, &out, y.add(oy * win.ow + ox0), [m; 2]);
                }
                oy += 4;
            }
        }
        let along = Step { input: 16 * win.sw, output: 16 };
        for oy in oy..win.oh {
            let (rows, yr) = (pad.add(oy * across.input), y.add(oy * win.ow));
            let mut ox0 = 0;
            while ox0 + 64 <= win.ow {
                vectors::<4>(q, g.width, rows.add(ox0 * win.sw), &wt, along, &out, yr.add(ox0), [u16::MAX, if ox0 + 64 == win.ow { tail } else { u16::MAX }]);
                ox0 += 64;
            }
            while ox0 < win.ow {
                vectors::<1>(q, g.width, rows.add(ox0 * win.sw), &wt, along, &out, yr.add(ox0), [if ox0 + 16 >= win.ow { tail } else { u16::MAX }; 2]);
                ox0 += 16;
            }
        }
    }
    true
}

/// Where the vectors of one call of [`vectors`] lie from one to the next, in the padded plane
/// and in the output.
#[derive(Clone, Copy)]
struct Step {
    input: usize,
    output: usize,
}

/// A plane's output stage.
struct Out {
    /// The bias less the zero point's share, per lane.
    term: __m512i,
    /// Whether the `f32` stage applies (a finite scale, a zero point in the output's range).
    fast: bool,
    sf: __m512,
    sd: [__m512d; 2],
    zero: i32,
    signed: bool,
}

/// `V` vectors of 16 outputs, the first's taps starting at `at` in the padded plane and its
/// outputs at `y`, each next one `step` further; `masks` the live lanes of all but the last
/// vector and of the last.
///
/// # Safety
///
/// As [`plane`]: every vector's loads inside the padded plane, its live lanes inside the
/// output.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn vectors<const V: usize>(q: &QDwConv2d, width: usize, at: *const u8, wt: &[i32; MAX_TAPS], step: Step, out: &Out, y: *mut u8, masks: [u16; 2]) {
    let win = &q.win;
    let mut acc = [_mm512_setzero_si512(); V];
    for ky in 0..win.kh {
        // SAFETY: by the caller's contract.
        let row = unsafe { at.add(ky * win.dh * width) };
        for kx in 0..win.kw {
            let wv = _mm512_set1_epi32(wt[ky * win.kw + kx]);
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: the padded plane holds the load (`Padded::new`).
                let v = unsafe {
                    let at = row.add(kx * win.dw + u * step.input);
                    if win.sw == 1 {
                        let b = _mm_loadu_si128(at.cast());
                        if q.x_signed { _mm512_cvtepi8_epi32(b) } else { _mm512_cvtepu8_epi32(b) }
                    } else {
                        let words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(at.cast()));
                        if q.x_signed { _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(words)) } else { _mm512_and_si512(words, _mm512_set1_epi32(0xFF)) }
                    }
                };
                *a = _mm512_dpwssd_epi32(*a, v, wv);
            }
        }
    }
    for (u, a) in acc.iter().enumerate() {
        let v = _mm512_add_epi32(*a, out.term);
        // (No closure here: it would be compiled without AVX-512 and take the vectors through
        // memory.)
        let bytes = levels_i32(v, out.sf, &out.sd, out.zero, out.signed, out.fast);
        // SAFETY: by the caller's contract.
        unsafe { store(y.add(u * step.output), masks[usize::from(u + 1 == V)], bytes) };
    }
}
