use kiln_testkit::Rng;

use super::*;

/// The definition, element by element in `i64`, wrapped to `i32`.
fn reference(q: &Qgemm, a: &[u8], b: &[u8], za: &[u8], zb: &[u8], bias: &[i32]) -> Vec<i32> {
    let value = |byte: u8, signed: bool| if signed { i64::from(byte as i8) } else { i64::from(byte) };
    let zero = |z: &[u8], count: usize, at: usize, signed: bool| match count {
        0 => 0,
        1 => value(z[0], signed),
        _ => value(z[at], signed),
    };
    let (_, _, ec) = q.extents();
    let mut c = vec![i32::MIN; ec];
    for i in 0..q.m {
        for j in 0..q.n {
            let mut sum = 0i64;
            for p in 0..q.k {
                let av = value(a[i * q.lda + p], q.a_signed) - zero(za, q.a_zeros, i, q.a_signed);
                let bv = value(b[p * q.ldb + j], q.b_signed) - zero(zb, q.b_zeros, j, q.b_signed);
                sum += av * bv;
            }
            sum += match q.bias {
                QBias::None => 0,
                QBias::PerRow => i64::from(bias[i]),
                QBias::PerColumn => i64::from(bias[j]),
            };
            c[i * q.ldc + j] = sum as i32;
        }
    }
    c
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Shapes with row, column and depth tails, padded leading dimensions, every signedness pair
/// and every zero-point form, on every kernel the CPU has (VNNI, AVX2) and the portable
/// loop; the untouched padding of `C` stays as it was.
#[test]
fn matches_the_definition() {
    let mut rng = Rng::new(7);
    let paths = Isa::available();
    for &(m, n, k) in &[(1, 1, 1), (6, 32, 8), (7, 33, 9), (13, 17, 3), (2, 70, 64), (12, 16, 131), (5, 1, 5)] {
        for (a_signed, b_signed) in [(false, true), (false, false), (true, true), (true, false)] {
            // (m, 1): one zero point repeated per row, which folds the terms as (1, 1) does.
            for (a_zeros, b_zeros, bias) in [(0, 0, QBias::None), (1, 1, QBias::PerRow), (m, n, QBias::PerColumn), (1, n, QBias::None), (m, 1, QBias::PerColumn)] {
                let (lda, ldb, ldc) = (k + 3, n + 1, n + 2);
                let q = Qgemm { m, n, k, lda, ldb, ldc, a_signed, b_signed, a_zeros, b_zeros, bias, b_packed: false };
                assert!(q.is_valid());
                let (ea, eb, ec) = q.extents();
                let (a, b) = (bytes(&mut rng, ea), bytes(&mut rng, eb));
                let (mut za, zb) = (bytes(&mut rng, a_zeros), bytes(&mut rng, b_zeros));
                if b_zeros == 1 && a_zeros == m {
                    let z = za[0];
                    za.fill(z);
                }
                let bias: Vec<i32> = (0..q.bias_len()).map(|_| rng.next_u64() as i32 >> 8).collect();
                let want = reference(&q, &a, &b, &za, &zb, &bias);
                // B as it is, and packed ahead.
                let packed_q = Qgemm { b_packed: true, ..q };
                let mut packed = vec![0u8; packed_b_len(k, n).unwrap()];
                pack_b(&b, k, n, ldb, b_signed, &mut packed);
                for (q, b) in [(&q, &b), (&packed_q, &packed)] {
                    for &isa in &paths {
                        let mut c = vec![i32::MIN; ec];
                        // SAFETY: the vectors hold the extents; VNNI only where detected.
                        unsafe { q.run_raw(a.as_ptr(), b.as_ptr(), Out::Acc(c.as_mut_ptr()), za.as_ptr(), zb.as_ptr(), bias.as_ptr(), isa) };
                        assert_eq!(c, want, "{q:?} {isa:?}");
                    }
                }
            }
        }
    }
}

/// The extreme bytes, where a wrong flip or an `i16` intermediate would show.
#[test]
fn extreme_values_are_exact() {
    for (a_signed, b_signed, av, bv) in [(false, true, 255u8, 0x80u8), (true, true, 0x80, 0x80), (false, false, 255, 255), (true, false, 0x7f, 0)] {
        let (m, n, k) = (3, 20, 259);
        let q = Qgemm { m, n, k, lda: k, ldb: n, ldc: n, a_signed, b_signed, a_zeros: 1, b_zeros: 1, bias: QBias::None, b_packed: false };
        let (a, b) = (vec![av; m * k], vec![bv; k * n]);
        let (za, zb) = ([if a_signed { 0x7f } else { 0 }], [if b_signed { 0x7f } else { 255 }]);
        let want = reference(&q, &a, &b, &za, &zb, &[]);
        let mut c = vec![0; m * n];
        q.run(&a, &b, &mut c, &za, &zb, &[]);
        assert_eq!(c, want, "{q:?}");
    }
}

/// Split over a pool, by columns and by rows, the result is the single-threaded one.
#[test]
fn threads_give_the_same_bytes() {
    let mut rng = Rng::new(11);
    for &(m, n, k) in &[(64, 200, 96), (200, 16, 96)] {
        let q = Qgemm { m, n, k, lda: k, ldb: n, ldc: n, a_signed: false, b_signed: true, a_zeros: 1, b_zeros: n, bias: QBias::PerRow, b_packed: false };
        let (a, b, za, zb) = (bytes(&mut rng, m * k), bytes(&mut rng, k * n), bytes(&mut rng, 1), bytes(&mut rng, n));
        let bias: Vec<i32> = (0..m as i32).map(|i| i * 1000 - 7).collect();
        let want = reference(&q, &a, &b, &za, &zb, &bias);
        let pool = crate::pool::Pool::new(3).unwrap();
        let mut c = vec![0; m * n];
        pool.enter(|| q.run(&a, &b, &mut c, &za, &zb, &bias));
        assert_eq!(c, want, "{q:?}");
    }
}

#[test]
fn the_c_entry_point_refuses_nonsense() {
    let (a, b, mut c) = ([1u8; 8], [1u8; 8], [7i32; 4]);
    // m, n, k, lda, ldb, ldc, a_zeros, b_zeros, bias_mode
    for bad in [[-1, 2, 2, 2, 2, 2, 0, 0, 0], [2, 2, 2, 1, 2, 2, 0, 0, 0], [2, 2, 2, 2, 1, 2, 0, 0, 0], [2, 2, 2, 2, 2, 1, 0, 0, 0], [2, 2, 2, 2, 2, 2, 3, 0, 0], [2, 2, 2, 2, 2, 2, 0, 5, 0], [2, i64::MAX, 2, 2, i64::MAX, i64::MAX, 0, 0, 0], [2, 2, 2, 2, 2, 2, 0, 0, 3]] {
        let [m, n, k, lda, ldb, ldc, az, bz, bias] = bad;
        // SAFETY: each case is refused before addressing anything.
        unsafe { kiln_rt_qgemm(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), c.as_ptr(), m, n, k, lda, ldb, ldc, 0, 1, az, bz, bias, 0) };
        assert_eq!(c, [7; 4], "{bad:?}");
    }
}

/// An empty depth: `C` is the bias and zero-point terms alone (all zero sums), with B packed
/// (whose column sums are still read) or not.
#[test]
fn an_empty_depth_leaves_the_bias() {
    let (m, n) = (2, 3);
    let bias = [5, -7];
    let mut packed = vec![0u8; packed_b_len(0, n).unwrap()];
    pack_b(&[], 0, n, n, true, &mut packed);
    for (b_packed, b) in [(false, &[][..]), (true, &packed[..])] {
        let q = Qgemm { m, n, k: 0, lda: 0, ldb: n, ldc: n, a_signed: false, b_signed: true, a_zeros: 1, b_zeros: 1, bias: QBias::PerRow, b_packed };
        let mut c = vec![0; m * n];
        q.run(&[], b, &mut c, &[9], &[3], &bias);
        assert_eq!(c, [5, 5, 5, -7, -7, -7], "packed {b_packed}");
    }
}

/// With the output stage, every element is the requantization of the definition's `i32`
/// result: scales per tensor, row and column, both output types, on every kernel the CPU has,
/// with row and column tails and the padding of `Y` untouched.
#[test]
fn requantized_output_matches_the_definition() {
    let mut rng = Rng::new(13);
    // A zero point per column of `B`, and one for all (the terms folded).
    for &(m, n, k, b_zeros) in &[(1, 1, 1, 1), (7, 33, 9, 33), (7, 33, 9, 1), (13, 17, 40, 17), (6, 32, 131, 32), (6, 32, 131, 1)] {
        let (lda, ldb, ldc) = (k + 1, n + 3, n + 2);
        let q = Qgemm { m, n, k, lda, ldb, ldc, a_signed: true, b_signed: true, a_zeros: 1, b_zeros, bias: QBias::PerRow, b_packed: false };
        let (ea, eb, ec) = q.extents();
        let (a, b, za, zb) = (bytes(&mut rng, ea), bytes(&mut rng, eb), bytes(&mut rng, 1), bytes(&mut rng, b_zeros));
        let bias: Vec<i32> = (0..m).map(|_| rng.next_u64() as i32 >> 12).collect();
        let acc = reference(&q, &a, &b, &za, &zb, &bias);
        // Scales that put results on both sides of the range and on exact halves; then with an
        // infinite one, and zero points outside the range: those take the `f64` stage.
        for odd in [false, true] {
        let scales: Vec<f32> = (0..m.max(n)).map(|i| if odd && i == 1 { f32::INFINITY } else { [1.0 / 256.0, 0.5, 3.0e-3, 1.0e-5, 0.25][i % 5] }).collect();
        for along in [QScale::PerTensor, QScale::PerRow, QScale::PerColumn] {
            for (signed, zero) in [(false, 128), (true, -3), (false, 0), (true, 0), (false, 300), (true, -1000)] {
                let r = Requant { scales: along, zero, signed };
                let want: Vec<u8> = (0..ec)
                    .map(|e| {
                        let (i, j) = (e / ldc, e % ldc);
                        if j >= n {
                            return 0xAB;
                        }
                        let s = scales[match along { QScale::PerTensor => 0, QScale::PerRow => i, QScale::PerColumn => j }];
                        crate::requantize::level(f64::from(acc[e]), f64::from(s), f64::from(zero), signed)
                    })
                    .collect();
                for &isa in &Isa::available() {
                    let mut y = vec![0xABu8; ec];
                    // SAFETY: the vectors hold the extents; VNNI only where detected.
                    unsafe {
                        let out = Out::new_bytes(y.as_mut_ptr(), scales.as_ptr(), &r, m, n);
                        q.run_raw(a.as_ptr(), b.as_ptr(), out, za.as_ptr(), zb.as_ptr(), bias.as_ptr(), isa);
                    }
                    assert_eq!(y, want, "{q:?} {r:?} {isa:?}");
                }
            }
        }
        }
    }
}
