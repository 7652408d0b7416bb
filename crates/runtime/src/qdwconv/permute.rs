//! Quantized depthwise planes computed four taps to an instruction: AVX-512 VBMI's byte
//! permute gathers, for each of 16 output lanes, the bytes under up to four taps of one kernel
//! row from a single 64-byte load, and VNNI's `vpdpbusd` sums their products with the row's
//! weights (as `i8`) into the lane's `i32`.
//!
//! A vector covers 16 columns of one output row, or, when a row has fewer than 16 columns,
//! several whole rows (a 7-wide plane puts two rows in one vector), so small planes keep most
//! lanes busy. The last vector of a wide row starts 16 columns from its end and recomputes a
//! few outputs rather than masking.
//!
//! Each plane is copied into a padded plane whose border holds the input's zero point, an `i8`
//! input flipped to `u8` (`x + 128`) on the way, as `vpdpbusd` multiplies unsigned bytes by
//! signed ones; the zero point moves with it. Every tap adds `w·x'`, the padding adding
//! `w·x_zero'`, so the zero point's share `x_zero'·Σ w` leaves once, with the bias. The output
//! stage is [`crate::requantize`]'s `f32` one, a vector its tie test declines taking the `f64`
//! one.

use std::arch::x86_64::*;

use super::QDwConv2d;
use crate::requantize::avx512::{Ties, levels_declined};

/// Kernel rows and groups of four columns a plane of this path may have (its weights live on
/// the stack).
const MAX_ROWS: usize = 16;
const MAX_GROUPS: usize = 4;

/// Vectors computed together, so that their sums overlap.
const BLOCK: usize = 4;

/// How `q`'s planes are laid out for this path.
pub(super) struct Layout {
    /// Bytes per padded row.
    width: usize,
    /// Padded rows the input is copied into.
    rows: usize,
    /// Bytes of the padded plane, with room for the last vector's 64-byte loads.
    len: usize,
    /// Groups of four kernel columns.
    groups: usize,
    /// Per group, the byte each lane's four bytes come from, from the vector's load.
    index: [[u8; 64]; MAX_GROUPS],
    /// The vectors of a pass: each one's first load and first output from the pass's, and its
    /// live lanes. A plane is one pass per output row when a row has 16 columns or more
    /// (ending with a vector 16 columns from the row's end), else one pass of groups of
    /// `lines` rows.
    pieces: Vec<(usize, usize, u16)>,
    /// Passes per plane and the distance from one to the next, in the padded plane and in
    /// the output.
    passes: usize,
    pass_step: (usize, usize),
}

impl Layout {
    /// The layout of `q`'s planes, `None` when this path does not take them: strides or
    /// dilations under which 16 outputs' taps span more than 64 bytes, a kernel past
    /// [`MAX_ROWS`] × 4·[`MAX_GROUPS`], an input zero point outside the input's range (the
    /// padding's bytes), sizes that overflow, or a CPU without AVX-512 BW, VBMI and VNNI.
    pub(super) fn new(q: &QDwConv2d) -> Option<Layout> {
        let w = &q.win;
        let zero_fits = if q.x_signed { (-128..=127).contains(&q.x_zero) } else { (0..=255).contains(&q.x_zero) };
        let groups = w.kw.div_ceil(4);
        if !zero_fits || w.oh == 0 || w.ow == 0 || w.kh == 0 || w.kh > MAX_ROWS || groups == 0 || groups > MAX_GROUPS || !supported() {
            return None;
        }
        let (cols, lines) = if w.ow >= 16 { (16, 1) } else { (w.ow, (16 / w.ow).min(w.oh)) };
        let reach = (w.ow - 1).checked_mul(w.sw)?.checked_add((w.kw - 1).checked_mul(w.dw)?)?.checked_add(1)?;
        let width = w.pw.checked_add(w.w)?.max(reach);
        let rows = (w.oh - 1).checked_mul(w.sh)?.checked_add((w.kh - 1).checked_mul(w.dh)?)?.checked_add(1)?;
        // Every offset below is at most `width·rows`.
        let plane = width.checked_mul(rows)?;
        let mut index = [[0u8; 64]; MAX_GROUPS];
        for (g, table) in index.iter_mut().enumerate().take(groups) {
            for lane in 0..cols * lines {
                for q in 0..4 {
                    let kx = 4 * g + q;
                    if kx >= w.kw {
                        continue;
                    }
                    let at = (lane / cols).checked_mul(w.sh)?.checked_mul(width)?.checked_add((lane % cols).checked_mul(w.sw)?)?.checked_add(kx.checked_mul(w.dw)?)?;
                    table[4 * lane + q] = u8::try_from(at).ok().filter(|&b| b < 64)?;
                }
            }
        }
        let (pieces, passes, pass_step): (Vec<_>, _, _) = if lines == 1 && w.ow >= 16 {
            let pieces = (0..w.ow.div_ceil(16)).map(|p| (16 * p).min(w.ow - 16)).map(|ox| (ox * w.sw, ox, u16::MAX)).collect();
            (pieces, w.oh, (w.sh.checked_mul(width)?, w.ow))
        } else {
            let pieces = (0..w.oh.div_ceil(lines))
                .map(|g| {
                    let live = lines.min(w.oh - g * lines) * cols;
                    (g * lines * w.sh * width, g * lines * w.ow, if live >= 16 { u16::MAX } else { (1u16 << live) - 1 })
                })
                .collect();
            (pieces, 1, (0, 0))
        };
        // The last vector loads 64 bytes from its last kernel row; a partial group of lines
        // reads rows past the plane, whose lanes are not stored.
        let &(last, _, _) = pieces.last()?;
        let start = (passes - 1).checked_mul(pass_step.0)?.checked_add(last)?;
        let len = start.checked_add((w.kh - 1).checked_mul(w.dh)?.checked_mul(width)?)?.checked_add(64)?.max(plane);
        (len <= isize::MAX as usize).then_some(Layout { width, rows, len, groups, index, pieces, passes, pass_step })
    }

    /// Bytes of the padded plane.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// Whether this CPU has the instructions.
fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vl") && std::arch::is_x86_feature_detected!("avx512vbmi") && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// The padding byte: the input zero point, flipped as the input is.
pub(super) fn fill(q: &QDwConv2d, pad: &mut [u8]) {
    pad.fill(flip(q) ^ q.x_zero as u8);
}

/// What the input's bytes are XORed with to become `u8`.
fn flip(q: &QDwConv2d) -> u8 {
    if q.x_signed { 0x80 } else { 0 }
}

/// One plane: `x` its input, `w` its `kh·kw` shifted weights, `bias` its bias (0 without),
/// `scale` its requantization scale, `y` its output, `pad` the padded plane of layout `l`
/// whose border [`fill`] set. Returns `false`, having written nothing, when a weight is not an
/// integer in `i8`'s range (the caller then takes another path).
///
/// # Safety
///
/// `l` is `q`'s layout; `x` readable for a plane, `w` for `kh·kw` floats, `y` writable for a
/// plane; `pad` holds `l.len()` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn plane(q: &QDwConv2d, l: &Layout, pad: &mut [u8], x: *const u8, w: *const f32, bias: i32, scale: f32, y: *mut u8) -> bool {
    let win = &q.win;
    // Row `ky`, group `g`: the four weights' bytes, zero past the kernel's columns.
    let mut weights = [0i32; MAX_ROWS * MAX_GROUPS];
    let mut sum = _mm512_setzero_si512();
    let live = ((1u32 << win.kw) - 1) as u16;
    for ky in 0..win.kh {
        // SAFETY: `w` holds `kh·kw` floats.
        let v = unsafe { _mm512_maskz_loadu_ps(live, w.add(ky * win.kw)) };
        let i = _mm512_cvttps_epi32(v);
        let exact = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_cvtepi32_ps(i), v);
        let small = _mm512_cmpge_epi32_mask(i, _mm512_set1_epi32(-128)) & _mm512_cmple_epi32_mask(i, _mm512_set1_epi32(127));
        if exact & small & live != live {
            return false;
        }
        // SAFETY: the row's four groups are 16 bytes of `weights`.
        unsafe { _mm_storeu_si128(weights.as_mut_ptr().add(ky * MAX_GROUPS).cast(), _mm512_cvtepi32_epi8(i)) };
        sum = _mm512_add_epi32(sum, i);
    }
    let sum = _mm512_reduce_add_epi32(sum);
    let flip = flip(q);
    let n = win.w.min(l.width - win.pw);
    for iy in 0..win.h.min(l.rows.saturating_sub(win.ph)) {
        // SAFETY: row `iy` of the plane holds `w ≥ n` bytes; padded row `iy + ph` holds `n`
        // after its `pw`.
        unsafe { copy_row(x.add(iy * win.w), pad.as_mut_ptr().add((iy + win.ph) * l.width + win.pw), n, flip) };
    }
    let zero = i32::from(flip ^ q.x_zero as u8);
    let out = Out { term: _mm512_set1_epi32(bias.wrapping_sub(zero.wrapping_mul(sum))), fast: scale.is_finite() && crate::requantize::zero_in_range(q.zero, q.y_signed), sf: _mm512_set1_ps(scale), sd: [_mm512_set1_pd(f64::from(scale)); 2], zero: q.zero, signed: q.y_signed };
    let pad = pad.as_ptr();
    // SAFETY: every vector's loads lie inside the padded plane (`Layout::new`), its live lanes
    // inside the output.
    unsafe {
        for pass in 0..l.passes {
            let (from, to) = (pad.add(pass * l.pass_step.0), y.add(pass * l.pass_step.1));
            let mut chunks = l.pieces.chunks_exact(BLOCK);
            for c in &mut chunks {
                vectors::<BLOCK>(q, l, from, [c[0], c[1], c[2], c[3]], &weights, &out, to);
            }
            match *chunks.remainder() {
                [a] => vectors::<1>(q, l, from, [a], &weights, &out, to),
                [a, b] => vectors::<2>(q, l, from, [a, b], &weights, &out, to),
                [a, b, c] => vectors::<3>(q, l, from, [a, b, c], &weights, &out, to),
                _ => {}
            }
        }
    }
    true
}

/// Copies `n` bytes, XORed with `flip`.
///
/// # Safety
///
/// `from` readable and `to` writable for `n` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn copy_row(from: *const u8, to: *mut u8, n: usize, flip: u8) {
    let f = _mm512_set1_epi8(flip as i8);
    let mut i = 0;
    // SAFETY: by the caller's contract, for the bytes `i..i + 64` or the masked tail.
    unsafe {
        while i + 64 <= n {
            _mm512_storeu_si512(to.add(i).cast(), _mm512_xor_si512(_mm512_loadu_si512(from.add(i).cast()), f));
            i += 64;
        }
        if i < n {
            let m: __mmask64 = (1u64 << (n - i)) - 1;
            _mm512_mask_storeu_epi8(to.add(i).cast(), m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, from.add(i).cast()), f));
        }
    }
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

/// `V` vectors, each given by its first load in `pad`, its first output in `y` and its live
/// lanes.
///
/// # Safety
///
/// As [`plane`], for vectors of `l`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn vectors<const V: usize>(q: &QDwConv2d, l: &Layout, pad: *const u8, at: [(usize, usize, u16); V], weights: &[i32; MAX_ROWS * MAX_GROUPS], out: &Out, y: *mut u8) {
    let win = &q.win;
    let mut acc = [_mm512_setzero_si512(); V];
    for ky in 0..win.kh {
        let row = ky * win.dh * l.width;
        for (u, a) in acc.iter_mut().enumerate() {
            // SAFETY: the padded plane holds the load (`Layout::new`).
            let bytes = unsafe { _mm512_loadu_si512(pad.add(at[u].0 + row).cast()) };
            for g in 0..l.groups {
                // SAFETY: the table is 64 bytes.
                let index = unsafe { _mm512_loadu_si512(l.index[g].as_ptr().cast()) };
                *a = _mm512_dpbusd_epi32(*a, _mm512_permutexvar_epi8(index, bytes), _mm512_set1_epi32(weights[ky * MAX_GROUPS + g]));
            }
        }
    }
    // The `f32` stage for every vector, then the `f64` one for all of them when a lane
    // declines: a call among the live vectors would send them through memory.
    let mut bytes = [_mm_setzero_si128(); V];
    let mut ties = Ties::new();
    for (b, a) in bytes.iter_mut().zip(&mut acc) {
        *a = _mm512_add_epi32(*a, out.term);
        *b = ties.levels(*a, out.sf, out.zero as f32, out.signed);
    }
    if !out.fast || ties.declines() {
        declined(&mut bytes, &acc, out);
    }
    for (b, &(_, to, live)) in bytes.iter().zip(&at) {
        // SAFETY: by the caller's contract.
        unsafe { _mm_mask_storeu_epi8(y.add(to).cast(), live, *b) };
    }
}

/// The `f64` output stage of the sums `acc` into `bytes`.
#[cold]
#[inline(never)]
#[target_feature(enable = "avx512f")]
fn declined<const V: usize>(bytes: &mut [__m128i; V], acc: &[__m512i; V], out: &Out) {
    for (b, a) in bytes.iter_mut().zip(acc) {
        *b = levels_declined(*a, &out.sd, f64::from(out.zero), out.signed);
    }
}
