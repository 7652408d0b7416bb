//! Depthwise planes `LANES` at a time, one plane per vector lane: the layout onnxruntime's
//! NCHWc kernels use, built per call instead of per model.
//!
//! The path of the module doc works on one plane at a time, so on small planes its per-plane
//! work (filling the padded plane, masked vectors at the end of each row) outweighs the taps,
//! and stride 2 de-interleaves every row. Here the planes of a group are interleaved into one
//! padded plane whose elements are vectors, lane `l` holding plane `p0 + l`: element `(r, c)`
//! is padded row `r`, column `c` of every plane in the group, zero in the padding. An output
//! is then `kh·kw` whole-vector multiply-adds at offsets fixed by the tap, with no masks and
//! no strided reads, whatever the stride or dilation; `BLOCK` outputs are summed together, so
//! their chains of multiply-adds overlap. The sums go to an interleaved output, copied out
//! plane by plane. Lanes past the last plane repeat it and are dropped.
//!
//! The sums are the padded path's exactly: each output is its start (zero, or `y` when
//! accumulating) plus the taps in ascending `(ky, kx)` order, one multiply-add each, a tap in
//! the padding adding `w·0`. A plane whose kernel is not finite is computed by the scalar
//! definition instead, as there.
//!
//! On an AVX2 machine without AVX-512, `dwconv_bench` shows this path faster than the padded
//! one on every MobileNet-V2 layer whose output is at most 28 × 28, and slower on larger
//! outputs, where the padded path's rows of whole vectors need no interleaving: hence the
//! module doc's 32 × 32 limit. Rows and outputs move between the layouts in `LANES × LANES`
//! transposes (`Simd::transpose`), much faster than element by element.

use super::{Plan, plane_exact, MAX_TAPS};
use crate::gemm::Isa;
use crate::gemm::simd::{Portable, Simd};

/// Outputs summed together: independent accumulators hide the multiply-add latency.
const BLOCK: usize = 8;

/// The most lanes a vector has.
const MAX_LANES: usize = 16;

/// The interleaved padded plane of a call: `rows × cols` vectors, the rows and columns that
/// the taps of some output reach.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lanes {
    rows: isize,
    cols: isize,
}

impl Lanes {
    /// The layout for `g`, whose sizes are valid with at least one output.
    pub(super) fn new(g: &Plan) -> Lanes {
        Lanes { rows: (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1, cols: (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 }
    }

    /// Floats of the interleaved padded plane with `lanes` lanes.
    pub(super) fn input_len(&self, lanes: usize) -> usize {
        (self.rows * self.cols) as usize * lanes
    }

    /// Scratch floats with `lanes` lanes: the interleaved padded plane, then the interleaved
    /// output.
    pub(super) fn scratch_len(&self, g: &Plan, lanes: usize) -> usize {
        self.input_len(lanes) + (g.oh * g.ow) as usize * lanes
    }
}

/// [`planes`] with `isa`'s vector operations.
///
/// # Safety
///
/// As [`planes`]; the CPU runs `isa`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run(isa: Isa, g: &Plan, shape: Lanes, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => planes_avx2(g, shape, x, w, y, scratch),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => planes_avx512(g, shape, x, w, y, scratch),
            _ => planes::<Portable>(g, shape, x, w, y, scratch),
        }
    }
}

/// [`planes`] with the AVX2 vector operations.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn planes_avx2(g: &Plan, shape: Lanes, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes::<crate::gemm::avx2::Avx2>(g, shape, x, w, y, scratch) }
}

/// [`planes`] with the AVX-512 vector operations.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn planes_avx512(g: &Plan, shape: Lanes, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes::<crate::gemm::avx512::Avx512>(g, shape, x, w, y, scratch) }
}

/// Every plane of `g.from..g.to`, `S::LANES` at a time.
///
/// # Safety
///
/// As the module's `planes`, with `scratch` writable for [`Lanes::scratch_len`] floats, zero in
/// its first [`Lanes::input_len`], overlapping no operand; `shape` is `Lanes::new(g)`; the
/// kernel has at most `MAX_TAPS` taps; the CPU runs `S`.
#[inline(always)]
pub(super) unsafe fn planes<S: Simd>(g: &Plan, shape: Lanes, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    let ln = S::LANES;
    debug_assert!(ln <= MAX_LANES);
    let (xs, ks, ys) = (g.h * g.w, (g.kh * g.kw) as usize, g.oh * g.ow);
    // The weights, tap-major: tap `t`'s vector is `wv[t·ln..]`, lane `l` of plane `p0 + l`.
    let mut wv = [0.0f32; MAX_TAPS * MAX_LANES];
    // The interior of the padded plane: the rows and columns that hold input.
    let (r_lo, r_hi) = (g.ph.min(shape.rows), (g.ph + g.h).min(shape.rows));
    let (c_lo, c_hi) = (g.pw.min(shape.cols), (g.pw + g.w).min(shape.cols));
    let (inp, row) = (scratch, shape.cols * ln as isize);
    // SAFETY: the interleaved output follows the input in the scratch.
    let out = unsafe { scratch.add(shape.input_len(ln)) };
    let mut pending = g.from;
    let mut p0 = g.from;
    while p0 < g.to {
        let n = (g.to - p0).min(ln as isize) as usize;
        let plane = |l: usize| p0 + l.min(n - 1) as isize;
        let mut finite = [true; MAX_LANES];
        // A whole group of planes moves in `LANES × LANES` transposes, a part group (the last
        // one) element by element.
        let whole = n == ln;
        let l_ = ln as isize;
        // SAFETY (the block): the planes `plane(l)` exist (and with `whole`, `p0..p0 + ln`); the
        // interleaved planes hold `rows × cols` and `oh × ow` vectors, which every index below
        // stays inside (the taps of output `(oy, ox)` reach padded row `oy·sh + ky·dh < rows`,
        // column likewise); input columns `c − pw` for `c` in `c_lo..c_hi` exist.
        unsafe {
            for l in 0..ln {
                let k = w.offset(plane(l) % g.channels * ks as isize);
                for t in 0..ks {
                    let v = k.add(t).read_unaligned();
                    wv[t * ln + l] = v;
                    finite[l] &= v.is_finite();
                }
            }
            for r in r_lo..r_hi {
                let (src, dst) = (x.offset(p0 * xs + (r - g.ph) * g.w - g.pw), inp.offset(r * row));
                let mut c = c_lo;
                while whole && c + l_ <= c_hi {
                    S::transpose(src.offset(c), xs, dst.offset(c * l_), l_);
                    c += l_;
                }
                for l in 0..ln {
                    let src = x.offset(plane(l) * xs + (r - g.ph) * g.w - g.pw);
                    for c in c..c_hi {
                        *dst.offset(c * l_ + l as isize) = *src.offset(c);
                    }
                }
            }
            if g.accumulate {
                let mut o = 0;
                while whole && o + l_ <= ys {
                    S::transpose(y.offset(p0 * ys + o), ys, out.offset(o * l_), l_);
                    o += l_;
                }
                for l in 0..ln {
                    let yp = y.offset(plane(l) * ys);
                    for o in o..ys {
                        *out.offset(o * l_ + l as isize) = *yp.offset(o);
                    }
                }
            }
            sums::<S>(g, row, wv.as_ptr(), inp, out);
            let all_finite = finite.iter().all(|&f| f);
            let mut o = 0;
            while whole && all_finite && o + l_ <= ys {
                S::transpose(out.offset(o * l_), l_, y.offset(p0 * ys + o), ys);
                o += l_;
            }
            for l in 0..n {
                let p = p0 + l as isize;
                if finite[l] {
                    let yp = y.offset(p * ys);
                    for o in o..ys {
                        *yp.offset(o) = *out.offset(o * l_ + l as isize);
                    }
                } else {
                    plane_exact(g, x.offset(p * xs), w.offset(p % g.channels * ks as isize), y.offset(p * ys));
                }
            }
            if let Some(post) = g.post {
                for l in 0..n {
                    post.after(p0 + l as isize, g.to, g.channels, &mut pending, y);
                }
            }
        }
        p0 += n as isize;
    }
}

/// Every output of a group: `out[o] = (out[o] if accumulating) + Σ_t wv[t]·inp[base(o) + tap(t)]`,
/// in vectors, `BLOCK` outputs at a time (the last block repeats its last output and keeps only
/// the real ones).
///
/// # Safety
///
/// As [`planes`]: `inp` the interleaved padded plane with rows of `row` floats, `out` the
/// interleaved output, `wv` one vector per tap.
#[inline(always)]
unsafe fn sums<S: Simd>(g: &Plan, row: isize, wv: *const f32, inp: *const f32, out: *mut f32) {
    let ln = S::LANES as isize;
    let count = (g.oh * g.ow) as usize;
    let (mut oy, mut ox) = (0isize, 0isize);
    let mut o0 = 0;
    while o0 < count {
        let kept = BLOCK.min(count - o0);
        // Each output's offset into the padded plane; the row and column advance without
        // divisions, and stay on the last output past it.
        let mut base = [0isize; BLOCK];
        for (i, b) in base.iter_mut().enumerate() {
            *b = oy * g.sh * row + ox * g.sw * ln;
            if i + 1 < kept {
                ox += 1;
                if ox == g.ow {
                    (oy, ox) = (oy + 1, 0);
                }
            }
        }
        let at = |i: usize| (o0 + i.min(kept - 1)) as isize * ln;
        // SAFETY: by the caller's contract (see `planes`).
        unsafe {
            let mut acc: [S::V; BLOCK] = std::array::from_fn(|i| if g.accumulate { S::load(out.offset(at(i))) } else { S::zero() });
            let mut t = 0;
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    let tap = inp.offset(ky * g.dh * row + kx * g.dw * ln);
                    let wt = S::load(wv.offset(t * ln));
                    for (a, &b) in acc.iter_mut().zip(&base) {
                        *a = S::mul_add(wt, S::load(tap.offset(b)), *a);
                    }
                    t += 1;
                }
            }
            for (i, a) in acc.into_iter().enumerate().take(kept) {
                S::store(out.offset(at(i)), a);
            }
        }
        o0 += kept;
        ox += 1;
        if ox == g.ow {
            (oy, ox) = (oy + 1, 0);
        }
    }
}

/// Output planes of at most this many elements take this path (32 × 32).
const MAX_PLANE: isize = 1024;

/// With AVX-512, output planes of at most this many elements (16 × 16) whose window
/// `direct.rs` does not read in place: in `conv_one`, a 5×5 window on 960 planes of 7 × 7 took
/// 84 µs here against 126 on the padded planes, 672 planes of 14 × 14 at stride 2 95 against
/// 125, a 7×7 window on 14 × 14 planes 88 against 118; at 20 × 20 and 28 × 28 outputs the two
/// were even, and from 56 × 56 at stride 2 the padded planes were faster.
const MAX_PLANE_AVX512: isize = 256;

/// Whether `g`'s planes take this path with `isa`: small output planes whose window, with
/// AVX-512, `direct.rs` does not read in place with masked loads. On larger ones the padded
/// path's rows of whole vectors were faster than interleaving (see the module doc).
pub(super) fn applies(g: &Plan, isa: Isa) -> bool {
    if isa == Isa::Avx512 {
        #[cfg(target_arch = "x86_64")]
        return g.oh * g.ow <= MAX_PLANE_AVX512 && super::direct::choose(g).is_none();
    }
    g.oh * g.ow <= MAX_PLANE
}
