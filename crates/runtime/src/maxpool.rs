//! 2-D max pooling of `f32` NCHW planes: `y[p, oy, ox]` is the maximum of
//! `x[p, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw]` over the taps inside the `h × w` input, 0
//! when no tap is inside.
//!
//! **Semantics** are the loop IR lowering's, exactly: the taps are visited in `(ky, kx)` order
//! and a tap replaces the running maximum when it is the first inside the input or strictly
//! greater (`v > max`). So a NaN is the result only when it is the first tap inside (a later
//! NaN never compares greater), and of equal values (`−0` and `+0`) the first stays. The result
//! is a copy of one input element (bits included) or 0.
//!
//! **Design.** Per plane and output row: the kernel rows inside the input are one range, and
//! the output columns whose taps all lie inside (`ox·sw − pw ≥ 0`, `ox·sw − pw + (kw − 1)·dw <
//! w`) another. Over that interior segment the taps are the same for every column, so it is
//! computed in blocks of 16 outputs (8 for narrow rows) whose maxima stay in vector registers
//! across the taps (the first tap taken, each later one `v > max ? v : max`: the x86 `max`
//! instruction), the last block overlapping the one before; strides 1 and 2 are constants
//! there, so the compiler vectorizes the strided reads with shuffles. The columns at the
//! borders (and interiors narrower than 8, and strides above 2) take a scalar loop that checks
//! each tap. Writing the maxima into `y` tap by tap instead made the AVX-512 build several
//! times slower than the portable one (the re-read vectors wait for the stores before them).
//! Each instruction set's version is compiled with its `#[target_feature]`s (AVX-512,
//! AVX2, the build target), chosen at run time as `sgemm`'s. Operands may sit at any byte
//! offset: accesses are unaligned. The loop-IR interpreter calls this same code.
//!
//! **Performance.** `cargo run --release -p kiln-runtime --example maxpool_bench` times
//! ResNet-50's pool (3×3, stride 2, padding 1, 64 × 112² → 56²) and two others per instruction
//! set; this routine runs ResNet-50's pool over an order of magnitude faster than the loop nest
//! of generated code it replaces. Recorded results: `docs/performance.md`.

use crate::gemm::Isa;
use crate::im2col::inside;
use crate::pool::{self, SharedPtr};
use crate::window::{Window, elements};

/// The sizes of one 2-D max pool: `planes` input planes (`N·C`) and the window over each (taps
/// past the input, as under `ceil_mode`, are skipped like the padding).
///
/// ```
/// use kiln_runtime::maxpool::MaxPool2d;
/// use kiln_runtime::window::Window;
/// // One 3×3 plane, a 2×2 window, stride 1, padding 1 before: a 3×3 output.
/// let m = MaxPool2d { planes: 1, win: Window { h: 3, w: 3, oh: 3, ow: 3, kh: 2, kw: 2, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 } };
/// let x = [1.0, 5.0, 3.0, 4.0, 2.0, 6.0, 7.0, 8.0, 9.0];
/// let mut y = [f32::NAN; 9];
/// m.run(&x, &mut y);
/// assert_eq!(y, [1.0, 5.0, 5.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    /// Input and output planes (`N·C`).
    pub planes: usize,
    /// The planes, window, strides, padding and dilations.
    pub win: Window,
}

impl MaxPool2d {
    /// Whether the sizes make sense: positive strides and dilations, and every element count
    /// and index representable. [`run`](Self::run) does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        let (m, win) = (self, &self.win);
        win.is_valid() && elements(&[m.planes, win.h, win.w]).is_some() && elements(&[m.planes, win.oh, win.ow]).is_some() && elements(&[win.kh, win.kw]).is_some()
    }

    /// Elements of `x` the pool may read, counted from `x[0]` (0 if it writes nothing;
    /// saturating, so an absurd shape reads as too long for any slice).
    pub fn x_len(&self) -> usize {
        if self.y_len() == 0 { 0 } else { self.planes.saturating_mul(self.win.h).saturating_mul(self.win.w) }
    }

    /// Elements of `y` written.
    pub fn y_len(&self) -> usize {
        self.planes.saturating_mul(self.win.oh).saturating_mul(self.win.ow)
    }

    /// Computes the pool.
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`x_len`](Self::x_len) or [`y_len`](Self::y_len).
    pub fn run(&self, x: &[f32], y: &mut [f32]) {
        self.run_with(Isa::detected(), x, y);
    }

    /// Computes the pool with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, x: &[f32], y: &mut [f32]) {
        assert!(x.len() >= self.x_len() && y.len() >= self.y_len(), "maxpool2d operand slices are too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element the pool addresses; `y` is exclusively
        // borrowed.
        unsafe { self.run_raw(isa, x.as_ptr(), y.as_mut_ptr()) }
    }

    /// The pool on raw pointers; nothing when the sizes are not valid.
    ///
    /// # Safety
    ///
    /// `x` readable for [`x_len`](Self::x_len) elements, `y` writable for
    /// [`y_len`](Self::y_len) and not overlapping `x`; the CPU runs `isa`. No alignment is
    /// required.
    unsafe fn run_raw(&self, isa: Isa, x: *const f32, y: *mut f32) {
        if !self.is_valid() || self.y_len() == 0 {
            return;
        }
        // Planes are independent: large poolings split them over the thread pool.
        let work = self.y_len().saturating_mul(self.win.kh * self.win.kw);
        let parts = if work >= SPLIT_MIN_TAPS { pool::threads().min(self.planes) } else { 1 };
        let ptrs = SharedPtr((x, y));
        pool::for_each(parts, &|i| {
            let (x, y) = ptrs.get();
            let r = pool::part(self.planes, parts, 1, i);
            let m = MaxPool2d { planes: r.len(), ..*self };
            // SAFETY: by the caller's contract, with valid sizes: planes `r` of each operand,
            // which no other part writes.
            unsafe {
                let (x, y) = (x.add(r.start * self.win.h * self.win.w), y.add(r.start * self.win.oh * self.win.ow));
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => planes_avx512(&m, x, y),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => planes_avx2(&m, x, y),
                    _ => planes(&m, x, y),
                }
            }
        });
    }
}

/// Poolings with fewer taps than this run on one thread (a split costs a few microseconds).
const SPLIT_MIN_TAPS: usize = 1 << 17;

/// [`planes`] compiled for AVX-512.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn planes_avx512(m: &MaxPool2d, x: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes(m, x, y) }
}

/// [`planes`] compiled for AVX2.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn planes_avx2(m: &MaxPool2d, x: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes(m, x, y) }
}

/// Every plane.
///
/// # Safety
///
/// As [`MaxPool2d::run_raw`], with valid sizes and a non-empty output.
#[inline(always)]
unsafe fn planes(m: &MaxPool2d, x: *const f32, y: *mut f32) {
    let i = |v: usize| v as isize;
    let (h, w, oh, ow, kh, kw) = (i(m.win.h), i(m.win.w), i(m.win.oh), i(m.win.ow), i(m.win.kh), i(m.win.kw));
    let (sh, sw, ph, pw, dh, dw) = (i(m.win.sh), i(m.win.sw), i(m.win.ph), i(m.win.pw), i(m.win.dh), i(m.win.dw));
    // Output columns whose taps all lie inside the input: `ox·sw ≥ pw` and
    // `ox·sw − pw + (kw − 1)·dw ≤ w − 1`.
    let (full_lo, full_hi) = if kw == 0 {
        (0, 0)
    } else {
        let lo = (pw + sw - 1) / sw;
        let last = w - 1 + pw - (kw - 1) * dw;
        let hi = if last < 0 { 0 } else { last / sw + 1 };
        (lo.min(ow), hi.clamp(lo.min(ow), ow))
    };
    for p in 0..i(m.planes) {
        // SAFETY: plane `p` of each operand is inside it.
        let (xp, yp) = unsafe { (x.offset(p * h * w), y.offset(p * oh * ow)) };
        for oy in 0..oh {
            let iy0 = oy * sh - ph;
            let (ky_lo, ky_hi) = inside(iy0, dh, h, kh);
            // SAFETY: row `oy` of the output plane; the rows `ky_lo..ky_hi` are inside the
            // input by `inside`, and the interior columns' taps by `full_lo..full_hi`.
            unsafe {
                let yr = yp.offset(oy * ow);
                if ky_lo >= ky_hi || kw == 0 {
                    // No tap inside: every output of the row is 0.
                    for ox in 0..ow {
                        yr.offset(ox).write_unaligned(0.0);
                    }
                    continue;
                }
                // The interior: blocks of 16 outputs (8 when narrower), the last one
                // overlapping its neighbour (outputs are recomputed, not accumulated, so writing
                // one twice is harmless); a segment narrower than 8, or with a stride above 2,
                // joins the border loop (more instances of `block` make the compiler stop
                // unrolling them, which costs the common ones half their speed).
                let n = full_hi - full_lo;
                let (mut inner_lo, mut inner_hi) = (full_lo, full_lo);
                let width = if n >= 16 { 16 } else { 8 };
                if n >= width && sw <= 2 {
                    (inner_lo, inner_hi) = (full_lo, full_hi);
                    let mut start = full_lo;
                    loop {
                        let at = start.min(full_hi - width);
                        let src = xp.offset((iy0 + ky_lo * dh) * w + at * sw - pw);
                        let t = Taps { rows: (ky_hi - ky_lo) as usize, row_step: dh * w, kw: kw as usize, dw };
                        let dst = yr.offset(at);
                        match (width, sw) {
                            (16, 1) => block::<16, 1>(dst, src, &t),
                            (16, _) => block::<16, 2>(dst, src, &t),
                            (_, 1) => block::<8, 1>(dst, src, &t),
                            _ => block::<8, 2>(dst, src, &t),
                        }
                        if at + width >= full_hi {
                            break;
                        }
                        start += width;
                    }
                }
                for ox in (0..inner_lo).chain(inner_hi..ow) {
                    let ix0 = ox * sw - pw;
                    let (kx_lo, kx_hi) = inside(ix0, dw, w, kw);
                    let mut best = 0.0f32;
                    let mut found = false;
                    for ky in ky_lo..ky_hi {
                        let xr = xp.offset((iy0 + ky * dh) * w + ix0);
                        for kx in kx_lo..kx_hi {
                            let v = xr.offset(kx * dw).read_unaligned();
                            if !found || v > best {
                                best = v;
                                found = true;
                            }
                        }
                    }
                    yr.offset(ox).write_unaligned(best);
                }
            }
        }
    }
}

/// The taps of an interior block: `rows` kernel rows `row_step` floats apart, `kw` columns
/// `dw` apart.
#[derive(Clone, Copy)]
struct Taps {
    rows: usize,
    row_step: isize,
    kw: usize,
    dw: isize,
}

/// One block of `B` interior outputs `dst[j]`, `j` in `0..B`, their maxima kept in registers
/// across the taps: the maximum over `src[r·row_step + kx·dw + j·STEP]` for `r` in `0..rows`,
/// `kx` in `0..kw`, visited in that order, each replacing the maximum when strictly greater
/// (the first taken as it is), consecutive outputs `STEP` floats apart (1 or 2: a constant, so
/// the strided reads vectorize).
///
/// # Safety
///
/// Every tap of every output readable from `src`, `dst` writable for `B` floats, not
/// overlapping; `rows` and `kw` positive.
#[inline(always)]
unsafe fn block<const B: usize, const STEP: usize>(dst: *mut f32, src: *const f32, t: &Taps) {
    // Copied out of `t`: the stores through `dst` could alias it for all the compiler knows.
    let Taps { rows, row_step, kw, dw } = *t;
    // SAFETY: by the caller's contract; unaligned accesses.
    unsafe {
        let load = |r: usize, kx: usize, j: usize| src.offset(r as isize * row_step + kx as isize * dw).add(j * STEP).read_unaligned();
        let mut acc = [0.0f32; B];
        for (j, a) in acc.iter_mut().enumerate() {
            *a = load(0, 0, j);
        }
        for r in 0..rows {
            for kx in usize::from(r == 0)..kw {
                for (j, a) in acc.iter_mut().enumerate() {
                    let v = load(r, kx, j);
                    *a = if v > *a { v } else { *a };
                }
            }
        }
        for (j, a) in acc.into_iter().enumerate() {
            dst.add(j).write_unaligned(a);
        }
    }
}

/// The max pool of `planes` `f32` planes: [`MaxPool2d`] for generated code, with its argument
/// names. Nothing happens when a size is negative or the sizes are not
/// [valid](MaxPool2d::is_valid) (a zero stride or dilation, counts or indices beyond `isize`).
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations: `planes·h·w` of `x`
/// readable, `planes·oh·ow` of `y` writable, not overlapping `x`. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_maxpool2d(x: *const f32, y: *mut f32, planes: i64, h: i64, w: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64) {
    let (Ok(planes), Some(win)) = (usize::try_from(planes), Window::from_args([h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw])) else {
        return;
    };
    let m = MaxPool2d { planes, win };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { m.run_raw(Isa::detected(), x, y) }
}

#[cfg(test)]
mod tests;
