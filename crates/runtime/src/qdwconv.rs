//! Depthwise 2-D convolution of 8-bit planes with QLinearConv's output stage:
//! `y = sat(round((Σ (x − x_zero)·w' + bias[c]) · scale[c] + zero))`, each plane `p` of
//! `planes` (`N·C`) using channel `c = p mod C`'s kernel `w'` (the weights minus their zero
//! point, as `f32`), bias and scale.
//!
//! The sums run on the `f32` depthwise routine ([`DwConv2d`]), which is exact when every sum
//! of products is an integer below 2^24 in magnitude: the caller guarantees
//! `Σ_taps |w'| · max|x − x_zero| < 2^24` per channel (checked on the constant weights at
//! lowering). A run of planes of one image is shifted into `f32` scratch, convolved there and
//! requantized from there, so the `f32` tensors are never written out whole: a run is sized to
//! stay in L2. The accumulator becomes an `i32` exactly, the bias is added in `i32`
//! (wrapping), and the requantization is [`crate::requantize`]'s.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dwconv::DwConv2d;
use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};
use crate::scratch;
use crate::window::{Window, elements};

/// `f32` elements of shifted input and accumulators a run of planes may hold (256 KiB).
const RUN_ELEMENTS: usize = 1 << 16;

#[cfg(target_arch = "x86_64")]
mod direct;
#[cfg(target_arch = "x86_64")]
mod permute;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PADDED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One quantized depthwise convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QDwConv2d {
    /// Input and output planes (`N·C`).
    pub planes: usize,
    /// Channels (`C`): plane `p` uses channel `p mod channels`.
    pub channels: usize,
    /// The planes, kernel, strides, padding and dilations.
    pub win: Window,
    /// `x` holds `i8` (else `u8`).
    pub x_signed: bool,
    /// `x`'s zero point.
    pub x_zero: i32,
    /// A bias per channel is added.
    pub bias: bool,
    /// The output zero point.
    pub zero: i32,
    /// `y` holds `i8` (else `u8`).
    pub y_signed: bool,
}

impl QDwConv2d {
    /// The `f32` convolution of one run of `planes` planes whose first is channel 0's.
    fn sums(&self, planes: usize) -> DwConv2d {
        DwConv2d { planes, channels: planes.max(1), win: self.win, accumulate: false }
    }

    /// Whether the sizes make sense (as [`DwConv2d::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.sums(self.planes).is_valid() && (self.planes == 0 || self.channels > 0) && elements(&[self.channels, self.win.kh, self.win.kw]).is_some()
    }

    /// Elements of `x`, `w` (`channels · kh · kw`), the bias and scales (`channels`), and `y` read
    /// or written; all 0 when the output is empty.
    pub fn extents(&self) -> (usize, usize, usize, usize) {
        let d = DwConv2d { planes: self.planes, channels: self.channels, win: self.win, accumulate: false };
        let y = d.y_len();
        if y == 0 {
            return (0, 0, 0, 0);
        }
        (d.x_len(), d.w_len(), self.channels, y)
    }

    /// Runs it.
    ///
    /// # Panics
    ///
    /// If the sizes are invalid or a slice is shorter than its extent.
    pub fn run(&self, x: &[u8], w: &[f32], bias: &[i32], scales: &[f32], y: &mut [u8]) {
        self.run_with(Isa::detected(), x, w, bias, scales, y)
    }

    /// [`Self::run`] on the kernels of `isa` (benchmarks compare them): with AVX-512 the
    /// bytes' own path where it applies, else the `f32` planes.
    ///
    /// # Panics
    ///
    /// If the sizes are invalid, a slice is shorter than its extent, or the CPU cannot run
    /// `isa`.
    pub fn run_with(&self, isa: Isa, x: &[u8], w: &[f32], bias: &[i32], scales: &[f32], y: &mut [u8]) {
        assert!(isa.available(), "this CPU cannot run {isa:?}");
        assert!(self.is_valid(), "invalid quantized depthwise convolution {self:?}");
        let (ex, ew, ec, ey) = self.extents();
        assert!(x.len() >= ex && w.len() >= ew && scales.len() >= ec && (!self.bias || bias.len() >= ec) && y.len() >= ey, "dwconv2d_requantize operands are too short for {self:?}");
        // SAFETY: the slices hold every element addressed; `y` is exclusively borrowed; the
        // CPU runs `isa`.
        unsafe { self.run_raw(isa, x.as_ptr(), w.as_ptr(), bias.as_ptr(), scales.as_ptr(), y.as_mut_ptr()) }
    }

    /// # Safety
    ///
    /// Valid sizes; `x`, `w`, `bias` (when used) and `scales` readable and `y` writable for their
    /// extents, `y` apart from the others; the CPU runs `isa`. No alignment is required.
    unsafe fn run_raw(&self, isa: Isa, x: *const u8, w: *const f32, bias: *const i32, scales: *const f32, y: *mut u8) {
        let (_, _, _, ey) = self.extents();
        if ey == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 {
            // SAFETY: by the caller's contract; each path's `plane` is called on a scratch of
            // its length after its `fill`, with `applies` (or the layout) holding.
            // A weight outside `i8` declines the first, one past `i16` the second.
            // SAFETY: by the caller's contract.
            if unsafe { self.run_permuted(x, w, bias, scales, y) || self.run_direct(x, w, bias, scales, y) } {
                return;
            }
        }
        // SAFETY: by the caller's contract.
        unsafe { self.run_f32(isa, x, w, bias, scales, y) }
    }

    /// The planes through [`permute`]; `false`, having written nothing or everything a later
    /// path rewrites, when it does not take them.
    ///
    /// # Safety
    ///
    /// As [`Self::run_raw`], with a non-empty output.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run_permuted(&self, x: *const u8, w: *const f32, bias: *const i32, scales: *const f32, y: *mut u8) -> bool {
        // SAFETY: by the caller's contract; `plane` gets a scratch `fill` set up and the layout.
        permute::Layout::new(self).is_some_and(|l| unsafe { self.each_plane(l.len(), &|pad| permute::fill(self, pad), &|pad, x, w, b, s, y| permute::plane(self, &l, pad, x, w, b, s, y), x, w, bias, scales, y) })
    }

    /// The planes through [`direct`], as [`Self::run_permuted`].
    ///
    /// # Safety
    ///
    /// As [`Self::run_raw`], with a non-empty output.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run_direct(&self, x: *const u8, w: *const f32, bias: *const i32, scales: *const f32, y: *mut u8) -> bool {
        // SAFETY: by the caller's contract; `plane` gets a scratch `fill` set up, `applies`
        // holding.
        direct::applies(self) && direct::Padded::new(self).is_some_and(|g| unsafe { self.each_plane(g.len(), &|pad| direct::fill(self, pad), &|pad, x, w, b, s, y| direct::plane(self, g, pad, x, w, b, s, y), x, w, bias, scales, y) })
    }

    /// Every plane through `plane` (input, weights, bias, scale, output), each task's padded
    /// plane `len` bytes of scratch set up by `fill`; `false` when a plane was declined (the
    /// caller then takes another path, which rewrites every plane).
    ///
    /// # Safety
    ///
    /// As [`Self::run_raw`], with a non-empty output; `plane` safe to call on a scratch `fill`
    /// set up, with one plane's operands.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    unsafe fn each_plane(
        &self,
        len: usize,
        fill: &(dyn Fn(&mut [u8]) + Sync),
        plane: &(dyn Fn(&mut [u8], *const u8, *const f32, i32, f32, *mut u8) -> bool + Sync),
        x: *const u8,
        w: *const f32,
        bias: *const i32,
        scales: *const f32,
        y: *mut u8,
    ) -> bool {
        let (_, _, _, ey) = self.extents();
        let (plane_in, plane_out, taps) = (self.win.h * self.win.w, self.win.oh * self.win.ow, self.win.kh * self.win.kw);
        let parts = if ey.saturating_mul(taps) >= 1 << 17 { pool::threads().min(self.planes) } else { 1 };
        let declined = AtomicBool::new(false);
        let ptrs = SharedPtr((x, w, bias, scales, y));
        pool::for_each(parts, &|t| {
            let (x, w, bias, scales, y) = ptrs.get();
            scratch::with(&PADDED, len, |pad| {
                fill(pad);
                for p in pool::part(self.planes, parts, 1, t) {
                    let c = p % self.channels;
                    // SAFETY: plane `p` is inside `x` and `y`, channel `c` inside `w`, the bias
                    // and the scales.
                    let ok = unsafe {
                        let b = if self.bias { bias.add(c).read_unaligned() } else { 0 };
                        plane(pad, x.add(p * plane_in), w.add(c * taps), b, scales.add(c).read_unaligned(), y.add(p * plane_out))
                    };
                    if !ok {
                        declined.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            });
        });
        !declined.load(Ordering::Relaxed)
    }

    /// The planes through the `f32` routine: shifted into scratch, convolved, requantized.
    ///
    /// # Safety
    ///
    /// As [`Self::run_raw`], with a non-empty output.
    unsafe fn run_f32(&self, isa: Isa, x: *const u8, w: *const f32, bias: *const i32, scales: *const f32, y: *mut u8) {
        let (_, _, _, ey) = self.extents();
        let (plane_in, plane_out) = (self.win.h * self.win.w, self.win.oh * self.win.ow);
        let taps = self.win.kh * self.win.kw;
        // Runs of planes within one image: as many as fit the scratch, at least one.
        let per_run = (RUN_ELEMENTS / (plane_in + plane_out).max(1)).clamp(1, self.channels);
        let runs_per_image = self.channels.div_ceil(per_run);
        let images = self.planes.div_ceil(self.channels);
        let runs = images * runs_per_image;
        let work = ey.saturating_mul(taps);
        let parts = if work >= 1 << 17 { pool::threads().min(runs) } else { 1 };
        let ptrs = SharedPtr((x, w, bias, scales, y));
        pool::for_each(parts, &|t| {
            let (x, w, bias, scales, y) = ptrs.get();
            scratch::with(&SCRATCH, per_run * (plane_in + plane_out), |buf| {
                let (xs, acc) = buf.split_at_mut(per_run * plane_in);
                for run in pool::part(runs, parts, 1, t) {
                    let (image, r) = (run / runs_per_image, run % runs_per_image);
                    let c0 = r * per_run;
                    let count = per_run.min(self.channels - c0);
                    let p0 = image * self.channels + c0;
                    if p0 >= self.planes {
                        break;
                    }
                    let count = count.min(self.planes - p0);
                    // SAFETY: planes `p0..p0 + count` are inside `x` and `y`, channels
                    // `c0..c0 + count` inside `w`, the bias and the scales; the scratch holds
                    // `count` planes of each.
                    unsafe {
                        shift(isa, x.add(p0 * plane_in), count * plane_in, self.x_signed, self.x_zero, xs.as_mut_ptr());
                        self.sums(count).run_with(isa, &xs[..count * plane_in], std::slice::from_raw_parts(w.add(c0 * taps), count * taps), &mut acc[..count * plane_out]);
                        for i in 0..count {
                            let b = if self.bias { bias.add(c0 + i).read_unaligned() } else { 0 };
                            let s = f64::from(scales.add(c0 + i).read_unaligned());
                            requantize(isa, acc.as_ptr().add(i * plane_out), plane_out, b, s, self, y.add((p0 + i) * plane_out));
                        }
                    }
                }
            });
        });
    }
}

/// `n` elements `x − zero` of `x` (`i8` when `signed`, else `u8`) as `f32` into `to`.
///
/// # Safety
///
/// `x` readable and `to` writable for `n` elements; the CPU runs `isa`.
unsafe fn shift(isa: Isa, x: *const u8, n: usize, signed: bool, zero: i32, to: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: by the caller's contract.
        return unsafe { shift_avx512(x, n, signed, zero, to) };
    }
    let _ = isa;
    for i in 0..n {
        // SAFETY: by the caller's contract.
        unsafe {
            let b = x.add(i).read();
            let v = if signed { i32::from(b as i8) } else { i32::from(b) };
            to.add(i).write((v - zero) as f32);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn shift_avx512(x: *const u8, n: usize, signed: bool, zero: i32, to: *mut f32) {
    use std::arch::x86_64::*;
    let z = _mm512_set1_epi32(zero);
    let mut i = 0;
    while i < n {
        let live = if n - i >= 16 { u16::MAX } else { (1u16 << (n - i)) - 1 };
        // SAFETY: by the caller's contract, for the live lanes.
        unsafe {
            let bytes = if live == u16::MAX { _mm_loadu_si128(x.add(i).cast()) } else { partial(x.add(i), n - i) };
            let v = if signed { _mm512_cvtepi8_epi32(bytes) } else { _mm512_cvtepu8_epi32(bytes) };
            _mm512_mask_storeu_ps(to.add(i), live, _mm512_cvtepi32_ps(_mm512_sub_epi32(v, z)));
        }
        i += 16;
    }
}

/// The first `n < 16` bytes at `x` in a vector, the rest zero.
///
/// # Safety
///
/// `x` readable for `n` bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn partial(x: *const u8, n: usize) -> std::arch::x86_64::__m128i {
    let mut b = [0u8; 16];
    // SAFETY: by the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(x, b.as_mut_ptr(), n) };
    // SAFETY: `b` holds 16 bytes.
    unsafe { std::arch::x86_64::_mm_loadu_si128(b.as_ptr().cast()) }
}

/// One plane's `n` integer-valued `f32` sums plus `bias`, requantized with scale `s` into `y`.
///
/// # Safety
///
/// `acc` readable and `y` writable for `n` elements; the CPU runs `isa`.
unsafe fn requantize(isa: Isa, acc: *const f32, n: usize, bias: i32, s: f64, q: &QDwConv2d, y: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: by the caller's contract.
        return unsafe { requantize_avx512(acc, n, bias, s, q, y) };
    }
    let _ = isa;
    let zero = f64::from(q.zero);
    for i in 0..n {
        // SAFETY: by the caller's contract.
        unsafe {
            let v = (acc.add(i).read() as i32).wrapping_add(bias);
            y.add(i).write(crate::requantize::level(f64::from(v), s, zero, q.y_signed));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn requantize_avx512(acc: *const f32, n: usize, bias: i32, s: f64, q: &QDwConv2d, y: *mut u8) {
    use std::arch::x86_64::*;
    use crate::requantize::avx512::{levels_i32, store};
    let f32 = s.is_finite() && crate::requantize::zero_in_range(q.zero, q.y_signed);
    let (b, s, sf) = (_mm512_set1_epi32(bias), [_mm512_set1_pd(s); 2], _mm512_set1_ps(s as f32));
    let mut i = 0;
    while i < n {
        let live = if n - i >= 16 { u16::MAX } else { (1u16 << (n - i)) - 1 };
        // SAFETY: by the caller's contract, for the live lanes.
        unsafe {
            // The sums are integers below 2^24: the conversion is exact.
            let v = _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_maskz_loadu_ps(live, acc.add(i))), b);
            store(y.add(i), live, levels_i32(v, sf, &s, q.zero, q.y_signed, f32));
        }
        i += 16;
    }
}

/// [`QDwConv2d`] for generated code: `x` `i8` when `x_signed` is non-zero, else `u8`; `w` the
/// `f32` shifted weights; `bias` read when `bias` is non-zero; `y` `i8` when `y_signed` is
/// non-zero. Nothing happens when a size is negative, a zero point does not fit `i32` or the
/// sizes are invalid.
///
/// # Safety
///
/// Every operand addressable for its extent; `y` overlaps no other. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_dwconv2d_requantize(
    x: *const u8,
    w: *const f32,
    bias: *const i32,
    scales: *const f32,
    y: *mut u8,
    planes: i64,
    channels: i64,
    ih: i64,
    iw: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    x_signed: i64,
    x_zero: i64,
    bias_mode: i64,
    zero: i64,
    y_signed: i64,
) {
    let Some(q) = QDwConv2d::from_args(planes, channels, [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw], [x_signed, x_zero, bias_mode, zero, y_signed]) else { return };
    // SAFETY: by the caller's contract.
    unsafe { q.run_raw(Isa::detected(), x, w, bias, scales, y) }
}

impl QDwConv2d {
    /// The routine of the call operands, or `None` for sizes it refuses: negative sizes, zero
    /// points past `i32`, a bias mode other than 0 or 1, invalid sizes.
    pub fn from_args(planes: i64, channels: i64, window: [i64; 12], [x_signed, x_zero, bias_mode, zero, y_signed]: [i64; 5]) -> Option<QDwConv2d> {
        let (planes, channels) = (usize::try_from(planes).ok()?, usize::try_from(channels).ok()?);
        let win = Window::from_args(window)?;
        if !(0..=1).contains(&bias_mode) {
            return None;
        }
        let q = QDwConv2d { planes, channels, win, x_signed: x_signed != 0, x_zero: i32::try_from(x_zero).ok()?, bias: bias_mode != 0, zero: i32::try_from(zero).ok()?, y_signed: y_signed != 0 };
        q.is_valid().then_some(q)
    }
}

#[cfg(test)]
mod tests {
    use kiln_testkit::Rng;

    use super::*;

    /// The definition in `i64` and `f64`, with taps outside the input skipped.
    fn reference(q: &QDwConv2d, x: &[u8], w: &[f32], bias: &[i32], scales: &[f32]) -> Vec<u8> {
        let win = &q.win;
        let mut y = Vec::new();
        for p in 0..q.planes {
            let c = p % q.channels;
            for oy in 0..win.oh {
                for ox in 0..win.ow {
                    let mut sum = 0i64;
                    for ky in 0..win.kh {
                        for kx in 0..win.kw {
                            let (iy, ix) = ((oy * win.sh + ky * win.dh) as i64 - win.ph as i64, (ox * win.sw + kx * win.dw) as i64 - win.pw as i64);
                            if iy < 0 || ix < 0 || iy >= win.h as i64 || ix >= win.w as i64 {
                                continue;
                            }
                            let b = x[p * win.h * win.w + iy as usize * win.w + ix as usize];
                            let v = if q.x_signed { i64::from(b as i8) } else { i64::from(b) };
                            sum += (v - i64::from(q.x_zero)) * w[(c * win.kh + ky) * win.kw + kx] as i64;
                        }
                    }
                    let acc = (sum as i32).wrapping_add(if q.bias { bias[c] } else { 0 });
                    y.push(crate::requantize::level(f64::from(acc), f64::from(scales[c]), f64::from(q.zero), q.y_signed));
                }
            }
        }
        y
    }

    /// Strides 1 and 2, padding, dilation, a 5×5 kernel, several images, runs split inside an
    /// image (a plane larger than a run's share), both input and output types, on every
    /// instruction set the CPU has.
    #[test]
    fn matches_the_definition() {
        let mut rng = Rng::new(17);
        let cases = [
            // (planes, channels, h, w, k, stride, pad, dilation)
            (6, 3, 9, 11, 3, 1, 1, 1),
            (8, 4, 12, 7, 3, 2, 1, 1),
            (3, 3, 10, 10, 5, 1, 2, 1),
            (4, 2, 9, 9, 3, 1, 2, 2),
            (5, 5, 200, 200, 3, 2, 1, 1),
            // Rows of several vectors and a partial one, in place and strided.
            (3, 3, 5, 37, 3, 1, 1, 1),
            (4, 2, 7, 45, 3, 2, 1, 1),
            (2, 2, 9, 70, 5, 2, 2, 1),
            (2, 2, 6, 50, 3, 1, 0, 3),
            (3, 3, 11, 33, 3, 3, 1, 1),
            // Planes narrower than a vector: several rows to a vector, a last group of fewer.
            (4, 4, 7, 7, 3, 1, 1, 1),
            (3, 3, 14, 14, 3, 2, 1, 1),
            (2, 2, 5, 5, 3, 1, 1, 1),
            (2, 2, 3, 1, 3, 1, 1, 1),
            (2, 2, 9, 9, 7, 1, 3, 1),
        ];
        let mut permuted = 0;
        for (planes, channels, h, w, k, stride, pad, dil) in cases {
            let oh = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
            let ow = (w + 2 * pad - dil * (k - 1) - 1) / stride + 1;
            let win = Window { h, w, oh, ow, kh: k, kw: k, sh: stride, sw: stride, ph: pad, pw: pad, dh: dil, dw: dil };
            for (x_signed, y_signed, bias) in [(false, false, true), (true, true, false), (true, false, true)] {
                let q = QDwConv2d { planes, channels, win, x_signed, x_zero: if x_signed { -3 } else { 131 }, bias, zero: if y_signed { 5 } else { 120 }, y_signed };
                let x: Vec<u8> = (0..planes * h * w).map(|_| rng.next_u64() as u8).collect();
                // `i8`'s ends among the weights.
                let wts: Vec<f32> = (0..channels * k * k).map(|i| if i % 7 == 3 { [-128.0, 127.0][i % 2] } else { (rng.next_u64() % 255) as f32 - 127.0 }).collect();
                let bias: Vec<i32> = (0..channels).map(|_| (rng.next_u64() % 20001) as i32 - 10000).collect();
                let scales: Vec<f32> = (0..channels).map(|c| [1.0 / 512.0, 3.0e-4, 0.01][c % 3]).collect();
                let want = reference(&q, &x, &wts, &bias, &scales);
                for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512].into_iter().filter(|i| i.available()) {
                    // Each path where it applies: the bytes' two and the `f32` planes'.
                    for path in ["permute", "direct", "f32"] {
                        let mut y = vec![0xABu8; planes * oh * ow + 3];
                        // SAFETY: the vectors hold the extents; `isa` is available.
                        let ran = unsafe {
                            let (x, w, b, s, y) = (x.as_ptr(), wts.as_ptr(), bias.as_ptr(), scales.as_ptr(), y.as_mut_ptr());
                            match path {
                                #[cfg(target_arch = "x86_64")]
                                "permute" => isa == Isa::Avx512 && q.run_permuted(x, w, b, s, y),
                                #[cfg(target_arch = "x86_64")]
                                "direct" => isa == Isa::Avx512 && q.run_direct(x, w, b, s, y),
                                "f32" => {
                                    q.run_f32(isa, x, w, b, s, y);
                                    true
                                }
                                _ => false,
                            }
                        };
                        permuted += usize::from(ran && path == "permute");
                        if ran {
                            assert_eq!(&y[..want.len()], &want[..], "{q:?} {isa:?} {path} path");
                            assert_eq!(&y[want.len()..], &[0xAB; 3], "{q:?} {isa:?} {path} path: past the output");
                        }
                    }
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx512.available() && std::arch::is_x86_feature_detected!("avx512vbmi") && std::arch::is_x86_feature_detected!("avx512vnni") {
            assert!(permuted >= 3 * 14, "the permuting path ran {permuted} times");
        }
        let _ = permuted;
    }

    /// The bytes' paths run wherever their instructions are (so the test above checks them),
    /// a weight past `i8` sends the call from the permuting path to the direct one, and one
    /// neither can hold to the `f32` path, whose result it then is.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_bytes_path_takes_strides_1_and_2_and_declines_odd_weights() {
        let win = Window { h: 6, w: 40, oh: 6, ow: 40, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 };
        let q = QDwConv2d { planes: 2, channels: 2, win, x_signed: false, x_zero: 7, bias: false, zero: 3, y_signed: false };
        if !Isa::Avx512.available() || !std::arch::is_x86_feature_detected!("avx512bw") {
            return;
        }
        assert!(direct::applies(&q) && direct::applies(&QDwConv2d { win: Window { sw: 2, ow: 20, ..win }, ..q }));
        assert!(!direct::applies(&QDwConv2d { win: Window { sw: 3, ow: 14, ..win }, ..q }) && !direct::applies(&QDwConv2d { x_zero: 300, ..q }));
        assert!(!direct::applies(&QDwConv2d { win: Window { w: 15, ow: 15, ..win }, ..q }), "rows narrower than a vector take the f32 planes");
        let x: Vec<u8> = (0..2 * 240).map(|i| (i * 29 % 256) as u8).collect();
        let mut wts = vec![3.0f32; 18];
        wts[13] = 2.5;
        let (mut a, mut b) = (vec![0u8; 480], vec![0u8; 480]);
        // SAFETY: the vectors hold the extents; AVX-512 is available.
        unsafe {
            q.run_raw(Isa::Avx512, x.as_ptr(), wts.as_ptr(), [0].as_ptr(), [0.01f32, 0.02].as_ptr(), a.as_mut_ptr());
            q.run_f32(Isa::Avx512, x.as_ptr(), wts.as_ptr(), [0].as_ptr(), [0.01f32, 0.02].as_ptr(), b.as_mut_ptr());
        }
        assert_eq!(a, b);
        // A weight past `i8` but inside `i16`: the permuting path declines, the direct one
        // takes it.
        wts[13] = 300.0;
        // SAFETY: as above.
        unsafe {
            assert!(!q.run_permuted(x.as_ptr(), wts.as_ptr(), [0].as_ptr(), [0.01f32, 0.02].as_ptr(), a.as_mut_ptr()));
            assert!(q.run_direct(x.as_ptr(), wts.as_ptr(), [0].as_ptr(), [0.01f32, 0.02].as_ptr(), a.as_mut_ptr()));
            q.run_f32(Isa::Avx512, x.as_ptr(), wts.as_ptr(), [0].as_ptr(), [0.01f32, 0.02].as_ptr(), b.as_mut_ptr());
        }
        assert_eq!(a, b);
    }

    #[test]
    fn the_c_entry_point_refuses_nonsense() {
        let (x, w, mut y) = ([1u8; 9], [1.0f32; 9], [7u8; 9]);
        let win = [3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1];
        for (planes, channels, flags) in [(-1, 1, [0, 0, 0, 0, 0]), (1, 1, [0, 1 << 40, 0, 0, 0]), (1, 1, [0, 0, 2, 0, 0]), (1, 0, [0, 0, 0, 0, 0])] {
            let [xs, xz, b, z, ys] = flags;
            // SAFETY: each case is refused before addressing anything.
            unsafe { kiln_rt_dwconv2d_requantize(x.as_ptr(), w.as_ptr(), [0i32].as_ptr(), w.as_ptr(), y.as_mut_ptr(), planes, channels, win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7], win[8], win[9], win[10], win[11], xs, xz, b, z, ys) };
            assert_eq!(y, [7; 9]);
        }
    }
}
