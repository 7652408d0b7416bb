//! Products whose `B` is read where it lies: a stride-1 convolution's input planes, without a
//! column matrix or packed panels.
//!
//! Row `p = (c, ky, kx)` of a stride-1 convolution's column matrix is input plane `c` shifted by
//! the tap. Lay the planes out flat with rows of `width` floats (the input itself, or a copy
//! with its padding written as zeros) and number the product's columns `q = oy·width + ox`:
//! column `q` of row `p` is then the float at `c·plane + ky·dh·width + kx·dw + q`, so a tile's
//! columns are consecutive floats at an offset that depends on `p` alone ([`Planes`]: one offset
//! per step). When `width` exceeds the output's `ow`, columns with `ox ≥ ow` are computed and
//! dropped: the tile goes to a scratch tile and its kept runs to `C`, whose columns are the
//! output's pixels. Nothing is packed, so the product runs at the micro-kernel's rate even
//! when `m` is small (a 64-channel convolution packed a `B` element for every 8 rows' use).
//!
//! The loop nest is `blocked.rs`'s without the packing: column blocks of `NC`, k blocks of `KC`
//! in ascending order (`beta` applies to the first), row tiles, column tiles. Each element of
//! `C` is summed over `k` in ascending order with one multiply-add per step in a k block, the
//! blocks added through `C`: the value does not depend on where the element falls in a tile,
//! a block or a thread's part.

use std::ops::Range;

use super::blocked::{gives_a_vector, Blocking, Finish, Kernel};
use super::kernel::{Gathered, Out, Update};
use super::pack::View;
use super::simd::Simd;

/// A stride-1 convolution's column matrix as flat planes: step `p`'s column `q` is the float
/// at `base + offsets[p] + q`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Planes {
    /// Column 0 of step 0's plane.
    pub base: *const f32,
    /// One offset per step (`k` of them).
    pub offsets: *const u32,
    /// Floats per flat row: column `q` is pixel `(q / width, q % width)`.
    pub width: usize,
    /// Kept columns per row: column `q` is an output pixel when `q % width < ow`.
    pub ow: usize,
    /// Flat columns: `(oh − 1)·width + ow`, the last kept one plus one.
    pub cols: usize,
}

impl Planes {
    /// Output pixels among flat columns `0..q`.
    fn pixels_before(&self, q: usize) -> usize {
        (q / self.width) * self.ow + (q % self.width).min(self.ow)
    }
}

/// `C[m × pixels] = alpha·A·B + beta·C` with `B` a convolution's [`Planes`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Direct {
    /// Rows of `C` and `A`.
    pub m: usize,
    /// The summed dimension (steps of `A` and of `B`).
    pub k: usize,
    /// `A`: lanes are rows, steps are `p`; rows contiguous along `k` (`step_stride` 1).
    pub a: View,
    /// `B`.
    pub b: Planes,
    /// `C`, one row per row of `A` and one column per output pixel.
    pub c: Out,
    /// `alpha` and `beta`.
    pub up: Update,
}

/// Floats of scratch [`run`] needs (an `A` panel when the kernel packs `A`, with room to
/// align it).
pub(crate) fn scratch_len<K: Kernel>(bl: Blocking, k: usize) -> usize {
    if K::A_IN_PLACE { 0 } else { bl.kc.min(k) * K::MR + 16 }
}

/// Computes rows `rows` and flat columns `cols` of `d` with kernel `K`, and runs `fin` on each
/// block of rows once it is summed (its columns in pixels). `cols.start` is a multiple of the
/// column block or the part a thread was given; any split computes the same values.
///
/// # Safety
///
/// `d` addresses only live memory: `A`'s rows `rows` hold `k` steps, every offset plus every
/// column in `cols` is readable, and `C` holds the pixels of those columns in those rows.
/// `scratch` holds [`scratch_len`] floats; the caller enables `K`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn run<K: Kernel, F: Finish>(d: &Direct, rows: Range<usize>, cols: Range<usize>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    let nc_max = bl.nc.next_multiple_of(K::NR);
    let base = scratch.as_mut_ptr();
    // SAFETY: by the caller's contract (scratch_len leaves room to align the A panel).
    unsafe {
        let ap = base.add(base.align_offset(64));
        let dropped = d.b.width != d.b.ow;
        for jc in cols.clone().step_by(nc_max) {
            let jend = (jc + nc_max).min(cols.end);
            let (p0, p1) = (d.b.pixels_before(jc), d.b.pixels_before(jend));
            for pc in (0..d.k).step_by(bl.kc) {
                let kc = bl.kc.min(d.k - pc);
                let up = if pc == 0 { d.up } else { Update { beta: 1.0, ..d.up } };
                for ir in rows.clone().step_by(K::MR) {
                    let mr = K::MR.min(rows.end - ir);
                    let a = if K::A_IN_PLACE {
                        d.a.at(ir, pc)
                    } else {
                        K::pack_a(ap, d.a.at(ir, pc), mr, kc);
                        View { ptr: ap, lane_stride: 1, step_stride: K::MR as isize }
                    };
                    let c_rows = Out { ptr: d.c.ptr.offset(ir as isize * d.c.rs), ..d.c };
                    let mut jr = jc;
                    while jr < jend {
                        let lanes = tile_lanes::<K>(jend - jr);
                        let b = Gathered { base: d.b.base.add(jr), offsets: d.b.offsets.add(pc), lanes };
                        if dropped {
                            tile_dropping::<K>(kc, a, b, d.b, c_rows, up, mr, jr);
                        } else {
                            K::tile(kc, a, b, Out { ptr: c_rows.ptr.add(jr), ..c_rows }, up, mr, lanes);
                        }
                        jr += lanes;
                    }
                    if pc + kc == d.k && p1 > p0 {
                        fin.rows(ir, mr, p0, p1 - p0);
                    }
                }
            }
        }
    }
}

/// Columns of the next tile when `rest` are left: a whole tile, or one vector fewer when the
/// tile after it would be a lone vector ([`gives_a_vector`]).
#[inline(always)]
fn tile_lanes<K: Kernel>(rest: usize) -> usize {
    if gives_a_vector::<K>(rest) { K::NR - <K::S as Simd>::LANES } else { K::NR.min(rest) }
}

/// One tile whose flat columns include dropped ones: computed into a scratch tile, then each
/// run of kept columns merged into `C`'s pixels.
///
/// # Safety
///
/// As [`run`], for the tile at flat column `jr` (`b.lanes` columns) of rows `0..mr` of `c`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_dropping<K: Kernel>(kc: usize, a: View, b: Gathered, planes: Planes, c: Out, up: Update, mr: usize, jr: usize) {
    let l = <K::S as Simd>::LANES;
    // Room for reading a whole vector from any lane of the last row; zeroed, since lanes past
    // the tile's columns are read (and not stored).
    let mut tile = [0.0f32; super::kernel::MAX_TILE + 16];
    let t = tile.as_mut_ptr();
    // SAFETY: the scratch tile holds MR × NR floats plus a vector; the rest by the caller's
    // contract.
    unsafe {
        K::tile(kc, a, b, Out { ptr: t, rs: K::NR as isize }, Update::new(up.alpha, 0.0), mr, b.lanes);
        let (w, ow) = (planes.width, planes.ow);
        let (mut q, end) = (jr, jr + b.lanes);
        while q < end {
            let (oy, ox) = (q / w, q % w);
            if ox >= ow {
                q = (oy + 1) * w;
                continue;
            }
            let run_end = end.min(oy * w + ow);
            let (lane, pixel, n) = (q - jr, oy * ow + ox, run_end - q);
            for r in 0..mr {
                let src = t.add(r * K::NR + lane);
                let dst = c.ptr.offset(r as isize * c.rs).add(pixel);
                let mut i = 0;
                while i < n {
                    let len = l.min(n - i);
                    let x = <K::S as Simd>::load(src.add(i));
                    let v = if up.beta == 0.0 {
                        x
                    } else {
                        let old = if len == l { <K::S as Simd>::load(dst.add(i)) } else { <K::S as Simd>::load_first(dst.add(i), len) };
                        <K::S as Simd>::mul_add(old, <K::S as Simd>::splat(up.beta), x)
                    };
                    if len == l {
                        <K::S as Simd>::store(dst.add(i), v);
                    } else {
                        <K::S as Simd>::store_first(dst.add(i), v, len);
                    }
                    i += len;
                }
            }
            q = run_end;
        }
    }
}
