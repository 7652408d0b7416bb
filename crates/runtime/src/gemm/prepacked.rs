//! Constant right-hand matrices packed once, when a model is compiled, into the panels the
//! blocked driver would otherwise pack on every call.
//!
//! A MatMul against a weight matrix (`[tokens, k] · [k, n]`) has the weights as `op(B)`, which
//! `blocked.rs` copies into `NR`-column panels for every `KC × NC` block on each run: BERT-mini
//! packed 12.6 MB per inference that way. Packed ahead, the driver reads the panels in place.
//!
//! **Layout** `(nr, kc)`, for `op(B)` of `k × n`: the k blocks of depth `kc` in order (the last
//! one `k mod kc` deep), each holding its `⌈n/nr⌉` panels in order, a panel being the block's
//! steps × `nr` columns step-major, columns past `n` zero. That is `k·⌈n/nr⌉·nr` floats, and
//! every block of whole panels the driver asks for is one run of consecutive panels. When the
//! layout is the detected kernel's (`NR`, `KC`), the driver takes its panels as they are; any
//! other layout is still read correctly, gathered element by element (slowly) into fresh panels,
//! so a layout recorded in a program stays valid under any kernel or blocking.

use super::blocked::{Kernel, Source};
use super::pack::View;
use super::{Isa, Transpose};

/// The panel width and block depth of a packed `op(B)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedLayout {
    /// Columns per panel.
    pub nr: usize,
    /// Steps per k block.
    pub kc: usize,
}

impl PackedLayout {
    /// The layout the detected kernel reads in place.
    pub fn detected() -> PackedLayout {
        PackedLayout::for_isa(Isa::detected())
    }

    /// The layout `isa`'s kernel reads in place.
    pub fn for_isa(isa: Isa) -> PackedLayout {
        PackedLayout { nr: isa.tile().1, kc: isa.blocking().kc }
    }

    /// Floats of a packed `k × n` matrix (saturating: an absurd shape reads as too long for any
    /// slice).
    pub fn len(&self, k: usize, n: usize) -> usize {
        k.saturating_mul(n.div_ceil(self.nr.max(1)).saturating_mul(self.nr))
    }

    /// Packs `op(B)` (`k × n`; `B` stored row-major with row stride `ldb`, transposed when
    /// `trans_b` is `Yes`) from its little-endian bytes `b` into `dst`, `4·len(k, n)` bytes (any
    /// alignment for both).
    ///
    /// # Panics
    ///
    /// If `nr` or `kc` is zero, `b` is shorter than `op(B)` spans or `dst` than the layout.
    pub fn pack(&self, b: &[u8], k: usize, n: usize, ldb: usize, trans_b: Transpose, dst: &mut [u8]) {
        let PackedLayout { nr, kc } = *self;
        assert!(nr > 0 && kc > 0, "empty packed layout {self:?}");
        assert!(dst.len() >= 4 * self.len(k, n), "packed B needs {} floats", self.len(k, n));
        let rows = if trans_b == Transpose::Yes { n } else { k };
        let cols = if trans_b == Transpose::Yes { k } else { n };
        assert!(rows == 0 || cols == 0 || b.len() >= 4 * ((rows - 1) * ldb + cols), "B is shorter than {rows} rows of stride {ldb}");
        if k == 0 || n == 0 {
            return;
        }
        let panels = n.div_ceil(nr);
        // Loops run along B's rows as stored, so the source (often a model file's pages, read
        // for the first time) streams in order.
        // Float offset of packed row `s` of panel `t` in the k block from step `p0`.
        let at = |p0: usize, t: usize, s: usize| 4 * (p0 * panels * nr + (t * kc.min(k - p0) + s) * nr);
        if trans_b == Transpose::No {
            // Row p of B is packed row p - p0 of every panel of its block.
            for p in 0..k {
                let (p0, from) = (p / kc * kc, 4 * p * ldb);
                for t in 0..panels {
                    let (j0, width) = (t * nr, nr.min(n - t * nr));
                    let row = &mut dst[at(p0, t, p - p0)..at(p0, t, p - p0) + 4 * nr];
                    row[..4 * width].copy_from_slice(&b[from + 4 * j0..from + 4 * (j0 + width)]);
                    row[4 * width..].fill(0);
                }
            }
            return;
        }
        // Row j of B (column j of op(B)) is column j mod nr of panel j / nr. A panel's rows,
        // consecutive in B, are first read through in order, one load per line (B is usually a
        // model file's pages, in no cache yet, and one stream is what the hardware prefetchers
        // follow best); then the panel is transposed from L2 through `tile`, 16 steps at a
        // time: one line of each of its rows, then 16 packed rows written whole. Reading lines
        // of all the panel's rows in turn straight from memory, or writing 4 columns at a time
        // down the panel, were 2-4 times slower.
        const TILE: usize = 16;
        let mut tile = vec![[0u8; 4]; nr * TILE];
        for t in 0..panels {
            let (j0, width) = (t * nr, nr.min(n - t * nr));
            let first = 4 * j0 * ldb;
            let span = &b[first..first + 4 * ((width - 1) * ldb + k)];
            let mut touched = 0u8;
            for line in span.chunks(64) {
                touched ^= line[0];
            }
            std::hint::black_box(touched);
            for p0 in (0..k).step_by(kc) {
                let steps = kc.min(k - p0);
                for s0 in (0..steps).step_by(TILE) {
                    let rows = TILE.min(steps - s0);
                    for j in 0..width {
                        let from = 4 * ((j0 + j) * ldb + p0 + s0);
                        for (q, x) in b[from..from + 4 * rows].chunks_exact(4).enumerate() {
                            tile[j * TILE + q] = [x[0], x[1], x[2], x[3]];
                        }
                    }
                    for q in 0..rows {
                        let row = &mut dst[at(p0, t, s0 + q)..at(p0, t, s0 + q) + 4 * nr];
                        let (out, pad) = row.split_at_mut(4 * width);
                        for (j, x) in out.chunks_exact_mut(4).enumerate() {
                            x.copy_from_slice(&tile[j * TILE + q]);
                        }
                        pad.fill(0);
                    }
                }
            }
        }
    }
}

/// A packed `op(B)` as a [`Source`], from column `j0` on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packed {
    /// Element 0 of the layout.
    pub ptr: *const f32,
    pub layout: PackedLayout,
    /// `op(B)`'s whole shape.
    pub k: usize,
    pub n: usize,
    /// The first column this source starts at.
    pub j0: usize,
}

impl Packed {
    /// Element `(p, j)` of `op(B)`, `j` counted from column 0 of the whole matrix.
    ///
    /// # Safety
    ///
    /// `p < k`, `j < n`, and the layout is readable.
    #[inline(always)]
    pub(crate) unsafe fn get(&self, p: usize, j: usize) -> f32 {
        let PackedLayout { nr, kc } = self.layout;
        let p0 = p / kc * kc;
        let depth = kc.min(self.k - p0);
        let at = p0 * self.n.div_ceil(nr) * nr + (j / nr * depth + (p - p0)) * nr + j % nr;
        // SAFETY: `at` is inside the layout for any (p, j) of the matrix.
        unsafe { *self.ptr.add(at) }
    }
}

impl Source for Packed {
    /// Gathers panels of another width or depth element by element (the layout is not the
    /// detected kernel's, or a tested blocking differs).
    unsafe fn pack<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize) {
        // SAFETY: the driver asks for columns and steps of the matrix; `dst` holds the panels.
        unsafe {
            for t in 0..lanes.div_ceil(K::NR) {
                for s in 0..kc {
                    for l in 0..K::NR {
                        let c = t * K::NR + l;
                        *dst.add((t * kc + s) * K::NR + l) = if c < lanes { self.get(p + s, self.j0 + j + c) } else { 0.0 };
                    }
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn panels<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize) -> *const f32 {
        let PackedLayout { nr, kc: depth } = self.layout;
        let col = self.j0 + j;
        // In place when the driver's block is whole panels of one of the layout's k blocks.
        let whole = col.is_multiple_of(nr) && (lanes.is_multiple_of(nr) || col + lanes == self.n);
        if K::NR == nr && p.is_multiple_of(depth) && kc == depth.min(self.k - p) && whole {
            // SAFETY: the block's panels are inside the layout.
            return unsafe { self.ptr.add(p * self.n.div_ceil(nr) * nr + col / nr * kc * nr) };
        }
        // SAFETY: by the caller's contract.
        unsafe { self.pack::<K>(dst, j, p, lanes, kc) };
        dst
    }

    #[inline(always)]
    unsafe fn at_col(self, j: usize) -> Packed {
        Packed { j0: self.j0 + j, ..self }
    }
}

/// Rows of `op(A)` as the driver's view (`A` row-major with row stride `lda`).
pub(crate) fn a_view(a: *const f32, lda: usize, trans_a: Transpose) -> View {
    match trans_a {
        Transpose::No => View { ptr: a, lane_stride: lda as isize, step_stride: 1 },
        Transpose::Yes => View { ptr: a, lane_stride: 1, step_stride: lda as isize },
    }
}
