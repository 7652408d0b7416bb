//! Single-precision matrix multiplication for generated code.
//!
//! A cache-blocked scalar kernel the compiler auto-vectorizes. Each output element is summed
//! over `k` in ascending order in an `f32` accumulator starting at zero, with separate multiply
//! and add, and then scaled: exactly the loop-IR interpreter's `Sgemm`, so compiled code and the
//! oracle agree bit for bit. Blocking is over rows, columns and `k` (`k` blocks are visited in
//! order, the partial sums kept in a scratch tile), which preserves that order.
//! A later micro-kernel (AVX-512 / AVX2+FMA) replaces the body and keeps the symbol.

/// Rows of `C` per block.
const MC: usize = 32;
/// Columns of `C` per block: one row of the accumulator tile is 1 KiB.
const NC: usize = 256;
/// Depth per block: a packed `B` panel is `KC × NC` floats (256 KiB, L2-resident).
const KC: usize = 256;

/// `C[m×n] = alpha·op(A)·op(B) + beta·C` on row-major `f32` matrices with leading dimensions
/// `lda`, `ldb`, `ldc` (in elements). `op(A)` is `A` (`m×k`), or `Aᵀ` when `trans_a != 0` (`A`
/// is then `k×m`); likewise `op(B)` is `k×n`. When `beta == 0`, `C` is not read. Nothing
/// happens when `m` or `n` is not positive; `k ≤ 0` gives `alpha·0 + beta·C`.
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
    let (m, n, k) = (m as usize, n as usize, k.max(0) as usize);
    let (lda, ldb, ldc) = (lda as isize, ldb as isize, ldc as isize);
    // Element (row, col) of op(A) and op(B).
    let a_at = |i: usize, p: usize| -> f32 {
        let off = if trans_a != 0 { p as isize * lda + i as isize } else { i as isize * lda + p as isize };
        // SAFETY: in bounds by the caller's contract.
        unsafe { a.offset(off).read_unaligned() }
    };
    let b_at = |p: usize, j: usize| -> f32 {
        let off = if trans_b != 0 { j as isize * ldb + p as isize } else { p as isize * ldb + j as isize };
        // SAFETY: in bounds by the caller's contract.
        unsafe { b.offset(off).read_unaligned() }
    };
    let mut acc = vec![0f32; MC * NC.min(n)];
    let mut panel = vec![0f32; KC.min(k.max(1)) * NC.min(n)];
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for i0 in (0..m).step_by(MC) {
            let mc = MC.min(m - i0);
            acc[..mc * nc].fill(0.0);
            for p0 in (0..k).step_by(KC) {
                let kc = KC.min(k - p0);
                for p in 0..kc {
                    let row = &mut panel[p * nc..(p + 1) * nc];
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = b_at(p0 + p, j0 + j);
                    }
                }
                for i in 0..mc {
                    let acc_row = &mut acc[i * nc..(i + 1) * nc];
                    for p in 0..kc {
                        let aip = a_at(i0 + i, p0 + p);
                        let b_row = &panel[p * nc..(p + 1) * nc];
                        for (s, &bv) in acc_row.iter_mut().zip(b_row) {
                            *s += aip * bv;
                        }
                    }
                }
            }
            for i in 0..mc {
                // SAFETY: row i0+i, columns j0..j0+nc of C are in bounds by the caller's contract.
                let c_row = unsafe { c.offset((i0 + i) as isize * ldc + j0 as isize) };
                for (j, &s) in acc[i * nc..(i + 1) * nc].iter().enumerate() {
                    // SAFETY: as above.
                    unsafe {
                        let out = c_row.add(j);
                        out.write_unaligned(if beta == 0.0 { alpha * s } else { alpha * s + beta * out.read_unaligned() });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::kiln_rt_sgemm;

    /// The interpreter's loop, for comparison.
    #[allow(clippy::too_many_arguments)]
    fn naive(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize, lda: usize, ldb: usize, ldc: usize, ta: bool, tb: bool, alpha: f32, beta: f32) {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for p in 0..k {
                    let x = if ta { a[p * lda + i] } else { a[i * lda + p] };
                    let y = if tb { b[j * ldb + p] } else { b[p * ldb + j] };
                    acc += x * y;
                }
                let old = c[i * ldc + j];
                c[i * ldc + j] = if beta == 0.0 { alpha * acc } else { alpha * acc + beta * old };
            }
        }
    }

    fn data(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn bit_identical_to_the_naive_loop() {
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (33, 300, 270), (70, 17, 600), (5, 9, 0)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for (alpha, beta) in [(1.0, 0.0), (0.5, 1.5)] {
                    let (lda, ldb, ldc) = (if ta { m + 1 } else { k + 2 }, if tb { k + 3 } else { n + 1 }, n + 2);
                    let a = data(lda * if ta { k } else { m } + 4, 1);
                    let b = data(ldb * if tb { n } else { k } + 4, 2);
                    let mut want = data(ldc * m, 3);
                    let mut got = want.clone();
                    naive(&a, &b, &mut want, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta);
                    // SAFETY: the buffers hold every addressed element.
                    unsafe {
                        kiln_rt_sgemm(a.as_ptr(), b.as_ptr(), got.as_mut_ptr(), m as i64, n as i64, k as i64, lda as i64, ldb as i64, ldc as i64, i64::from(ta), i64::from(tb), alpha, beta);
                    }
                    let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "m={m} n={n} k={k} ta={ta} tb={tb} alpha={alpha} beta={beta}");
                }
            }
        }
    }
}
