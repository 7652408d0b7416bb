//! Input planes copied into their stride phases, the padding written as zeros: the flat planes
//! `flat.rs` reads, and the subsampled planes of a strided `1×1` convolution.
//!
//! Phase `(ry, rx)` of a plane holds the padded input at `(i·sh + ry, j·sw + rx)` for `i <
//! height`, `j < width`. Rows are written with vector copies (stride 2 by two loads and a
//! permutation), and channels split over the thread pool.

use std::cell::RefCell;

use crate::gemm::simd::{Portable, Simd};
#[cfg(target_arch = "x86_64")]
use crate::gemm::{avx2::Avx2, avx512::Avx512};
use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};
use crate::window::Window;

/// Which phases of each plane are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phases {
    /// All `sh·sw` of them, in row-major `(ry, rx)` order.
    All,
    /// Phase `(0, 0)` alone: the plane subsampled by the strides.
    First,
}

/// A copy of input planes into phase planes of `width × height`.
#[derive(Clone, Copy, Debug)]
pub(super) struct PhaseCopy {
    pub win: Window,
    pub width: usize,
    pub height: usize,
    pub phases: Phases,
}

thread_local! {
    /// Phase planes, grown to the largest asked for and kept.
    static COPIES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Copies of fewer elements than this run on one thread (a split costs a few microseconds).
const SPLIT_MIN: usize = 1 << 15;

impl PhaseCopy {
    /// Phase planes per channel.
    pub(super) fn per_channel(&self) -> usize {
        match self.phases {
            Phases::All => self.win.sh * self.win.sw,
            Phases::First => 1,
        }
    }

    /// Floats written for `channels` planes.
    pub(super) fn len(&self, channels: usize) -> usize {
        channels * self.per_channel() * self.width * self.height
    }

    /// Runs `f` on the phase planes of the `channels` planes at `x`, written into this
    /// thread's scratch.
    ///
    /// # Safety
    ///
    /// As [`run`](Self::run).
    pub(super) unsafe fn with<R>(&self, isa: Isa, channels: usize, x: *const f32, f: impl FnOnce(*const f32) -> R) -> R {
        crate::scratch::with(&COPIES, self.len(channels), |dst| {
            // SAFETY: by the caller's contract; `dst` holds `len` floats.
            unsafe { self.run(isa, channels, x, dst) };
            f(dst.as_ptr())
        })
    }

    /// Writes the phases of the `channels` planes at `x` into `dst`.
    ///
    /// # Safety
    ///
    /// `x` holds `channels` planes of `h × w`, `dst` [`len`](Self::len) floats; the strides are
    /// positive; the CPU runs `isa`.
    unsafe fn run(&self, isa: Isa, channels: usize, x: *const f32, dst: &mut [f32]) {
        debug_assert!(dst.len() >= self.len(channels));
        let parts = if self.len(channels) >= SPLIT_MIN { pool::threads().min(channels) } else { 1 };
        let ptrs = SharedPtr((x, dst.as_mut_ptr()));
        pool::for_each(parts, &|i| {
            let (x, dst) = ptrs.get();
            let r = pool::part(channels, parts, 1, i);
            // SAFETY: by the caller's contract: channels `r` of `x` and their phase planes,
            // which no other part writes; `isa` runs here.
            unsafe {
                let x = x.add(r.start * self.win.h * self.win.w);
                let dst = dst.add(self.len(r.start));
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => channels_avx512(self, r.len(), x, dst),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => channels_avx2(self, r.len(), x, dst),
                    _ => self.channels::<Portable>(r.len(), x, dst),
                }
            }
        });
    }

    /// [`run`](Self::run)'s work for `channels` planes, on this thread.
    ///
    /// # Safety
    ///
    /// As [`run`](Self::run); the CPU runs `S`.
    #[inline(always)]
    unsafe fn channels<S: Simd>(&self, channels: usize, x: *const f32, dst: *mut f32) {
        let (win, width) = (&self.win, self.width);
        let (sw, pw, w) = (win.sw as isize, win.pw as isize, win.w as isize);
        // The first flat column whose input column `j·sw + rx − pw` is at least `at − pw`.
        let first = |at: isize| if at <= 0 { 0 } else { ((at + sw - 1) / sw).min(width as isize) as usize };
        for c in 0..channels {
            for phase in 0..self.per_channel() {
                let (ry, rx) = ((phase / win.sw) as isize, (phase % win.sw) as isize);
                // Flat columns `lo..hi` hold input columns inside `0..w`.
                let (lo, hi) = (first(pw - rx), first(w + pw - rx));
                for i in 0..self.height {
                    let iy = i as isize * win.sh as isize + ry - win.ph as isize;
                    // SAFETY: the row is inside `dst` by the caller's contract; when `iy` is a
                    // row of the plane, its columns `x0 + t·sw` for `t < hi − lo` lie in `0..w`
                    // (by `lo` and `hi`), inside `x`.
                    unsafe {
                        let row = std::slice::from_raw_parts_mut(dst.add(((c * self.per_channel() + phase) * self.height + i) * width), width);
                        if iy < 0 || iy >= win.h as isize || lo >= hi {
                            row.fill(0.0);
                            continue;
                        }
                        row[..lo].fill(0.0);
                        row[hi..].fill(0.0);
                        let src = x.add((c * win.h + iy as usize) * win.w).offset(lo as isize * sw + rx - pw);
                        strided_copy::<S>(&mut row[lo..hi], src, sw);
                    }
                }
            }
        }
    }
}

/// `to[t] = from[t·step]`: whole vectors for steps 1 and 2 (two loads and a permutation; a row
/// of at least one vector ends in a vector overlapping the one before), the rest element by
/// element. No masked stores: on this project's AMD machine each costs as much
/// as a dozen plain ones, and rows of 15 to 115 floats end in one.
///
/// # Safety
///
/// `from` readable at `t·step` for every `t < to.len()`; the CPU runs `S`.
#[inline(always)]
unsafe fn strided_copy<S: Simd>(to: &mut [f32], from: *const f32, step: isize) {
    let (l, n) = (S::LANES, to.len());
    let mut t = 0;
    // SAFETY: vector accesses stay inside `0..n` elements of `to` and read `from` at `t·step`
    // for `t < n` only (`load_even` touches `from[0..2l − 1]`).
    unsafe {
        match step {
            1 => {
                while t + l <= n {
                    S::store(to.as_mut_ptr().add(t), S::load(from.add(t)));
                    t += l;
                }
            }
            2 => {
                while t + l <= n {
                    S::store(to.as_mut_ptr().add(t), S::load_even(from.add(2 * t), l));
                    t += l;
                }
            }
            _ => {}
        }
        // The last partial vector as a whole one ending at `n`, overlapping the one before
        // (the same values written twice).
        if (step == 1 || step == 2) && t < n && n >= l {
            let at = n - l;
            let v = if step == 1 { S::load(from.add(at)) } else { S::load_even(from.add(2 * at), l) };
            S::store(to.as_mut_ptr().add(at), v);
            t = n;
        }
        for (i, out) in to.iter_mut().enumerate().skip(t) {
            *out = from.offset(i as isize * step).read_unaligned();
        }
    }
}

/// [`PhaseCopy::channels`] with the AVX-512 vector operations.
///
/// # Safety
///
/// As [`PhaseCopy::run`]; the CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn channels_avx512(p: &PhaseCopy, channels: usize, x: *const f32, dst: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { p.channels::<Avx512>(channels, x, dst) }
}

/// [`PhaseCopy::channels`] with the AVX2 vector operations.
///
/// # Safety
///
/// As [`PhaseCopy::run`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn channels_avx2(p: &PhaseCopy, channels: usize, x: *const f32, dst: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { p.channels::<Avx2>(channels, x, dst) }
}
