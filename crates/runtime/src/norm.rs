//! Layer and RMS normalization along the rows of an `f32` matrix: with `n` the row length,
//! `m = Σx / n` and `v = Σ(x − m)² / n`, LayerNormalization writes
//! `y = ((x − m) · (1 / √(v + ε))) · scale + bias`, RMSNormalization `y = (x · (1 / √(Σx² / n
//! + ε))) · scale`, `scale` and `bias` indexed by column.
//!
//! **Design.** Two or three passes over a row, each a loop the compiler vectorizes under the
//! `#[target_feature]` of the detected instruction set (as `softmax` does): the sums in 16
//! lanes combined in a fixed order, so results depend only on the row, not on the vector width
//! or on how rows are split over the thread pool. Operands at addresses that are not
//! `f32`-aligned (weights sliced from a model file) go through scratch copies.
//!
//! **Numerics.** The statistics are `f32`, as the loop IR computes them for `f32` inputs with
//! the default stash type, but summed in lanes rather than in one running sum, so results
//! differ from the generated scalar loop by rounding; the final expression is the loop IR's,
//! operation for operation (no fused multiply-adds). A NaN or infinity in a row makes the row
//! NaN.

use crate::gemm::{Isa, with_scratch};
use crate::pool::{self, SharedPtr};

/// One normalization of `rows` rows of `cols` contiguous elements.
///
/// ```
/// use kiln_runtime::norm::LayerNorm;
/// let n = LayerNorm { rows: 1, cols: 4, epsilon: 0.0, bias: true, rms: false };
/// let mut y = [0.0; 4];
/// n.run(&[1.0, 3.0, 1.0, 3.0], &[2.0; 4], &[0.5; 4], &mut y);
/// assert_eq!(y, [-1.5, 2.5, -1.5, 2.5]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    /// Rows, each normalized on its own.
    pub rows: usize,
    /// Elements per row (the row stride), and of the scale and bias.
    pub cols: usize,
    /// Added to the variance (or mean square) before the square root.
    pub epsilon: f32,
    /// Whether the bias is added (LayerNormalization's optional input).
    pub bias: bool,
    /// RMSNormalization: no centering, no bias.
    pub rms: bool,
}

impl LayerNorm {
    /// Whether `rows·cols` elements are representable as bytes in `isize`. [`run`](Self::run)
    /// does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        self.rows.checked_mul(self.cols).and_then(|n| n.checked_mul(4)).is_some_and(|b| b <= isize::MAX as usize)
    }

    /// Elements of `x` read and of `y` written (saturating).
    pub fn len(&self) -> usize {
        self.rows.saturating_mul(self.cols)
    }

    /// True when there is no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements of the bias read (0 without one, for RMS, or when there is no element).
    pub fn bias_len(&self) -> usize {
        if self.bias && !self.rms && !self.is_empty() { self.cols } else { 0 }
    }

    /// Normalizes with the detected instruction set.
    ///
    /// # Panics
    ///
    /// If `x` or `y` is shorter than [`len`](Self::len), `scale` than `cols` (when there are
    /// rows) or `bias` than [`bias_len`](Self::bias_len).
    pub fn run(&self, x: &[f32], scale: &[f32], bias: &[f32], y: &mut [f32]) {
        self.run_with(Isa::detected(), x, scale, bias, y);
    }

    /// Normalizes with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, x: &[f32], scale: &[f32], bias: &[f32], y: &mut [f32]) {
        let scale_len = if self.is_empty() { 0 } else { self.cols };
        assert!(x.len() >= self.len() && y.len() >= self.len() && scale.len() >= scale_len && bias.len() >= self.bias_len(), "layernorm operand slices are too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element; `y` is exclusively borrowed, so it overlaps
        // none of the others.
        unsafe { self.run_raw(isa, x.as_ptr(), scale.as_ptr(), bias.as_ptr(), y.as_mut_ptr()) }
    }

    /// The normalization on raw pointers; nothing when the sizes are not valid.
    ///
    /// # Safety
    ///
    /// `x` readable and `y` writable for [`len`](Self::len) elements, `scale` readable for
    /// `cols` and `bias` for [`bias_len`](Self::bias_len); `y` overlaps none of them; the CPU
    /// runs `isa`. No alignment is required.
    unsafe fn run_raw(&self, isa: Isa, x: *const f32, scale: *const f32, bias: *const f32, y: *mut f32) {
        if !self.is_valid() || self.is_empty() {
            return;
        }
        let parts = if self.len() >= SPLIT_MIN { pool::threads().min(self.rows) } else { 1 };
        let ptrs = SharedPtr((x, scale, bias, y));
        pool::for_each(parts, &|i| {
            let (x, scale, bias, y) = ptrs.get();
            let r = pool::part(self.rows, parts, 1, i);
            // SAFETY: rows `r` of `x` and `y`, which no other part writes; the rest by the
            // caller's contract.
            unsafe { self.part(isa, x, scale, bias, y, r) }
        });
    }

    /// Rows `r` on this thread, through aligned scratch copies of what is not aligned.
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw), for rows `r`.
    unsafe fn part(&self, isa: Isa, x: *const f32, scale: *const f32, bias: *const f32, y: *mut f32, r: std::ops::Range<usize>) {
        let n = self.cols;
        let aligned = |p: *const f32| (p as usize).is_multiple_of(std::mem::align_of::<f32>());
        let has_bias = self.bias_len() > 0;
        with_scratch(4 * n, |s| {
            let (s_scale, rest) = s.split_at_mut(n);
            let (s_bias, rest) = rest.split_at_mut(n);
            let (s_x, s_y) = rest.split_at_mut(n);
            // SAFETY: by the caller's contract each operand holds the elements sliced or
            // copied here (byte copies need no alignment); `y` overlaps none of the others.
            unsafe {
                let slice = |p: *const f32, copy: &mut [f32]| -> *const f32 {
                    if aligned(p) {
                        p
                    } else {
                        std::ptr::copy_nonoverlapping(p.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), 4 * n);
                        copy.as_ptr()
                    }
                };
                let scale = std::slice::from_raw_parts(slice(scale, s_scale), n);
                let bias = if has_bias { Some(std::slice::from_raw_parts(slice(bias, s_bias), n)) } else { None };
                for row in r {
                    let xr = std::slice::from_raw_parts(slice(x.add(row * n), s_x), n);
                    let yr = y.add(row * n);
                    if aligned(yr) {
                        run_row(isa, self, xr, scale, bias, std::slice::from_raw_parts_mut(yr, n));
                    } else {
                        run_row(isa, self, xr, scale, bias, s_y);
                        std::ptr::copy_nonoverlapping(s_y.as_ptr().cast::<u8>(), yr.cast::<u8>(), 4 * n);
                    }
                }
            }
        });
    }
}

/// Matrices of fewer elements than this run on one thread (a split costs a few microseconds).
const SPLIT_MIN: usize = 1 << 14;

/// Lanes of the sums (at least the widest vector's).
const LANES: usize = 16;

/// One row with `isa`'s instructions.
///
/// # Safety
///
/// The CPU runs `isa`.
unsafe fn run_row(isa: Isa, g: &LayerNorm, x: &[f32], scale: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    // SAFETY: `isa` runs here.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => row_avx512(g, x, scale, bias, y),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => row_avx2(g, x, scale, bias, y),
            _ => row(g, x, scale, bias, y),
        }
    }
}

/// [`row`] compiled for AVX-512.
///
/// # Safety
///
/// The CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_avx512(g: &LayerNorm, x: &[f32], scale: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    row(g, x, scale, bias, y)
}

/// [`row`] compiled for AVX2.
///
/// # Safety
///
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(g: &LayerNorm, x: &[f32], scale: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    row(g, x, scale, bias, y)
}

/// `Σ f(x)` in 16 lanes, combined pairwise in the same order whatever the vector width.
#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let whole = x.len() / LANES * LANES;
    let mut s = [0.0f32; LANES];
    for c in x[..whole].chunks_exact(LANES) {
        for l in 0..LANES {
            s[l] += f(c[l]);
        }
    }
    for (l, &v) in x[whole..].iter().enumerate() {
        s[l] += f(v);
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            s[l] += s[l + w];
        }
    }
    s[0]
}

/// One row: `x`, `scale`, `bias` and `y` of one length.
#[inline(always)]
fn row(g: &LayerNorm, x: &[f32], scale: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    let n = x.len() as f32;
    let (x, scale, y) = (&x[..y.len()], &scale[..y.len()], &mut *y);
    if g.rms {
        let inv = 1.0 / (lane_sum(x, |v| v * v) / n + g.epsilon).sqrt();
        for i in 0..y.len() {
            y[i] = x[i] * inv * scale[i];
        }
        return;
    }
    let mean = lane_sum(x, |v| v) / n;
    let inv = 1.0 / (lane_sum(x, |v| (v - mean) * (v - mean)) / n + g.epsilon).sqrt();
    match bias {
        Some(b) => {
            let b = &b[..y.len()];
            for i in 0..y.len() {
                y[i] = (x[i] - mean) * inv * scale[i] + b[i];
            }
        }
        None => {
            for i in 0..y.len() {
                y[i] = (x[i] - mean) * inv * scale[i];
            }
        }
    }
}

/// The normalization for generated code: [`LayerNorm`] with its argument names. `x`, `y` point
/// at `rows·cols` elements, `scale` at `cols`, `b` at `cols` when `bias != 0` (otherwise it
/// is not read); `rms != 0` selects RMS normalization (no centering, no bias). Nothing happens
/// when a size is negative or the sizes are not [valid](LayerNorm::is_valid).
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations, `y` writable and
/// overlapping none of the others. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_layernorm(x: *const f32, scale: *const f32, b: *const f32, y: *mut f32, rows: i64, cols: i64, bias: i64, rms: i64, epsilon: f32) {
    let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else { return };
    let g = LayerNorm { rows, cols, epsilon, bias: bias != 0, rms: rms != 0 };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { g.run_raw(Isa::detected(), x, scale, b, y) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::test_data as data;

    /// The definition in `f64`.
    fn reference(g: &LayerNorm, x: &[f32], scale: &[f32], bias: &[f32]) -> Vec<f64> {
        let n = g.cols as f64;
        x.chunks(g.cols)
            .flat_map(|r| {
                let r: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
                let mean = if g.rms { 0.0 } else { r.iter().sum::<f64>() / n };
                let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let inv = 1.0 / (var + f64::from(g.epsilon)).sqrt();
                r.iter().enumerate().map(|(i, v)| (v - mean) * inv * f64::from(scale[i]) + if g.bias_len() > 0 { f64::from(bias[i]) } else { 0.0 }).collect::<Vec<f64>>()
            })
            .collect()
    }

    #[test]
    fn matches_the_definition_on_every_instruction_set() {
        for (rows, cols, bias, rms) in [(3, 256, true, false), (5, 37, false, false), (2, 1, true, false), (4, 100, false, true), (1, 15, true, true)] {
            let g = LayerNorm { rows, cols, epsilon: 1e-5, bias, rms };
            let (x, scale, b) = (data(rows * cols, 1), data(cols, 2), data(cols, 3));
            let want = reference(&g, &x, &scale, &b);
            let mut first: Option<Vec<f32>> = None;
            for isa in Isa::runnable() {
                let mut y = vec![f32::NAN; rows * cols];
                g.run_with(isa, &x, &scale, &b, &mut y);
                for (i, (&got, &w)) in y.iter().zip(&want).enumerate() {
                    assert!((f64::from(got) - w).abs() <= 1e-5 * (1.0 + w.abs()), "{isa:?} {g:?} element {i}: {got} vs {w}");
                }
                // The lanes are combined in one order: every instruction set agrees exactly.
                match &first {
                    Some(f) => assert!(f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} {g:?}"),
                    None => first = Some(y),
                }
            }
        }
    }

    #[test]
    fn unaligned_operands_and_threads_give_the_same_bits() {
        let g = LayerNorm { rows: 97, cols: 300, epsilon: 1e-3, bias: true, rms: false };
        let (x, scale, b) = (data(g.len(), 4), data(g.cols, 5), data(g.cols, 6));
        let mut want = vec![0.0; g.len()];
        g.run(&x, &scale, &b, &mut want);
        // Every operand one byte past an f32 boundary.
        let bytes = |v: &[f32]| -> Vec<u8> { std::iter::once(0u8).chain(v.iter().flat_map(|f| f.to_ne_bytes())).collect() };
        let (xb, sb, bb) = (bytes(&x), bytes(&scale), bytes(&b));
        let mut yb = vec![0u8; 4 * g.len() + 1];
        // SAFETY: each buffer holds its operand's bytes from offset 1.
        unsafe { g.run_raw(Isa::detected(), xb[1..].as_ptr().cast(), sb[1..].as_ptr().cast(), bb[1..].as_ptr().cast(), yb[1..].as_mut_ptr().cast()) };
        let y: Vec<f32> = yb[1..].chunks(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert!(y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
        for threads in [2, 3] {
            let mut split = vec![0.0; g.len()];
            Pool::new(threads).unwrap().enter(|| g.run(&x, &scale, &b, &mut split));
            assert!(split.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{threads} threads");
        }
    }
}
