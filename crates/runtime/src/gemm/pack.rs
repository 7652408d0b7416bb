//! Packing: copying a block of `op(A)` or `op(B)` into the contiguous panels the micro-kernel
//! streams, zero-padded to whole panels.
//!
//! A panel is `W` lanes wide (the kernel's `MR` rows of `A`, or its `NR` columns of `B`) and
//! `kc` steps deep, stored step-major: `dst[p·W + lane]`. The source is any strided view, so
//! transposition is only a choice of strides; the two common layouts have fast paths (lanes
//! contiguous: a row copy per step; steps contiguous: a transpose through small blocks). Sources
//! are read unaligned; the panels (in the scratch space) are 64-byte aligned.

/// A strided view of a matrix: element `(lane, step)` is at `ptr + lane·lane_stride + step·step_stride`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    /// Element `(0, 0)`.
    pub ptr: *const f32,
    /// Distance between neighbouring lanes, in elements.
    pub lane_stride: isize,
    /// Distance between neighbouring steps, in elements.
    pub step_stride: isize,
}

impl View {
    /// The view moved by `lanes` lanes and `steps` steps.
    ///
    /// # Safety
    ///
    /// The result points inside (or one past) the same allocation.
    #[inline(always)]
    pub unsafe fn at(self, lanes: usize, steps: usize) -> View {
        // SAFETY: by the caller's contract.
        let ptr = unsafe { self.ptr.offset(lanes as isize * self.lane_stride + steps as isize * self.step_stride) };
        View { ptr, ..self }
    }
}

/// Packs `lanes ≤ W` lanes × `kc` steps of `src` into `dst[kc·W]`, zeroing lanes `lanes..W`.
///
/// # Safety
///
/// Every element `(lane < lanes, step < kc)` of `src` is readable; `dst` has `kc·W` writable floats.
#[inline(always)]
pub(crate) unsafe fn panel<const W: usize>(dst: *mut f32, src: View, lanes: usize, kc: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        if src.lane_stride == 1 {
            // Each step's lanes are contiguous: a row copy.
            for p in 0..kc {
                let from = src.ptr.offset(p as isize * src.step_stride);
                let to = dst.add(p * W);
                // As bytes: the source may not be 4-byte aligned. A whole panel row is a copy
                // of constant size, which compiles to a few vector moves.
                if lanes == W {
                    std::ptr::copy_nonoverlapping(from.cast::<u8>(), to.cast::<u8>(), 4 * W);
                } else {
                    std::ptr::copy_nonoverlapping(from.cast::<u8>(), to.cast::<u8>(), 4 * lanes);
                    std::ptr::write_bytes(to.add(lanes), 0, W - lanes);
                }
            }
        } else if src.step_stride == 1 {
            // Each lane's steps are contiguous: transpose 8 steps at a time, so every source
            // row is read in runs of 32 bytes.
            const B: usize = 8;
            let mut p = 0;
            while p + B <= kc {
                for r in 0..lanes {
                    let from = src.ptr.offset(r as isize * src.lane_stride).add(p);
                    let run = from.cast::<[f32; B]>().read_unaligned();
                    for (q, &x) in run.iter().enumerate() {
                        *dst.add((p + q) * W + r) = x;
                    }
                }
                for q in 0..B {
                    std::ptr::write_bytes(dst.add((p + q) * W + lanes), 0, W - lanes);
                }
                p += B;
            }
            for p in p..kc {
                for r in 0..W {
                    *dst.add(p * W + r) = if r < lanes { src.ptr.offset(r as isize * src.lane_stride).add(p).read_unaligned() } else { 0.0 };
                }
            }
        } else {
            for p in 0..kc {
                for r in 0..W {
                    *dst.add(p * W + r) = if r < lanes { src.ptr.offset(r as isize * src.lane_stride + p as isize * src.step_stride).read_unaligned() } else { 0.0 };
                }
            }
        }
    }
}

/// [`panel`] with the transposing case (steps contiguous) done by 8 × 8 AVX transposes: each
/// group of 8 lanes is read as 8 rows of 8 steps and written as 8 panel rows. Other layouts, and
/// lanes past the last whole group, take [`panel`]'s paths.
///
/// # Safety
///
/// As [`panel`]; `W` is a multiple of 8; the caller enables AVX.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn panel_avx<const W: usize>(dst: *mut f32, src: View, lanes: usize, kc: usize) {
    use std::arch::x86_64::*;
    if src.step_stride != 1 || src.lane_stride == 1 || lanes < 8 {
        // SAFETY: by the caller's contract.
        return unsafe { panel::<W>(dst, src, lanes, kc) };
    }
    // SAFETY: by the caller's contract: every (lane < lanes, step < kc) is readable, dst holds kc·W.
    unsafe {
        let groups = lanes / 8;
        let k8 = kc / 8 * 8;
        for g in 0..groups {
            let rows: [*const f32; 8] = std::array::from_fn(|r| src.ptr.offset((8 * g + r) as isize * src.lane_stride));
            let mut p = 0;
            while p < k8 {
                if p % 16 == 0 {
                    // The rows stream from L3 or memory (weights): ask for them 512 bytes ahead.
                    for &row in &rows {
                        _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(p + 128).cast());
                    }
                }
                let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(rows[i].add(p)));
                let out = super::avx2::transpose8(r);
                for (q, &v) in out.iter().enumerate() {
                    _mm256_storeu_ps(dst.add((p + q) * W + 8 * g), v);
                }
                p += 8;
            }
            for p in k8..kc {
                for (r, &row) in rows.iter().enumerate() {
                    *dst.add(p * W + 8 * g + r) = row.add(p).read_unaligned();
                }
            }
        }
        // The lanes past the whole groups, and the zero padding.
        for p in 0..kc {
            for r in 8 * groups..W {
                *dst.add(p * W + r) = if r < lanes { src.ptr.offset(r as isize * src.lane_stride).add(p).read_unaligned() } else { 0.0 };
            }
        }
    }
}

/// [`panel_avx`] when `AVX` (on x86-64), else [`panel`].
///
/// # Safety
///
/// As [`panel`]; with `AVX`, as [`panel_avx`].
#[inline(always)]
unsafe fn one_panel<const W: usize, const AVX: bool>(dst: *mut f32, src: View, lanes: usize, kc: usize) {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        // SAFETY: by the caller's contract.
        return unsafe { panel_avx::<W>(dst, src, lanes, kc) };
    }
    // SAFETY: by the caller's contract.
    unsafe { panel::<W>(dst, src, lanes, kc) }
}

/// Rows of a row-major `B` ahead of the one [`block`] copies whose lines are asked into L2: a
/// convolution's input planes are `B`'s rows, so a block's rows are runs of `NC` floats a
/// plane apart, each too short for the hardware prefetcher to get ahead of. Four rows ahead,
/// into L2, did best in `conv_one` with the input from memory (2, 8 and 16 rows did as well or
/// worse, and L1 gained next to nothing); with the input in cache it changes nothing.
const B_AHEAD: usize = 4;

/// Packs `lanes` lanes × `kc` steps of `src` into consecutive panels of `W` lanes (`kc·W` floats
/// each; the last zero-padded), each through [`one_panel`]. (A const parameter, not a closure:
/// a closure is compiled as a function of its own without the caller's `#[target_feature]`s,
/// and the AVX intrinsics in it became calls.) When lanes are contiguous the
/// block is copied step by step across all panels instead, so the source is read in long
/// sequential runs (a panel at a time would read `kc` short runs a row stride apart, which the
/// hardware prefetcher follows poorly).
///
/// # Safety
///
/// As [`panel`], for `lanes` lanes; `dst` holds `⌈lanes/W⌉·kc·W` floats; with `AVX`, the caller
/// enables AVX.
#[inline(always)]
pub(crate) unsafe fn block<const W: usize, const AVX: bool>(dst: *mut f32, src: View, lanes: usize, kc: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        if src.lane_stride != 1 || lanes <= W {
            for (t, j) in (0..lanes).step_by(W).enumerate() {
                one_panel::<W, AVX>(dst.add(t * kc * W), src.at(j, 0), W.min(lanes - j), kc);
            }
            return;
        }
        let full = lanes / W;
        let rest = lanes - full * W;
        for p in 0..kc {
            if p + B_AHEAD < kc {
                // The rows are short runs (a block's columns) a plane apart: see `B_AHEAD`.
                crate::prefetch::rows_to_l2(src.ptr.offset((p + B_AHEAD) as isize * src.step_stride), 1, lanes, 0);
            }
            let from = src.ptr.offset(p as isize * src.step_stride).cast::<u8>();
            for t in 0..full {
                std::ptr::copy_nonoverlapping(from.add(4 * t * W), dst.add((t * kc + p) * W).cast::<u8>(), 4 * W);
            }
            if rest > 0 {
                let to = dst.add((full * kc + p) * W);
                std::ptr::copy_nonoverlapping(from.add(4 * full * W), to.cast::<u8>(), 4 * rest);
                std::ptr::write_bytes(to.add(rest), 0, W - rest);
            }
        }
    }
}
