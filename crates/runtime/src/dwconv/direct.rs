//! 3×3 depthwise planes with padding 1 and no dilation read in place with AVX-512: of stride 2
//! or 1 a row at a time, and small ones of stride 1 as one flat run — every depthwise layer of
//! MobileNet-V2.
//!
//! The padded-plane path (the module doc) copies each input plane into the scratch first, and
//! for stride 2 de-interleaves it into four phases, which cost about as much as the taps. Here
//! an output row is computed a vector of 16 columns at a time straight from its three input
//! rows: for stride 1 a tap's 16 inputs are one load; for stride 2 they are the even or odd
//! elements of two loads, gathered by one two-source permute. A stride-1 plane of at most 64
//! vectors in rows of at most 8 columns (half a vector) whose output has its input's shape is
//! one run of vectors, output `o` reading input `o + (ky − 1)·w + kx − 1` ([`Flat`]).
//! Masks leave out the inputs outside the plane: a masked-off lane loads zero and is never
//! accessed, so a tap in the padding adds `w·0` exactly as it does from the padded plane's
//! zeros, and a row outside the plane adds zeros. Each output is its start plus the nine taps
//! in ascending `(ky, kx)` order with fused multiply-adds, as on that path: the paths agree
//! bit for bit. All planes of a call go through one loop ([`planes`]).
//!
//! Against the padded path in `dwconv_bench`, reading in place is faster on every stride-2
//! layer of MobileNet-V2 and on its stride-1 planes up to 28 × 28 (with the masks of every
//! tap precomputed; combining row and column masks per load was slower). Reading the rows of
//! larger stride-1 planes in place pays only with all planes in one loop ([`planes`]), not as
//! a call per plane.

use std::arch::x86_64::*;

use super::Plan;
use crate::gemm::avx512::Avx512;
use crate::gemm::simd::Simd;
use crate::epilogue::Bias;
use crate::gemm::TileAct;

/// How a call's planes are read in place.
// Made once per call, on the stack: boxing the masks would allocate on every call.
#[allow(clippy::large_enum_variant)]
pub(super) enum Direct {
    /// Stride 2, a row at a time.
    Stride2,
    /// Stride 1 on a small plane, the whole plane as one flat run of vectors.
    Flat(Flat),
    /// Stride 1 on a larger plane, a row at a time.
    Stride1,
}

/// The planes of `g` that take a path of this file (see the module doc), if they do.
pub(super) fn choose(g: &Plan) -> Option<Direct> {
    if !(g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && g.ph == 1 && g.pw == 1) {
        return None;
    }
    if g.sh == 2 && g.sw == 2 {
        return Some(Direct::Stride2);
    }
    if !(g.sh == 1 && g.sw == 1 && g.oh == g.h && g.ow == g.w) {
        return None;
    }
    if g.ow <= FLAT_MAX_COLUMNS && g.oh * g.ow <= (16 * FLAT_VECTORS) as isize {
        return Some(Direct::Flat(Flat::new(g)));
    }
    Some(Direct::Stride1)
}

/// Rows of at most this many columns fill at most half a vector: [`Flat`] takes such planes
/// whole; wider ones go a row at a time (in `conv_one`, flat wins on 7 × 7 planes, rows on
/// 14 × 14 and 28 × 28: e.g. `conv_one -- 960,960,7,3,1,1,0,960 3000`).
const FLAT_MAX_COLUMNS: isize = 8;

/// Vectors of the largest plane [`Flat`] takes.
const FLAT_VECTORS: usize = 64;

/// A small plane of stride 1 and padding 1 on every side, whose output has the input's shape:
/// output `o` (row-major) reads input `o + (ky − 1)·w + kx − 1` for tap `(ky, kx)`, so the plane
/// is one run of vectors whatever its width, and a tap's 16 inputs are one load, masked to the
/// lanes whose input row and column exist. The masks are the same for every plane of a call.
pub(super) struct Flat {
    /// Vectors of a plane.
    vectors: usize,
    /// Per vector: the lanes inside the plane, then for each tap those whose input exists.
    masks: [[__mmask16; 10]; FLAT_VECTORS],
}

impl Flat {
    fn new(g: &Plan) -> Flat {
        let (h, w) = (g.h as usize, g.w as usize);
        let n = h * w;
        let mut masks = [[0; 10]; FLAT_VECTORS];
        for o in 0..n {
            let (oy, ox) = (o / w, o % w);
            let (rows, cols) = ([oy > 0, true, oy + 1 < h], [ox > 0, true, ox + 1 < w]);
            let m = &mut masks[o / 16];
            m[0] |= 1 << (o % 16);
            for t in 0..9 {
                if rows[t / 3] && cols[t % 3] {
                    m[1 + t] |= 1 << (o % 16);
                }
            }
        }
        Flat { vectors: n.div_ceil(16), masks }
    }
}

/// The lanes `i` of a vector with `0 <= start + i < len`.
#[inline(always)]
fn span(start: isize, len: isize) -> __mmask16 {
    let lo = (-start).clamp(0, 16);
    let hi = (len - start).clamp(0, 16);
    if hi <= lo { 0 } else { ((1u32 << hi) - (1u32 << lo)) as __mmask16 }
}

/// A fused convolution's epilogue applied to a plane's vectors before they are stored:
/// `v = (sum + bias) + z`, then the activation, the additions and selects of
/// [`Epilogue`](crate::epilogue::Epilogue) (so the values are those of the pass over the
/// finished plane).
#[derive(Clone, Copy)]
struct Epi {
    /// The plane's bias, if the epilogue has one.
    bias: Option<f32>,
    /// The plane of the residual addend (`oh × ow`, like the output), or null.
    z: *const f32,
    act: TileAct,
}

impl Epi {
    /// `a`, the sums at output offset `at`, through the epilogue; `keep` the lanes that exist
    /// (the others of `z` are not read).
    ///
    /// # Safety
    ///
    /// `z`'s lanes `keep` at `at` are readable when `z` is not null; the CPU has AVX-512F.
    #[inline(always)]
    unsafe fn apply(&self, a: __m512, at: isize, keep: __mmask16) -> __m512 {
        // SAFETY: by the caller's contract; masked-off lanes are not accessed.
        unsafe {
            let a = match self.bias {
                Some(b) => Avx512::add(a, _mm512_set1_ps(b)),
                None => a,
            };
            let a = if self.z.is_null() { a } else { Avx512::add(a, _mm512_maskz_loadu_ps(keep, self.z.wrapping_offset(at))) };
            match self.act {
                TileAct::None => a,
                TileAct::Relu => Avx512::relu(a),
                TileAct::Clip { lo, hi } => Avx512::clip(a, lo, hi),
            }
        }
    }
}

/// Planes `g.from..g.to`, read in place as `d` says, each with its epilogue in registers when
/// the plan has one whose activation [`TileAct`] takes, and otherwise with the epilogue's pass
/// over runs of finished planes; a plane whose kernel is not finite goes through
/// [`plane_exact`](super::plane_exact). One loop over the planes: a call per plane (its frame,
/// the kernel's broadcasts spilled, the epilogue passed through memory and reloaded before
/// the store that wrote it had finished) cost about as much as the taps of a 7 × 7 plane
/// (`conv_one` on MobileNet-V2's depthwise layers, `kiln bench --kernels`).
///
/// # Safety
///
/// `g` is the plan of valid sizes for which [`choose`] gave `d`; `x`, `w`, `y` hold their
/// planes as in [`DwConv2d::run_raw`](super::DwConv2d), `y` apart from the others; the
/// epilogue's bias and addend hold theirs; the CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn planes(d: &Direct, g: &Plan, x: *const f32, w: *const f32, y: *mut f32) {
    // One loop per kind of plane and width, each with its own registers: a loop that could
    // take any of them spilled the flat planes' taps (slower on 960 × 7²).
    // SAFETY: by the caller's contract.
    unsafe {
        match (d, (g.ow as usize).div_ceil(16)) {
            (Direct::Flat(f), _) => each(g, x, w, y, |xp, taps, yp, epi| flat(f, g, xp, taps, yp, epi)),
            (Direct::Stride1, 1) => each(g, x, w, y, |xp, taps, yp, epi| rows1::<1>(g, xp, taps, yp, epi)),
            (Direct::Stride1, 2) => each(g, x, w, y, |xp, taps, yp, epi| rows1::<2>(g, xp, taps, yp, epi)),
            (Direct::Stride1, 3) => each(g, x, w, y, |xp, taps, yp, epi| rows1::<3>(g, xp, taps, yp, epi)),
            (Direct::Stride1, _) => each(g, x, w, y, |xp, taps, yp, epi| rows1::<4>(g, xp, taps, yp, epi)),
            (Direct::Stride2, 1) => each(g, x, w, y, |xp, taps, yp, epi| rows::<1>(g, xp, taps, yp, epi)),
            (Direct::Stride2, 2) => each(g, x, w, y, |xp, taps, yp, epi| rows::<2>(g, xp, taps, yp, epi)),
            (Direct::Stride2, 3) => each(g, x, w, y, |xp, taps, yp, epi| rows::<3>(g, xp, taps, yp, epi)),
            (Direct::Stride2, _) => each(g, x, w, y, |xp, taps, yp, epi| rows::<4>(g, xp, taps, yp, epi)),
        }
    }
}

/// [`planes`]' loop, with `one` computing a plane from its input, its taps broadcast, its
/// output and its epilogue.
///
/// # Safety
///
/// As [`planes`]; `one` computes the plane it is given, as [`flat`] does.
#[inline(always)]
unsafe fn each(g: &Plan, x: *const f32, w: *const f32, y: *mut f32, one: impl Fn(*const f32, &[__m512; 9], *mut f32, Option<Epi>)) {
    let (xs, ys) = (g.h * g.w, g.oh * g.ow);
    // The epilogue's parts that do not change from plane to plane, taken apart here: an `Epi`
    // returned per plane went through memory and stalled its reload.
    let act = g.post.and_then(|post| TileAct::of(post.e.act));
    let mut pending = g.from;
    for p in g.from..g.to {
        // SAFETY: plane `p` of each operand is inside it (the caller's contract), and its
        // kernel has 9 taps (`choose`); the epilogue's bias holds the plane's element and its
        // addend the plane.
        unsafe {
            let (xp, k, yp) = (x.offset(p * xs), w.offset(p % g.channels * 9), y.offset(p * ys));
            let kernel: [f32; 9] = std::array::from_fn(|t| k.add(t).read_unaligned());
            if kernel.iter().all(|v| v.is_finite()) {
                let taps = kernel.map(|v| _mm512_set1_ps(v));
                let epi = match (g.post, act) {
                    (Some(post), Some(act)) => Some(Epi {
                        bias: (post.e.bias != Bias::None).then(|| post.bias.offset(p % g.channels).read_unaligned()),
                        z: if post.e.residual { post.z.offset(p * ys) } else { std::ptr::null() },
                        act,
                    }),
                    _ => None,
                };
                one(xp, &taps, yp, epi);
                if let (Some(post), Some(_)) = (g.post, epi) {
                    // Planes before this one (of the exact path) get their pass first, so
                    // each plane has its epilogue exactly once.
                    if pending < p {
                        post.planes(pending, p, g.channels, y);
                    }
                    pending = p + 1;
                    continue;
                }
            } else {
                super::plane_exact(g, xp, k, yp);
            }
            if let Some(post) = g.post {
                post.after(p, g.to, g.channels, &mut pending, y);
            }
        }
    }
}

/// One plane of a [`Direct::Flat`] call, `x` (`h × w`) into `y` (`oh × ow`, the start of each
/// sum when accumulating), with the kernel's taps broadcast in `w`: blocks of up to four
/// vectors; with `epi`, the epilogue applied before the sums are stored.
///
/// # Safety
///
/// As [`planes`], for one plane of each operand; `epi`'s `z` readable for `oh·ow` when not
/// null.
#[inline(always)]
unsafe fn flat(f: &Flat, g: &Plan, x: *const f32, w: &[__m512; 9], y: *mut f32, epi: Option<Epi>) {
    let mut v = 0;
    while v < f.vectors {
        // SAFETY: by the caller's contract; the block's vectors are below `f.vectors`.
        unsafe {
            match f.vectors - v {
                1 => flat_block::<1>(f, g, x, w, y, v, epi),
                2 => flat_block::<2>(f, g, x, w, y, v, epi),
                3 => flat_block::<3>(f, g, x, w, y, v, epi),
                _ => flat_block::<4>(f, g, x, w, y, v, epi),
            }
        }
        v += 4;
    }
}

/// Vectors `v0..v0 + V` of a [`Flat`] plane.
///
/// # Safety
///
/// As [`flat`]; `v0 + V <= f.vectors`.
#[inline(always)]
unsafe fn flat_block<const V: usize>(f: &Flat, g: &Plan, x: *const f32, w: &[__m512; 9], y: *mut f32, v0: usize, epi: Option<Epi>) {
    // SAFETY (the function): every load and store is masked to lanes whose output and input
    // exist (`Flat::masks`); masked-off lanes are not accessed, so addresses before or past the
    // plane are only formed (`wrapping_offset`), never dereferenced.
    unsafe {
        let masks: [[__mmask16; 10]; V] = std::array::from_fn(|i| f.masks[v0 + i]);
        let at = |i: usize| 16 * (v0 + i) as isize;
        let mut acc: [__m512; V] = std::array::from_fn(|i| if g.accumulate { _mm512_maskz_loadu_ps(masks[i][0], y.wrapping_offset(at(i))) } else { _mm512_setzero_ps() });
        for ky in 0..3 {
            for kx in 0..3 {
                let off = (ky as isize - 1) * g.w + kx as isize - 1;
                for (i, (acc, m)) in acc.iter_mut().zip(&masks).enumerate() {
                    let t = _mm512_maskz_loadu_ps(m[1 + ky * 3 + kx], x.wrapping_offset(at(i) + off));
                    *acc = _mm512_fmadd_ps(w[ky * 3 + kx], t, *acc);
                }
            }
        }
        for (i, (a, m)) in acc.into_iter().zip(&masks).enumerate() {
            let a = match &epi {
                Some(e) => e.apply(a, at(i), m[0]),
                None => a,
            };
            _mm512_mask_storeu_ps(y.wrapping_offset(at(i)), m[0], a);
        }
    }
}

/// [`flat`] for stride 2, with the kernel's taps broadcast in `w`, a block of `V` vectors of
/// each row at a time, block by block: their sums are
/// independent, so the nine dependent multiply-adds of one vector overlap with the others'.
/// A block's masks are the same in every row, and in most blocks and rows all lanes are
/// inside: those take plain loads.
///
/// # Safety
///
/// As [`flat`].
#[inline(always)]
unsafe fn rows<const V: usize>(g: &Plan, x: *const f32, w: &[__m512; 9], y: *mut f32, epi: Option<Epi>) {
    let mut ox0 = 0;
    while ox0 < g.ow {
        let col = |v: usize| ox0 + 16 * v as isize;
        let keep: [__mmask16; V] = std::array::from_fn(|v| span(col(v), g.ow));
        // The lanes of each load inside its input row: tap kx of output column ox reads column
        // 2·ox − 1 + kx, taken from the 32 columns from 2·ox − 1 (taps 0 and 1) and those from
        // 2·ox + 1 (tap 2).
        let masks: [[__mmask16; 4]; V] = std::array::from_fn(|v| {
            let b = 2 * col(v);
            [span(b - 1, g.w), span(b + 15, g.w), span(b + 1, g.w), span(b + 17, g.w)]
        });
        let full = keep.iter().chain(masks.iter().flatten()).all(|&m| m == u16::MAX);
        for oy in 0..g.oh {
            let iy = 2 * oy - 1;
            let inside: [bool; 3] = std::array::from_fn(|ky| (0..g.h).contains(&(iy + ky as isize)));
            // SAFETY: as `row` requires: `oy` is an output row, `iy..iy + 3` its input rows.
            unsafe {
                let (xr, yr) = (x.wrapping_offset(iy * g.w), y.offset(oy * g.ow).offset(ox0));
                // The epilogue's `z` at the row's first output (null stays null: no addend).
                let epi = epi.map(|e| Epi { z: if e.z.is_null() { e.z } else { e.z.wrapping_offset(oy * g.ow + ox0) }, ..e });
                if full && inside.iter().all(|&i| i) {
                    row::<V, false>(g, xr, yr, w, ox0, &keep, &masks, inside, epi);
                } else {
                    row::<V, true>(g, xr, yr, w, ox0, &keep, &masks, inside, epi);
                }
            }
        }
        ox0 += 16 * V as isize;
    }
}

/// Output row `yr` (from column `ox0`), `V` vectors, from the three input rows from `xr` (whose
/// `inside` flags say which lie in the plane); loads and stores masked by `keep` and `masks`
/// when `MASKED`, and otherwise all of whose lanes are inside.
///
/// # Safety
///
/// `xr` is the first input row of output row `yr` (it and the next two are readable for
/// their lanes that `masks` select where `inside`); `yr` (and `epi`'s `z`, when not null) holds
/// the block's lanes that `keep` selects; when not `MASKED` every lane is selected and every row inside; the CPU has
/// AVX-512F.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row<const V: usize, const MASKED: bool>(g: &Plan, xr: *const f32, yr: *mut f32, w: &[__m512; 9], ox0: isize, keep: &[__mmask16; V], masks: &[[__mmask16; 4]; V], inside: [bool; 3], epi: Option<Epi>) {
    // SAFETY (the function): masked-off lanes are not accessed, so addresses before or past a
    // row are only formed (`wrapping_offset`), never dereferenced.
    unsafe {
        let load = |m: __mmask16, p: *const f32| if MASKED { _mm512_maskz_loadu_ps(m, p) } else { _mm512_loadu_ps(p) };
        let at = |v: usize| 16 * v as isize;
        let mut acc: [__m512; V] = std::array::from_fn(|v| if g.accumulate { load(keep[v], yr.wrapping_offset(at(v))) } else { _mm512_setzero_ps() });
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for ky in 0..3 {
            let r = xr.wrapping_offset(ky as isize * g.w);
            for (v, (acc, masks)) in acc.iter_mut().zip(masks).enumerate() {
                let m = |i: usize| if inside[ky] { masks[i] } else { 0 };
                let b = 2 * (ox0 + at(v));
                let lo = load(m(0), r.wrapping_offset(b - 1));
                let hi = load(m(1), r.wrapping_offset(b + 15));
                let lo2 = load(m(2), r.wrapping_offset(b + 1));
                let hi2 = load(m(3), r.wrapping_offset(b + 17));
                *acc = _mm512_fmadd_ps(w[ky * 3], _mm512_permutex2var_ps(lo, even, hi), *acc);
                *acc = _mm512_fmadd_ps(w[ky * 3 + 1], _mm512_permutex2var_ps(lo, odd, hi), *acc);
                *acc = _mm512_fmadd_ps(w[ky * 3 + 2], _mm512_permutex2var_ps(lo2, even, hi2), *acc);
            }
        }
        for (v, a) in acc.into_iter().enumerate() {
            let a = match &epi {
                Some(e) => e.apply(a, at(v), if MASKED { keep[v] } else { u16::MAX }),
                None => a,
            };
            if MASKED {
                _mm512_mask_storeu_ps(yr.wrapping_offset(at(v)), keep[v], a);
            } else {
                _mm512_storeu_ps(yr.wrapping_offset(at(v)), a);
            }
        }
    }
}

/// [`flat`] for a larger plane of stride 1, with the kernel's taps broadcast in `w`: a block of
/// `V` vectors of each row at a time, each tap one load from its input row, masked to the
/// columns inside it (a row outside the plane adds zeros, as the padded plane's would).
///
/// # Safety
///
/// As [`flat`].
#[inline(always)]
unsafe fn rows1<const V: usize>(g: &Plan, x: *const f32, w: &[__m512; 9], y: *mut f32, epi: Option<Epi>) {
    let mut ox0 = 0;
    while ox0 < g.ow {
        let col = |v: usize| ox0 + 16 * v as isize;
        let keep: [__mmask16; V] = std::array::from_fn(|v| span(col(v), g.ow));
        // Tap kx of output column ox reads input column ox − 1 + kx.
        let masks: [[__mmask16; 3]; V] = std::array::from_fn(|v| std::array::from_fn(|kx| span(col(v) - 1 + kx as isize, g.w)));
        for oy in 0..g.oh {
            let iy = oy - 1;
            let inside: [bool; 3] = std::array::from_fn(|ky| (0..g.h).contains(&(iy + ky as isize)));
            // SAFETY (the block): masked-off lanes are not accessed, so addresses before or
            // past a row are only formed, never dereferenced; rows outside the plane are not
            // read; the output row holds the block's lanes `keep` selects.
            unsafe {
                let (xr, yr) = (x.wrapping_offset(iy * g.w), y.offset(oy * g.ow).offset(ox0));
                let epi = epi.map(|e| Epi { z: if e.z.is_null() { e.z } else { e.z.wrapping_offset(oy * g.ow + ox0) }, ..e });
                let at = |v: usize| 16 * v as isize;
                let mut acc: [__m512; V] = std::array::from_fn(|v| if g.accumulate { _mm512_maskz_loadu_ps(keep[v], yr.wrapping_offset(at(v))) } else { _mm512_setzero_ps() });
                for ky in 0..3 {
                    let r = xr.wrapping_offset(ky as isize * g.w);
                    for (v, acc) in acc.iter_mut().enumerate() {
                        for kx in 0..3 {
                            let m = if inside[ky] { masks[v][kx] } else { 0 };
                            let t = _mm512_maskz_loadu_ps(m, r.wrapping_offset(col(v) - 1 + kx as isize));
                            *acc = _mm512_fmadd_ps(w[ky * 3 + kx], t, *acc);
                        }
                    }
                }
                for (v, a) in acc.into_iter().enumerate() {
                    let a = match &epi {
                        Some(e) => e.apply(a, at(v), keep[v]),
                        None => a,
                    };
                    _mm512_mask_storeu_ps(yr.wrapping_offset(at(v)), keep[v], a);
                }
            }
        }
        ox0 += 16 * V as isize;
    }
}
