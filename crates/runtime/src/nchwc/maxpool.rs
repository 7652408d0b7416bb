//! 2-D max pooling of NCHW16c tensors: every lane of a block is a plane of
//! [`maxpool`](crate::maxpool), with its semantics exactly (the taps inside the input in
//! `(ky, kx)` order, the first one taken, each later one when it is strictly greater; 0 when no
//! tap is inside), 16 planes per vector.

use std::ops::Range;

use super::LANES;
use crate::gemm::Isa;
#[cfg(target_arch = "x86_64")]
use super::line::{Line, Pair, Wide};
use crate::pool::{self, SharedPtr};
use crate::window::Window;

/// The max pool of `blocks` blocks of `win.h × win.w` pixels into blocks of `win.oh × win.ow`.
///
/// # Safety
///
/// `x` readable for `blocks·h·w·16` floats, `y` writable for `blocks·oh·ow·16` and not
/// overlapping `x`; the window is valid (nonzero strides and dilations).
pub unsafe fn run(isa: Isa, blocks: usize, win: &Window, x: *const f32, y: *mut f32) {
    let ways = if blocks * win.oh * win.ow * win.kh * win.kw >= 1 << 16 { pool::threads().min(blocks) } else { 1 };
    let wide = super::usable(isa);
    let ptrs = SharedPtr((x, y));
    pool::for_each(ways, &|i| {
        let (x, y) = ptrs.get();
        // SAFETY: by the caller's contract; each task writes its own blocks.
        unsafe {
            let part = pool::part(blocks, ways, 1, i);
            match wide {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => avx512(win, x, y, part),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => avx2(win, x, y, part),
                _ => portable(win, x, y, part),
            }
        }
    });
}

/// The taps of output coordinate `o` inside an input of `n`: `k` taps `d` apart from `o·s − p`.
fn inside(o: usize, s: usize, p: usize, k: usize, d: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..k).filter_map(move |t| (o * s + t * d).checked_sub(p).filter(|&i| i < n))
}

/// [`run`] on `blocks` with AVX-512.
///
/// # Safety
///
/// As [`run`]; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512(win: &Window, x: *const f32, y: *mut f32, blocks: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { lines::<Wide>(win, x, y, blocks) }
}

/// [`run`] on `blocks` with AVX2.
///
/// # Safety
///
/// As [`run`]; the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(win: &Window, x: *const f32, y: *mut f32, blocks: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { lines::<Pair>(win, x, y, blocks) }
}

/// [`run`] on `blocks`, a line (16 channels of a pixel) at a time.
///
/// # Safety
///
/// As [`run`]; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lines<L: Line>(win: &Window, x: *const f32, y: *mut f32, blocks: Range<usize>) {
    let (plane_in, plane_out) = (win.h * win.w * LANES, win.oh * win.ow * LANES);
    // Each output row's and column's taps inside the input: the first one's input coordinate
    // and how many (consecutive taps, `dh` or `dw` apart), found once per call.
    let span = |o: usize, s: usize, p: usize, k: usize, d: usize, n: usize| {
        let mut taps = inside(o, s, p, k, d, n);
        let first = taps.next();
        (first.unwrap_or(0), first.map_or(0, |_| 1 + taps.count()))
    };
    let rows: Vec<(usize, usize)> = (0..win.oh).map(|oy| span(oy, win.sh, win.ph, win.kh, win.dh, win.h)).collect();
    let cols: Vec<(usize, usize)> = (0..win.ow).map(|ox| span(ox, win.sw, win.pw, win.kw, win.dw, win.w)).collect();
    let (row_step, col_step) = (win.dh * win.w * LANES, win.dw * LANES);
    for b in blocks {
        for (oy, &(iy, nr)) in rows.iter().enumerate() {
            for (ox, &(ix, nc)) in cols.iter().enumerate() {
                let at = y.wrapping_add(b * plane_out + (oy * win.ow + ox) * LANES);
                if nr == 0 || nc == 0 {
                    // SAFETY: an output pixel of block `b`, by the caller's contract.
                    unsafe { L::store(at, L::zero()) };
                    continue;
                }
                // SAFETY: input pixels of block `b` and an output pixel, by the caller's
                // contract. The first tap starts the maximum; `max(v, m)` is `v > m ? v : m`,
                // lane by lane, so taking the first tap again changes nothing.
                unsafe {
                    let first = x.add(b * plane_in + (iy * win.w + ix) * LANES);
                    let mut m = L::load(first);
                    for r in 0..nr {
                        let row = first.add(r * row_step);
                        for c in 0..nc {
                            m = L::max(L::load(row.add(c * col_step)), m);
                        }
                    }
                    L::store(at, m);
                }
            }
        }
    }
}

/// [`run`] on `blocks`, one float at a time.
///
/// # Safety
///
/// As [`run`].
unsafe fn portable(win: &Window, x: *const f32, y: *mut f32, blocks: Range<usize>) {
    let (plane_in, plane_out) = (win.h * win.w * LANES, win.oh * win.ow * LANES);
    for b in blocks {
        for oy in 0..win.oh {
            for ox in 0..win.ow {
                for l in 0..LANES {
                    let mut m: Option<f32> = None;
                    for iy in inside(oy, win.sh, win.ph, win.kh, win.dh, win.h) {
                        for ix in inside(ox, win.sw, win.pw, win.kw, win.dw, win.w) {
                            // SAFETY: as in `lines`.
                            let v = unsafe { *x.add(b * plane_in + (iy * win.w + ix) * LANES + l) };
                            m = Some(m.map_or(v, |m| if v > m { v } else { m }));
                        }
                    }
                    // SAFETY: as in `lines`.
                    unsafe { *y.add(b * plane_out + (oy * win.ow + ox) * LANES + l) = m.unwrap_or(0.0) };
                }
            }
        }
    }
}

/// [`run`] for generated code, with `kiln_rt_maxpool2d`'s arguments: `planes` (the blocked
/// tensor's channels over all images, a multiple of 16, or rounded up to one) and the window.
/// Nothing happens when a size is negative or the window is not valid.
///
/// # Safety
///
/// `x` readable for `⌈planes/16⌉·16·h·w` floats, `y` writable for `⌈planes/16⌉·16·oh·ow`
/// and not overlapping `x`. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_maxpool2d_nchwc(x: *const f32, y: *mut f32, planes: i64, h: i64, w: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64) {
    let (Ok(planes), Some(win)) = (usize::try_from(planes), Window::from_args([h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw])) else {
        return;
    };
    let blocks = planes.div_ceil(LANES);
    if !(crate::maxpool::MaxPool2d { planes: blocks * LANES, win }).is_valid() {
        return;
    }
    // SAFETY: by the caller's contract.
    unsafe { run(Isa::detected(), blocks, &win, x, y) }
}
