//! Single-precision matrix multiplication: `C = alpha·op(A)·op(B) + beta·C`.
//!
//! **Design.** The GotoBLAS/BLIS scheme (`blocked.rs`): a `KC × NC` block of `op(B)` is packed
//! into contiguous, zero-padded `NR`-column panels (L2-resident), and a register-blocked
//! micro-kernel (`kernel.rs`) multiplies `MR` rows of `op(A)` — read in place when they are
//! contiguous along `k` (the usual case: weights, activations), otherwise packed into an L1
//! panel — by each `B` panel into an `MR × NR` tile of `C` with fused multiply-adds. Packing
//! space is a thread-local vector that grows to the largest size needed and is then reused: a
//! warm call allocates nothing. The instruction set is detected once per process
//! ([`Isa::detected`]) and the kernels are one generic nest instantiated per set (`simd.rs`):
//!
//! | kernel | tile (`MR × NR`) | `KC`, `NC` ([`Isa::blocking`]) |
//! | --- | --- | --- |
//! | AVX-512F (`avx512.rs`) | 8 × 48: 24 accumulator registers, 3 `B` vectors, broadcast `A` | 384, 480 (tuned) |
//! | AVX2 + FMA (`avx2.rs`) | 6 × 16: 12 accumulators | 256, 1024 (not tuned) |
//! | portable (`portable.rs`, compiler-vectorized) | 4 × 16 | 256, 1024 (not tuned) |
//!
//! The driver takes `B` from any `Source` (a strided matrix here; the fused convolution's
//! implicit im2col matrix in `conv.rs`; a constant matrix packed at compile time,
//! `prepacked.rs`, whose panels it reads in place: [`Sgemm::run_packed`],
//! `kiln_rt_sgemm_packed`) and runs a `Finish` on each block of `C`'s rows once it is summed
//! (the convolution's epilogue; a fused MatMul's bias, residual addend and activation,
//! `fused.rs`: [`SgemmFused`], `kiln_rt_sgemm_fused`). The kernels take `B` step by step
//! (`kernel::Steps`): from a packed panel, or gathered where it lies at one offset per step,
//! which `direct.rs` uses to multiply a convolution's input planes without packing them.
//!
//! Edge tiles run the smallest kernel instance that covers them (`mr` rows × `⌈nr/16⌉`
//! vectors), so a 49-column product wastes 15 lanes, not a whole 48-column tile. Products with
//! `m == 1` or `n == 1` do not pack; they stream the matrix (`gemv.rs`), and a row vector times a
//! matrix packed ahead streams its panels. Transposition and
//! leading dimensions are strides of the views (`pack.rs`); a transposed `B` is packed through
//! 8 × 8 AVX transposes. Inputs need no alignment (weights are slices of a mapped model file at
//! any offset).
//!
//! **Numerics.** Each element of `C` is summed over `k` in ascending order (fused multiply-adds
//! within a `KC` block, then added to `C` block by block) — except in a narrow last panel, where
//! each `KC` block is summed in vector lanes and reduced — so results differ from a naive loop
//! by ordinary `f32` rounding, not bit for bit. They are deterministic for a given shape, blocking
//! and instruction set, whatever the operands' addresses, and the loop-IR interpreter calls this
//! same code, so JIT-compiled code and the interpreter agree exactly. With `beta == 0`, `C`'s old
//! contents are never read (NaN there does not propagate).
//!
//! **Performance.** `cargo run --release -p kiln-runtime --features bench-peers --example
//! sgemm_bench` gives GFLOP/s (2·m·n·k / time, the best call by thread CPU time) on squares,
//! ResNet-50's convolutions as im2col products, BERT-mini's products and the MLP's GEMV, for
//! kiln's kernels against the `matrixmultiply` and `gemm` crates; `fma_peak` gives the core's
//! register-only ceiling to hold them against. Recorded results: `docs/performance.md`.
//!
//! A last panel of at most 4 columns (`n` = 49 = 48 + 1, 196 = 4·48 + 4) is computed by dot
//! products along `k` instead of a register tile (`kernel::edge_dot`), its columns transposed
//! first: the tile spent a whole vector of multiply-adds per row and step on one column, which
//! held the 49-column products well below the others' rate. Those columns are then summed in
//! vector lanes and reduced, not in ascending `k` (see Numerics).
//!
//! Own kernels rather than a dependency: they match `gemm` (and beat `matrixmultiply` on
//! ResNet-50's shapes) while keeping the runtime dependency-free (it is also a static library
//! linked into firmware), and they let the interpreter share the exact arithmetic.

mod blocked;
mod direct;
mod fused;
mod gemv;
mod kernel;
pub(crate) mod pack;
mod portable;
mod prepacked;
pub(crate) mod simd;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::sync::OnceLock;

pub use blocked::Blocking;
pub use fused::{kiln_rt_sgemm_fused, SgemmFused};
pub(crate) use blocked::{Finish, Kernel, Problem, Source};
pub(crate) use blocked::Done;
pub(crate) use direct::{Direct, Planes};
use blocked::Shifted;
use gemv::Gemv;
pub(crate) use kernel::{Out, TileAct, TileEpilogue, Update};
use pack::View;
pub use prepacked::PackedLayout;
use prepacked::Packed;

use crate::pool::{self, SharedPtr};

/// Whether an operand enters the product as stored or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transpose {
    /// As stored: `op(X) = X`.
    No,
    /// Transposed: `op(X) = Xᵀ`.
    Yes,
}

/// An instruction set with a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512F (x86-64).
    Avx512,
    /// AVX2 with FMA (x86-64).
    Avx2,
    /// Plain Rust, vectorized by the compiler for the build target.
    Portable,
}

impl Isa {
    /// The instruction sets this CPU can run, best first: what tests and benches compare the
    /// kernels across.
    pub fn runnable() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2, Isa::Portable].into_iter().filter(|isa| isa.available()).collect()
    }

    /// The best kernel this CPU runs, detected on first use.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| [Isa::Avx512, Isa::Avx2].into_iter().find(|isa| isa.available()).unwrap_or(Isa::Portable))
    }

    /// The instruction set named by the environment variable `var` (`avx512`, `avx2` or
    /// `portable`; benches use it to compare kernels), else the [detected](Self::detected) one.
    pub fn from_env(var: &str) -> Isa {
        match std::env::var(var).as_deref() {
            Ok("avx512") => Isa::Avx512,
            Ok("avx2") => Isa::Avx2,
            Ok("portable") => Isa::Portable,
            _ => Isa::detected(),
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            Isa::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Floats per vector.
    pub(crate) fn lanes(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => <avx512::Avx512 as simd::Simd>::LANES,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => <avx2::Avx2 as simd::Simd>::LANES,
            _ => <simd::Portable as simd::Simd>::LANES,
        }
    }

    /// The kernel's tile, `(MR, NR)`.
    pub fn tile(self) -> (usize, usize) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => (avx512::Tile8x48::MR, avx512::Tile8x48::NR),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => (avx2::Tile6x16::MR, avx2::Tile6x16::NR),
            _ => (portable::Tile4x16::MR, portable::Tile4x16::NR),
        }
    }

    /// The cache blocking of the kernel (tuned for AVX-512 on the machine in the module doc).
    pub fn blocking(self) -> Blocking {
        match self {
            Isa::Avx512 => Blocking { kc: 384, nc: 480 },
            Isa::Avx2 => Blocking { kc: 256, nc: 1024 },
            Isa::Portable => Blocking { kc: 256, nc: 1024 },
        }
    }
}

/// The shape and scalars of one product `C[m×n] = alpha·op(A)·op(B) + beta·C` on row-major
/// matrices with leading dimensions (row strides) `lda`, `ldb`, `ldc` in elements. `op(A)` is
/// `m×k`: `A` is `m×k`, or `k×m` when transposed; likewise `op(B)` is `k×n`.
///
/// ```
/// use kiln_runtime::gemm::{Sgemm, Transpose};
/// let a = [1.0, 2.0, 3.0, 4.0]; // 2×2
/// let b = [1.0, 0.0, 0.0, 1.0]; // identity, used transposed
/// let mut c = [f32::NAN; 4]; // not read: beta is 0
/// let g = Sgemm { m: 2, n: 2, k: 2, lda: 2, ldb: 2, ldc: 2, trans_a: Transpose::No, trans_b: Transpose::Yes, alpha: 2.0, beta: 0.0 };
/// g.run(&a, &b, &mut c);
/// assert_eq!(c, [2.0, 4.0, 6.0, 8.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgemm {
    /// Rows of `C` and `op(A)`.
    pub m: usize,
    /// Columns of `C` and `op(B)`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// `A`'s row stride.
    pub lda: usize,
    /// `B`'s row stride.
    pub ldb: usize,
    /// `C`'s row stride.
    pub ldc: usize,
    /// Whether `A` is transposed.
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// The product's factor.
    pub alpha: f32,
    /// `C`'s factor; when zero, `C`'s old contents are not read.
    pub beta: f32,
}

/// Elements spanned by `rows × cols` with row stride `ld` (0 when empty; saturating, so an
/// absurd shape reads as too long for any slice instead of overflowing).
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1).saturating_mul(ld).saturating_add(cols) }
}

impl Sgemm {
    /// Elements of `A` the product reads, counted from `A[0,0]` (0 if it reads none).
    pub fn a_len(&self) -> usize {
        if self.m == 0 || self.n == 0 {
            return 0;
        }
        match self.trans_a {
            Transpose::No => span(self.m, self.k, self.lda),
            Transpose::Yes => span(self.k, self.m, self.lda),
        }
    }

    /// Elements of `B` the product reads, counted from `B[0,0]` (0 if it reads none).
    pub fn b_len(&self) -> usize {
        if self.m == 0 || self.n == 0 {
            return 0;
        }
        match self.trans_b {
            Transpose::No => span(self.k, self.n, self.ldb),
            Transpose::Yes => span(self.n, self.k, self.ldb),
        }
    }

    /// Elements of `C` the product writes, counted from `C[0,0]`.
    pub fn c_len(&self) -> usize {
        span(self.m, self.n, self.ldc)
    }

    /// Computes the product with the detected kernel.
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`a_len`](Self::a_len), [`b_len`](Self::b_len) or
    /// [`c_len`](Self::c_len).
    pub fn run(&self, a: &[f32], b: &[f32], c: &mut [f32]) {
        let isa = Isa::detected();
        self.run_with(isa, isa.blocking(), a, b, c);
    }

    /// Computes the product with a given kernel and blocking (for tests and tuning).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa` or a block size is zero.
    pub fn run_with(&self, isa: Isa, blocking: Blocking, a: &[f32], b: &[f32], c: &mut [f32]) {
        assert!(a.len() >= self.a_len() && b.len() >= self.b_len() && c.len() >= self.c_len(), "sgemm operand slices are too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        assert!(blocking.kc > 0 && blocking.nc > 0, "zero block size in {blocking:?}");
        // SAFETY: the slices hold every element the product addresses; `c` is exclusively borrowed.
        unsafe { self.run_raw(isa, blocking, a.as_ptr(), b.as_ptr(), c.as_mut_ptr()) }
    }

    /// The product on raw pointers.
    ///
    /// # Safety
    ///
    /// `a`, `b` readable for [`a_len`](Self::a_len) and [`b_len`](Self::b_len) elements, `c`
    /// readable and writable for [`c_len`](Self::c_len) and not overlapping them; the CPU runs
    /// `isa`; block sizes are positive.
    pub(crate) unsafe fn run_raw(&self, isa: Isa, bl: Blocking, a: *const f32, b: *const f32, c: *mut f32) {
        // SAFETY: by the caller's contract.
        unsafe { self.run_raw_then(isa, bl, a, b, c, &Done) }
    }

    /// [`run_raw`](Self::run_raw), with `fin` run on every block of `C` once it is final.
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw); `fin` touches only the block of `C` it is given.
    pub(crate) unsafe fn run_raw_then<F: Finish>(&self, isa: Isa, bl: Blocking, a: *const f32, b: *const f32, c: *mut f32, fin: &F) {
        let Sgemm { m, n, k, .. } = *self;
        if m == 0 || n == 0 {
            return;
        }
        let up = Update::new(self.alpha, self.beta);
        let ldc = self.ldc as isize;
        if k == 0 {
            // SAFETY: by the caller's contract.
            return unsafe {
                self.scale_c(c);
                fin.rows(0, m, 0, n);
            };
        }
        // op(A) as lanes i × steps p; op(B) as lanes j × steps p.
        let a = prepacked::a_view(a, self.lda, self.trans_a);
        let ldb = self.ldb as isize;
        let b = match self.trans_b {
            Transpose::No => View { ptr: b, lane_stride: 1, step_stride: ldb },
            Transpose::Yes => View { ptr: b, lane_stride: ldb, step_stride: 1 },
        };
        if m == 1 || n == 1 {
            let g = if m == 1 {
                // y = C's row, M = op(B)ᵀ, x = op(A)'s row.
                Gemv { rows: n, k, m: b, x: a.ptr, x_stride: a.step_stride, y: c, y_stride: 1, up }
            } else {
                // y = C's column, M = op(A), x = op(B)'s column.
                Gemv { rows: m, k, m: a, x: b.ptr, x_stride: b.step_stride, y: c, y_stride: ldc, up }
            };
            // `y`'s elements `r` as a block of C.
            let block = |r: std::ops::Range<usize>| if m == 1 { (0, 1, r.start, r.len()) } else { (r.start, r.len(), 0, 1) };
            // Rows split in whole vectors of 16, so every row takes the same path as unsplit.
            let parts = if g.rows * k >= SPLIT_MIN_FMAS { pool::threads().min(g.rows / 16) } else { 1 };
            if parts <= 1 {
                // SAFETY: by the caller's contract, and `isa` runs here.
                return unsafe {
                    run_gemv(isa, &g);
                    let (i, mr, j, nc) = block(0..g.rows);
                    fin.rows(i, mr, j, nc);
                };
            }
            let shared = SharedPtr((g, fin as *const F));
            pool::for_each(parts, &|i| {
                let (g, fin) = shared.get();
                let r = pool::part(g.rows, parts, 16, i);
                // SAFETY: rows `r` of the product, disjoint from every other part's; `fin` is
                // alive for the call.
                unsafe {
                    let sub = Gemv { rows: r.len(), m: g.m.at(r.start, 0), y: g.y.offset(r.start as isize * g.y_stride), ..g };
                    run_gemv(isa, &sub);
                    let (i, mr, j, nc) = block(r);
                    (*fin).rows(i, mr, j, nc);
                }
            });
            return;
        }
        let pr = Problem { m, n, k, a, b, c: Out { ptr: c, rs: ldc }, up };
        // SAFETY: by the caller's contract.
        unsafe { product(isa, bl, &pr, fin) }
    }
}

impl Sgemm {
    /// Computes the product with `op(B)` packed ahead in `layout` (`b` holds
    /// [`PackedLayout::len`]`(k, n)` floats; `ldb` and `trans_b` are not used), with the
    /// detected kernel. Results equal [`run`](Self::run)'s bit for bit, except where `run` takes
    /// the matrix–vector path (`m` or `n` is 1), which sums in another order (so does this one
    /// with `m == 1`, reading the panels as one stream).
    ///
    /// # Panics
    ///
    /// If a slice is too short, or the layout has a zero size.
    pub fn run_packed(&self, a: &[f32], b: &[f32], layout: PackedLayout, c: &mut [f32]) {
        assert!(a.len() >= self.a_len() && b.len() >= layout.len(self.k, self.n) && c.len() >= self.c_len(), "sgemm operand slices are too short for {self:?}");
        assert!(layout.nr > 0 && layout.kc > 0, "empty packed layout {layout:?}");
        // SAFETY: the slices hold every element the product addresses; `c` is exclusively borrowed.
        unsafe { self.run_packed_raw(a.as_ptr(), b.as_ptr(), layout, c.as_mut_ptr()) }
    }

    /// [`run_packed`](Self::run_packed) on raw pointers.
    ///
    /// # Safety
    ///
    /// `a` readable for [`a_len`](Self::a_len) elements, `b` for `layout.len(k, n)`, `c` readable
    /// and writable for [`c_len`](Self::c_len) and not overlapping them; the layout's sizes are
    /// positive.
    pub(crate) unsafe fn run_packed_raw(&self, a: *const f32, b: *const f32, layout: PackedLayout, c: *mut f32) {
        // SAFETY: by the caller's contract.
        unsafe { self.run_packed_raw_then(a, b, layout, c, &Done) }
    }

    /// [`run_packed_raw`](Self::run_packed_raw), with `fin` run on every block of `C` once it
    /// is final.
    ///
    /// # Safety
    ///
    /// As [`run_packed_raw`](Self::run_packed_raw); `fin` touches only the block of `C` it is
    /// given.
    pub(crate) unsafe fn run_packed_raw_then<F: Finish>(&self, a: *const f32, b: *const f32, layout: PackedLayout, c: *mut f32, fin: &F) {
        let Sgemm { m, n, k, .. } = *self;
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            // SAFETY: by the caller's contract.
            return unsafe {
                self.scale_c(c);
                fin.rows(0, m, 0, n);
            };
        }
        let a = prepacked::a_view(a, self.lda, self.trans_a);
        let b = Packed { ptr: b, layout, k, n, j0: 0 };
        let up = Update::new(self.alpha, self.beta);
        let isa = Isa::detected();
        if m == 1 {
            let g = gemv::PackedGemv { x: a.ptr, x_stride: a.step_stride, b, y: c, up };
            let panels = g.panels();
            let parts = if n * k >= SPLIT_MIN_GEMV_FMAS { pool::threads().min(panels) } else { 1 };
            let shared = SharedPtr((g, fin as *const F));
            let part = |i: usize| {
                let (g, fin) = shared.get();
                let t = pool::part(panels, parts, 1, i);
                let cols = t.start * layout.nr..(t.end * layout.nr).min(n);
                // SAFETY: panels `t` are columns `cols` of the product, disjoint from every
                // other part's; `fin` is alive for the call; `isa` runs here.
                unsafe {
                    run_gemv_packed(isa, &g, t);
                    (*fin).rows(0, 1, cols.start, cols.len());
                }
            };
            if parts <= 1 {
                part(0);
            } else {
                pool::for_each(parts, &part);
            }
            return;
        }
        let pr = Problem {
            m,
            n,
            k,
            a,
            b,
            c: Out { ptr: c, rs: self.ldc as isize },
            up,
        };
        // SAFETY: by the caller's contract; `isa` is what this CPU runs.
        unsafe { product(isa, isa.blocking(), &pr, fin) }
    }

    /// `C = beta·C` (zero when `beta == 0`): the product of an empty sum.
    ///
    /// # Safety
    ///
    /// `c` readable and writable for [`c_len`](Self::c_len).
    unsafe fn scale_c(&self, c: *mut f32) {
        for i in 0..self.m {
            for j in 0..self.n {
                // SAFETY: (i, j) is inside C by the caller's contract.
                unsafe {
                    let p = c.offset(i as isize * self.ldc as isize).add(j);
                    p.write_unaligned(if self.beta == 0.0 { 0.0 } else { self.beta * p.read_unaligned() });
                }
            }
        }
    }
}

/// A blocked product, split over the thread pool when it is large, with `fin` run on each
/// block of rows once it is summed.
///
/// # Safety
///
/// `pr` addresses only live memory (`m, n, k > 0`) and `fin` only `pr`'s `C` block it is
/// given; the CPU runs `isa`; block sizes are positive.
pub(crate) unsafe fn product<B: Source, F: Finish>(isa: Isa, bl: Blocking, pr: &Problem<B>, fin: &F) {
    let (rows, parts) = split(pr.m, pr.n, pr.k, isa, pool::threads());
    if parts <= 1 {
        // SAFETY: by the caller's contract.
        return unsafe { run_blocked(isa, bl, pr, fin) };
    }
    let (mr, nr) = isa.tile();
    let shared = SharedPtr((*pr, fin as *const F));
    pool::for_each(parts, &|i| {
        let (pr, fin) = shared.get();
        // SAFETY: a block of rows or columns of the product, disjoint from every other part's;
        // `fin` is alive for the call and sees the whole product's indices; `isa` runs here.
        unsafe {
            let (sub, di, dj) = if rows {
                let r = pool::part(pr.m, parts, mr, i);
                (Problem { m: r.len(), a: pr.a.at(r.start, 0), c: Out { ptr: pr.c.ptr.offset(r.start as isize * pr.c.rs), ..pr.c }, ..pr }, r.start, 0)
            } else {
                let r = pool::part(pr.n, parts, nr, i);
                (Problem { n: r.len(), b: pr.b.at_col(r.start), c: Out { ptr: pr.c.ptr.add(r.start), ..pr.c }, ..pr }, 0, r.start)
            };
            if sub.m > 0 && sub.n > 0 {
                run_blocked(isa, bl, &sub, &Shifted { inner: &*fin, di, dj });
            }
        }
    });
}

/// A product of a convolution's planes read in place ([`Direct`]), split over the thread pool
/// when it is large, with `fin` run on each block of rows once it is summed.
///
/// # Safety
///
/// As [`direct::run`] for all of `d`'s rows and columns; `fin` touches only the block of `C`
/// it is given; the CPU runs `isa`; block sizes are positive.
pub(crate) unsafe fn product_direct<F: Finish>(isa: Isa, bl: Blocking, d: &Direct, fin: &F) {
    let (rows, parts) = split(d.m, d.b.cols, d.k, isa, pool::threads());
    if parts <= 1 {
        // SAFETY: by the caller's contract.
        return unsafe { run_direct(isa, bl, d, 0..d.m, 0..d.b.cols, fin) };
    }
    let (mr, nr) = isa.tile();
    let shared = SharedPtr((*d, fin as *const F));
    pool::for_each(parts, &|i| {
        let (d, fin) = shared.get();
        let (r, c) = if rows { (pool::part(d.m, parts, mr, i), 0..d.b.cols) } else { (0..d.m, pool::part(d.b.cols, parts, nr, i)) };
        if !r.is_empty() && !c.is_empty() {
            // SAFETY: a block of rows or columns of the product, disjoint from every other
            // part's; `fin` is alive for the call; `isa` runs here.
            unsafe { run_direct(isa, bl, &d, r, c, &*fin) };
        }
    });
}

/// [`direct::run`] with `isa`'s kernel, on this thread.
///
/// # Safety
///
/// As [`direct::run`]; the CPU runs `isa`.
unsafe fn run_direct<F: Finish>(isa: Isa, bl: Blocking, d: &Direct, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => with_scratch(direct::scratch_len::<avx512::Tile8x48>(bl, d.k), |s| avx512::direct(d, rows, cols, bl, s, fin)),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => with_scratch(direct::scratch_len::<avx2::Tile6x16>(bl, d.k), |s| avx2::direct(d, rows, cols, bl, s, fin)),
            _ => with_scratch(direct::scratch_len::<portable::Tile4x16>(bl, d.k), |s| portable::direct(d, rows, cols, bl, s, fin)),
        }
    }
}

/// Products with fewer multiply-adds than this run on one thread: splitting costs a few
/// microseconds, about what 2^18 multiply-adds take.
pub(crate) const SPLIT_MIN_FMAS: usize = 1 << 18;

/// [`SPLIT_MIN_FMAS`] for a product of one row: it loads a weight per multiply-add (from L2 at
/// best, where a blocked product reuses each load from registers), so the same time is a
/// quarter of the multiply-adds; and each part then keeps its share of the weights in its own
/// core's cache from one call to the next (a recurrent layer's steps).
const SPLIT_MIN_GEMV_FMAS: usize = SPLIT_MIN_FMAS / 4;

/// Column parts of at most this many tiles, when `B` is small and row parts would have at
/// least [`ROWS_MIN_ROW_TILES`], make a split by rows instead.
const ROWS_COLUMN_TILES: usize = 10;

/// See [`ROWS_COLUMN_TILES`].
const ROWS_MIN_ROW_TILES: usize = 8;

/// The most elements of `B` (`k·n`) that every part of a split by rows packs.
const ROWS_MAX_B: usize = 256 * 1024;

/// How to split a blocked product over `ways` threads: `(by rows, parts)`. Columns are split
/// when that balances about as well as rows, since each part then packs only its own columns
/// of `B`; a split by rows packs all of `B` in every part. Except when the column parts would
/// be a few tiles each and `B` is small: then each part's edge tile and packing are a large
/// share of its work, and rows (every part with all columns, as one thread has them) are
/// faster. With many columns the edge tiles are a small share anyway, and with a larger `B`
/// ([`ROWS_MAX_B`]) or few rows per part ([`ROWS_MIN_ROW_TILES`]) packing all of `B` in every
/// part costs more than it saves: columns win. Sharing one copy of `B` between row parts
/// instead (all parts packing a share of it, then all reading it) was slower: the whole packed
/// `B` leaves L2, where each part's `KC × NC` blocks stay. `conv_one` with `KILN_THREADS=2`
/// and `kiln bench --kernels` measure the choice. Parts are whole tiles, so each element is
/// computed exactly as without the split.
fn split(m: usize, n: usize, k: usize, isa: Isa, ways: usize) -> (bool, usize) {
    if ways <= 1 || m.saturating_mul(n).saturating_mul(k) < SPLIT_MIN_FMAS {
        return (false, 1);
    }
    let (mr, nr) = isa.tile();
    let (by_cols, by_rows) = (pool::balance(n, ways, nr), pool::balance(m, ways, mr));
    let few_tiles = n <= ways * ROWS_COLUMN_TILES * nr && m >= ways * ROWS_MIN_ROW_TILES * mr && k.saturating_mul(n) <= ROWS_MAX_B;
    if few_tiles && by_rows >= by_cols - 0.1 {
        return (true, ways);
    }
    if by_cols >= by_rows - 0.1 { (false, ways) } else { (true, ways) }
}

/// A matrix–vector product with `isa`'s kernel, on this thread.
///
/// # Safety
///
/// `g` addresses only live memory; the CPU runs `isa`.
unsafe fn run_gemv(isa: Isa, g: &Gemv) {
    // SAFETY: by the caller's contract.
    with_scratch(gemv::scratch_len(g), |s| unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::gemv(g, s),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::gemv(g, s),
            _ => portable::gemv(g, s),
        }
    })
}

/// Panels `panels` of a row vector times a packed matrix with `isa`'s kernel, on this thread.
///
/// # Safety
///
/// As [`gemv::packed`]; the CPU runs `isa`.
unsafe fn run_gemv_packed(isa: Isa, g: &gemv::PackedGemv, panels: std::ops::Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::gemv_packed(g, panels),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::gemv_packed(g, panels),
            _ => portable::gemv_packed(g, panels),
        }
    }
}

/// A blocked product with `isa`'s kernel, on this thread, with `fin` run on each finished block
/// of rows.
///
/// # Safety
///
/// `pr` addresses only live memory (`m, n, k > 0`); the CPU runs `isa`; block sizes are positive.
unsafe fn run_blocked<B: Source, F: Finish>(isa: Isa, bl: Blocking, pr: &Problem<B>, fin: &F) {
    // SAFETY: by the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => with_scratch(blocked::scratch_len::<avx512::Tile8x48, B>(pr, bl), |s| avx512::gemm(pr, bl, s, fin)),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => with_scratch(blocked::scratch_len::<avx2::Tile6x16, B>(pr, bl), |s| avx2::gemm(pr, bl, s, fin)),
            _ => with_scratch(blocked::scratch_len::<portable::Tile4x16, B>(pr, bl), |s| portable::gemm(pr, bl, s, fin)),
        }
    }
}

thread_local! {
    /// Packing space, grown to the largest size asked for and kept for the thread's life.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of this thread's packing space ([`crate::scratch::with`]); the
/// depthwise convolution shares it.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    crate::scratch::with(&SCRATCH, len, f)
}

/// `C[m×n] = alpha·op(A)·op(B) + beta·C` on row-major `f32` matrices with leading dimensions
/// `lda`, `ldb`, `ldc` (in elements): [`Sgemm`] for generated code. `op(A)` is `A` (`m×k`), or
/// `Aᵀ` when `trans_a != 0` (`A` is then `k×m`); likewise `op(B)` is `k×n`. When `beta == 0`,
/// `C` is not read. Nothing happens when `m` or `n` is not positive; `k ≤ 0` gives `beta·C`
/// (zero when `beta == 0`). Negative leading dimensions are treated as zero.
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations: `A` and `B` readable,
/// `C` readable and writable, `C` not overlapping `A` or `B`. Alignment is not required
/// (constants may be unaligned slices of a model file).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_sgemm(
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    trans_a: i64,
    trans_b: i64,
    alpha: f32,
    beta: f32,
) {
    if m <= 0 || n <= 0 {
        return;
    }
    let dim = |x: i64| x.max(0) as usize;
    let transpose = |t: i64| if t != 0 { Transpose::Yes } else { Transpose::No };
    let g = Sgemm { m: dim(m), n: dim(n), k: dim(k), lda: dim(lda), ldb: dim(ldb), ldc: dim(ldc), trans_a: transpose(trans_a), trans_b: transpose(trans_b), alpha, beta };
    let isa = Isa::detected();
    // SAFETY: by the caller's contract; `isa` is what this CPU runs.
    unsafe { g.run_raw(isa, isa.blocking(), a, b, c) }
}

/// `C[m×n] = alpha·op(A)·op(B) + beta·C` with `op(B)` (`k×n`) packed ahead in the layout
/// `(nr, kc)` ([`PackedLayout`]): [`Sgemm::run_packed`] for generated code. `A` and `C` are as
/// for [`kiln_rt_sgemm`]; `b` holds `k·⌈n/nr⌉·nr` floats. Nothing happens when `m` or `n` is not
/// positive, or `nr` or `kc` is not positive; `k ≤ 0` gives `beta·C`.
///
/// # Safety
///
/// As [`kiln_rt_sgemm`], with `B`'s extent that of the packed layout.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_sgemm_packed(
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldc: i64,
    trans_a: i64,
    nr: i64,
    kc: i64,
    alpha: f32,
    beta: f32,
) {
    if m <= 0 || n <= 0 || nr <= 0 || kc <= 0 {
        return;
    }
    let dim = |x: i64| x.max(0) as usize;
    let trans_a = if trans_a != 0 { Transpose::Yes } else { Transpose::No };
    let g = Sgemm { m: dim(m), n: dim(n), k: dim(k), lda: dim(lda), ldb: 0, ldc: dim(ldc), trans_a, trans_b: Transpose::No, alpha, beta };
    // SAFETY: by the caller's contract.
    unsafe { g.run_packed_raw(a, b, PackedLayout { nr: dim(nr), kc: dim(kc) }, c) }
}
