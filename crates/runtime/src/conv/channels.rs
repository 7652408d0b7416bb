//! Convolutions over flat planes ([`Flat`](super::flat::Flat)) with output channels in vector
//! lanes: the AVX2 and AVX-512 kernel for the layouts `flat.rs` chooses.
//!
//! A tile is `NP` consecutive flat columns (output pixels) of `NV` vectors of output channels.
//! Each step `p = (c, ky, kx)` loads the `NV` vectors of the channels' weights from a panel
//! packed step-major (aligned, in order) and broadcasts the `NP` input floats at the step's
//! offset plus the tile's columns: `NV·NP` multiply-adds for `NV + NP` loads, none of them
//! straddling a cache line. `gemm/direct.rs` computes the same sums the other way round
//! (weights broadcast, pixels in lanes); there every step reads a whole vector of pixels at an
//! offset that no vector boundary lines up with, and with AVX2's 6 × 16 tile that kept
//! ResNet-50's 3×3 layers under the packed path's rate.
//!
//! The weights go in panels of `NV·LANES` output channels (the last one padded with zeros):
//! packed when the model was compiled (`conv/packed.rs`, `conv2d_packed`), or else on every
//! call, a few microseconds for 64 channels, a pass over 9 MB for a 512-channel 3×3 layer,
//! which the flat layout takes only for planes of at least 14 × 14 here.
//!
//! **Performance.** `conv_one` on ResNet-50's 3×3 layers (e.g. `cargo run --release -p
//! kiln-runtime --example conv_one -- 64,64,56,3,1,1,0 200`) compares this kernel with
//! AVX-512 `gemm/direct.rs`: with 6 × 4 tiles it is a little ahead on 56², 28² and 14² planes,
//! within the run-to-run noise of `kiln bench` on the whole model. Tiles of 12 pixels × 2
//! vectors are much slower (see [`AVX512_NP`]).
//!
//! **Numerics.** Every output is one chain of multiply-adds over all `k` steps in order,
//! starting from zero, as `gemm/direct.rs` sums it in one k block: the values are those of the
//! direct product, whatever the tile, the thread's part or the thread count.

use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::Finish;
use crate::gemm::simd::Simd;
use crate::pool::{self, SharedPtr};

/// The most pixels a tile has (`NP`).
const MAX_NP: usize = 6;

/// Pixels per block: the epilogue runs on each block while its outputs are in cache. A
/// multiple of every `NP` and of 16 (the widest vector's lanes), so blocks split into whole
/// tiles and whole transposes.
const BLOCK: usize = 192;


/// Panels whose runs share one pass over a block's input.
const GROUP: usize = 4;

/// AVX2's tile: 6 pixels × 2 vectors (12 of the 16 registers accumulate); runs of 128 steps
/// (8 KiB of weights, which stay in L1 with the input rows the run reads).
pub(super) const AVX2_NP: usize = 6;
/// See [`AVX2_NP`].
pub(super) const AVX2_NV: usize = 2;
/// See [`AVX2_NP`].
pub(super) const AVX2_KC: usize = 128;
/// AVX-512's tile: 6 pixels × 4 vectors (24 of the 32 registers accumulate); runs of 512 steps
/// (128 KiB of weights, read from L2: longer runs save reloading and storing the sums more than
/// L1-resident weights gain: `conv_one` with `KILN_BENCH_PACKED=1` on ResNet-50's 3×3 layers
/// favours 256 steps over 64 and 512 over 128, and whole-k runs are slower). Twelve pixels × 2
/// vectors needs twelve input pointers, more than the general registers left: the spills made
/// ResNet-50's 3×3 layers 1.7 times slower.
pub(super) const AVX512_NP: usize = 6;
/// See [`AVX512_NP`].
pub(super) const AVX512_NV: usize = 4;
/// See [`AVX512_NP`].
pub(super) const AVX512_KC: usize = 512;

thread_local! {
    /// The packed weight panels, grown to the largest asked for and kept for the thread's life.
    static PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A block's sums between runs of steps: `GROUP` panels of `BLOCK` pixels.
    static ACC: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `y[m × pixels] = w[m × k] · col(x)`, the column matrix given as flat planes: step `p`'s
/// flat column `q` is the float at `x + offsets[p] + q`, and output pixel `(oy, ox)` is flat
/// column `oy·width + ox`. `x`, `w` and `y` need no alignment (weights inside a model file
/// may start at any byte).
#[derive(Clone, Copy, Debug)]
pub(super) struct Product {
    /// Column 0 of step 0's plane.
    pub x: *const f32,
    /// One offset per step (`k` of them).
    pub offsets: *const u32,
    /// The kernels: `m` rows of `k` floats, or (when `packed`) already in the panels [`pack`]
    /// writes, as [`Conv2d::pack_weights`](crate::conv::Conv2d::pack_weights) lays them out
    /// when the model is compiled.
    pub w: *const f32,
    /// Whether `w` holds the packed panels.
    pub packed: bool,
    /// Output channels.
    pub m: usize,
    /// Steps.
    pub k: usize,
    /// Floats per flat row.
    pub width: usize,
    /// Output pixels per row.
    pub ow: usize,
    /// Output pixels per plane.
    pub pixels: usize,
    /// The output: `m` planes of `pixels` floats.
    pub y: *mut f32,
}

/// [`pack`] for one instruction set: weights, `m`, `k`, panel space, the panels to pack.
type PackFn = unsafe fn(*const f32, usize, usize, *mut f32, Range<usize>);

/// One instruction set's routines, compiled with it enabled.
pub(super) struct Kernels<F> {
    /// [`pack`] for the instruction set's vectors.
    pub pack: PackFn,
    /// [`part`] for the instruction set's vectors.
    pub part: unsafe fn(&Product, *const f32, *mut f32, Range<usize>, Range<usize>, &F),
}

impl Product {
    /// Computes the product with `S`'s vectors over the current pool, running `fin` on each
    /// finished block of rows.
    ///
    /// # Safety
    ///
    /// Every offset plus the flat column of every pixel is readable from `x`; `w` holds `m·k`
    /// floats (packed: the `⌈m / (NV·LANES)⌉` panels of `NV·LANES·k`); `y` holds the `m` output planes and overlaps neither; `fin` touches only the
    /// block it is given; `kernels` are [`pack`] and [`part`] for `S`, and the CPU runs `S`'s
    /// instruction set.
    #[inline(always)]
    pub(super) unsafe fn run<S: Simd, F: Finish, const NP: usize, const NV: usize>(&self, fin: &F, kernels: Kernels<F>) {
        let width = NV * S::LANES;
        let panels = self.m.div_ceil(width);
        let fmas = self.m.saturating_mul(self.k).saturating_mul(self.pixels);
        let ways = if fmas < crate::gemm::SPLIT_MIN_FMAS { 1 } else { pool::threads() };
        let acc_len = GROUP * BLOCK * width;
        if self.packed {
            // SAFETY: by the caller's contract, `w` holds the panels.
            return unsafe { self.split::<F, NP>(self.w, panels, ways, acc_len, None, fin, kernels.part) };
        }
        crate::scratch::with(&PANELS, panels * width * self.k + 16, |buf| {
            let base = buf.as_mut_ptr();
            // SAFETY: 16 floats of room to align the panels to 64 bytes; `pack` writes the
            // panels inside `buf` and reads `w`'s `m·k` floats (the caller's contract).
            let wp = unsafe { base.add(base.align_offset(64)) };
            // SAFETY: as above.
            unsafe { self.split::<F, NP>(wp, panels, ways, acc_len, Some(kernels.pack), fin, kernels.part) }
        })
    }

    /// The product over `ways` threads with the panels at `wp`, packed first by `pack` (each
    /// thread its own panels, or a share of them) unless they are packed already (`None`).
    ///
    /// # Safety
    ///
    /// As [`run`](Self::run); `wp` holds (or has room for) the `panels` panels.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn split<F: Finish, const NP: usize>(
        &self,
        wp: *const f32,
        panels: usize,
        ways: usize,
        acc_len: usize,
        pack: Option<PackFn>,
        fin: &F,
        part: unsafe fn(&Product, *const f32, *mut f32, Range<usize>, Range<usize>, &F),
    ) {
        let wp_mut = wp.cast_mut();
        if ways <= 1 {
            // SAFETY: by the caller's contract, the panels packed first.
            return crate::scratch::with(&ACC, acc_len, |acc| unsafe {
                if let Some(pack) = pack {
                    pack(self.w, self.m, self.k, wp_mut, 0..panels);
                }
                part(self, wp, acc.as_mut_ptr(), 0..panels, 0..self.pixels, fin)
            });
        }
        // Whole panels to each thread when that balances as well as pixels do: each thread
        // then packs and streams only its own weights. Otherwise the threads pack a share of
        // the panels each, then all read all of them.
        let by_panels = pool::balance(panels, ways, 1) >= pool::balance(self.pixels, ways, NP) - 0.05;
        let shared = SharedPtr((*self, wp_mut, fin as *const F, pack, part));
        if !by_panels && pack.is_some() {
            pool::for_each(ways, &|i| {
                let (d, wp, _, pack, _) = shared.get();
                if let Some(pack) = pack {
                    // SAFETY: disjoint panels for each task, inside the panel space.
                    unsafe { pack(d.w, d.m, d.k, wp, pool::part(panels, ways, 1, i)) };
                }
            });
        }
        pool::for_each(ways, &|i| {
            let (d, wp, fin, pack, part) = shared.get();
            let (pr, cr) = if by_panels { (pool::part(panels, ways, 1, i), 0..d.pixels) } else { (0..panels, pool::part(d.pixels, ways, NP, i)) };
            if !pr.is_empty() && !cr.is_empty() {
                // SAFETY: disjoint blocks of the output (and, split by panels, of the packed
                // panels) for each task; the panels and `fin` outlive the call.
                crate::scratch::with(&ACC, acc_len, |acc| unsafe {
                    if let (true, Some(pack)) = (by_panels, pack) {
                        pack(d.w, d.m, d.k, wp, pr.clone());
                    }
                    part(&d, wp, acc.as_mut_ptr(), pr, cr, &*fin)
                });
            }
        });
    }
}

/// Packs panels `panels` of `w[m × k]`, `NV·LANES` output channels each, step-major: panel
/// `i`'s step `p` holds `w[i·NV·LANES + j][p]` in lane `j`, zero past `m`.
///
/// # Safety
///
/// `w` holds `m·k` floats; `dst` has room for `m.div_ceil(NV·LANES)·NV·LANES·k`; the CPU runs
/// `S`'s instruction set.
#[inline(always)]
pub(super) unsafe fn pack<S: Simd, const NV: usize>(w: *const f32, m: usize, k: usize, dst: *mut f32, panels: Range<usize>) {
    let (l, width) = (S::LANES, NV * S::LANES);
    for i in panels {
        // SAFETY: by the caller's contract.
        unsafe {
            let panel = dst.add(i * width * k);
            for v in 0..NV {
                let (r0, col) = (i * width + v * l, v * l);
                let rows = l.min(m.saturating_sub(r0));
                let mut p = 0;
                if rows == l {
                    // Whole blocks of `LANES` steps of `LANES` rows, transposed.
                    while p + l <= k {
                        S::transpose(w.add(r0 * k + p), k as isize, panel.add(p * width + col), width as isize);
                        p += l;
                    }
                }
                for p in p..k {
                    for j in 0..l {
                        *panel.add(p * width + col + j) = if j < rows { w.add((r0 + j) * k + p).read_unaligned() } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// Panels `panels` of pixels `pixels` of `d`, with the weights packed at `wp`.
///
/// Pixels go in blocks of `BLOCK`, a block's steps in runs of `KC` over `GROUP` panels at a
/// time (a run of a panel and the input rows it reads stay in L1, and the panels of a group
/// share them); between runs each tile's sums wait in `acc`, so every output is still one
/// chain of multiply-adds over all steps. A tile's pixels are consecutive outputs, whatever
/// flat rows they fall in: no flat column is computed and dropped.
///
/// # Safety
///
/// As [`Product::run`]; `acc` holds `GROUP·BLOCK·NV·LANES` floats; the CPU runs `S`'s
/// instruction set.
#[inline(always)]
pub(super) unsafe fn part<S: Simd, F: Finish, const NP: usize, const NV: usize, const KC: usize>(d: &Product, wp: *const f32, acc: *mut f32, panels: Range<usize>, pixels: Range<usize>, fin: &F) {
    let (l, width) = (S::LANES, NV * S::LANES);
    // The block's flat columns, padded to whole tiles with the last pixel's.
    let mut cols = [0usize; BLOCK + MAX_NP];
    for g0 in panels.clone().step_by(GROUP) {
        let group = g0..(g0 + GROUP).min(panels.end);
        for t0 in pixels.clone().step_by(BLOCK) {
            let t1 = (t0 + BLOCK).min(pixels.end);
            let (mut oy, mut ox) = (t0 / d.ow, t0 % d.ow);
            for c in &mut cols[..t1 - t0] {
                *c = oy * d.width + ox;
                ox += 1;
                if ox == d.ow {
                    (oy, ox) = (oy + 1, 0);
                }
            }
            let last = cols[t1 - t0 - 1];
            cols[t1 - t0..].fill(last);
            // SAFETY: by the caller's contract: the panels are packed, every column read is
            // the flat column of a pixel of the block, and the outputs written are the
            // block's pixels in rows of the group's panels.
            unsafe {
                for pc in (0..d.k).step_by(KC) {
                    let kc = KC.min(d.k - pc);
                    for (gi, i) in group.clone().enumerate() {
                        let w = wp.add(i * width * d.k + pc * width);
                        let acc = acc.add(gi * BLOCK * width);
                        for t in (t0..t1).step_by(NP) {
                            // The last tile of a block repeats its last pixel (computed, not
                            // stored).
                            let cols: [usize; NP] = std::array::from_fn(|j| cols[t - t0 + j]);
                            tile::<S, NP, NV>(kc, w, d.x, cols, d.offsets.add(pc), acc.add((t - t0) * width), pc == 0);
                        }
                    }
                }
                for (gi, i) in group.clone().enumerate() {
                    let (m0, rows) = (i * width, width.min(d.m - i * width));
                    let (y, acc) = (d.y.add(m0 * d.pixels + t0), acc.add(gi * BLOCK * width));
                    // The sums are pixel-major: whole `LANES × LANES` blocks go to the output's
                    // rows transposed, the rest one float at a time.
                    let whole = if rows == width { (t1 - t0) / l * l } else { 0 };
                    for t in (0..whole).step_by(l) {
                        for v in 0..NV {
                            S::transpose(acc.add(t * width + v * l), width as isize, y.add(v * l * d.pixels + t), d.pixels as isize);
                        }
                    }
                    for t in whole..t1 - t0 {
                        for r in 0..rows {
                            y.add(r * d.pixels + t).write_unaligned(*acc.add(t * width + r));
                        }
                    }
                    fin.rows(m0, rows, t0, t1 - t0);
                }
            }
        }
    }
}

/// One tile: the `NP` flat columns `cols` of the panel run at `w`, `k` steps added to the sums
/// at `acc` (`NP` rows of `NV` vectors; started from zero when `first`).
///
/// # Safety
///
/// `w` holds `k` steps of `NV` vectors; `x + offsets[p] + cols[j]` is readable for every step
/// `p` and every `j`; `acc` has room for `NP·NV` vectors; the CPU runs `S`'s instruction set.
#[inline(always)]
unsafe fn tile<S: Simd, const NP: usize, const NV: usize>(k: usize, w: *const f32, x: *const f32, cols: [usize; NP], offsets: *const u32, acc: *mut f32, first: bool) {
    let l = S::LANES;
    // SAFETY: by the caller's contract.
    unsafe {
        let xs = cols.map(|q| x.add(q));
        let mut sums: [[S::V; NV]; NP] = std::array::from_fn(|j| std::array::from_fn(|v| if first { S::zero() } else { S::load(acc.add((j * NV + v) * l)) }));
        for p in 0..k {
            let wv: [S::V; NV] = std::array::from_fn(|v| S::load(w.add((p * NV + v) * l)));
            let o = *offsets.add(p) as usize;
            for (j, sums) in sums.iter_mut().enumerate() {
                let b = S::splat(xs[j].add(o).read_unaligned());
                for v in 0..NV {
                    sums[v] = S::mul_add(wv[v], b, sums[v]);
                }
            }
        }
        for (j, sums) in sums.iter().enumerate() {
            for (v, &a) in sums.iter().enumerate() {
                S::store(acc.add((j * NV + v) * l), a);
            }
        }
    }
}

/// [`pack`] with AVX2 and FMA enabled.
///
/// # Safety
///
/// As [`pack`]; the CPU runs AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn pack_avx2(w: *const f32, m: usize, k: usize, dst: *mut f32, panels: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { pack::<crate::gemm::avx2::Avx2, AVX2_NV>(w, m, k, dst, panels) }
}

/// [`part`] with AVX2 and FMA enabled.
///
/// # Safety
///
/// As [`part`]; the CPU runs AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn part_avx2<F: Finish>(d: &Product, wp: *const f32, acc: *mut f32, panels: Range<usize>, pixels: Range<usize>, fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { part::<crate::gemm::avx2::Avx2, F, AVX2_NP, AVX2_NV, AVX2_KC>(d, wp, acc, panels, pixels, fin) }
}

/// [`pack`] with AVX-512F enabled.
///
/// # Safety
///
/// As [`pack`]; the CPU runs AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn pack_avx512(w: *const f32, m: usize, k: usize, dst: *mut f32, panels: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe { pack::<crate::gemm::avx512::Avx512, AVX512_NV>(w, m, k, dst, panels) }
}

/// [`part`] with AVX-512F enabled.
///
/// # Safety
///
/// As [`part`]; the CPU runs AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn part_avx512<F: Finish>(d: &Product, wp: *const f32, acc: *mut f32, panels: Range<usize>, pixels: Range<usize>, fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe { part::<crate::gemm::avx512::Avx512, F, AVX512_NP, AVX512_NV, AVX512_KC>(d, wp, acc, panels, pixels, fin) }
}
