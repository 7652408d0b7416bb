//! Depthwise convolutions of NCHW16c tensors ([`super`]): one kernel per channel, 16 channels
//! per vector, `y = act(w ⊛ x + bias + z)`.
//!
//! An output pixel of a block is its taps' input vectors times the taps' weight vectors
//! (weights packed `[c/16][ky][kx][16]`, [`pack_weights`]), summed in `(ky, kx)` order from
//! zero, the taps outside the input skipped, then the bias, the addend and the activation, and
//! one whole-line store. A 3×3 window's weights stay in registers for a block's rows; each
//! output row's columns whose taps all lie inside take a loop without checks. Other windows
//! (5×5, 7×7, dilated) sum eight columns at a time (four with AVX2), the border columns in
//! groups too, each with its own taps: one column's chain of 25 multiply-adds alone waits on
//! each sum's latency (the 72-channel 5×5 stride-2 layer of MobileNet-V3 at 56² went from 94
//! to 49 µs in `conv_one`).
//!
//! **Numerics.** Each output is the fused multiply-adds of its taps inside the input in
//! ascending `(ky, kx)` order from zero, then `+ bias`, `+ z` and the activation, on any thread
//! count.

use std::cell::RefCell;
use std::ops::Range;

use super::LANES;
use crate::conv::Conv2d;
use crate::gemm::Isa;
#[cfg(target_arch = "x86_64")]
use super::line::{Line, Pair, Wide};
use crate::pool::{self, SharedPtr};

/// The `width` argument of `kiln_rt_conv2d_nchwc` for weights packed by [`pack_weights`].
pub const PACKED: usize = LANES;

thread_local! {
    /// Weights packed on the call when they come plain.
    static PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether this routine computes `c`: a depthwise convolution (one input and one output
/// channel per group) of valid sizes with an activation it applies in registers (none, Relu,
/// Clip).
pub fn supports(c: &Conv2d) -> bool {
    let act = super::applies(c.act);
    act && c.groups == c.channels && c.out_channels == c.channels && c.is_valid() && c.y_len() > 0 && c.win.kh * c.win.kw > 0
}

/// Floats of the packed weights.
pub fn packed_len(c: &Conv2d) -> usize {
    c.channels.div_ceil(LANES) * LANES * c.win.kh * c.win.kw
}

/// Packs the weights `w` (`channels × kh × kw` little-endian floats, any alignment) as
/// [`run`] reads them: tap `t` of channel `c` at `(c/16·taps + t)·16 + c mod 16`, zero past
/// the last channel.
///
/// # Panics
///
/// If `w` or `dst` is too short.
pub fn pack_weights(c: &Conv2d, w: &[u8], dst: &mut [f32]) {
    let taps = c.win.kh * c.win.kw;
    assert!(w.len() >= 4 * c.channels * taps && dst.len() >= packed_len(c), "depthwise weights too short to pack");
    for (i, v) in dst[..packed_len(c)].iter_mut().enumerate() {
        let (block, t, lane) = (i / (taps * LANES), i / LANES % taps, i % LANES);
        let ch = block * LANES + lane;
        *v = if ch < c.channels {
            let at = 4 * (ch * taps + t);
            f32::from_le_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]])
        } else {
            0.0
        };
    }
}

/// `c` on blocked tensors with weights `w`: plain (`packed` false) or packed by
/// [`pack_weights`]. Over the current thread pool; nothing when `c` is not
/// [supported](supports).
///
/// # Safety
///
/// `x` readable for `batch·⌈C/16⌉·16·h·w` floats, `y` writable for `batch·⌈C/16⌉·16·oh·ow`
/// and overlapping no other operand, `z` readable for as many when `c.residual`, `bias` for
/// `C` floats when `c.bias`, `w` for the weights; no alignment is required.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(isa: Isa, c: &Conv2d, x: *const f32, w: *const f32, packed: bool, bias: *const f32, z: *const f32, y: *mut f32) {
    if !supports(c) {
        return;
    }
    if packed {
        // SAFETY: by the caller's contract.
        return unsafe { run_packed(isa, c, x, w, bias, z, y) };
    }
    crate::scratch::with(&PANELS, packed_len(c), |wp| {
        // SAFETY: `w` holds the plain weights, whose bytes `pack_weights` reads.
        let bytes = unsafe { std::slice::from_raw_parts(w.cast::<u8>(), 4 * c.w_len()) };
        pack_weights(c, bytes, wp);
        // SAFETY: by the caller's contract, with the weights just packed.
        unsafe { run_packed(isa, c, x, wp.as_ptr(), bias, z, y) }
    })
}

/// [`run`] with packed weights.
///
/// # Safety
///
/// As [`run`].
unsafe fn run_packed(isa: Isa, c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
    let blocks = c.channels.div_ceil(LANES);
    // Rows of output blocks, over all images: the tasks' grain.
    let rows = c.batch * blocks * c.win.oh;
    let work = rows * c.win.ow * c.win.kh * c.win.kw;
    let ways = if work < 1 << 15 { 1 } else { pool::threads().min(rows) };
    let wide = super::usable(isa);
    let bias = if c.bias { bias } else { std::ptr::null() };
    let z = if c.residual { z } else { std::ptr::null() };
    let args = SharedPtr((x, wp, bias, z, y));
    let task = |i: usize| {
        let (x, wp, bias, z, y) = args.get();
        let part = pool::part(rows, ways, 1, i);
        // SAFETY: by the caller's contract; each task writes its own rows.
        unsafe {
            match wide {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => avx512(c, x, wp, bias, z, y, part),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => avx2(c, x, wp, bias, z, y, part),
                _ => portable(c, x, wp, bias, z, y, part),
            }
        }
    };
    if ways <= 1 {
        task(0);
    } else {
        pool::for_each(ways, &task);
    }
}

/// The taps of output coordinate `o` inside an input of `n`: `k` taps `d` apart from `o·s − p`,
/// as the range of tap indices and the input coordinate of the first.
fn inside(o: usize, s: usize, p: usize, k: usize, d: usize, n: usize) -> (Range<usize>, usize) {
    let start = o * s;
    // First tap with start + t·d ≥ p, last with start + t·d − p < n.
    let lo = p.saturating_sub(start).div_ceil(d).min(k);
    let hi = if start >= n + p { 0 } else { (n + p - start - 1) / d + 1 }.min(k);
    let lo = lo.min(hi);
    (lo..hi, (start + lo * d).saturating_sub(p))
}

/// Rows `rows` (over images, blocks and output rows) with AVX-512.
///
/// # Safety
///
/// As [`run_packed`]; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512(c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, rows: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { lines::<Wide>(c, x, wp, bias, z, y, rows) }
}

/// Rows `rows` (over images, blocks and output rows) with AVX2.
///
/// # Safety
///
/// As [`run_packed`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, rows: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { lines::<Pair>(c, x, wp, bias, z, y, rows) }
}

/// Rows `rows` a line (16 channels of a pixel) at a time.
///
/// # Safety
///
/// As [`run_packed`]; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lines<L: Line>(c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, rows: Range<usize>) {
    // No closure here does vector work: a closure is compiled apart from the function with the
    // instruction set, and its vector operations would be calls.
    let win = &c.win;
    let blocks = c.channels.div_ceil(LANES);
    let taps = win.kh * win.kw;
    let (plane_in, plane_out) = (win.h * win.w * LANES, win.oh * win.ow * LANES);
    // Output columns whose taps all lie inside the input.
    let lo = win.pw.div_ceil(win.sw).min(win.ow);
    let hi = if win.w + win.pw < (win.kw - 1) * win.dw + 1 { lo } else { ((win.w + win.pw - (win.kw - 1) * win.dw - 1) / win.sw + 1).clamp(lo, win.ow) };
    for r in rows {
        let (image_block, oy) = (r / win.oh, r % win.oh);
        let block = image_block % blocks;
        // SAFETY: by the caller's contract, every address is inside its operand.
        unsafe {
            let x = x.add(image_block * plane_in);
            let w = wp.add(block * taps * LANES);
            let lanes = LANES.min(c.channels - block * LANES);
            let b = if bias.is_null() { L::zero() } else { L::load_first(bias.add(block * LANES), lanes) };
            let out = Out { y: y.add(image_block * plane_out + oy * win.ow * LANES), z: if z.is_null() { z } else { z.add(image_block * plane_out + oy * win.ow * LANES) }, b, act: c.act };
            let (ky, iy0) = inside(oy, win.sh, win.ph, win.kh, win.dh, win.h);
            let row = |i: usize| x.add((iy0 + i * win.dh) * win.w * LANES);
            // A 3×3 window of stride 1 and padding 1 with its three rows inside: the first and
            // last columns have two taps per row inside, summed below from the weights in
            // registers.
            let edges = win.kh == 3 && win.kw == 3 && ky.len() == 3 && win.sw == 1 && win.dw == 1 && win.pw == 1 && lo == 1 && hi + 1 == win.ow && win.ow == win.w;
            if !(win.kh == 3 && win.kw == 3) {
                any_window::<L>(&out, win, x, w, ky.clone(), iy0, lo..hi);
                continue;
            }
            if !edges {
                for ox in (0..lo).chain(hi..win.ow) {
                    out.put(ox, checked::<L>(win, x, w, ky.clone(), iy0, ox));
                }
            }
            if win.kh == 3 && win.kw == 3 {
                // All nine taps in registers; the rows inside the input (all three, or two at
                // the top and bottom rows) with their three columns each, unrolled.
                let mut wv = [L::zero(); 9];
                for (t, v) in wv.iter_mut().enumerate() {
                    *v = L::load(w.add(t * LANES));
                }
                let step = win.dw * LANES;
                match ky.len() {
                    3 => {
                        let rows = [row(0), row(1), row(2)];
                        if edges {
                            // Column 0 reads input columns 0 and 1 with taps 1 and 2; the last
                            // reads the last two with taps 0 and 1.
                            out.put(0, sum2(&wv, rows, 0, 1));
                            out.put(win.ow - 1, sum2(&wv, rows, (win.w - 2) * LANES, 0));
                        }
                        let mut ox = lo;
                        // Stride 1: eight columns at a time, each row's ten input vectors
                        // loaded once for the taps that read them (30 loads for 72
                        // multiply-adds, not 72; faster in conv_one on 384 × 14²). The
                        // same with four columns of stride 2 (27 loads, not 36) was slower
                        // (on 96 from 112²). Not with AVX2, whose 16 registers hold half as
                        // many lines.
                        if win.sw == 1 && win.dw == 1 && L::REGS == 1 {
                            while ox + 8 <= hi {
                                for (q, &s) in sums3x3::<L, 8, 1>(&wv, rows, (ox - win.pw) * LANES).iter().enumerate() {
                                    out.put(ox + q, s);
                                }
                                ox += 8;
                            }
                        }
                        // Four columns at a time: four independent chains of nine
                        // multiply-adds (one chain waits on each sum's latency).
                        while ox + 4 <= hi {
                            let mut s = [L::zero(); 4];
                            for (ty, &r) in rows.iter().enumerate() {
                                for (q, s) in s.iter_mut().enumerate() {
                                    *s = sum3(&wv, *s, r, ty, ((ox + q) * win.sw - win.pw) * LANES, step);
                                }
                            }
                            for (q, &s) in s.iter().enumerate() {
                                out.put(ox + q, s);
                            }
                            ox += 4;
                        }
                        for ox in ox..hi {
                            let ix = (ox * win.sw - win.pw) * LANES;
                            let s = sum3(&wv, L::zero(), rows[0], 0, ix, step);
                            let s = sum3(&wv, s, rows[1], 1, ix, step);
                            out.put(ox, sum3(&wv, s, rows[2], 2, ix, step));
                        }
                    }
                    2 => {
                        let (rows, t0) = ([row(0), row(1)], ky.start);
                        for ox in lo..hi {
                            let ix = (ox * win.sw - win.pw) * LANES;
                            let s = sum3(&wv, L::zero(), rows[0], t0, ix, step);
                            out.put(ox, sum3(&wv, s, rows[1], t0 + 1, ix, step));
                        }
                    }
                    _ => {
                        for ox in lo..hi {
                            out.put(ox, checked::<L>(win, x, w, ky.clone(), iy0, ox));
                        }
                    }
                }
            }
        }
    }
}

/// One output row of a block: where its lines go, and what each gets on the way.
#[cfg(target_arch = "x86_64")]
struct Out<L> {
    /// The row's first pixel in the output, and in the addend (null when there is none).
    y: *mut f32,
    z: *const f32,
    /// The block's bias.
    b: L,
    act: crate::epilogue::Activation,
}

#[cfg(target_arch = "x86_64")]
impl<L: Line> Out<L> {
    /// Column `ox`'s sums plus the bias and the addend, activated, stored.
    ///
    /// # Safety
    ///
    /// Column `ox` is inside the row; the CPU has `L`'s instruction set.
    #[inline(always)]
    unsafe fn put(&self, ox: usize, s: L) {
        // SAFETY: by the caller's contract.
        unsafe {
            let mut s = L::add(s, self.b);
            if !self.z.is_null() {
                s = L::add(s, L::load(self.z.add(ox * LANES)));
            }
            L::store(self.y.add(ox * LANES), L::activate(s, self.act));
        }
    }
}

/// The sums of output column `ox` (any), its taps checked against the input's borders: the
/// rows `ky` inside the input, the first at input row `iy0`.
///
/// # Safety
///
/// `x` is the block's input, `w` its packed weights; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn checked<L: Line>(win: &crate::window::Window, x: *const f32, w: *const f32, ky: Range<usize>, iy0: usize, ox: usize) -> L {
    let (kx, ix0) = inside(ox, win.sw, win.pw, win.kw, win.dw, win.w);
    // SAFETY: by the caller's contract, the taps inside the input.
    unsafe {
        let mut s = L::zero();
        for (i, ty) in ky.enumerate() {
            let row = x.add((iy0 + i * win.dh) * win.w * LANES);
            for (j, tx) in kx.clone().enumerate() {
                let v = L::load(row.add((ix0 + j * win.dw) * LANES));
                s = L::mul_add(L::load(w.add((ty * win.kw + tx) * LANES)), v, s);
            }
        }
        s
    }
}

/// One output row of any window but 3×3, the rows `ky` inside the input, the first at input
/// row `iy0`, the columns `inner` those whose taps all lie inside the input's columns: several
/// columns at a time, so that their chains of multiply-adds overlap (a chain waits on each
/// sum's latency, and a 5×5 window is 25 of them). Each output's chain keeps [`checked`]'s
/// order.
///
/// # Safety
///
/// As [`checked`]; `inner` is as [`lines`] computes it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn any_window<L: Line>(out: &Out<L>, win: &crate::window::Window, x: *const f32, w: *const f32, ky: Range<usize>, iy0: usize, inner: Range<usize>) {
    // Eight lines of accumulators with AVX-512, four (eight registers) with AVX2.
    // SAFETY: by the caller's contract.
    unsafe {
        if L::REGS == 1 {
            columns::<L, 8>(out, win, x, w, ky, iy0, inner);
        } else {
            columns::<L, 4>(out, win, x, w, ky, iy0, inner);
        }
    }
}

/// [`any_window`] with `Q` columns at a time: the inner columns without checks, the border
/// columns (or a whole row of at most `Q`) with each column's taps inside the input.
///
/// # Safety
///
/// As [`any_window`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn columns<L: Line, const Q: usize>(out: &Out<L>, win: &crate::window::Window, x: *const f32, w: *const f32, ky: Range<usize>, iy0: usize, inner: Range<usize>) {
    // SAFETY: by the caller's contract: the columns of `inner` have every tap inside the input.
    unsafe {
        if win.ow <= Q {
            return bordered::<L, Q>(out, win, x, w, ky, iy0, 0..win.ow);
        }
        for start in (0..inner.start).step_by(Q) {
            bordered::<L, Q>(out, win, x, w, ky.clone(), iy0, start..(start + Q).min(inner.start));
        }
        let mut ox = inner.start;
        while ox + Q <= inner.end {
            let mut s = [L::zero(); Q];
            for (i, ty) in ky.clone().enumerate() {
                let row = x.add((iy0 + i * win.dh) * win.w * LANES);
                for tx in 0..win.kw {
                    let wv = L::load(w.add((ty * win.kw + tx) * LANES));
                    for (q, s) in s.iter_mut().enumerate() {
                        let ix = (ox + q) * win.sw + tx * win.dw - win.pw;
                        *s = L::mul_add(wv, L::load(row.add(ix * LANES)), *s);
                    }
                }
            }
            for (q, &s) in s.iter().enumerate() {
                out.put(ox + q, s);
            }
            ox += Q;
        }
        let mut start = ox;
        while start < win.ow {
            let end = (start + Q).min(win.ow);
            bordered::<L, Q>(out, win, x, w, ky.clone(), iy0, start..end);
            start = end;
        }
    }
}

/// Up to `Q` columns `cols` of a row, each with its own taps inside the input: as
/// [`bordered_in`], in a group no wider than it takes.
///
/// # Safety
///
/// As [`bordered_in`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn bordered<L: Line, const Q: usize>(out: &Out<L>, win: &crate::window::Window, x: *const f32, w: *const f32, ky: Range<usize>, iy0: usize, cols: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe {
        match cols.len() {
            0 => {}
            1 => bordered_in::<L, 1>(out, win, x, w, ky, iy0, cols),
            2 => bordered_in::<L, 2>(out, win, x, w, ky, iy0, cols),
            3 | 4 => bordered_in::<L, 4>(out, win, x, w, ky, iy0, cols),
            _ => bordered_in::<L, Q>(out, win, x, w, ky, iy0, cols),
        }
    }
}

/// Up to `Q` columns `cols` of a row, each with its own taps inside the input.
///
/// # Safety
///
/// As [`any_window`], with `cols` at most `Q` columns of the row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn bordered_in<L: Line, const Q: usize>(out: &Out<L>, win: &crate::window::Window, x: *const f32, w: *const f32, ky: Range<usize>, iy0: usize, cols: Range<usize>) {
    let n = cols.len().min(Q);
    // Per column: its first and last taps inside the input, and the input column of the first.
    let mut taps = [(0, 0, 0); Q];
    for (q, t) in taps.iter_mut().enumerate().take(n) {
        let (kx, ix0) = inside(cols.start + q, win.sw, win.pw, win.kw, win.dw, win.w);
        *t = (kx.start, kx.end, ix0);
    }
    // SAFETY: by the caller's contract; each column reads only its taps inside the input.
    unsafe {
        let mut s = [L::zero(); Q];
        for (i, ty) in ky.enumerate() {
            let row = x.add((iy0 + i * win.dh) * win.w * LANES);
            for tx in 0..win.kw {
                let wv = L::load(w.add((ty * win.kw + tx) * LANES));
                for q in 0..Q {
                    // Columns past `n` have no taps: `taps` holds an empty range for them.
                    let (first, end, ix0) = taps[q];
                    if (first..end).contains(&tx) {
                        s[q] = L::mul_add(wv, L::load(row.add((ix0 + (tx - first) * win.dw) * LANES)), s[q]);
                    }
                }
            }
        }
        for (q, &s) in s.iter().enumerate().take(n) {
            out.put(cols.start + q, s);
        }
    }
}

/// `s` plus the three taps of row `ty` of a 3×3 window whose first column reads float `ix` of
/// input row `r`, the columns `step` floats apart.
///
/// # Safety
///
/// The three lines are inside the input; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sum3<L: Line>(wv: &[L; 9], s: L, r: *const f32, ty: usize, ix: usize, step: usize) -> L {
    // SAFETY: by the caller's contract.
    unsafe {
        let s = L::mul_add(wv[ty * 3], L::load(r.add(ix)), s);
        let s = L::mul_add(wv[ty * 3 + 1], L::load(r.add(ix + step)), s);
        L::mul_add(wv[ty * 3 + 2], L::load(r.add(ix + 2 * step)), s)
    }
}

/// The sums of an edge column of a 3×3 window of stride 1 and padding 1: two taps per row,
/// `kx` and `kx + 1`, reading the lines at `ix` and `ix + 16` of the three `rows`.
///
/// # Safety
///
/// As [`sum3`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sum2<L: Line>(wv: &[L; 9], rows: [*const f32; 3], ix: usize, kx: usize) -> L {
    // SAFETY: by the caller's contract.
    unsafe {
        let mut s = L::zero();
        for (ty, &r) in rows.iter().enumerate() {
            s = L::mul_add(wv[ty * 3 + kx], L::load(r.add(ix)), s);
            s = L::mul_add(wv[ty * 3 + kx + 1], L::load(r.add(ix + LANES)), s);
        }
        s
    }
}

/// The sums of `Q` consecutive output columns of a 3×3 window of stride `S` and dilation 1,
/// the first column's taps starting at float `ix` of each of the three input `rows`, with the
/// weights `wv`: each row's `(Q − 1)·S + 3` input vectors are loaded once. Each output's chain
/// keeps the `(ky, kx)` order.
///
/// # Safety
///
/// Every vector read is inside the input; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sums3x3<L: Line, const Q: usize, const S: usize>(wv: &[L; 9], rows: [*const f32; 3], ix: usize) -> [L; Q] {
    const MAX: usize = 18;
    let n = const { (Q - 1) * S + 3 };
    const { assert!((Q - 1) * S + 3 <= MAX) };
    // SAFETY: by the caller's contract.
    unsafe {
        let mut s = [L::zero(); Q];
        for (ty, &r) in rows.iter().enumerate() {
            let mut v = [L::zero(); MAX];
            for (j, v) in v.iter_mut().enumerate().take(n) {
                *v = L::load(r.add(ix + j * LANES));
            }
            for kx in 0..3 {
                for (q, s) in s.iter_mut().enumerate() {
                    *s = L::mul_add(wv[ty * 3 + kx], v[q * S + kx], *s);
                }
            }
        }
        s
    }
}

/// Rows `rows`, one float at a time (the same sums).
///
/// # Safety
///
/// As [`run_packed`].
unsafe fn portable(c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, rows: Range<usize>) {
    let win = &c.win;
    let blocks = c.channels.div_ceil(LANES);
    let taps = win.kh * win.kw;
    let (plane_in, plane_out) = (win.h * win.w * LANES, win.oh * win.ow * LANES);
    for r in rows {
        let (image_block, oy) = (r / win.oh, r % win.oh);
        let block = image_block % blocks;
        let (ky, iy0) = inside(oy, win.sh, win.ph, win.kh, win.dh, win.h);
        for ox in 0..win.ow {
            let (kx, ix0) = inside(ox, win.sw, win.pw, win.kw, win.dw, win.w);
            for lane in 0..LANES.min(c.channels - block * LANES) {
                // SAFETY: by the caller's contract, every address is inside its operand.
                unsafe {
                    let mut s = 0.0f32;
                    for (i, ty) in ky.clone().enumerate() {
                        for (j, tx) in kx.clone().enumerate() {
                            let v = *x.add(image_block * plane_in + ((iy0 + i * win.dh) * win.w + ix0 + j * win.dw) * LANES + lane);
                            s = (*wp.add((block * taps + ty * win.kw + tx) * LANES + lane)).mul_add(v, s);
                        }
                    }
                    if !bias.is_null() {
                        s += *bias.add(block * LANES + lane);
                    }
                    let at = image_block * plane_out + (oy * win.ow + ox) * LANES + lane;
                    if !z.is_null() {
                        s += *z.add(at);
                    }
                    *y.add(at) = super::activate_one(s, c.act);
                }
            }
        }
    }
}
