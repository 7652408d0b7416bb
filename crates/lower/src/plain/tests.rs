//! Each expansion against the runtime's kernel, in the interpreter (which calls the kernels for
//! calls): random operands, every flag.

use kiln_loops::call::{self, Addr, Call};
use kiln_loops::interp;
use kiln_loops::ir::*;

use super::expand_calls;

/// A program of one kernel holding `call` over f32 buffers of the given lengths; buffer 0..n.
fn program(lens: &[u64], call: Call) -> Program {
    let mut p = Program::default();
    for (i, &len) in lens.iter().enumerate() {
        p.add_buffer(Buffer { name: format!("b{i}"), elem: ElemType::Scalar(ScalarType::F32), len, kind: BufferKind::Temp });
    }
    let mut k = Kernel::new("k");
    k.body = vec![Stmt::Call(call)];
    p.kernels.push(k);
    p
}

/// Runs `p` as it is and expanded on the same seeded memory; the buffers must agree within
/// `tol` relative (sums run in another order).
fn agree(p: &Program, tol: f32) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let memory: Vec<Vec<u8>> = p
        .buffers
        .iter()
        .map(|b| {
            (0..b.len)
                .flat_map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0).to_le_bytes()
                })
                .collect()
        })
        .collect();
    let mut want = memory.clone();
    interp::run(p, &mut want).expect("the kernels run");
    let mut plain = p.clone();
    expand_calls(&mut plain).expect("every call expands");
    assert!(plain.kernels[0].body.iter().all(|s| !matches!(s, Stmt::Call(_))), "a call is left");
    kiln_loops::verify::verify(&plain).unwrap_or_else(|e| panic!("{e:?}"));
    let mut got = memory;
    interp::run(&plain, &mut got).expect("the loops run");
    for (b, (w, g)) in want.iter().zip(&got).enumerate() {
        for (i, (w, g)) in w.chunks(4).zip(g.chunks(4)).enumerate() {
            let (w, g) = (f32::from_le_bytes(w.try_into().unwrap()), f32::from_le_bytes(g.try_into().unwrap()));
            assert!((w - g).abs() <= tol * w.abs().max(1.0) || (w.is_nan() && g.is_nan()), "buffer {b} element {i}: kernel {w}, loops {g}");
        }
    }
}

fn i(v: i64) -> Expr {
    Expr::idx(v)
}

#[test]
fn products_match_sgemm_in_every_transposition() {
    for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        for beta in [0.0, 0.5] {
            let (m, n, k) = (5, 7, 9);
            let c = call::Sgemm { a: Addr::at(BufId(0), 0), b: Addr::at(BufId(1), 0), c: Addr::at(BufId(2), 0), m: i(m), n: i(n), k: i(k), lda: i(if ta == 1 { m } else { k }), ldb: i(if tb == 1 { k } else { n }), ldc: i(n), trans_a: i(ta), trans_b: i(tb), alpha: Expr::f32(1.5), beta: Expr::f32(beta) };
            agree(&program(&[(m * k) as u64, (k * n) as u64, (m * n) as u64], c.into()), 1e-5);
        }
    }
}

#[test]
fn fused_products_and_epilogues_match_in_every_activation_and_bias() {
    for act in 0..=10 {
        // Clip's bounds, LeakyRelu's slope, or a quantization's scale and zero point.
        let (alpha, beta) = match act {
            9 => (0.05, 100.0),
            10 => (0.001, 30000.0),
            _ => (-0.25, 0.75),
        };
        for (bias_mode, residual) in [(0, 0), (1, 1), (2, 0), (2, 1)] {
            let (m, n, k) = (4, 6, 5);
            let c = call::SgemmFused { a: Addr::at(BufId(0), 0), b: Addr::at(BufId(1), 0), c: Addr::at(BufId(2), 0), bias: Addr::at(BufId(3), 0), z: Addr::at(BufId(4), 0), m: i(m), n: i(n), k: i(k), lda: i(k), ldb: i(n), ldc: i(n), trans_a: i(0), trans_b: i(0), nr: i(0), kc: i(0), bias_mode: i(bias_mode), period: i(m), residual: i(residual), act: i(act), alpha: Expr::f32(1.0), beta: Expr::f32(0.0), act_alpha: Expr::f32(alpha), act_beta: Expr::f32(beta) };
            // A quantize-dequantize pair turns a last-bit difference of the sums (taken in
            // another order) into a whole step: its products are checked through the epilogue
            // alone, which is exact.
            if act < 9 {
                agree(&program(&[(m * k) as u64, (k * n) as u64, (m * n) as u64, 8, (m * n) as u64], c.into()), 1e-5);
            }
            let e = call::Epilogue { y: Addr::at(BufId(0), 0), b: Addr::at(BufId(1), 0), z: Addr::at(BufId(2), 0), rows: i(m), cols: i(n), bias_mode: i(bias_mode), period: i(3), residual: i(residual), act: i(act), alpha: Expr::f32(if act >= 9 { alpha } else { 0.1 }), beta: Expr::f32(if act >= 9 { beta } else { 0.6 }) };
            agree(&program(&[(m * n) as u64, 8, (m * n) as u64], e.into()), 1e-5);
        }
    }
}

/// Window operands `ih iw oh ow kh kw sh sw ph pw dh dw` for a 7×6 input.
fn windows() -> Vec<[i64; 12]> {
    let out = |i: i64, k: i64, s: i64, p: i64, d: i64| (i + 2 * p - ((k - 1) * d + 1)) / s + 1;
    let mut w = Vec::new();
    for (k, s, p, d) in [(3, 1, 1, 1), (3, 2, 0, 1), (2, 2, 1, 2), (1, 1, 0, 1), (3, 1, 0, 1)] {
        w.push([7, 6, out(7, k, s, p, d), out(6, k, s, p, d), k, k, s, s, p, p, d, d]);
    }
    w
}

#[test]
fn convolutions_im2col_and_pooling_match_over_padded_strided_dilated_windows() {
    for [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] in windows() {
        for (groups, channels, out_channels) in [(1, 3, 4), (2, 4, 6), (3, 3, 3)] {
            for (bias, residual, act) in [(0, 0, 0), (1, 1, 1), (1, 0, 7)] {
                let batch = 2;
                let c = call::Conv2d { x: Addr::at(BufId(0), 0), w: Addr::at(BufId(1), 0), b: Addr::at(BufId(2), 0), z: Addr::at(BufId(3), 0), y: Addr::at(BufId(4), 0), batch: i(batch), channels: i(channels), out_channels: i(out_channels), groups: i(groups), ih: i(ih), iw: i(iw), oh: i(oh), ow: i(ow), kh: i(kh), kw: i(kw), sh: i(sh), sw: i(sw), ph: i(ph), pw: i(pw), dh: i(dh), dw: i(dw), bias: i(bias), residual: i(residual), act: i(act), alpha: Expr::f32(0.0), beta: Expr::f32(6.0) };
                let y = (batch * out_channels * oh * ow) as u64;
                agree(&program(&[(batch * channels * ih * iw) as u64, (out_channels * channels / groups * kh * kw) as u64, out_channels as u64, y, y], c.into()), 1e-5);
            }
        }
        for accumulate in [0, 1] {
            let (planes, channels) = (6, 3);
            let c = call::DwConv2d { x: Addr::at(BufId(0), 0), w: Addr::at(BufId(1), 0), y: Addr::at(BufId(2), 0), planes: i(planes), channels: i(channels), ih: i(ih), iw: i(iw), oh: i(oh), ow: i(ow), kh: i(kh), kw: i(kw), sh: i(sh), sw: i(sw), ph: i(ph), pw: i(pw), dh: i(dh), dw: i(dw), accumulate: i(accumulate) };
            agree(&program(&[(planes * ih * iw) as u64, (channels * kh * kw) as u64, (planes * oh * ow) as u64], c.into()), 1e-5);
        }
        let c = call::Im2col { x: Addr::at(BufId(0), 0), col: Addr::at(BufId(1), 0), channels: i(2), ih: i(ih), iw: i(iw), oh: i(oh), ow: i(ow), kh: i(kh), kw: i(kw), sh: i(sh), sw: i(sw), ph: i(ph), pw: i(pw), dh: i(dh), dw: i(dw) };
        agree(&program(&[(2 * ih * iw) as u64, (2 * kh * kw * oh * ow) as u64], c.into()), 0.0);
        let c = call::MaxPool2d { x: Addr::at(BufId(0), 0), y: Addr::at(BufId(1), 0), planes: i(3), ih: i(ih), iw: i(iw), oh: i(oh), ow: i(ow), kh: i(kh), kw: i(kw), sh: i(sh), sw: i(sw), ph: i(ph), pw: i(pw), dh: i(dh), dw: i(dw) };
        agree(&program(&[(3 * ih * iw) as u64, (3 * oh * ow) as u64], c.into()), 0.0);
    }
}

#[test]
fn softmax_and_normalizations_match_row_by_row() {
    let c = call::Softmax { x: Addr::at(BufId(0), 0), rows: i(3), cols: i(11) };
    agree(&program(&[33], c.into()), 1e-5);
    for (bias, rms) in [(0, 0), (1, 0), (0, 1)] {
        let c = call::LayerNorm { x: Addr::at(BufId(0), 0), scale: Addr::at(BufId(1), 0), b: Addr::at(BufId(2), 0), y: Addr::at(BufId(3), 0), rows: i(4), cols: i(10), bias: i(bias), rms: i(rms), epsilon: Expr::f32(1e-5) };
        agree(&program(&[40, 10, 10, 40], c.into()), 1e-4);
    }
}

#[test]
fn requantization_matches_to_the_byte() {
    let x: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) * 37.0 + if i % 5 == 0 { 0.5 } else { 0.0 }).chain([f32::NAN, 1e30, -1e30, 2.5]).collect();
    let s = [0.5f32, 0.013, 1.0, 0.25];
    for (elem, signed) in [(ScalarType::U8, 0), (ScalarType::I8, 1)] {
        for zero in [0, 7, -100] {
            let mut p = Program::default();
            for (name, elem, len) in [("x", ScalarType::F32, x.len()), ("s", ScalarType::F32, s.len()), ("y", elem, x.len())] {
                p.add_buffer(Buffer { name: name.into(), elem: ElemType::Scalar(elem), len: len as u64, kind: BufferKind::Temp });
            }
            let c = call::Requantize { x: Addr::at(BufId(0), 0), s: Addr::at(BufId(1), 0), y: Addr::at(BufId(2), 0), rows: i(7), cols: i(4), period: i(3), zero: i(zero), signed: i(signed), int_x: i(0) };
            let mut k = Kernel::new("k");
            k.body = vec![Stmt::Call(c.into())];
            p.kernels.push(k);
            kiln_loops::verify::verify(&p).unwrap_or_else(|e| panic!("{e:?}"));
            let memory = vec![x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), s.iter().flat_map(|v| v.to_le_bytes()).collect(), vec![0u8; x.len()]];
            let mut want = memory.clone();
            interp::run(&p, &mut want).expect("the kernel runs");
            let mut plain = p.clone();
            expand_calls(&mut plain).expect("the call expands");
            kiln_loops::verify::verify(&plain).unwrap_or_else(|e| panic!("{e:?}"));
            let mut got = memory;
            interp::run(&plain, &mut got).expect("the loops run");
            assert_eq!(want[2], got[2], "signed {signed}, zero {zero}");
            assert!(want[2].iter().any(|&v| v != 0), "signed {signed}, zero {zero}: all zero");
        }
    }
}

/// A `qgemm` call on buffers `bufs` (A, B, C, A's and B's zero points, the bias), with sizes
/// `m, n, k, lda, ldb, ldc` and flags `a_signed, b_signed, a_zeros, b_zeros, bias_mode,
/// b_packed`.
fn qgemm_call(bufs: [u32; 6], sizes: [i64; 6], flags: [i64; 6]) -> call::Qgemm {
    let at = |b: u32| Addr::at(BufId(b), 0);
    let [m, n, k, lda, ldb, ldc] = sizes.map(i);
    let [a_signed, b_signed, a_zeros, b_zeros, bias_mode, b_packed] = flags.map(i);
    call::Qgemm { a: at(bufs[0]), b: at(bufs[1]), c: at(bufs[2]), za: at(bufs[3]), zb: at(bufs[4]), bias: at(bufs[5]), m, n, k, lda, ldb, ldc, a_signed, b_signed, a_zeros, b_zeros, bias_mode, b_packed }
}

/// The integer product's loops against the runtime's routine (through the interpreter), for
/// every signedness pair and zero-point form, with padded leading dimensions and a depth that
/// is not a multiple of four, B as it is and packed ahead.
#[test]
fn integer_products_match_to_the_byte() {
    let (m, n, k, lda, ldb, ldc) = (5usize, 19usize, 7usize, 9usize, 20usize, 21usize);
    let mut rng = kiln_testkit::Rng::new(3);
    let mut bytes = |len: usize| -> Vec<u8> { (0..len).map(|_| rng.next_u64() as u8).collect() };
    let (a, b, za, zb, bias) = (bytes(m * lda), bytes(k * ldb), bytes(m), bytes(n), bytes(4 * n));
    for (a_signed, b_signed) in [(0, 1), (0, 0), (1, 1), (1, 0)] {
        for (a_zeros, b_zeros, bias_mode, b_packed) in [(0, 0, 0, 0), (1, 1, 1, 0), (m, n, 2, 0), (1, n, 1, 1), (0, 1, 0, 1)] {
            let ty = |signed: i64| if signed != 0 { ScalarType::I8 } else { ScalarType::U8 };
            let b = if b_packed == 0 {
                b.clone()
            } else {
                let mut packed = vec![0u8; kiln_runtime::qgemm::packed_b_len(k, n).unwrap()];
                kiln_runtime::qgemm::pack_b(&b, k, n, ldb, b_signed != 0, &mut packed);
                packed
            };
            let mut p = Program::default();
            let b_ty = if b_packed != 0 { ScalarType::I8 } else { ty(b_signed) };
            // The `i32` result, and the requantized one (into `y`, the output's type following
            // A's signedness, with the scales along rows, columns or neither).
            let y_ty = ty(a_signed);
            for (name, elem, len) in [("a", ty(a_signed), a.len()), ("b", b_ty, b.len()), ("c", ScalarType::I32, m * ldc), ("za", ty(a_signed), m), ("zb", ty(b_signed), n), ("bias", ScalarType::I32, n), ("s", ScalarType::F32, m + n), ("y", y_ty, m * ldc)] {
                p.add_buffer(Buffer { name: name.into(), elem: ElemType::Scalar(elem), len: len as u64, kind: BufferKind::Temp });
            }
            let c = qgemm_call([0, 1, 2, 3, 4, 5], [m, n, k, lda, ldb, ldc].map(|v| v as i64), [a_signed, b_signed, a_zeros as i64, b_zeros as i64, bias_mode, b_packed]);
            let scale_mode = (a_zeros + b_zeros) as i64 % 3;
            let requantized = c.clone().requantized(Addr::at(BufId(7), 0), Addr::at(BufId(6), 0), i(scale_mode), i(5 - 40 * a_signed), i(a_signed));
            let mut kern = Kernel::new("k");
            kern.body = vec![Stmt::Call(c.into()), Stmt::Call(requantized.into())];
            p.kernels.push(kern);
            kiln_loops::verify::verify(&p).unwrap_or_else(|e| panic!("{e:?}"));
            let scales: Vec<u8> = (0..m + n).flat_map(|v| [0.004f32, 0.5, 2.0e-5][v % 3].to_le_bytes()).collect();
            let memory = vec![a.clone(), b.clone(), vec![0u8; 4 * m * ldc], za.clone(), zb.clone(), bias.clone(), scales, vec![0u8; m * ldc]];
            let mut want = memory.clone();
            interp::run(&p, &mut want).expect("the kernel runs");
            let mut plain = p.clone();
            expand_calls(&mut plain).expect("the call expands");
            kiln_loops::verify::verify(&plain).unwrap_or_else(|e| panic!("{e:?}"));
            let mut got = memory;
            interp::run(&plain, &mut got).expect("the loops run");
            let what = format!("signed {a_signed}/{b_signed}, zeros {a_zeros}/{b_zeros}, bias {bias_mode}, packed {b_packed}, scales {scale_mode}");
            assert_eq!(want[2], got[2], "{what}");
            assert_eq!(want[7], got[7], "{what}: requantized");
            assert!(want[2].iter().any(|&v| v != 0), "{what}: all zero");
            assert!(want[7].iter().any(|&v| v != want[7][0]), "{what}: requantized all one value");
        }
    }
}

/// The verifier holds the signedness flags to the buffers' types.
#[test]
fn integer_product_flags_must_match_the_buffers() {
    let mut p = Program::default();
    for (name, elem) in [("a", ScalarType::U8), ("b", ScalarType::I8), ("c", ScalarType::I32)] {
        p.add_buffer(Buffer { name: name.into(), elem: ElemType::Scalar(elem), len: 4, kind: BufferKind::Temp });
    }
    let c = qgemm_call([0, 1, 2, 0, 1, 2], [2; 6], [1, 1, 0, 0, 0, 0]);
    let mut kern = Kernel::new("k");
    kern.body = vec![Stmt::Call(c.into())];
    p.kernels.push(kern);
    let errors = format!("{:?}", kiln_loops::verify::verify(&p).expect_err("a u8 buffer flagged signed"));
    assert!(errors.contains("qgemm operand `a` is @0 of u8 elements, but the flag says i8"), "{errors}");
}

/// The quantized depthwise convolution's loops against the runtime's routine, byte for byte:
/// padded, strided and dilated windows, both input and output types, with and without a bias.
#[test]
fn quantized_depthwise_convolutions_match_to_the_byte() {
    let mut rng = kiln_testkit::Rng::new(9);
    // (h, w, k, stride, pad, dilation)
    for (h, w, k, s, p, d) in [(7, 9, 3, 1, 1, 1), (8, 8, 3, 2, 1, 1), (9, 7, 5, 1, 2, 1), (9, 9, 3, 1, 2, 2)] {
        let (oh, ow) = ((h + 2 * p - d * (k - 1) - 1) / s + 1, (w + 2 * p - d * (k - 1) - 1) / s + 1);
        let (planes, channels) = (6usize, 3usize);
        for (x_signed, y_signed, bias_mode) in [(0, 0, 1), (1, 1, 0), (1, 0, 1)] {
            let ty = |signed: i64| if signed != 0 { ScalarType::I8 } else { ScalarType::U8 };
            let mut p_ = Program::default();
            for (name, elem, len) in [("x", ty(x_signed), planes * h * w), ("w", ScalarType::F32, channels * k * k), ("bias", ScalarType::I32, channels), ("s", ScalarType::F32, channels), ("y", ty(y_signed), planes * oh * ow)] {
                p_.add_buffer(Buffer { name: name.into(), elem: ElemType::Scalar(elem), len: len as u64, kind: BufferKind::Temp });
            }
            let at = |b: u32| Addr::at(BufId(b), 0);
            let c = call::DwConv2dRequantize { x: at(0), w: at(1), bias: at(2), scales: at(3), y: at(4), planes: i(planes as i64), channels: i(channels as i64), ih: i(h as i64), iw: i(w as i64), oh: i(oh as i64), ow: i(ow as i64), kh: i(k as i64), kw: i(k as i64), sh: i(s as i64), sw: i(s as i64), ph: i(p as i64), pw: i(p as i64), dh: i(d as i64), dw: i(d as i64), x_signed: i(x_signed), x_zero: i(if x_signed != 0 { -5 } else { 130 }), bias_mode: i(bias_mode), zero: i(if y_signed != 0 { 3 } else { 128 }), y_signed: i(y_signed) };
            let mut kern = Kernel::new("k");
            kern.body = vec![Stmt::Call(c.into())];
            p_.kernels.push(kern);
            kiln_loops::verify::verify(&p_).unwrap_or_else(|e| panic!("{e:?}"));
            let x: Vec<u8> = (0..planes * h * w).map(|_| rng.next_u64() as u8).collect();
            let wts: Vec<u8> = (0..channels * k * k).flat_map(|_| ((rng.next_u64() % 255) as f32 - 127.0).to_le_bytes()).collect();
            let bias: Vec<u8> = (0..channels).flat_map(|_| ((rng.next_u64() % 4001) as i32 - 2000).to_le_bytes()).collect();
            let scales: Vec<u8> = (0..channels).flat_map(|c| [0.002f32, 4.0e-4, 0.01][c].to_le_bytes()).collect();
            let memory = vec![x, wts, bias, scales, vec![0u8; planes * oh * ow]];
            let mut want = memory.clone();
            interp::run(&p_, &mut want).expect("the kernel runs");
            let mut plain = p_.clone();
            expand_calls(&mut plain).expect("the call expands");
            kiln_loops::verify::verify(&plain).unwrap_or_else(|e| panic!("{e:?}"));
            let mut got = memory;
            interp::run(&plain, &mut got).expect("the loops run");
            let what = format!("{h}x{w} k{k} s{s} p{p} d{d}, signed {x_signed}/{y_signed}, bias {bias_mode}");
            assert_eq!(want[4], got[4], "{what}");
            assert!(want[4].iter().any(|&v| v != want[4][0]), "{what}: one value");
        }
    }
}
