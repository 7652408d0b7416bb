use kiln_testkit::Rng;

use super::*;

/// `C` computed in `f64` from the definition, and the error each element may have: `f32` sums of
/// length `k` (`1e-5·k·max|a|·max|b|·|alpha|`) plus the rounding of `beta·C`.
fn reference(g: &Sgemm, a: &[f32], b: &[f32], c: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let mut want: Vec<f64> = c.iter().map(|&x| f64::from(x)).collect();
    let mut tol = vec![0.0; c.len()];
    let amax = a.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    let bmax = b.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    for i in 0..g.m {
        for j in 0..g.n {
            let mut s = 0f64;
            for p in 0..g.k {
                let x = match g.trans_a {
                    Transpose::No => a[i * g.lda + p],
                    Transpose::Yes => a[p * g.lda + i],
                };
                let y = match g.trans_b {
                    Transpose::No => b[p * g.ldb + j],
                    Transpose::Yes => b[j * g.ldb + p],
                };
                s += f64::from(x) * f64::from(y);
            }
            let at = i * g.ldc + j;
            let old = f64::from(c[at]);
            let beta_c = if g.beta == 0.0 { 0.0 } else { f64::from(g.beta) * old };
            want[at] = f64::from(g.alpha) * s + beta_c;
            tol[at] = 1e-5 * g.k as f64 * amax * bmax * f64::from(g.alpha).abs() + 1e-6 * beta_c.abs() + 1e-30;
        }
    }
    (want, tol)
}

/// Runs `g` on random data with every kernel and `blocking` (the kernel's own when `None`),
/// checking `C` against [`reference`]; elements of `C` outside the product must keep their bits.
fn check(g: &Sgemm, blocking: Option<Blocking>, rng: &mut Rng) {
    let a = rng.unit_f32s(g.a_len() + 3);
    let b = rng.unit_f32s(g.b_len() + 3);
    let mut c0 = rng.unit_f32s(g.c_len() + 3);
    if g.beta == 0.0 {
        // Must not be read.
        for (i, x) in c0.iter_mut().enumerate() {
            if i % 3 != 1 {
                *x = f32::NAN;
            }
        }
    }
    let (want, tol) = reference(g, &a, &b, &c0);
    for isa in Isa::runnable() {
        let mut c = c0.clone();
        g.run_with(isa, blocking.unwrap_or(isa.blocking()), &a, &b, &mut c);
        for (at, (&got, (&w, &t))) in c.iter().zip(want.iter().zip(&tol)).enumerate() {
            let (i, j) = (at / g.ldc.max(1), at % g.ldc.max(1));
            if i < g.m && j < g.n {
                assert!((f64::from(got) - w).abs() <= t, "{isa:?} {blocking:?} {g:?}: C[{i},{j}] = {got}, want {w} ± {t}");
            } else {
                assert_eq!(got.to_bits(), c0[at].to_bits(), "{isa:?} {g:?}: wrote C[{at}] outside the product");
            }
        }
    }
}

fn transposes() -> [(Transpose, Transpose); 4] {
    use Transpose::*;
    [(No, No), (Yes, No), (No, Yes), (Yes, Yes)]
}

fn shape(m: usize, n: usize, k: usize, (trans_a, trans_b): (Transpose, Transpose), pad: [usize; 3], alpha: f32, beta: f32) -> Sgemm {
    let lda = pad[0] + if trans_a == Transpose::No { k } else { m };
    let ldb = pad[1] + if trans_b == Transpose::No { n } else { k };
    Sgemm { m, n, k, lda, ldb, ldc: n + pad[2], trans_a, trans_b, alpha, beta }
}

#[test]
fn small_and_degenerate_shapes() {
    let mut rng = Rng::new(7);
    let dims = [0, 1, 2, 3, 5, 8, 9, 16, 17];
    for &m in &dims {
        for &n in &dims {
            for &k in &dims {
                for t in transposes() {
                    let (alpha, beta) = [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)][rng.below(3)];
                    let pad = [rng.below(3), rng.below(3), rng.below(3)];
                    check(&shape(m, n, k, t, pad, alpha, beta), None, &mut rng);
                }
            }
        }
    }
}

#[test]
fn random_shapes_across_edges_and_blocks() {
    let mut rng = Rng::new(11);
    let dims = [1, 7, 15, 31, 47, 48, 49, 63, 64, 65, 97, 130];
    for _ in 0..60 {
        let (m, n, k) = (dims[rng.below(dims.len())], dims[rng.below(dims.len())], dims[rng.below(dims.len())]);
        let t = transposes()[rng.below(4)];
        let pad = [rng.below(5), rng.below(5), rng.below(5)];
        let (alpha, beta) = [(1.0, 0.0), (1.0, 1.0), (0.75, -1.5), (-1.0, 0.0)][rng.below(4)];
        let g = shape(m, n, k, t, pad, alpha, beta);
        // The kernel's own blocking, then small blocks so every loop of the nest has several
        // trips (and blocks that are not whole panels).
        check(&g, None, &mut rng);
        let small = Blocking { kc: 1 + rng.below(40), nc: 1 + rng.below(100) };
        check(&g, Some(small), &mut rng);
    }
}

#[test]
fn large_products_span_several_blocks() {
    let mut rng = Rng::new(13);
    for t in transposes() {
        check(&shape(300, 530, 600, t, [1, 2, 3], 1.0, 0.0), None, &mut rng);
    }
    check(&shape(64, 3136 / 4, 576, transposes()[0], [0; 3], 1.0, 1.0), None, &mut rng);
}

#[test]
fn matrix_vector_products() {
    // Long enough for every block size of both forms, with vector and scalar tails in k.
    let mut rng = Rng::new(29);
    for t in transposes() {
        for (m, n, k) in [(1, 1000, 310), (1000, 1, 310), (1, 1, 310), (1, 37, 1), (29, 1, 2)] {
            check(&shape(m, n, k, t, [3, 2, 1], 1.0, 0.0), None, &mut rng);
            check(&shape(m, n, k, t, [0, 1, 5], -0.5, 2.0), None, &mut rng);
        }
    }
}

#[test]
fn beta_zero_ignores_nan_and_k_zero_scales() {
    let g = Sgemm { m: 2, n: 3, k: 0, lda: 1, ldb: 3, ldc: 3, trans_a: Transpose::No, trans_b: Transpose::No, alpha: 1.0, beta: 0.0 };
    let mut c = [f32::NAN; 6];
    g.run(&[], &[], &mut c);
    assert_eq!(c, [0.0; 6]);
    let g = Sgemm { beta: 2.0, ..g };
    let mut c = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    g.run(&[], &[], &mut c);
    assert_eq!(c, [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
}

#[test]
fn operands_at_odd_byte_offsets() {
    // Weights are slices of a mapped file: f32 data need not be 4-byte aligned.
    let mut rng = Rng::new(17);
    for (m, n, k) in [(1, 100, 37), (37, 1, 50), (20, 70, 33)] {
        for t in transposes() {
            let g = shape(m, n, k, t, [1, 0, 2], 1.0, 0.5);
            let (a, b, c0) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()));
            let (want, tol) = reference(&g, &a, &b, &c0);
            let bytes = |v: &[f32]| -> Vec<u8> { std::iter::once(0u8).chain(v.iter().flat_map(|x| x.to_le_bytes())).collect() };
            let (a_bytes, b_bytes) = (bytes(&a), bytes(&b));
            for isa in Isa::runnable() {
                let mut c = c0.clone();
                // SAFETY: the byte vectors hold the operands from offset 1; c is a live slice.
                unsafe { g.run_raw(isa, isa.blocking(), a_bytes.as_ptr().add(1).cast(), b_bytes.as_ptr().add(1).cast(), c.as_mut_ptr()) };
                for (at, &x) in c.iter().enumerate() {
                    assert!((f64::from(x) - want[at]).abs() <= tol[at] + 1e-6 * want[at].abs(), "{isa:?} {g:?} C[{at}]");
                }
            }
        }
    }
}

#[test]
fn the_c_entry_point_matches_the_slice_api() {
    let mut rng = Rng::new(19);
    let g = shape(13, 29, 40, (Transpose::Yes, Transpose::No), [2, 1, 3], 1.5, 0.5);
    let (a, b, c0) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()));
    let mut want = c0.clone();
    g.run(&a, &b, &mut want);
    let mut got = c0;
    // SAFETY: the slices hold every addressed element.
    unsafe {
        kiln_rt_sgemm(a.as_ptr(), b.as_ptr(), got.as_mut_ptr(), 13, 29, 40, g.lda as i64, g.ldb as i64, g.ldc as i64, 1, 0, 1.5, 0.5);
    }
    assert!(got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn results_do_not_depend_on_operand_addresses() {
    // The interpreter copies operands before calling; it must get the JIT's bits.
    let mut rng = Rng::new(23);
    let g = shape(33, 70, 300, (Transpose::No, Transpose::No), [0; 3], 1.0, 1.0);
    let (a, b, c0) = (rng.unit_f32s(g.a_len() + 1), rng.unit_f32s(g.b_len() + 1), rng.unit_f32s(g.c_len()));
    let mut x = c0.clone();
    g.run(&a[..g.a_len()], &b[..g.b_len()], &mut x);
    let (a2, b2) = (a[..g.a_len()].to_vec(), b[..g.b_len()].to_vec());
    let mut y = c0;
    g.run(&a2, &b2, &mut y);
    assert!(x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()));
}

#[test]
fn split_products_are_bit_identical_to_one_thread() {
    // Shapes that split by columns, by rows (few columns; the last with several k blocks), with
    // narrow edge panels, and the matrix–vector forms; each with and without transposes,
    // against the single-thread result.
    let shapes = [(64, 3136, 76), (512, 49, 200), (130, 130, 70), (1, 1024, 784), (1000, 1, 300), (300, 97, 64), (256, 140, 900)];
    let mut rng = Rng::new(0x5eed);
    for isa in Isa::runnable() {
        for (m, n, k) in shapes {
            for tr in transposes() {
                let g = shape(m, n, k, tr, [0, 3, 1], 1.5, 0.5);
                let a = rng.unit_f32s(g.a_len());
                let b = rng.unit_f32s(g.b_len());
                let c0 = rng.unit_f32s(g.c_len());
                let mut alone = c0.clone();
                g.run_with(isa, isa.blocking(), &a, &b, &mut alone);
                for threads in [2, 3] {
                    let pool = crate::pool::Pool::new(threads).unwrap();
                    let mut split = c0.clone();
                    pool.enter(|| g.run_with(isa, isa.blocking(), &a, &b, &mut split));
                    let same = alone.iter().zip(&split).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{isa:?} {g:?} on {threads} threads differs from one thread");
                }
            }
        }
    }
}

/// `op(B)` of `g` packed in `layout`, from its bytes.
fn packed(g: &Sgemm, b: &[f32], layout: PackedLayout) -> Vec<f32> {
    let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut dst = vec![0xffu8; 4 * layout.len(g.k, g.n)];
    layout.pack(&bytes, g.k, g.n, g.ldb, g.trans_b, &mut dst);
    dst.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn packed_b_gives_the_bits_of_packing_per_call() {
    // The detected layout (read in place), and layouts of other widths and depths (gathered),
    // on shapes with edge panels, several k blocks and both splits over threads.
    let mut rng = Rng::new(31);
    let shapes = [(2, 2, 1), (9, 49, 385), (128, 1024, 256), (130, 97, 70), (64, 3136, 76), (512, 49, 200), (33, 130, 800)];
    let detected = PackedLayout::detected();
    for (m, n, k) in shapes {
        for tr in transposes() {
            let g = shape(m, n, k, tr, [1, 2, 3], 1.5, if m % 2 == 0 { 0.0 } else { 0.5 });
            let (a, b, c0) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()));
            let mut want = c0.clone();
            g.run(&a, &b, &mut want);
            for layout in [detected, PackedLayout { nr: 16, kc: 100 }, PackedLayout { nr: 5, kc: 7 }] {
                let bp = packed(&g, &b, layout);
                for threads in [1, 2, 3] {
                    let pool = crate::pool::Pool::new(threads).unwrap();
                    let mut got = c0.clone();
                    pool.enter(|| g.run_packed(&a, &bp, layout, &mut got));
                    let same = want.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{g:?} with B packed as {layout:?} on {threads} threads differs from sgemm");
                }
            }
        }
    }
}

#[test]
fn a_row_vector_times_a_packed_matrix() {
    // m = 1 reads the panels as a stream (gemv.rs), summing in another order than `run`: checked
    // against the f64 reference instead, with edge panels, several k blocks, a strided x (A
    // transposed), beta on and off, layouts with whole vectors per panel and without, and the
    // panels split over threads. Elements of C past the product keep their bits.
    let mut rng = Rng::new(41);
    let layouts = [PackedLayout::detected(), PackedLayout { nr: 16, kc: 100 }, PackedLayout { nr: 32, kc: 384 }, PackedLayout { nr: 5, kc: 7 }];
    for (n, k) in [(1000, 310), (97, 800), (48, 1), (2, 3)] {
        for tr in transposes() {
            for (alpha, beta) in [(1.0, 0.0), (-0.5, 2.0)] {
                let g = shape(1, n, k, tr, [3, 2, 0], alpha, beta);
                let (a, b) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()));
                let mut c0 = rng.unit_f32s(g.c_len() + 3);
                if beta == 0.0 {
                    c0[..n].fill(f32::NAN);
                }
                let (want, tol) = reference(&g, &a, &b, &c0);
                for layout in layouts {
                    let bp = packed(&g, &b, layout);
                    for threads in [1, 2, 3] {
                        let pool = crate::pool::Pool::new(threads).unwrap();
                        let mut c = c0.clone();
                        pool.enter(|| g.run_packed(&a, &bp, layout, &mut c));
                        for (j, &got) in c.iter().enumerate() {
                            if j < n {
                                assert!((f64::from(got) - want[j]).abs() <= tol[j], "{g:?} packed as {layout:?} on {threads} threads: C[0,{j}] = {got}, want {} ± {}", want[j], tol[j]);
                            } else {
                                assert_eq!(got.to_bits(), c0[j].to_bits(), "{g:?} packed as {layout:?}: wrote C[{j}] past the product");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_packed_entry_point_matches_the_slice_api() {
    let mut rng = Rng::new(37);
    let g = shape(20, 61, 400, (Transpose::Yes, Transpose::Yes), [2, 1, 3], 0.5, 1.0);
    let (a, b, c0) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()));
    let layout = PackedLayout::detected();
    let bp = packed(&g, &b, layout);
    let mut want = c0.clone();
    g.run_packed(&a, &bp, layout, &mut want);
    let mut got = c0;
    // SAFETY: the slices hold every addressed element.
    unsafe {
        let (nr, kc) = (layout.nr as i64, layout.kc as i64);
        kiln_rt_sgemm_packed(a.as_ptr(), bp.as_ptr(), got.as_mut_ptr(), 20, 61, 400, g.lda as i64, g.ldc as i64, 1, nr, kc, 0.5, 1.0);
    }
    assert!(got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
    // Each k block ends with the last panel, whose columns past n are zero.
    let (nr, panels) = (layout.nr, g.n.div_ceil(layout.nr));
    for p0 in (0..g.k).step_by(layout.kc) {
        let depth = layout.kc.min(g.k - p0);
        let last = &bp[(p0 * panels + (panels - 1) * depth) * nr..][..depth * nr];
        assert!(last.chunks(nr).all(|row| row[g.n - (panels - 1) * nr..].iter().all(|&x| x == 0.0)));
    }
}

/// The product, then the whole epilogue over `C`'s `m × n` elements (gathered from rows `ldc`
/// apart, with `Z` laid out as `C`): what [`SgemmFused`] must compute, element for element.
fn product_then_epilogue(f: &SgemmFused, a: &[f32], b: &[f32], c: &[f32], bias: &[f32], z: &[f32]) -> Vec<f32> {
    let g = f.gemm;
    let mut c = c.to_vec();
    match f.packed {
        Some(layout) => g.run_packed(a, b, layout, &mut c),
        None => g.run(a, b, &mut c),
    }
    let gather = |x: &[f32]| -> Vec<f32> { (0..g.m).flat_map(|i| x[i * g.ldc..][..g.n].to_vec()).collect() };
    let mut y = gather(&c);
    let zc = if f.residual { gather(z) } else { Vec::new() };
    let e = crate::epilogue::Epilogue { rows: g.m, cols: g.n, bias: f.bias, residual: f.residual, act: f.act };
    e.run(&mut y, bias, &zc);
    for i in 0..g.m {
        c[i * g.ldc..][..g.n].copy_from_slice(&y[i * g.n..][..g.n]);
    }
    c
}

#[test]
fn fused_epilogues_give_the_bits_of_product_then_epilogue() {
    use crate::epilogue::{Activation, Bias};
    // Blocked products with edge tiles, several k and column blocks and splits by rows and
    // columns; both matrix–vector forms; an empty sum.
    let shapes = [(9, 49, 385), (128, 1024, 256), (130, 97, 70), (512, 49, 200), (1, 1024, 784), (1000, 1, 300), (7, 5, 0)];
    let acts = [Activation::None, Activation::Relu, Activation::Clip { min: -0.25, max: 0.5 }, Activation::Gelu];
    let mut rng = Rng::new(41);
    for (s, (m, n, k)) in shapes.into_iter().enumerate() {
        let tr = transposes()[s % 4];
        let g = shape(m, n, k, tr, [1, 2, if s % 2 == 0 { 0 } else { 3 }], 1.5, if s % 3 == 0 { 0.0 } else { 0.5 });
        let (a, b, c0, z) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()), rng.unit_f32s(g.c_len()));
        let bias = rng.unit_f32s(m.max(n));
        let layouts = if m > 1 && n > 1 { vec![None, Some(PackedLayout::detected()), Some(PackedLayout { nr: 16, kc: 100 })] } else { vec![None] };
        for layout in layouts {
            let bs = match layout {
                Some(layout) => packed(&g, &b, layout),
                None => b.clone(),
            };
            for (v, bias_kind) in [Bias::None, Bias::PerColumn, Bias::PerRow { period: 3 }, Bias::PerRow { period: m.max(1) }].into_iter().enumerate() {
                let f = SgemmFused { gemm: g, packed: layout, bias: bias_kind, residual: v % 2 == 1, act: acts[(v + s) % acts.len()] };
                let want = product_then_epilogue(&f, &a, &bs, &c0, &bias, &z);
                for threads in [1, 2, 3] {
                    let pool = crate::pool::Pool::new(threads).unwrap();
                    let mut got = c0.clone();
                    pool.enter(|| f.run(&a, &bs, &mut got, &bias, &z));
                    let same = want.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{f:?} on {threads} threads differs from the product then the epilogue");
                }
            }
        }
    }
}

#[test]
fn the_fused_entry_point_matches_the_slice_api_and_rejects_bad_codes() {
    use crate::epilogue::{Activation, Bias};
    let mut rng = Rng::new(43);
    let g = shape(20, 61, 40, (Transpose::No, Transpose::Yes), [2, 1, 3], 0.5, 1.0);
    let (a, b, c0, z) = (rng.unit_f32s(g.a_len()), rng.unit_f32s(g.b_len()), rng.unit_f32s(g.c_len()), rng.unit_f32s(g.c_len()));
    let bias = rng.unit_f32s(61);
    let f = SgemmFused { gemm: g, packed: None, bias: Bias::PerColumn, residual: true, act: Activation::LeakyRelu { alpha: 0.1 } };
    let mut want = c0.clone();
    f.run(&a, &b, &mut want, &bias, &z);
    let ints = |act: i64| [20, 61, 40, g.lda as i64, g.ldb as i64, g.ldc as i64, 0, 1, 0, 0, 2, 0, 1, act];
    assert_eq!(SgemmFused::from_args(ints(3), [0.5, 1.0, 0.1, 0.0]), Some(f));
    let call = |act: i64| {
        let mut got = c0.clone();
        let [m, n, k, lda, ldb, ldc, ta, tb, nr, kc, mode, period, residual, act] = ints(act);
        // SAFETY: the slices hold every addressed element.
        unsafe { kiln_rt_sgemm_fused(a.as_ptr(), b.as_ptr(), got.as_mut_ptr(), bias.as_ptr(), z.as_ptr(), m, n, k, lda, ldb, ldc, ta, tb, nr, kc, mode, period, residual, act, 0.5, 1.0, 0.1, 0.0) };
        got
    };
    assert!(call(3).iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
    // An unknown activation code does nothing.
    assert_eq!(call(99), c0);
    assert_eq!(SgemmFused::from_args([1, 1, 1, 1, 1, 1, 0, 0, 16, 0, 0, 0, 0, 0], [1.0; 4]), None, "a packed layout without a depth");
    assert_eq!(SgemmFused::from_args([1, -1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], [1.0; 4]), None, "a negative size");
    assert!(!SgemmFused::from_args([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0], [1.0; 4]).unwrap().is_valid(), "a per-row bias of period 0");
}
