//! im2col of 8-bit NCHW planes for the integer convolutions, whose column matrix the integer
//! product ([`crate::qgemm`]) multiplies by the weights: the layout of [`super::Im2col`]'s, one
//! byte per element, and a padding byte in place of zero (the input's zero point, so that the
//! padding adds nothing once the product subtracts it).
//!
//! Each row of the matrix (one channel and tap) is, per output row, a run of padding, a copy
//! and a run of padding, the ranges computed once per row as [`super::Im2col`] does; where rows
//! are as long as the input's at stride 1, all of a matrix row's inside rows are one copy (the
//! plane shifted by the tap), their outside columns padded after; a stride-2
//! copy narrows 32 words to their low bytes at a time with AVX-512 BW, other strided copies go
//! a byte at a time.

use super::inside;
use crate::pool::{self, SharedPtr};
use crate::window::Window;

/// The sizes of one byte im2col: `channels` input planes, the window over each, and the byte
/// written where a tap falls in the padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Im2colBytes {
    /// Input channels (rows of the matrix are `channels·kh·kw`).
    pub channels: usize,
    /// The planes, kernel, strides, padding and dilations.
    pub win: Window,
    /// The padding's byte.
    pub pad: u8,
}

/// [`Im2colBytes`] with what this CPU offers for stride-2 rows.
struct Rows {
    g: Im2colBytes,
    /// AVX-512 BW narrows 32 words to their low bytes: the even bytes of 64.
    even_bytes: bool,
}

impl std::ops::Deref for Rows {
    type Target = Im2colBytes;
    fn deref(&self) -> &Im2colBytes {
        &self.g
    }
}

impl Im2colBytes {
    /// The same matrix of `f32`s, whose sizes and extents these are.
    fn of_floats(&self) -> super::Im2col {
        super::Im2col { channels: self.channels, win: self.win }
    }

    /// Whether the sizes make sense (as [`super::Im2col::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.of_floats().is_valid()
    }

    /// Bytes of `x` read (0 when nothing is written; saturating).
    pub fn x_len(&self) -> usize {
        self.of_floats().x_len()
    }

    /// Bytes of the matrix written: `channels·kh·kw·oh·ow`.
    pub fn col_len(&self) -> usize {
        self.of_floats().col_len()
    }

    /// Writes the matrix.
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`x_len`](Self::x_len) or [`col_len`](Self::col_len).
    pub fn run(&self, x: &[u8], col: &mut [u8]) {
        assert!(x.len() >= self.x_len() && col.len() >= self.col_len(), "im2col_bytes operand slices are too short for {self:?}");
        // SAFETY: the slices hold every byte addressed; `col` is exclusively borrowed.
        unsafe { self.run_raw(x.as_ptr(), col.as_mut_ptr()) }
    }

    /// The operation on raw pointers; nothing when the sizes are not valid.
    ///
    /// # Safety
    ///
    /// `x` readable for [`x_len`](Self::x_len) bytes, `col` writable for
    /// [`col_len`](Self::col_len) and not overlapping `x`.
    pub(crate) unsafe fn run_raw(&self, x: *const u8, col: *mut u8) {
        if !self.is_valid() || self.col_len() == 0 {
            return;
        }
        let win = &self.win;
        #[cfg(target_arch = "x86_64")]
        let even_bytes = std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vl");
        #[cfg(not(target_arch = "x86_64"))]
        let even_bytes = false;
        let rows = Rows { g: *self, even_bytes };
        let parts = if self.col_len() >= 1 << 16 { pool::threads().min(self.channels) } else { 1 };
        let ptrs = SharedPtr((x, col));
        pool::for_each(parts, &|t| {
            let (x, col) = ptrs.get();
            for c in pool::part(self.channels, parts, 1, t) {
                // SAFETY: channel `c`'s plane and its rows of the matrix, which no other part
                // writes, by the caller's contract.
                unsafe { rows.channel(x.add(c * win.h * win.w), col.add(c * win.kh * win.kw * win.oh * win.ow)) };
            }
        });
    }
}

impl Rows {
    /// One channel's `kh·kw` rows.
    ///
    /// # Safety
    ///
    /// `x` readable for a plane, `col` writable for `kh·kw·oh·ow` bytes; valid sizes.
    unsafe fn channel(&self, x: *const u8, col: *mut u8) {
        let win = &self.win;
        let i = |v: usize| v as isize;
        let mut to = col;
        for ky in 0..win.kh {
            let y0 = i(ky * win.dh) - i(win.ph);
            let (oy_lo, oy_hi) = inside(y0, i(win.sh), i(win.h), i(win.oh));
            for kx in 0..win.kw {
                let x0 = i(kx * win.dw) - i(win.pw);
                let (ox_lo, ox_hi) = inside(x0, i(win.sw), i(win.w), i(win.ow));
                let (lo, hi) = (ox_lo as usize, ox_hi.max(ox_lo) as usize);
                // Stride 1 along rows as long as the input's: the matrix row is the plane shifted
                // by a constant, one copy for all its rows inside, and the columns outside
                // padded after.
                if win.sw == 1 && win.ow == win.w && lo < hi && oy_lo < oy_hi {
                    let (first, last) = (oy_lo as usize, oy_hi as usize);
                    // SAFETY: the matrix row holds `oh·ow` bytes; the copy reads from the first
                    // inside row's column `lo` to the last one's column `hi − 1`, positions of
                    // the plane (`inside`), and so is every byte between.
                    unsafe {
                        let row = std::slice::from_raw_parts_mut(to, win.oh * win.ow);
                        row[..first * win.ow].fill(self.pad);
                        row[last * win.ow..].fill(self.pad);
                        let iy = (y0 + i(first * win.sh)) as usize;
                        if win.sh == 1 {
                            let src = x.add(iy * win.w).offset(x0 + i(lo));
                            std::ptr::copy_nonoverlapping(src, row.as_mut_ptr().add(first * win.ow + lo), (last - first - 1) * win.ow + hi - lo);
                        } else {
                            for oy in first..last {
                                let src = x.add((iy + (oy - first) * win.sh) * win.w).offset(x0 + i(lo));
                                std::ptr::copy_nonoverlapping(src, row.as_mut_ptr().add(oy * win.ow + lo), hi - lo);
                            }
                        }
                        for oy in first..last {
                            pad_run(&mut row[oy * win.ow..oy * win.ow + lo], self.pad);
                            pad_run(&mut row[oy * win.ow + hi..(oy + 1) * win.ow], self.pad);
                        }
                        to = to.add(win.oh * win.ow);
                    }
                    continue;
                }
                for oy in 0..win.oh {
                    // SAFETY: the row's `ow` bytes are inside the matrix; an inside row's
                    // columns `lo..hi` read inside the plane (`inside`).
                    unsafe {
                        let row = std::slice::from_raw_parts_mut(to, win.ow);
                        if (oy as isize) < oy_lo || (oy as isize) >= oy_hi || lo >= hi {
                            row.fill(self.pad);
                        } else {
                            let iy = (y0 + i(oy * win.sh)) as usize;
                            let src = x.add(iy * win.w).offset(x0 + i(lo * win.sw));
                            pad_run(&mut row[..lo], self.pad);
                            pad_run(&mut row[hi..], self.pad);
                            if win.sw == 1 {
                                std::ptr::copy_nonoverlapping(src, row.as_mut_ptr().add(lo), hi - lo);
                            } else if win.sw == 2 && self.even_bytes {
                                #[cfg(target_arch = "x86_64")]
                                even_bytes(src, row.as_mut_ptr().add(lo), hi - lo);
                            } else {
                                for (d, v) in row[lo..hi].iter_mut().enumerate() {
                                    *v = src.add(d * win.sw).read();
                                }
                            }
                        }
                        to = to.add(win.ow);
                    }
                }
            }
        }
    }
}

/// `run` filled with `pad`: the few bytes a row's edge usually has stored one by one, since a
/// `memset` call per row of a 3×3 window's matrix cost 4 % of a quantized ResNet-50.
#[inline]
fn pad_run(run: &mut [u8], pad: u8) {
    match run {
        [] => {}
        [a] => *a = pad,
        [a, b] => (*a, *b) = (pad, pad),
        [a, b, c] => (*a, *b, *c) = (pad, pad, pad),
        _ => run.fill(pad),
    }
}

/// `n` bytes at every second byte from `src` into `dst`, 32 at a time.
///
/// # Safety
///
/// `src` readable for `2n − 1` bytes, `dst` writable for `n`; the CPU has AVX-512 BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn even_bytes(src: *const u8, dst: *mut u8, n: usize) {
    use std::arch::x86_64::*;
    let mut d = 0;
    // SAFETY: by the caller's contract, for the bytes each (masked) access covers.
    unsafe {
        while d + 32 <= n {
            let words = if 2 * d + 64 <= 2 * n - 1 { _mm512_loadu_si512(src.add(2 * d).cast()) } else { _mm512_maskz_loadu_epi8(u64::MAX >> 1, src.add(2 * d).cast()) };
            _mm256_storeu_si256(dst.add(d).cast(), _mm512_cvtepi16_epi8(words));
            d += 32;
        }
        if d < n {
            let left = n - d;
            let bytes = _mm512_maskz_loadu_epi8(u64::MAX >> (64 - (2 * left - 1)), src.add(2 * d).cast());
            _mm256_mask_storeu_epi8(dst.add(d).cast(), u32::MAX >> (32 - left), _mm512_cvtepi16_epi8(bytes));
        }
    }
}

/// [`Im2colBytes`] for generated code: `pad` the padding's byte (its low 8 bits); `signed`
/// (whether the bytes are `i8`) changes nothing here. Nothing happens when a size is negative
/// or the sizes are invalid.
///
/// # Safety
///
/// `channels·h·w` bytes of `x` readable, `channels·kh·kw·oh·ow` of `col` writable, not
/// overlapping `x`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_im2col_bytes(x: *const u8, col: *mut u8, channels: i64, h: i64, w: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64, pad: i64, signed: i64) {
    let _ = signed;
    let (Ok(channels), Some(win)) = (usize::try_from(channels), Window::from_args([h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw])) else {
        return;
    };
    let g = Im2colBytes { channels, win, pad: pad as u8 };
    // SAFETY: by the caller's contract.
    unsafe { g.run_raw(x, col) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::im2col::Im2col;

    /// Every window of the `f32` routine's tests gives the same matrix, the padding's byte
    /// where that one writes zero.
    #[test]
    fn matches_the_f32_matrix() {
        let cases = [
            // (channels, h, w, k, stride, pad, dilation)
            (2, 7, 9, 3, 1, 1, 1),
            (3, 12, 11, 3, 2, 1, 1),
            (1, 10, 10, 7, 2, 3, 1),
            (2, 9, 9, 3, 1, 2, 2),
            (2, 8, 13, 1, 3, 0, 1),
            (1, 5, 5, 5, 1, 4, 1),
            // Stride-2 rows of several 32-byte pieces and a partial one.
            (2, 5, 150, 3, 2, 1, 1),
            (1, 4, 129, 7, 2, 3, 1),
        ];
        // Square strides, then rows at stride 1 under a vertical stride of 2 (rows as long as
        // the input's, each copied on its own).
        let cases = cases.map(|(c, h, w, k, s, p, d)| (c, h, w, k, (s, s), p, d)).into_iter().chain([(2, 9, 10, 3, (2, 1), 1, 1)]);
        for (channels, h, w, k, (sh, sw), p, d) in cases {
            let (oh, ow) = ((h + 2 * p - d * (k - 1) - 1) / sh + 1, (w + 2 * p - d * (k - 1) - 1) / sw + 1);
            let win = Window { h, w, oh, ow, kh: k, kw: k, sh, sw, ph: p, pw: p, dh: d, dw: d };
            let g = Im2colBytes { channels, win, pad: 0xA5 };
            // Bytes 1..=255 (never the padding's 0xA5 as f32 marks it below).
            let x: Vec<u8> = (0..channels * h * w).map(|i| (i * 7 % 250 + 1) as u8).collect();
            let xf: Vec<f32> = x.iter().map(|&v| f32::from(v)).collect();
            let mut want = vec![f32::NAN; g.col_len()];
            Im2col { channels, win }.run(&xf, &mut want);
            let mut col = vec![0u8; g.col_len() + 2];
            col[g.col_len()..].fill(0x11);
            g.run(&x, &mut col);
            for (i, (&b, &f)) in col.iter().zip(&want).enumerate() {
                // The f32 matrix's zeros are the padding (no input byte is 0).
                let expected = if f == 0.0 { 0xA5 } else { f as u8 };
                assert_eq!(b, expected, "{g:?}: element {i}");
            }
            assert_eq!(&col[g.col_len()..], &[0x11, 0x11], "{g:?}: past the matrix");
        }
    }
}
