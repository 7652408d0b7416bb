//! Softmax along the rows of an `f32` matrix, in place: `x[r, c] = e^(x[r, c] − m) / Σ_c e^(x[r, c] − m)`
//! with `m` the row's maximum, or 0 when the maximum is −∞ (a row of −∞ becomes zeros, not
//! NaN); a sum of 0 divides by 1.
//!
//! **Design.** Three passes over a row, each a loop the compiler vectorizes under the
//! `#[target_feature]` of the detected instruction set (as the epilogue does): the maximum in
//! 16 lanes, then `e^(x − m)` stored back and summed in 16 lanes (the crate's branch-free
//! `vmath::exp`), then the products with the sum's reciprocal. The lanes are combined in a
//! fixed order, so results depend only on the row, not on the instruction set's vector width
//! or on how rows are split over the thread pool. Rows at addresses that are not `f32`-aligned
//! go through a scratch copy.
//!
//! **Numerics.** `e^x` is within 1.5 ulp (see `vmath`), where generated scalar code calls the
//! `f64` `exp` and rounds; sums are in `f32`, in lanes; a product with the reciprocal is within
//! an ulp of the quotient. A NaN anywhere in a row (or `+inf`, whose shift gives `inf − inf`)
//! makes the whole row NaN, as the definition does.

#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::gemm::{Isa, with_scratch};
use crate::pool::{self, SharedPtr};
use crate::vmath;

/// A row-wise softmax over `rows × cols` contiguous elements.
///
/// ```
/// use kiln_runtime::softmax::Softmax;
/// let mut x = [0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY];
/// Softmax { rows: 2, cols: 2 }.run(&mut x);
/// assert_eq!(x, [0.5, 0.5, 0.0, 0.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Softmax {
    /// Rows, each normalized on its own.
    pub rows: usize,
    /// Elements per row (the row stride).
    pub cols: usize,
}

impl Softmax {
    /// Whether `rows·cols` elements are representable as bytes in `isize`. [`run`](Self::run)
    /// does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        self.rows.checked_mul(self.cols).and_then(|n| n.checked_mul(4)).is_some_and(|b| b <= isize::MAX as usize)
    }

    /// Elements read and written (saturating).
    pub fn len(&self) -> usize {
        self.rows.saturating_mul(self.cols)
    }

    /// True when there is no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Computes the softmax with the detected instruction set.
    ///
    /// # Panics
    ///
    /// If `x` is shorter than [`len`](Self::len).
    pub fn run(&self, x: &mut [f32]) {
        self.run_with(Isa::detected(), x);
    }

    /// Computes the softmax with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, x: &mut [f32]) {
        assert!(x.len() >= self.len(), "softmax slice too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: `x` holds every element and is exclusively borrowed.
        unsafe { self.run_raw(isa, x.as_mut_ptr()) }
    }

    /// The softmax on a raw pointer.
    ///
    /// # Safety
    ///
    /// `x` readable and writable for [`len`](Self::len) elements; the CPU runs `isa`. No
    /// alignment is required.
    unsafe fn run_raw(&self, isa: Isa, x: *mut f32) {
        if !self.is_valid() || self.is_empty() {
            return;
        }
        let parts = if self.len() >= SPLIT_MIN { pool::threads().min(self.rows) } else { 1 };
        let x = SharedPtr(x);
        pool::for_each(parts, &|i| {
            for r in pool::part(self.rows, parts, 1, i) {
                // SAFETY: row `r` is inside `x`, and no other part touches it.
                unsafe { row_raw(isa, x.get().add(r * self.cols), self.cols) }
            }
        });
    }
}

/// Matrices of fewer elements than this run on one thread (a split costs a few microseconds).
const SPLIT_MIN: usize = 1 << 14;

/// Lanes of the maximum and the sum (at least the widest vector's).
const LANES: usize = 16;

/// One row of `n` elements at `p`.
///
/// # Safety
///
/// `p` readable and writable for `n` elements; the CPU runs `isa`.
unsafe fn row_raw(isa: Isa, p: *mut f32, n: usize) {
    let run = |x: &mut [f32]| {
        // SAFETY: `isa` runs here.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => row_avx512(x),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => row_avx2(x),
                _ => row(x),
            }
        }
    };
    if (p as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        // SAFETY: aligned, and inside the caller's buffer.
        run(unsafe { std::slice::from_raw_parts_mut(p, n) });
    } else {
        with_scratch(n, |s| {
            // SAFETY: byte copies of the row, which the caller lets us read and write.
            unsafe {
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), s.as_mut_ptr().cast::<u8>(), 4 * n);
                run(s);
                std::ptr::copy_nonoverlapping(s.as_ptr().cast::<u8>(), p.cast::<u8>(), 4 * n);
            }
        });
    }
}

/// [`row`] in AVX-512 instructions (`avx512.rs`).
///
/// # Safety
///
/// The CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_avx512(x: &mut [f32]) {
    // SAFETY: the CPU has AVX-512F.
    unsafe { avx512::row(x) }
}

/// [`row`] compiled for AVX2.
///
/// # Safety
///
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(x: &mut [f32]) {
    row(x)
}

/// Sums the lanes pairwise, in the same order whatever the vector width.
#[inline(always)]
fn combine(mut v: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            v[l] = f(v[l], v[l + w]);
        }
    }
    v[0]
}

/// The softmax of one row.
#[inline(always)]
fn row(x: &mut [f32]) {
    let whole = x.len() / LANES * LANES;
    // Pass 1: the maximum (NaN is skipped here; it reaches every output through the sum).
    let mut m = [f32::NEG_INFINITY; LANES];
    let max = |a: f32, b: f32| if b > a { b } else { a };
    for c in x[..whole].chunks_exact(LANES) {
        for l in 0..LANES {
            m[l] = max(m[l], c[l]);
        }
    }
    for (l, &v) in x[whole..].iter().enumerate() {
        m[l] = max(m[l], v);
    }
    let m = combine(m, max);
    let shift = if m == f32::NEG_INFINITY { 0.0 } else { m };
    // Pass 2: the exponentials, stored, and their sum.
    let mut s = [0.0f32; LANES];
    for c in x[..whole].chunks_exact_mut(LANES) {
        for l in 0..LANES {
            let e = vmath::exp(c[l] - shift);
            c[l] = e;
            s[l] += e;
        }
    }
    for (l, v) in x[whole..].iter_mut().enumerate() {
        let e = vmath::exp(*v - shift);
        *v = e;
        s[l] += e;
    }
    let sum = combine(s, |a, b| a + b);
    // Pass 3: the products with the sum's reciprocal (a division per element costs several
    // products).
    let scale = if sum == 0.0 { 1.0 } else { 1.0 / sum };
    for v in x.iter_mut() {
        *v *= scale;
    }
}

/// `x[r, c] = softmax over c` in place for `rows × cols` `f32` elements (row stride `cols`):
/// [`Softmax`] for generated code. Nothing happens when a size is not positive or the matrix
/// is too large to address.
///
/// # Safety
///
/// `rows·cols` elements at `x` readable and writable. No alignment is required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_softmax(x: *mut f32, rows: i64, cols: i64) {
    let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else { return };
    let s = Softmax { rows, cols };
    let isa = Isa::detected();
    // SAFETY: by the caller's contract; `isa` runs here.
    unsafe { s.run_raw(isa, x) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition in `f64`, from the shifted arguments rounded to `f32` as the kernel (and
    /// generated code) rounds them: that rounding alone moves `e^(x − m)` by up to
    /// `|x − m|·2⁻²⁴` relative, more than the rest of the computation.
    fn reference(x: &[f32]) -> Vec<f64> {
        let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let shift = if m == f32::NEG_INFINITY { 0.0 } else { m };
        let e: Vec<f64> = x.iter().map(|&v| f64::from(v - shift).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / if s == 0.0 { 1.0 } else { s }).collect()
    }

    #[test]
    fn rows_match_the_definition_on_every_isa() {
        let mut rng = kiln_testkit::Rng::new(0x9e37_79b9);
        for cols in [1, 3, 15, 16, 17, 128, 1000] {
            let x: Vec<f32> = (0..3 * cols).map(|_| (rng.next_u64() % 4001) as f32 / 100.0 - 20.0).collect();
            let mut first: Option<Vec<f32>> = None;
            for isa in Isa::runnable() {
                let mut y = x.clone();
                Softmax { rows: 3, cols }.run_with(isa, &mut y);
                for r in 0..3 {
                    let want = reference(&x[r * cols..(r + 1) * cols]);
                    for (c, (&got, &want)) in y[r * cols..(r + 1) * cols].iter().zip(&want).enumerate() {
                        // exp's 1.5 ulp, the f32 sum in lanes and the quotient's rounding.
                        assert!((f64::from(got) - want).abs() <= 1e-6 * want + 1e-30, "{isa:?} cols {cols} ({r}, {c}): {got} vs {want}");
                    }
                }
                // Lanes combine in a fixed order: every instruction set agrees bit for bit.
                match &first {
                    None => first = Some(y),
                    Some(f) => assert!(f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} differs"),
                }
            }
        }
    }

    /// Rows spread over 220 (results from 1 down through subnormals to 0 at the underflow),
    /// with −∞ entries, every length around the vector width: each instruction set's kernel
    /// (AVX-512's own exponential among them) gives the same bits.
    #[test]
    fn wide_rows_agree_bit_for_bit_on_every_isa() {
        let mut rng = kiln_testkit::Rng::new(0x51f7);
        for cols in [1, 7, 16, 31, 33, 500] {
            let x: Vec<f32> = (0..4 * cols)
                .map(|i| if i % 11 == 5 { f32::NEG_INFINITY } else { (rng.next_u64() % 22_001) as f32 / 100.0 - 200.0 })
                .collect();
            let results: Vec<Vec<u32>> = Isa::runnable()
                .into_iter()
                .map(|isa| {
                    let mut y = x.clone();
                    Softmax { rows: 4, cols }.run_with(isa, &mut y);
                    y.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            assert!(results.iter().all(|r| *r == results[0]), "cols {cols}: the instruction sets differ");
            assert!(cols < 500 || results[0].iter().any(|&b| b != 0 && f32::from_bits(b) < f32::MIN_POSITIVE), "no subnormal result");
        }
    }

    #[test]
    fn special_rows() {
        let inf = f32::INFINITY;
        let cases: [(&[f32], &[f32]); 4] = [
            (&[-inf, -inf, -inf], &[0.0, 0.0, 0.0]),
            (&[0.0, -inf, 0.0], &[0.5, 0.0, 0.5]),
            (&[1.0, f32::NAN, 2.0], &[f32::NAN; 3]),
            (&[inf, 1.0], &[f32::NAN; 2]),
        ];
        for (x, want) in cases {
            let mut y = x.to_vec();
            Softmax { rows: 1, cols: x.len() }.run(&mut y);
            let same = y.iter().zip(want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(same, "{x:?} gave {y:?}, not {want:?}");
        }
    }

    #[test]
    fn unaligned_rows_and_the_c_entry_point() {
        let x: Vec<f32> = (0..40).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut want = x.clone();
        Softmax { rows: 4, cols: 10 }.run(&mut want);
        // The same values one byte into a buffer.
        let mut bytes = vec![0u8; 4 * 40 + 1];
        for (i, v) in x.iter().enumerate() {
            bytes[1 + 4 * i..5 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        // SAFETY: 40 elements at byte 1 of `bytes`.
        unsafe { kiln_rt_softmax(bytes.as_mut_ptr().add(1).cast(), 4, 10) };
        for (i, w) in want.iter().enumerate() {
            let got = f32::from_ne_bytes(bytes[1 + 4 * i..5 + 4 * i].try_into().unwrap());
            assert_eq!(got.to_bits(), w.to_bits());
        }
        // Nonsense sizes do nothing.
        // SAFETY: nothing is addressed.
        unsafe { kiln_rt_softmax(std::ptr::null_mut(), -1, 5) };
    }
}
