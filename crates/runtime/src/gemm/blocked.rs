//! The cache-blocked driver (the GotoBLAS/BLIS loop nest) around a micro-kernel.
//!
//! ```text
//! for jc in n step NC                      C columns; B block = KC × NC, packed, L2-resident
//!   for pc in k step KC                    k blocks in ascending order; beta applies to the first
//!     pack B[pc.., jc..] into NR-wide panels (row by row when B's rows are contiguous)
//!     for ir in m step MR                  MR rows of A: in place, or packed into one L1 panel ...
//!       for jr in nc step NR               ... against every B panel of the block
//!         C[ir.., jc+jr..] (+)= A · Bp     the micro-kernel
//! ```
//!
//! BLIS keeps a `B` panel in L1 and streams `A` panels from an L2-resident `MC × KC` block; with
//! a 48-column tile a `B` panel of useful depth does not fit a 32 KiB L1, so here the small set of
//! `A` rows stays in L1 and the `B` panels stream from L2. There is no `A` block: rows of `A`
//! contiguous along `k` are read in place (`MR` sequential streams, which also spares transposing
//! them), and others are packed into one panel right before use. Each element of `C` is summed
//! over `k` in ascending order: within a k block in registers, across k blocks through `C`.
//!
//! `B` is any [`Source`] that packs its own panels: a strided matrix, a convolution's implicit
//! column matrix (`conv.rs`), which is never written out, or a constant matrix packed when the
//! model was compiled (`prepacked.rs`), whose panels are read where they are. A [`Finish`] runs on each
//! block of `C`'s rows as soon as its last k block is summed, while it is still in cache (a
//! convolution's bias, residual addend and activation).

use super::kernel::{self, Out, Panel, Steps, Straddle, TileEpilogue, Update};
use super::pack::View;
use super::simd::Simd;

/// Cache-block sizes, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Depth of a packed block (`KC`).
    pub kc: usize,
    /// Columns of `B` per packed block (`NC`).
    pub nc: usize,
}

/// A micro-kernel with its panel shapes and the packing that feeds it.
pub(crate) trait Kernel {
    /// The vector operations the kernel is written in.
    type S: Simd;
    /// Rows of a tile (lanes of an `A` panel).
    const MR: usize;
    /// Columns of a tile (lanes of a `B` panel).
    const NR: usize;
    /// Packs `lanes ≤ MR` rows × `kc` of `op(A)` into an `A` panel of `kc·MR` floats.
    unsafe fn pack_a(dst: *mut f32, src: View, lanes: usize, kc: usize);
    /// Packs `lanes` columns × `kc` of `op(B)` into `⌈lanes/NR⌉` consecutive `B` panels of
    /// `kc·NR` floats.
    unsafe fn pack_b(dst: *mut f32, src: View, lanes: usize, kc: usize);
    /// Whether [`tile`](Self::tile) takes `A` rows in place (step stride 1, exactly `mr` rows
    /// read) besides packed panels.
    const A_IN_PLACE: bool;
    /// `C[0..mr, 0..nr] = alpha·A·B + beta·C` from `mr` rows of `A` (a packed panel, or rows in
    /// place) and `nr` columns of `B` (a packed panel, or columns read in place), both of depth
    /// `kc`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<B: Steps>(kc: usize, a: View, b: B, c: Out, up: Update, mr: usize, nr: usize);
    /// Whether the driver gives a lone last vector one of the tile before it
    /// ([`gives_a_vector`]), through [`tile_straddle`](Self::tile_straddle).
    const STRADDLES: bool = false;
    /// [`tile`](Self::tile) for two vectors straddling two panels, out of line: inlined into
    /// every product's driver it tripled the crate's build time. (Not called unless
    /// [`STRADDLES`](Self::STRADDLES).)
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    unsafe fn tile_straddle(kc: usize, a: View, b: Straddle, c: Out, up: Update, mr: usize, nr: usize) {
        // SAFETY: by the caller's contract.
        unsafe { Self::tile(kc, a, b, c, up, mr, nr) }
    }
}

/// Where a product's `op(B)` comes from.
pub(crate) trait Source: Copy {
    /// Packs lanes (columns) `j..j + lanes` × steps `p..p + kc` of `op(B)` into `⌈lanes/NR⌉`
    /// consecutive panels of `kc·NR` floats, zero-padded, as [`Kernel::pack_b`] does.
    ///
    /// # Safety
    ///
    /// Those elements exist; `dst` holds the panels; the caller enables `K`'s instruction set.
    unsafe fn pack<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize);

    /// The same panels, packed into `dst` as [`pack`](Self::pack) does, or found ready elsewhere
    /// (a matrix packed ahead); returns where they are.
    ///
    /// # Safety
    ///
    /// As [`pack`](Self::pack).
    #[inline(always)]
    unsafe fn panels<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize) -> *const f32 {
        // SAFETY: by the caller's contract.
        unsafe { self.pack::<K>(dst, j, p, lanes, kc) };
        dst
    }

    /// The source from column `j` on.
    ///
    /// # Safety
    ///
    /// Column `j` exists (or is one past the last).
    unsafe fn at_col(self, j: usize) -> Self;
}

impl Source for View {
    #[inline(always)]
    unsafe fn pack<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe { K::pack_b(dst, self.at(j, p), lanes, kc) }
    }

    #[inline(always)]
    unsafe fn at_col(self, j: usize) -> View {
        // SAFETY: by the caller's contract.
        unsafe { self.at(j, 0) }
    }
}

/// Work on a finished block of `C`: rows `i..i + mr`, columns `j..j + nc`, summed over all of
/// `k` (and stored).
pub(crate) trait Finish {
    /// # Safety
    ///
    /// The block lies inside the product's `C`.
    unsafe fn rows(&self, i: usize, mr: usize, j: usize, nc: usize);

    /// Called before the tile of rows `i..i + mr`, columns `j..j + nc` is summed over its last
    /// k block: a finisher that reads memory of its own (a residual addend) starts loading the
    /// tile's part of it here, so the loads overlap the tile's arithmetic.
    ///
    /// # Safety
    ///
    /// As [`rows`](Self::rows).
    #[inline(always)]
    unsafe fn prefetch(&self, _i: usize, _mr: usize, _j: usize, _nc: usize) {}

    /// The same work as register work on each full tile of the last k block, when it can be
    /// (positioned at row 0, column 0): the kernel applies it before storing the tile, and
    /// [`rows`](Self::rows) then runs only on edge tiles.
    #[inline(always)]
    fn tile_epilogue(&self) -> Option<TileEpilogue> {
        None
    }
}

/// No work: a plain product.
pub(crate) struct Done;

impl Finish for Done {
    #[inline(always)]
    unsafe fn rows(&self, _: usize, _: usize, _: usize, _: usize) {}
}

/// A [`Finish`] for a part of a split product: the part's block `(i, j)` is the whole's
/// `(i + di, j + dj)`.
pub(crate) struct Shifted<'a, F> {
    pub inner: &'a F,
    pub di: usize,
    pub dj: usize,
}

impl<F: Finish> Finish for Shifted<'_, F> {
    #[inline(always)]
    unsafe fn rows(&self, i: usize, mr: usize, j: usize, nc: usize) {
        // SAFETY: the part's block is inside the whole's `C`.
        unsafe { self.inner.rows(i + self.di, mr, j + self.dj, nc) }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, i: usize, mr: usize, j: usize, nc: usize) {
        // SAFETY: as above.
        unsafe { self.inner.prefetch(i + self.di, mr, j + self.dj, nc) }
    }

    #[inline(always)]
    fn tile_epilogue(&self) -> Option<TileEpilogue> {
        // SAFETY: the part's first element is the whole's `(di, dj)`, inside it.
        self.inner.tile_epilogue().map(|e| unsafe { e.at(self.di, self.dj) })
    }
}

/// One product, with `op(A)` as a strided view and `op(B)` from a [`Source`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Problem<B = View> {
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The summed dimension.
    pub k: usize,
    /// `op(A)`: lanes are rows `i`, steps are `p`.
    pub a: View,
    /// `op(B)`: lanes are columns `j`, steps are `p`.
    pub b: B,
    /// `C`.
    pub c: Out,
    /// `alpha` and `beta`.
    pub up: Update,
}

// A_AHEAD: while a tile of `MR` rows of `A` read in place sweeps the block's columns, the next
// tile's rows are prefetched into L2. With few columns (7 × 7 and 14 × 14 planes) each row tile
// is used by one or a few micro-kernel calls, so its `A` rows (a model's weights, from L3 or
// memory) would arrive as demand misses (`conv_one` with the weights from memory shows it on
// 7 × 7 and 14 × 14 planes; on 56² planes it changes nothing). Prefetching them into L1
// instead made no difference: the lines pushed out the `B` panel the tile was reading.

/// Last panels at most this wide take [`kernel::edge_dot`] (when `A` is read in place): a
/// 49-column product's 49th column cost as much as 16 in a register tile.
const DOT_EDGE: usize = 4;

/// Whether the tile before the last of `rest` columns gives it a vector: when the last would
/// be a lone vector after a whole tile, the two become `NR − LANES` and `LANES + edge` columns
/// wide, as a one-vector tile does fewer multiply-adds per load than the kernel can issue
/// (`sgemm_bench 500,64,500`: 48 + 16 columns ran at 0.80 of 48 alone).
#[inline(always)]
pub(super) fn gives_a_vector<K: Kernel>(rest: usize) -> bool {
    let l = <K::S as Simd>::LANES;
    K::STRADDLES && rest > K::NR && rest - K::NR <= l
}

/// Floats of scratch the blocked product needs (with room to align it to 64 bytes).
pub(crate) fn scratch_len<K: Kernel, B>(pr: &Problem<B>, bl: Blocking) -> usize {
    bl.kc.min(pr.k) * (bl.nc.min(pr.n).next_multiple_of(K::NR) + K::MR) + 16
}

/// Computes `pr` with kernel `K`, packing into `scratch` (at least [`scratch_len`] floats), and
/// runs `fin` on each block of rows once it is summed.
///
/// # Safety
///
/// `pr` addresses only live memory (`m, n, k > 0`); the caller enables `K`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn run<K: Kernel, B: Source, F: Finish>(pr: &Problem<B>, bl: Blocking, scratch: &mut [f32], fin: &F) {
    debug_assert!(pr.m > 0 && pr.n > 0 && pr.k > 0 && scratch.len() >= scratch_len::<K, B>(pr, bl));
    // Blocks of equal size (in whole panels), so no block is a sliver.
    let nc_max = pr.n.div_ceil(pr.n.div_ceil(bl.nc)).next_multiple_of(K::NR);
    let base = scratch.as_mut_ptr();
    // SAFETY: scratch_len leaves 16 floats for this.
    let bp = unsafe { base.add(base.align_offset(64)) };
    // SAFETY: the rest is inside `scratch` by scratch_len (nc_max ≤ bl.nc rounded to panels), and
    // `pr` by the caller's contract.
    unsafe {
        let ap = bp.add(bl.kc.min(pr.k) * nc_max);
        for jc in (0..pr.n).step_by(nc_max) {
            let nc = nc_max.min(pr.n - jc);
            for pc in (0..pr.k).step_by(bl.kc) {
                let kc = bl.kc.min(pr.k - pc);
                let up = if pc == 0 { pr.up } else { Update { beta: 1.0, ..pr.up } };
                let panels = pr.b.panels::<K>(bp, jc, pc, nc, kc);
                // A narrow last panel, with A read in place, is computed by dot products from
                // its columns transposed into the (then unused) A panel space.
                let edge = nc % K::NR;
                let in_place = K::A_IN_PLACE && pr.a.step_stride == 1;
                let dot_edge = in_place && edge != 0 && edge <= DOT_EDGE;
                if dot_edge {
                    let panel = panels.add(nc / K::NR * kc * K::NR);
                    for j in 0..edge {
                        for p in 0..kc {
                            *ap.add(j * kc + p) = *panel.add(p * K::NR + j);
                        }
                    }
                }
                let last = pc + kc == pr.k;
                let fused = if last { fin.tile_epilogue() } else { None };
                for ir in (0..pr.m).step_by(K::MR) {
                    let mr = K::MR.min(pr.m - ir);
                    let a = if in_place {
                        // The next tile's rows of A, into L2 (see `A_AHEAD`).
                        if ir + K::MR < pr.m {
                            crate::prefetch::rows_to_l2(pr.a.at(ir + K::MR, pc).ptr, K::MR.min(pr.m - ir - K::MR), kc, pr.a.lane_stride as usize);
                        }
                        // Rows of A contiguous along k are read in place: MR sequential streams.
                        pr.a.at(ir, pc)
                    } else {
                        // Packed right before use, the A panel is in L1 for the whole sweep.
                        K::pack_a(ap, pr.a.at(ir, pc), mr, kc);
                        View { ptr: ap, lane_stride: 1, step_stride: K::MR as isize }
                    };
                    for (tb, jr) in (0..nc).step_by(K::NR).enumerate() {
                        let c = Out { ptr: pr.c.ptr.offset(ir as isize * pr.c.rs).add(jc + jr), ..pr.c };
                        let lanes = K::NR.min(nc - jr);
                        if !dot_edge && gives_a_vector::<K>(nc - jr) {
                            // The last two panels as a tile of the first's leading vectors and a
                            // two-vector tile straddling both.
                            let panel = Panel { ptr: panels.add(tb * kc * K::NR), step: K::NR };
                            let next = Panel { ptr: panel.ptr.add(kc * K::NR), step: K::NR };
                            let head = K::NR - <K::S as Simd>::LANES;
                            let split = Straddle { first: Panel { ptr: panel.ptr.add(head), step: K::NR }, rest: next };
                            if last {
                                fin.prefetch(ir, mr, jc + jr, nc - jr);
                            }
                            K::tile(kc, a, panel, c, up, mr, head);
                            K::tile_straddle(kc, a, split, Out { ptr: c.ptr.add(head), ..c }, up, mr, nc - jr - head);
                            if fused.is_some() {
                                fin.rows(ir, mr, jc + jr, nc - jr);
                            }
                            break;
                        }
                        if last {
                            fin.prefetch(ir, mr, jc + jr, lanes);
                        }
                        let dot = dot_edge && lanes == edge;
                        // Full tiles take the epilogue in registers; the others run it as a
                        // pass right after.
                        let full = !dot && mr == K::MR && lanes == K::NR;
                        let up = match fused {
                            Some(e) if full => Update { epi: Some(e.at(ir, jc + jr)), ..up },
                            _ => up,
                        };
                        if dot {
                            kernel::edge_dot::<K::S>(kc, a, ap, c, up, mr, lanes);
                        } else {
                            K::tile(kc, a, Panel { ptr: panels.add(tb * kc * K::NR), step: K::NR }, c, up, mr, lanes);
                        }
                        if fused.is_some() && !full {
                            fin.rows(ir, mr, jc + jr, lanes);
                        }
                    }
                    if last && fused.is_none() {
                        fin.rows(ir, mr, jc, nc);
                    }
                }
            }
        }
    }
}

