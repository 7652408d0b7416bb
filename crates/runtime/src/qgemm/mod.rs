//! The 8-bit integer product: `C = (A − za)·(B − zb) + bias` with `i32` accumulators, for
//! MatMulInteger, QLinearMatMul and the integer convolutions (whose `i32` bias runs along the
//! rows: output channels).
//!
//! Either operand may be `u8` or `i8`. The product is computed as `u8 × i8`, the form of the
//! VNNI instruction `vpdpbusd` (four byte products summed into each `i32` lane): a signed `A`
//! becomes `a + 128` (its bytes with the top bit flipped) and an unsigned `B` becomes
//! `b − 128`, each zero point moving with its operand, so the differences are unchanged. With
//! `a'`, `b'`, `za'`, `zb'` the moved values,
//!
//! `Σ_k (a' − za')(b' − zb') = Σ_k a'·b' − zb'·Σ_k a' − za'·(Σ_k b' − K·zb')`,
//!
//! so the kernel sums the raw byte products and subtracts a row term and a column term at the
//! store. Every step is exact in `i32` (wrapping, as an `i32` accumulator of more than 2^15
//! full-range products would in any implementation).
//!
//! `B` is packed into panels of 16 columns, `k` in groups of four bytes per column (the layout
//! `vnni.rs` reads in 64-byte vectors and `avx2.rs` in widened quarters), zero past the matrix,
//! on each call or once ahead ([`pack_b`], for constant weights, with its column sums); the
//! column sums come out of the packing. `A` is read in place, four bytes at a time, broadcast
//! across the panel.
//!
//! The result is either the `i32` matrix or, with a [`Requant`] output stage (QLinearConv's,
//! QLinearMatMul's), those values requantized to 8 bits as each tile is stored, exactly as
//! [`crate::requantize`] computes them, so the `i32` matrix is never written.

use std::cell::RefCell;

use crate::pool::{self, SharedPtr};
use crate::scratch;

#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod vnni;

/// Columns per packed panel: one 512-bit vector of `i32`.
const PANEL: usize = 16;

/// Rows per micro-tile.
const MR: usize = 6;

/// The micro-kernel a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512 VNNI (`vpdpbusd`).
    Vnni,
    /// AVX2, bytes widened to `i16` (`vpmaddwd`).
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Isa {
    /// The best this CPU has.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
            *ISA.get_or_init(|| {
                if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vnni") {
                    Isa::Vnni
                } else if std::arch::is_x86_feature_detected!("avx2") {
                    Isa::Avx2
                } else {
                    Isa::Portable
                }
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Portable
    }

    /// Every kernel this CPU can run, the portable one first.
    #[cfg(test)]
    fn available() -> Vec<Isa> {
        // A CPU with AVX-512 has AVX2.
        match Isa::detect() {
            Isa::Vnni => vec![Isa::Portable, Isa::Avx2, Isa::Vnni],
            Isa::Avx2 => vec![Isa::Portable, Isa::Avx2],
            Isa::Portable => vec![Isa::Portable],
        }
    }
}

/// Where an `i32` bias runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QBias {
    /// No bias.
    None,
    /// `bias[i]` added to row `i`.
    PerRow,
    /// `bias[j]` added to column `j`.
    PerColumn,
}

impl QBias {
    /// The bias of call-table code `code` (0, 1, 2).
    pub fn from_code(code: i64) -> Option<QBias> {
        match code {
            0 => Some(QBias::None),
            1 => Some(QBias::PerRow),
            2 => Some(QBias::PerColumn),
            _ => None,
        }
    }
}

/// One integer product `C[m×n] = (A − za)·(B − zb) + bias`, all row-major with leading
/// dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qgemm {
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// `A`'s row stride, in elements.
    pub lda: usize,
    /// `B`'s row stride.
    pub ldb: usize,
    /// `C`'s row stride.
    pub ldc: usize,
    /// `A` holds `i8` (else `u8`); so does its zero point.
    pub a_signed: bool,
    /// `B` holds `i8` (else `u8`); so does its zero point.
    pub b_signed: bool,
    /// `A`'s zero points: 0 (none), 1 (per tensor) or `m` (per row).
    pub a_zeros: usize,
    /// `B`'s zero points: 0 (none), 1 (per tensor) or `n` (per column).
    pub b_zeros: usize,
    /// The bias.
    pub bias: QBias,
    /// `B` is packed ahead by [`pack_b`] (`ldb` is then not read).
    pub b_packed: bool,
}

/// Along which axis a requantization's scales run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QScale {
    /// One scale.
    PerTensor,
    /// `scales[i]` for row `i`.
    PerRow,
    /// `scales[j]` for column `j`.
    PerColumn,
}

impl QScale {
    /// The scales of call-table code `code` (0, 1, 2).
    pub fn from_code(code: i64) -> Option<QScale> {
        match code {
            0 => Some(QScale::PerTensor),
            1 => Some(QScale::PerRow),
            2 => Some(QScale::PerColumn),
            _ => None,
        }
    }
}

/// A product's output stage: `y = sat(round(c · scale + zero))` into 8-bit integers, as
/// [`crate::requantize::Requantize`] computes it from the `i32` result `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requant {
    /// Which scale each element takes.
    pub scales: QScale,
    /// The output zero point.
    pub zero: i32,
    /// `i8` output; `u8` otherwise.
    pub signed: bool,
}

impl Requant {
    /// Scales read for an `m × n` product.
    pub fn scales_len(&self, m: usize, n: usize) -> usize {
        match self.scales {
            QScale::PerTensor => 1,
            QScale::PerRow => m,
            QScale::PerColumn => n,
        }
    }
}

/// Where a product's tiles are stored.
#[derive(Clone, Copy)]
enum Out {
    /// The `i32` results.
    Acc(*mut i32),
    /// Requantized: the scales (per row when `per_row`, else per column; a single scale is
    /// read as every row's); `f32` when they are finite and the zero point is inside the
    /// output's range, which lets the tile requantize in `f32` where that is exact
    /// (`requantize::avx512::Ties`).
    Bytes { y: *mut u8, scales: *const f32, per_row: bool, single: bool, zero: f64, signed: bool, f32: bool },
}

impl Out {
    /// The stage `r` of an `m × n` product writing `y`.
    ///
    /// # Safety
    ///
    /// `scales` readable for `r.scales_len(m, n)` floats.
    unsafe fn new_bytes(y: *mut u8, scales: *const f32, r: &Requant, m: usize, n: usize) -> Out {
        // SAFETY: by the caller's contract.
        let finite = (0..r.scales_len(m, n)).all(|i| unsafe { scales.add(i).read_unaligned() }.is_finite());
        let f32 = finite && crate::requantize::zero_in_range(r.zero, r.signed);
        Out::Bytes { y, scales, per_row: r.scales != QScale::PerColumn, single: r.scales == QScale::PerTensor, zero: f64::from(r.zero), signed: r.signed, f32 }
    }

    /// The scale of element `(i, j)` of a requantizing stage.
    ///
    /// # Safety
    ///
    /// The scales hold the element's.
    #[inline(always)]
    unsafe fn scale(scales: *const f32, per_row: bool, single: bool, i: usize, j: usize) -> f64 {
        let at = if single { 0 } else if per_row { i } else { j };
        // SAFETY: by the caller's contract.
        f64::from(unsafe { scales.add(at).read_unaligned() })
    }

    /// Stores the corrected accumulators `v` of row `i`, columns `j0..j0 + v.len()`.
    ///
    /// # Safety
    ///
    /// The elements are inside the output, of row stride `ldc`.
    #[inline(always)]
    unsafe fn store(self, ldc: usize, i: usize, j0: usize, v: &[i32]) {
        // SAFETY: by the caller's contract.
        unsafe {
            match self {
                Out::Acc(c) => {
                    for (d, &x) in v.iter().enumerate() {
                        c.add(i * ldc + j0 + d).write_unaligned(x);
                    }
                }
                Out::Bytes { y, scales, per_row, single, zero, signed, .. } => {
                    for (d, &x) in v.iter().enumerate() {
                        let s = Out::scale(scales, per_row, single, i, j0 + d);
                        *y.add(i * ldc + j0 + d) = crate::requantize::level(f64::from(x), s, zero, signed);
                    }
                }
            }
        }
    }
}

thread_local! {
    static PACKED: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
    static SUMS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    static FLIPPED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Qgemm {
    /// Whether the sizes are consistent: leading dimensions cover their rows, zero-point counts
    /// are allowed ones, and every operand's extent fits `isize`.
    pub fn is_valid(&self) -> bool {
        let fits = |rows: usize, ld: usize, cols: usize| rows == 0 || cols == 0 || (rows - 1).checked_mul(ld).and_then(|e| e.checked_add(cols)).is_some_and(|e| e.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize));
        self.lda >= self.k
            && self.ldb >= self.n
            && self.ldc >= self.n
            && matches!(self.a_zeros, 0 | 1) | (self.a_zeros == self.m)
            && matches!(self.b_zeros, 0 | 1) | (self.b_zeros == self.n)
            && fits(self.m, self.lda, self.k)
            && fits(self.k, self.ldb, self.n)
            && fits(self.m, self.ldc, self.n)
            && self.packed_len().is_some()
    }

    /// The product of the C entry points' operands: sizes `m, n, k, lda, ldb, ldc, a_zeros,
    /// b_zeros` and flags `a_signed, b_signed, bias_mode, b_packed`; `None` for a negative size,
    /// an unknown bias mode or inconsistent sizes.
    fn from_args(sizes: [i64; 8], [a_signed, b_signed, bias_mode, b_packed]: [i64; 4]) -> Option<Qgemm> {
        let [m, n, k, lda, ldb, ldc, a_zeros, b_zeros] = sizes.map(|v| usize::try_from(v).ok());
        let q = Qgemm { m: m?, n: n?, k: k?, lda: lda?, ldb: ldb?, ldc: ldc?, a_signed: a_signed != 0, b_signed: b_signed != 0, a_zeros: a_zeros?, b_zeros: b_zeros?, bias: QBias::from_code(bias_mode)?, b_packed: b_packed != 0 };
        q.is_valid().then_some(q)
    }

    /// Elements of the bias read.
    pub fn bias_len(&self) -> usize {
        match self.bias {
            QBias::None => 0,
            QBias::PerRow => self.m,
            QBias::PerColumn => self.n,
        }
    }

    /// Elements `A`, `B` and `C` span from their first (0 when empty).
    pub fn extents(&self) -> (usize, usize, usize) {
        let span = |rows: usize, ld: usize, cols: usize| if rows == 0 || cols == 0 { 0 } else { (rows - 1) * ld + cols };
        // A packed B is read whole (its column sums too) even when `k` is 0.
        let b = if self.b_packed && self.n > 0 { packed_b_len(self.k, self.n).unwrap_or(usize::MAX) } else { span(self.k, self.ldb, self.n) };
        (span(self.m, self.lda, self.k), b, span(self.m, self.ldc, self.n))
    }

    /// Bytes of the packed `B`.
    fn packed_len(&self) -> Option<usize> {
        self.n.div_ceil(PANEL).checked_mul(self.k.div_ceil(4))?.checked_mul(4 * PANEL)
    }

    /// Runs it with the detected instruction set.
    ///
    /// # Panics
    ///
    /// If the sizes are invalid or a slice is shorter than its extent.
    pub fn run(&self, a: &[u8], b: &[u8], c: &mut [i32], za: &[u8], zb: &[u8], bias: &[i32]) {
        assert!(self.is_valid(), "invalid qgemm {self:?}");
        let (ea, eb, ec) = self.extents();
        assert!(a.len() >= ea && b.len() >= eb && c.len() >= ec && za.len() >= self.a_zeros && zb.len() >= self.b_zeros && bias.len() >= self.bias_len(), "qgemm operands are too short for {self:?}");
        // SAFETY: the slices hold every element addressed; `c` is exclusively borrowed.
        unsafe { self.run_raw(a.as_ptr(), b.as_ptr(), Out::Acc(c.as_mut_ptr()), za.as_ptr(), zb.as_ptr(), bias.as_ptr(), Isa::detect()) }
    }

    /// Runs it with the output stage `r`: `y` receives the 8-bit results, laid out as `C`.
    ///
    /// # Panics
    ///
    /// If the sizes are invalid or a slice is shorter than its extent.
    #[allow(clippy::too_many_arguments)]
    pub fn run_requantized(&self, a: &[u8], b: &[u8], y: &mut [u8], za: &[u8], zb: &[u8], bias: &[i32], scales: &[f32], r: &Requant) {
        assert!(self.is_valid(), "invalid qgemm {self:?}");
        let (ea, eb, ec) = self.extents();
        assert!(a.len() >= ea && b.len() >= eb && y.len() >= ec && za.len() >= self.a_zeros && zb.len() >= self.b_zeros && bias.len() >= self.bias_len() && scales.len() >= r.scales_len(self.m, self.n), "qgemm operands are too short for {self:?}");
        // SAFETY: the scales were checked to hold `scales_len` elements.
        let out = unsafe { Out::new_bytes(y.as_mut_ptr(), scales.as_ptr(), r, self.m, self.n) };
        // SAFETY: the slices hold every element addressed; `y` is exclusively borrowed.
        unsafe { self.run_raw(a.as_ptr(), b.as_ptr(), out, za.as_ptr(), zb.as_ptr(), bias.as_ptr(), Isa::detect()) }
    }

    /// # Safety
    ///
    /// A valid product; `a`, `b`, `za`, `zb` (and a requantizing output's scales) readable and
    /// the output writable for their extents, the output apart from the others. No alignment
    /// is required.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_raw(&self, a: *const u8, b: *const u8, c: Out, za: *const u8, zb: *const u8, bias: *const i32, isa: Isa) {
        let (m, n, k) = (self.m, self.n, self.k);
        if m == 0 || n == 0 {
            return;
        }
        let Some(len) = self.packed_len() else { return };
        let panels = n.div_ceil(PANEL);
        let a_flip = if self.a_signed { 0x80u8 } else { 0 };
        let read_zero = |p: *const u8, i: usize, signed: bool| {
            // SAFETY: `i` is below the count the caller vouches for.
            let byte = unsafe { p.add(i).read() };
            if signed { i32::from(byte as i8) } else { i32::from(byte) }
        };
        scratch::with(&PACKED, if self.b_packed { 0 } else { len }, |packed| {
            // Per column (padded to whole panels): zb', Σ_k b' − K·zb' and −bias. Per row: za',
            // Σ_k a' and −bias. The bias enters as a subtracted term, as the others do.
            scratch::with(&SUMS, 4 * panels * PANEL + 4 * m, |sums| {
                let (cols, rest) = sums.split_at_mut(3 * panels * PANEL);
                let (rows, rest) = rest.split_at_mut(3 * m);
                let (col_terms, row_terms) = rest.split_at_mut(panels * PANEL);
                let b_shift = if self.b_signed { 0 } else { 128 };
                let padded = panels * PANEL;
                // Past `n`, a column's own zero point is taken as the shift (no term).
                match self.b_zeros {
                    0 => cols[..padded].fill(-b_shift),
                    1 => cols[..padded].fill(read_zero(zb, 0, self.b_signed) - b_shift),
                    _ => {
                        for (j, c) in cols[..n].iter_mut().enumerate() {
                            *c = read_zero(zb, j, self.b_signed) - b_shift;
                        }
                        cols[n..padded].fill(0);
                    }
                }
                let packed: &[i8] = if self.b_packed {
                    // SAFETY: a packed `B` holds the panels, then a little-endian `i32` sum per
                    // padded column.
                    let (panels_of, sums) = unsafe { (std::slice::from_raw_parts(b.cast::<i8>(), len), std::slice::from_raw_parts(b.add(len), 4 * panels * PANEL)) };
                    let k32 = k as i32;
                    for (j, s) in sums.chunks_exact(4).enumerate() {
                        let sum = i32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                        cols[panels * PANEL + j] = sum.wrapping_sub(k32.wrapping_mul(cols[j]));
                    }
                    panels_of
                } else {
                    // SAFETY: `b` spans `k` rows of `ldb` for `n` columns.
                    unsafe { pack(b, k, n, self.ldb, !self.b_signed, packed, cols) };
                    packed
                };
                // SAFETY: the bias holds `bias_len()` elements.
                let bias_at = |i: usize| unsafe { bias.add(i).read_unaligned() };
                let col_bias = &mut cols[2 * padded..];
                col_bias.fill(0);
                if self.bias == QBias::PerColumn {
                    for (j, c) in col_bias[..n].iter_mut().enumerate() {
                        *c = bias_at(j).wrapping_neg();
                    }
                }
                let a_shift = if self.a_signed { 128 } else { 0 };
                // With `zb'` zero in every column the row term vanishes, and `A`'s rows are not
                // summed (a convolution whose constants were folded so, `kiln_lower`).
                let row_term = cols[..panels * PANEL].iter().any(|&z| z != 0);
                for i in 0..m {
                    let za_i = match self.a_zeros {
                        0 => 0,
                        1 => read_zero(za, 0, self.a_signed),
                        _ => read_zero(za, i, self.a_signed),
                    };
                    // SAFETY: row `i` of `A` holds `k` bytes.
                    let row = unsafe { std::slice::from_raw_parts(a.add(i * self.lda), k) };
                    let sum = if row_term { row_sum(row, a_flip, isa) } else { 0 };
                    rows[3 * i] = za_i + a_shift;
                    rows[3 * i + 1] = sum;
                    rows[3 * i + 2] = if self.bias == QBias::PerRow { bias_at(i).wrapping_neg() } else { 0 };
                }
                // With one zero point for all of `A`'s rows and one for `B`'s columns, the terms
                // become one per row and one per column: `zb'·Σa' + bias` and `za'·(Σb' − K·zb')`.
                let uniform = self.b_zeros <= 1 && (0..m).all(|i| rows[3 * i] == rows[0]);
                if uniform {
                    for (j, t) in col_terms.iter_mut().enumerate() {
                        *t = rows[0].wrapping_mul(cols[padded + j]).wrapping_add(cols[2 * padded + j]);
                    }
                    for (i, t) in row_terms.iter_mut().enumerate() {
                        *t = cols[0].wrapping_mul(rows[3 * i + 1]).wrapping_add(rows[3 * i + 2]);
                    }
                }
                let terms = uniform.then_some((&*row_terms, &*col_terms));
                let (cols, rows, packed) = (&*cols, &*rows, &*packed);
                // A signed `A` is flipped once, into a copy, rather than at each broadcast.
                scratch::with(&FLIPPED, if a_flip != 0 { m * k } else { 0 }, |flipped| {
                    let (a, lda) = if a_flip != 0 {
                        for (i, dst) in flipped.chunks_exact_mut(k.max(1)).enumerate().take(m) {
                            // SAFETY: row `i` of `A` holds `k` bytes.
                            let row = unsafe { std::slice::from_raw_parts(a.add(i * self.lda), k) };
                            for (d, &b) in dst.iter_mut().zip(row) {
                                *d = b ^ a_flip;
                            }
                        }
                        (flipped.as_ptr(), k)
                    } else {
                        (a, self.lda)
                    };
                    let tile = Tile { a, lda, k, n, c, ldc: self.ldc, packed, cols, rows, terms };
                    // Tasks are column blocks of two panels when there are enough of them, else row
                    // blocks; each computes its part of `C` in the same order whatever the count.
                    let work = m.saturating_mul(n).saturating_mul(k);
                    let parts = if work >= 1 << 18 { pool::threads() } else { 1 };
                    let col_blocks = panels.div_ceil(2);
                    let by_cols = col_blocks >= parts || m <= MR;
                    let tasks = if by_cols { parts.min(col_blocks) } else { parts.min(m.div_ceil(MR)) };
                    let shared = SharedPtr(&tile);
                    pool::for_each(tasks.max(1), &|t| {
                        let tile = shared.get();
                        let (rows, panels_of) = if by_cols {
                            let r = pool::part(col_blocks, tasks.max(1), 1, t);
                            (0..m, 2 * r.start..(2 * r.end).min(panels))
                        } else {
                            (pool::part(m, tasks.max(1), MR, t), 0..panels)
                        };
                        // SAFETY: each task writes its own rows or columns of `C`.
                        unsafe { tile.run(rows, panels_of, isa) };
                    });
                });
            });
        });
    }
}

/// `Σ (v ^ flip)` over a row of `A`'s bytes, exact in `i32` for any `k` a valid product has
/// (`255·k` with `k` far below 2^23).
fn row_sum(row: &[u8], flip: u8, isa: Isa) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: both vector kernels imply AVX2.
        return unsafe { avx2::row_sum(row, flip) };
    }
    let _ = isa;
    row.iter().map(|&v| i32::from(v ^ flip)).fold(0i32, i32::wrapping_add)
}

/// Everything a task reads, and where it writes.
struct Tile<'s> {
    a: *const u8,
    lda: usize,
    k: usize,
    n: usize,
    c: Out,
    ldc: usize,
    packed: &'s [i8],
    /// `zb'[j]`, then `Σ_k b'[k, j] − K·zb'[j]`, then `−bias[j]`, per padded column.
    cols: &'s [i32],
    /// `za'[i]`, `Σ_k a'[i, k]` and `−bias[i]`, interleaved per row.
    rows: &'s [i32],
    /// When the zero points are one per operand, the terms folded: `zb'·Σ_k a'[i, k] − bias[i]`
    /// per row and `za'·(Σ_k b'[k, j] − K·zb') − bias[j]` per padded column, so that
    /// `C[i, j] = Σ_k a'·b' − row[i] − column[j]`.
    terms: Option<(&'s [i32], &'s [i32])>,
}

impl Tile<'_> {
    /// Rows `rows` × panels `panels` of `C`.
    ///
    /// # Safety
    ///
    /// As [`Qgemm::run_raw`]; the block is inside `C`; `isa` one the CPU has.
    unsafe fn run(&self, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>, isa: Isa) {
        #[cfg(target_arch = "x86_64")]
        match isa {
            // SAFETY: by the caller's contract.
            Isa::Vnni => return unsafe { vnni::block(self, rows, panels) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2::block(self, rows, panels) },
            Isa::Portable => {}
        }
        let _ = isa;
        let groups = self.k.div_ceil(4);
        let padded = self.cols.len() / 3;
        // A's row as u8, padded with zeros to whole groups.
        let mut quad = vec![0u8; 4 * groups];
        for i in rows {
            for (q, v) in quad.iter_mut().zip(0..self.k) {
                // SAFETY: row `i` holds `k` bytes.
                *q = unsafe { self.a.add(i * self.lda + v).read() };
            }
            for p in panels.clone() {
                let panel = &self.packed[p * groups * 4 * PANEL..(p + 1) * groups * 4 * PANEL];
                let mut acc = [0i32; PANEL];
                for g in 0..groups {
                    for (col, sum) in acc.iter_mut().enumerate() {
                        for q in 0..4 {
                            *sum = sum.wrapping_add(i32::from(quad[4 * g + q]) * i32::from(panel[(g * PANEL + col) * 4 + q]));
                        }
                    }
                }
                let j0 = p * PANEL;
                let live = PANEL.min(self.n - j0);
                for (col, sum) in acc.iter_mut().enumerate().take(live) {
                    *sum = self.finish(*sum, i, j0 + col, padded);
                }
                // SAFETY: the row's live columns are inside `C`.
                unsafe { self.c.store(self.ldc, i, j0, &acc[..live]) };
            }
        }
    }

    /// The corrected accumulator of `C[i, j]`.
    #[inline(always)]
    fn finish(&self, sum: i32, i: usize, j: usize, padded: usize) -> i32 {
        let (zb, db, cb) = (self.cols[j], self.cols[padded + j], self.cols[2 * padded + j]);
        let (za, ra, rb) = (self.rows[3 * i], self.rows[3 * i + 1], self.rows[3 * i + 2]);
        sum.wrapping_sub(zb.wrapping_mul(ra)).wrapping_sub(za.wrapping_mul(db)).wrapping_sub(rb).wrapping_sub(cb)
    }
}

/// Packs `B` (`k × n`, row stride `ldb`, flipped to `i8` when `flip`) into `dst`: panel `p`,
/// group `g`, column `c`, byte `q` at `((p·groups + g)·16 + c)·4 + q`, zero past the matrix.
/// `cols` holds `zb'` in its first third on entry; its second third becomes `Σ_k b' − K·zb'`.
///
/// # Safety
///
/// `b` readable for `(k − 1)·ldb + n` bytes.
unsafe fn pack(b: *const u8, k: usize, n: usize, ldb: usize, flip: bool, dst: &mut [i8], cols: &mut [i32]) {
    let groups = k.div_ceil(4);
    let padded = cols.len() / 3;
    let (zeros, rest) = cols.split_at_mut(padded);
    let sums = &mut rest[..padded];
    let flip = if flip { 0x80u8 } else { 0 };
    for p in 0..n.div_ceil(PANEL) {
        let out = &mut dst[p * groups * 4 * PANEL..(p + 1) * groups * 4 * PANEL];
        let sums = &mut sums[p * PANEL..(p + 1) * PANEL];
        sums.fill(0);
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if (p + 1) * PANEL <= n && Isa::detect() != Isa::Portable {
            // SAFETY: the panel's 16 columns are inside `B`; AVX2 is present.
            done = unsafe { avx2::pack_panel(b.add(p * PANEL), k, ldb, flip, out, sums) };
        }
        // The rest (a panel past `n`, a last group past `k`, a CPU without AVX2) byte by byte.
        for g in done..groups {
            for (c, quad) in out[g * 4 * PANEL..(g + 1) * 4 * PANEL].chunks_exact_mut(4).enumerate() {
                let j = p * PANEL + c;
                let mut sum = 0i32;
                for (q, v) in quad.iter_mut().enumerate() {
                    let r = 4 * g + q;
                    // SAFETY: `(r, j)` is inside `B`.
                    *v = if r < k && j < n { (unsafe { b.add(r * ldb + j).read() } ^ flip) as i8 } else { 0 };
                    sum += i32::from(*v);
                }
                sums[c] = sums[c].wrapping_add(sum);
            }
        }
    }
    let k = k as i32;
    for (s, &z) in sums.iter_mut().zip(zeros.iter()) {
        *s = s.wrapping_sub(k.wrapping_mul(z));
    }
}

/// Bytes of a `k × n` matrix packed by [`pack_b`]: its panels, then an `i32` per padded column.
pub fn packed_b_len(k: usize, n: usize) -> Option<usize> {
    let padded = n.div_ceil(PANEL).checked_mul(PANEL)?;
    padded.checked_mul(k.div_ceil(4))?.checked_mul(4)?.checked_add(padded.checked_mul(4)?)
}

/// Packs `B` (`k × n`, row stride `ldb`, `i8` when `signed`, else `u8`) as [`Qgemm`] reads it
/// with `b_packed`: the panels of `i8` (an unsigned `B` moved down by 128), then `Σ_k` of each
/// padded column as a little-endian `i32`. The layout is the same on every CPU.
///
/// # Panics
///
/// If `b` is shorter than the matrix spans or `dst` than [`packed_b_len`].
pub fn pack_b(b: &[u8], k: usize, n: usize, ldb: usize, signed: bool, dst: &mut [u8]) {
    let len = packed_b_len(k, n).expect("packed B size");
    let span = if k == 0 || n == 0 { Some(0) } else { (k - 1).checked_mul(ldb).and_then(|s| s.checked_add(n)) };
    assert!(dst.len() >= len && span.is_some_and(|s| b.len() >= s) && ldb >= n, "pack_b operands are too short");
    let padded = n.div_ceil(PANEL) * PANEL;
    let (panels, sums) = dst[..len].split_at_mut(len - 4 * padded);
    let mut cols = vec![0i32; 3 * padded];
    // SAFETY: `i8` and `u8` have one layout; `b` spans the matrix (checked above).
    unsafe { pack(b.as_ptr(), k, n, ldb, !signed, std::slice::from_raw_parts_mut(panels.as_mut_ptr().cast::<i8>(), panels.len()), &mut cols) };
    for (s, v) in sums.chunks_exact_mut(4).zip(&cols[padded..2 * padded]) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// `C = (A − za)·(B − zb) + bias` in `i32`: [`Qgemm`] for generated code. `A` and `B` (and
/// their zero points) are `i8` when `a_signed` / `b_signed` is non-zero, else `u8`; `a_zeros` is
/// 0, 1 or `m`, `b_zeros` 0, 1 or `n`; `bias_mode` 0 (none), 1 (per row) or 2 (per column);
/// `b_packed` non-zero when `B` is packed by [`pack_b`]. An unused address is not read. Nothing happens when a size is negative or the sizes are
/// inconsistent.
///
/// # Safety
///
/// Every operand addressable for its extent; `c` overlaps no other. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_qgemm(
    a: *const u8,
    b: *const u8,
    c: *mut i32,
    za: *const u8,
    zb: *const u8,
    bias: *const i32,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    a_signed: i64,
    b_signed: i64,
    a_zeros: i64,
    b_zeros: i64,
    bias_mode: i64,
    b_packed: i64,
) {
    let Some(q) = Qgemm::from_args([m, n, k, lda, ldb, ldc, a_zeros, b_zeros], [a_signed, b_signed, bias_mode, b_packed]) else { return };
    // SAFETY: by the caller's contract.
    unsafe { q.run_raw(a, b, Out::Acc(c), za, zb, bias, Isa::detect()) }
}

/// [`kiln_rt_qgemm`] with the output stage [`Requant`]: `y[i, j] = sat(round(C[i, j] · s + zero))`
/// into `i8` (`y_signed` non-zero) or `u8`, `s` being `scales[0]`, `scales[i]` or `scales[j]`
/// for `scale_mode` 0, 1 or 2. Nothing happens when the sizes are inconsistent or the zero
/// point does not fit `i32`.
///
/// # Safety
///
/// As [`kiln_rt_qgemm`], `y` in place of `c`; `scales` readable for its count.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_qgemm_requantize(
    a: *const u8,
    b: *const u8,
    y: *mut u8,
    za: *const u8,
    zb: *const u8,
    bias: *const i32,
    scales: *const f32,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    a_signed: i64,
    b_signed: i64,
    a_zeros: i64,
    b_zeros: i64,
    bias_mode: i64,
    b_packed: i64,
    scale_mode: i64,
    zero: i64,
    y_signed: i64,
) {
    let Some(q) = Qgemm::from_args([m, n, k, lda, ldb, ldc, a_zeros, b_zeros], [a_signed, b_signed, bias_mode, b_packed]) else { return };
    let (Some(scales_along), Ok(zero)) = (QScale::from_code(scale_mode), i32::try_from(zero)) else { return };
    let r = Requant { scales: scales_along, zero, signed: y_signed != 0 };
    // SAFETY: by the caller's contract.
    unsafe { q.run_raw(a, b, Out::new_bytes(y, scales, &r, q.m, q.n), za, zb, bias, Isa::detect()) }
}
