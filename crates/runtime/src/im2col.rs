//! im2col for 2-D convolutions over `f32` NCHW planes: the input channels of one image (or of
//! one group of one image) unrolled into the column matrix `[C·kh·kw, oh·ow]` that one
//! `sgemm` multiplies by the weights. Row `(c·kh + ky)·kw + kx`, column `oy·ow + ox` holds
//! `x[c, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw]`, or zero where that position is in the
//! padding.
//!
//! **Design.** Row by row of the column matrix (one channel and tap): the output rows `oy`
//! and columns `ox` whose input position exists are two ranges, computed once per tap
//! without dividing for strides 1 and 2, so each output row is a zero run, a copy and a zero
//! run, with no check per element. Zero runs and stride-1 and stride-2 copies are inline vector
//! loops with a masked last vector (`gemm`'s vector operations, the instruction set detected at run time
//! as for `sgemm`), not `memset`/`memcpy` calls: ResNet-50's 7×7 planes make most runs a few
//! elements long. A stride-2 copy loads two vectors and keeps their even lanes; larger strides
//! copy element by element. Operands may sit at any byte offset
//! (inputs come from callers, weights from a mapped file): the vector accesses are unaligned. The values are copied,
//! never computed, so the result is exact and the same as the loop nest it replaces; the
//! loop-IR interpreter calls this same code.
//!
//! **Performance.** `cargo run --release -p kiln-runtime --example im2col_bench` times
//! ResNet-50's convolutions that need a column matrix (the loop nests of generated code this
//! replaces checked every element's bounds and stored one element at a time). The 14² and 7²
//! planes of the last stages write more slowly than the large ones: each output row is a few
//! elements and per-row work dominates. Recorded results: `docs/performance.md`.

/// The sizes of one im2col: `channels` input planes and the window over each.
///
/// ```
/// use kiln_runtime::im2col::Im2col;
/// use kiln_runtime::window::Window;
/// // One 3×3 plane, a 2×2 kernel, stride 1, padding 1 before: a 3×3 output, 4 rows of 9.
/// let g = Im2col { channels: 1, win: Window { h: 3, w: 3, oh: 3, ow: 3, kh: 2, kw: 2, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 } };
/// let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
/// let mut col = [f32::NAN; 36];
/// g.run(&x, &mut col);
/// // Tap (0, 0) reads up and to the left: the first row and column are padding.
/// assert_eq!(col[..9], [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 4.0, 5.0]);
/// // Tap (1, 1) reads the input itself.
/// assert_eq!(col[27..], x);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Im2col {
    /// Input channels (rows of the column matrix are `channels·kh·kw`).
    pub channels: usize,
    /// The planes, kernel, strides, padding and dilations.
    pub win: Window,
}

pub mod bytes;

use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};
use crate::window::{Window, elements};
use crate::gemm::simd::{Portable, Simd};
#[cfg(target_arch = "x86_64")]
use crate::gemm::{avx2::Avx2, avx512::Avx512};

impl Im2col {
    /// Whether the sizes make sense: positive strides and dilations, and every element count
    /// and index representable. [`run`](Self::run) does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        let (g, win) = (self, &self.win);
        win.is_valid() && elements(&[g.channels, win.h, win.w]).is_some() && elements(&[g.channels, win.kh, win.kw, win.oh, win.ow]).is_some()
    }

    /// Elements of `x` the operation may read, counted from `x[0]` (0 if it writes nothing;
    /// saturating, so an absurd shape reads as too long for any slice).
    pub fn x_len(&self) -> usize {
        if self.col_len() == 0 { 0 } else { self.channels.saturating_mul(self.win.h).saturating_mul(self.win.w) }
    }

    /// Elements of the column matrix written: `channels·kh·kw·oh·ow`.
    pub fn col_len(&self) -> usize {
        [self.win.kh, self.win.kw, self.win.oh, self.win.ow].into_iter().fold(self.channels, usize::saturating_mul)
    }

    /// Writes the column matrix.
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`x_len`](Self::x_len) or [`col_len`](Self::col_len).
    pub fn run(&self, x: &[f32], col: &mut [f32]) {
        assert!(x.len() >= self.x_len() && col.len() >= self.col_len(), "im2col operand slices are too short for {self:?}");
        // SAFETY: the slices hold every element the operation addresses; `col` is exclusively
        // borrowed.
        unsafe { self.run_raw(x.as_ptr(), col.as_mut_ptr()) }
    }

    /// The operation on raw pointers; nothing when the sizes are not valid.
    ///
    /// # Safety
    ///
    /// `x` readable for [`x_len`](Self::x_len) elements, `col` writable for
    /// [`col_len`](Self::col_len) and not overlapping `x`. No alignment is required.
    pub(crate) unsafe fn run_raw(&self, x: *const f32, col: *mut f32) {
        if !self.is_valid() || self.col_len() == 0 {
            return;
        }
        // Channels fill disjoint rows of the matrix: large ones split over the thread pool.
        let parts = if self.col_len() >= SPLIT_MIN { pool::threads().min(self.channels) } else { 1 };
        let ptrs = SharedPtr((x, col));
        pool::for_each(parts, &|i| {
            let (x, col) = ptrs.get();
            let r = pool::part(self.channels, parts, 1, i);
            let g = Im2col { channels: r.len(), ..*self };
            // SAFETY: by the caller's contract, with valid sizes: channels `r` of `x` and their
            // rows of the matrix, which no other part writes; the detected instruction set is
            // what this CPU runs.
            unsafe {
                let x = x.add(r.start * self.win.h * self.win.w);
                let col = col.add(r.start * self.win.kh * self.win.kw * self.win.oh * self.win.ow);
                match Isa::detected() {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => rows_avx512(&g, x, col),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => rows_avx2(&g, x, col),
                    _ => rows::<Portable>(&g, x, col),
                }
            }
        });
    }
}

/// Matrices of fewer elements than this are built on one thread (a split costs a few
/// microseconds).
const SPLIT_MIN: usize = 1 << 15;

/// [`rows`] with the AVX-512 vector operations.
///
/// # Safety
///
/// As [`rows`]; the CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_avx512(g: &Im2col, x: *const f32, col: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { rows::<Avx512>(g, x, col) }
}

/// [`rows`] with the AVX2 vector operations.
///
/// # Safety
///
/// As [`rows`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(g: &Im2col, x: *const f32, col: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { rows::<Avx2>(g, x, col) }
}

/// Every row of the column matrix.
///
/// # Safety
///
/// As [`Im2col::run_raw`], with valid sizes and a non-empty matrix; the CPU runs `S`.
#[inline(always)]
unsafe fn rows<S: Simd>(g: &Im2col, x: *const f32, col: *mut f32) {
    let i = |v: usize| v as isize;
    let (h, w, oh, ow) = (i(g.win.h), i(g.win.w), i(g.win.oh), i(g.win.ow));
    let (sh, sw, ph, pw, dh, dw) = (i(g.win.sh), i(g.win.sw), i(g.win.ph), i(g.win.pw), i(g.win.dh), i(g.win.dw));
    let plane = (oh * ow) as usize;
    let mut out = col;
    for c in 0..i(g.channels) {
        // SAFETY: channel `c`'s plane is inside `x`.
        let xc = unsafe { x.offset(c * h * w) };
        for ky in 0..i(g.win.kh) {
            // Output rows whose input row `oy·sh − ph + ky·dh` exists.
            let y0 = ky * dh - ph;
            let (oy_lo, oy_hi) = inside(y0, sh, h, oh);
            for kx in 0..i(g.win.kw) {
                let x0 = kx * dw - pw;
                let (ox_lo, ox_hi) = inside(x0, sw, w, ow);
                // SAFETY: `out` is this row of the column matrix (`plane` elements); the copied
                // rows `oy_lo..oy_hi` and columns `ox_lo..ox_hi` read inside the channel's
                // plane by `inside`.
                unsafe {
                    if oy_lo >= oy_hi || ox_lo >= ox_hi {
                        zero::<S>(out, plane);
                    } else {
                        zero::<S>(out, (oy_lo * ow) as usize);
                        for oy in oy_lo..oy_hi {
                            let dst = out.offset(oy * ow);
                            // Input row `oy·sh + y0`, column `ox_lo·sw + x0`: both inside.
                            let src = xc.offset((oy * sh + y0) * w + ox_lo * sw + x0);
                            zero::<S>(dst, ox_lo as usize);
                            copy::<S>(dst.offset(ox_lo), src, (ox_hi - ox_lo) as usize, sw);
                            zero::<S>(dst.offset(ox_hi), (ow - ox_hi) as usize);
                        }
                        zero::<S>(out.offset(oy_hi * ow), ((oh - oy_hi) * ow) as usize);
                    }
                    out = out.add(plane);
                }
            }
        }
    }
}

/// The outputs `o` in `0..count` whose input position `start + o·step` lies in `0..len`, as
/// a range (`lo >= hi` when there are none).
#[inline(always)]
pub(crate) fn inside(start: isize, step: isize, len: isize, count: isize) -> (isize, isize) {
    // The usual strides without divisions (the halved values are not negative).
    let (lo, hi) = match step {
        1 => ((-start).max(0), (len - start).min(count)),
        2 => (if start >= 0 { 0 } else { (1 - start) >> 1 }, if start >= len { 0 } else { (((len - 1 - start) >> 1) + 1).min(count) }),
        _ => (if start >= 0 { 0 } else { (-start + step - 1) / step }, if start >= len { 0 } else { ((len - 1 - start) / step + 1).min(count) }),
    };
    (lo.min(count), hi)
}

/// `n` zeros from `to`, a vector at a time (inline: rows are often a few elements, where a
/// `memset` call would cost more than the stores).
///
/// # Safety
///
/// `to` writable for `n` floats; the CPU runs `S`.
#[inline(always)]
pub(crate) unsafe fn zero<S: Simd>(to: *mut f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    // SAFETY: every store is at `i..i + l` with `i + l <= n`, or masked to `i..n`; the vector
    // operations need no alignment.
    unsafe {
        let z = S::zero();
        while i + l <= n {
            S::store(to.add(i), z);
            i += l;
        }
        if i < n {
            S::store_first(to.add(i), z, n - i);
        }
    }
}

/// `to[j] = from[j·step]` for `j` in `0..n`: vectors (bits unchanged) for strides 1 and 2 (two
/// loads and a permutation), element by element for larger strides.
///
/// # Safety
///
/// `from` readable for `(n − 1)·step + 1` floats, `to` writable for `n`, not overlapping; the
/// CPU runs `S`.
#[inline(always)]
pub(crate) unsafe fn copy<S: Simd>(to: *mut f32, from: *const f32, n: usize, step: isize) {
    let l = S::LANES;
    // SAFETY: by the caller's contract; vector accesses stay inside `0..n` as in `zero`, the
    // scalar ones are unaligned.
    unsafe {
        match step {
            1 => {
                let mut i = 0;
                while i + l <= n {
                    S::store(to.add(i), S::load(from.add(i)));
                    i += l;
                }
                if i < n {
                    S::store_first(to.add(i), S::load_first(from.add(i), n - i), n - i);
                }
            }
            2 => {
                let mut i = 0;
                while i + l <= n {
                    S::store(to.add(i), S::load_even(from.add(2 * i), l));
                    i += l;
                }
                if i < n {
                    S::store_first(to.add(i), S::load_even(from.add(2 * i), n - i), n - i);
                }
            }
            _ => {
                for j in 0..n {
                    to.add(j).write_unaligned(from.offset(j as isize * step).read_unaligned());
                }
            }
        }
    }
}

/// The column matrix of the convolution's input: [`Im2col`] for generated code, with its
/// argument names. `x` points at the first input channel's plane; `col` receives
/// `channels·kh·kw` rows of `oh·ow`. Nothing happens when a size is negative or the sizes are
/// not [valid](Im2col::is_valid) (a zero stride or dilation, counts or indices beyond
/// `isize`).
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations: `channels·h·w` of
/// `x` readable, `channels·kh·kw·oh·ow` of `col` writable, not overlapping `x`. Alignment is
/// not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_im2col(x: *const f32, col: *mut f32, channels: i64, h: i64, w: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64) {
    let (Ok(channels), Some(win)) = (usize::try_from(channels), Window::from_args([h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw])) else {
        return;
    };
    let g = Im2col { channels, win };
    // SAFETY: by the caller's contract.
    unsafe { g.run_raw(x, col) }
}

#[cfg(test)]
mod tests;
