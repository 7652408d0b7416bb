//! Runtime calls: `Sgemm`, `SgemmPacked`, `SgemmFused`, `DwConv2d`, `Conv2d`, `Conv2dPacked`, `Epilogue`, `Im2col`, `Im2colBytes`, `MaxPool2d`, `LayerNorm`, `Qgemm`, `TopK`, every math function
//! in `f32` and `f64`, and float remainder.

use kiln_loops::*;
use kiln_testkit::Rng;

use crate::harness::{samples, Harness, Tol};

fn f32_data(n: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| u64::from(r.unit_f32().to_bits())).collect()
}

#[test]
fn sgemm_matches_the_interpreter() {
    // (m, n, k, trans_a, trans_b, alpha, beta), at element offsets into larger buffers.
    let cases = [(1, 1, 1, 0, 0, 1.0, 0.0), (5, 7, 3, 0, 0, 1.0, 0.0), (8, 9, 10, 1, 0, 0.5, 1.0), (6, 4, 33, 0, 1, 1.0, -2.0), (17, 3, 5, 1, 1, 2.0, 0.25), (4, 4, 0, 0, 0, 1.0, 1.0)];
    for (m, n, k, ta, tb, alpha, beta) in cases {
        let (lda, ldb, ldc) = (if ta != 0 { m + 1 } else { k + 2 }, if tb != 0 { k + 3 } else { n + 1 }, n + 2);
        let a_len = lda * if ta != 0 { k.max(1) } else { m } + 3;
        let b_len = ldb * if tb != 0 { n } else { k.max(1) } + 5;
        let c_len = ldc * m + 1;
        let mut h = Harness::new();
        let a = h.input_of(ScalarType::F32, &f32_data(a_len as usize, 1));
        let b = h.input_of(ScalarType::F32, &f32_data(b_len as usize, 2));
        let c = h.output(ElemType::Scalar(ScalarType::F32), c_len as u64);
        let mut kern = Kernel::new("gemm");
        let i = Expr::idx;
        let gemm = call::Sgemm {
            a: Addr::at(a, 3),
            b: Addr::at(b, 5),
            c: Addr::at(c, 1),
            m: i(m),
            n: i(n),
            // An i32 operand is extended to i64, as the interpreter allows.
            k: Expr::int(ScalarType::I32, k),
            lda: i(lda),
            ldb: i(ldb),
            ldc: i(ldc),
            trans_a: i(ta),
            trans_b: i(tb),
            alpha: Expr::f32(alpha),
            beta: Expr::f32(beta),
        };
        kern.body = vec![Stmt::Call(gemm.into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn sgemm_packed_matches_the_interpreter() {
    // (m, n, k, trans_a, nr, kc): the detected kernel's layout on AVX-512 (48, 384) and others;
    // B holds the packed layout's elements (any values are a valid packed matrix).
    let cases = [(2, 2, 1, 0, 48, 384), (5, 50, 400, 0, 48, 384), (9, 7, 20, 1, 16, 8), (3, 33, 5, 0, 5, 2), (4, 4, 0, 0, 16, 8)];
    for (m, n, k, ta, nr, kc) in cases {
        let (lda, ldc) = (if ta != 0 { m + 1 } else { k + 2 }, n + 2);
        let a_len = lda * if ta != 0 { k.max(1) } else { m } + 3;
        let b_len = k * ((n + nr - 1) / nr * nr) + 5;
        let mut h = Harness::new();
        let a = h.input_of(ScalarType::F32, &f32_data(a_len as usize, 3));
        let b = h.input_of(ScalarType::F32, &f32_data(b_len as usize, 4));
        let c = h.output(ElemType::Scalar(ScalarType::F32), (ldc * m + 1) as u64);
        let mut kern = Kernel::new("gemm_packed");
        let i = Expr::idx;
        let gemm = call::SgemmPacked { a: Addr::at(a, 3), b: Addr::at(b, 5), c: Addr::at(c, 1), m: i(m), n: i(n), k: i(k), lda: i(lda), ldc: i(ldc), trans_a: i(ta), nr: i(nr), kc: i(kc), alpha: Expr::f32(0.5), beta: Expr::f32(1.0) };
        kern.body = vec![Stmt::Call(gemm.into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn sgemm_fused_matches_the_interpreter() {
    // (m, n, k, trans_b, nr, kc, bias mode, period, residual, act): plain and packed B, the
    // matrix–vector forms, every bias mode; Z after C in the same buffer.
    let cases = [(5, 50, 40, 1, 0, 0, 2, 0, 1, 7), (9, 7, 20, 0, 16, 8, 1, 4, 0, 2), (1, 33, 70, 1, 0, 0, 2, 0, 1, 1), (20, 1, 9, 0, 0, 0, 1, 20, 1, 4), (4, 4, 0, 0, 0, 0, 0, 0, 1, 3), (3, 60, 5, 0, 48, 384, 0, 0, 0, 8)];
    for (m, n, k, tb, nr, kc, mode, period, residual, act) in cases {
        let (lda, ldb, ldc) = (k + 2, if tb != 0 { k + 3 } else { n + 1 }, n + 2);
        let a_len = lda * m + 3;
        let b_len = if nr > 0 { k * ((n + nr - 1) / nr * nr) } else { ldb * if tb != 0 { n } else { k.max(1) } } + 5;
        let c_len = ldc * m;
        let mut h = Harness::new();
        let a = h.input_of(ScalarType::F32, &f32_data(a_len as usize, 5));
        let b = h.input_of(ScalarType::F32, &f32_data(b_len as usize, 6));
        let bias = h.input_of(ScalarType::F32, &f32_data(m.max(n) as usize + 2, 7));
        let c = h.output(ElemType::Scalar(ScalarType::F32), (2 * c_len + 1) as u64);
        let mut kern = Kernel::new("gemm_fused");
        let i = Expr::idx;
        let gemm = call::SgemmFused {
            a: Addr::at(a, 3),
            b: Addr::at(b, 5),
            c: Addr::at(c, 1),
            bias: Addr::at(bias, 2),
            z: Addr::at(c, c_len + 1),
            m: i(m),
            n: i(n),
            k: i(k),
            lda: i(lda),
            ldb: i(ldb),
            ldc: i(ldc),
            trans_a: i(0),
            trans_b: i(tb),
            nr: i(nr),
            kc: i(kc),
            bias_mode: i(mode),
            period: i(period),
            residual: i(residual),
            act: i(act),
            alpha: Expr::f32(0.5),
            beta: Expr::f32(if residual != 0 { 0.0 } else { 1.0 }),
            act_alpha: Expr::f32(-0.25),
            act_beta: Expr::f32(0.5),
        };
        kern.body = vec![Stmt::Call(gemm.into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn dwconv2d_matches_the_interpreter() {
    // (planes, channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw, accumulate), padded after by
    // one row and column, at element offsets into larger buffers.
    let cases = [
        (2, 2, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 0),
        (6, 3, 9, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1),
        (4, 2, 7, 33, 2, 5, 1, 3, 0, 2, 2, 1, 1),
        (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0),
    ];
    for (planes, channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw, acc) in cases {
        let oh = (h + ph + 1 - ((kh - 1) * dh + 1)) / sh + 1;
        let ow = (w + pw + 1 - ((kw - 1) * dw + 1)) / sw + 1;
        let (x_len, w_len, y_len) = (planes * h * w, channels * kh * kw, planes * oh * ow);
        let mut hs = Harness::new();
        let x = hs.input_of(ScalarType::F32, &f32_data(x_len as usize + 3, 1));
        let k = hs.input_of(ScalarType::F32, &f32_data(w_len as usize + 5, 2));
        let start = hs.input_of(ScalarType::F32, &f32_data(y_len as usize, 3));
        let y = hs.output(ElemType::Scalar(ScalarType::F32), y_len as u64 + 2);
        let mut kern = Kernel::new("dwconv");
        let i = Expr::idx;
        // The start of the output, which an accumulating call adds to.
        kern.body = kern.nest(&[y_len as u64], |_, idx| vec![Stmt::Store { buf: y, index: idx[0].clone() + 1, value: Expr::load(start, idx[0].clone()) }]);
        let conv = call::DwConv2d {
            x: Addr::at(x, 3),
            w: Addr::at(k, 5),
            y: Addr::at(y, 1),
            planes: i(planes),
            // An i32 operand is extended to i64, as the interpreter allows.
            channels: Expr::int(ScalarType::I32, channels),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(kh),
            kw: i(kw),
            sh: i(sh),
            sw: i(sw),
            ph: i(ph),
            pw: i(pw),
            dh: i(dh),
            dw: i(dw),
            accumulate: i(acc),
        };
        kern.body.push(Stmt::Call(conv.into()));
        hs.push(kern);
        hs.run().unwrap();
    }
}

#[test]
fn conv2d_matches_the_interpreter() {
    // (batch, channels, out_channels, groups, h, w, kh, kw, sh, sw, ph, pw, dh, dw, bias,
    // residual, act), padded after by one row and column, at element offsets into larger
    // buffers; absent operands are the output's own address, as lowering passes them.
    let cases = [
        (1i64, 3i64, 4i64, 1i64, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1),
        (2, 4, 6, 2, 9, 20, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 2),
        (1, 6, 5, 1, 7, 33, 2, 5, 1, 3, 0, 2, 2, 1, 1, 1, 7),
        (1, 8, 9, 1, 6, 6, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0),
        (1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0),
        // Wide enough for the channels kernel (AVX2 and AVX-512), whose weights can be packed.
        (1, 8, 64, 1, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),
    ];
    // Plain, then `conv2d_packed` with panels of 64 (AVX-512's), 16 (AVX2's) and 5 (no
    // kernel's): the same routine computes both sides from the same (arbitrary) panels.
    let runs = cases.iter().flat_map(|&c| [(c, 0i64), (c, 64), (c, 16), (c, 5)]);
    for ((batch, channels, out_channels, groups, h, w, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act), width) in runs {
        // Pointwise when there is no window: no padding after either.
        let after = if kh == 1 && sh == 1 { 0 } else { 1 };
        let oh = (h + ph + after - ((kh - 1) * dh + 1)) / sh + 1;
        let ow = (w + pw + after - ((kw - 1) * dw + 1)) / sw + 1;
        let mg = out_channels / groups;
        let w_len = if width == 0 { out_channels * channels / groups * kh * kw } else { groups * ((mg + width - 1) / width) * width * channels / groups * kh * kw };
        let (x_len, y_len) = (batch * channels * h * w, batch * out_channels * oh * ow);
        let mut hs = Harness::new();
        let x = hs.input_of(ScalarType::F32, &f32_data(x_len as usize + 3, 1));
        let k = hs.input_of(ScalarType::F32, &f32_data(w_len as usize + 5, 2));
        let b = hs.input_of(ScalarType::F32, &f32_data(out_channels as usize + 2, 3));
        let z = hs.input_of(ScalarType::F32, &f32_data(y_len as usize + 1, 4));
        let y = hs.output(ElemType::Scalar(ScalarType::F32), y_len as u64 + 2);
        let mut kern = Kernel::new("conv");
        let i = Expr::idx;
        let conv = call::Conv2d {
            x: Addr::at(x, 3),
            w: Addr::at(k, 5),
            b: if bias == 0 { Addr::at(y, 1) } else { Addr::at(b, 2) },
            z: if residual == 0 { Addr::at(y, 1) } else { Addr::at(z, 1) },
            y: Addr::at(y, 1),
            // An i32 operand is extended to i64, as the interpreter allows.
            batch: Expr::int(ScalarType::I32, batch),
            channels: i(channels),
            out_channels: i(out_channels),
            groups: i(groups),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(kh),
            kw: i(kw),
            sh: i(sh),
            sw: i(sw),
            ph: i(ph),
            pw: i(pw),
            dh: i(dh),
            dw: i(dw),
            bias: i(bias),
            residual: i(residual),
            act: i(act),
            alpha: Expr::f32(-0.5),
            beta: Expr::f32(0.75),
        };
        let call: Call = if width == 0 { conv.into() } else { conv.clone().packed(conv.w, i(width)).into() };
        kern.body = vec![Stmt::Call(call)];
        hs.push(kern);
        hs.run().unwrap();
    }
}

/// The cases of the integer products: (m, n, k, a_signed, b_signed, a_zeros, b_zeros,
/// bias_mode).
const QGEMM_CASES: [(i64, i64, i64, i64, i64, i64, i64, i64); 4] = [(3, 20, 9, 0, 1, 1, 20, 1), (7, 33, 64, 1, 0, 7, 1, 2), (1, 1, 1, 0, 0, 0, 0, 0), (4, 5, 0, 1, 1, 1, 1, 1)];

/// A harness holding one integer product's operands at element offsets into larger buffers,
/// its result in an output of `out` elements, and the call; an absent zero point is its
/// operand's own address, as lowering passes it, and an absent bias the one of `bias_or`.
fn qgemm_case((m, n, k, a_signed, b_signed, a_zeros, b_zeros, bias_mode): (i64, i64, i64, i64, i64, i64, i64, i64), out: ScalarType) -> (Harness, call::Qgemm) {
    let (lda, ldb, ldc) = (k + 1, n + 2, n + 3);
    let mut r = Rng::new(5);
    let mut bytes = |len: i64| -> Vec<u64> { (0..len).map(|_| r.next_u64() & 0xff).collect() };
    let ty = |signed: i64| if signed != 0 { ScalarType::I8 } else { ScalarType::U8 };
    let mut h = Harness::new();
    let a = h.input_of(ty(a_signed), &bytes(m * lda + 3));
    let b = h.input_of(ty(b_signed), &bytes(k.max(1) * ldb + 2));
    let za = h.input_of(ty(a_signed), &bytes(m + 1));
    let zb = h.input_of(ty(b_signed), &bytes(n + 1));
    let bias_bits: Vec<u64> = bytes(m + n + 2).iter().map(|v| v * 0x0101_0101).collect();
    let bias = h.input_of(ScalarType::I32, &bias_bits);
    let c = h.output(ElemType::Scalar(out), (m * ldc + 1) as u64);
    let i = Expr::idx;
    let q = call::Qgemm {
        a: Addr::at(a, 3),
        b: Addr::at(b, 2),
        c: Addr::at(c, 1),
        za: if a_zeros == 0 { Addr::at(a, 3) } else { Addr::at(za, 1) },
        zb: if b_zeros == 0 { Addr::at(b, 2) } else { Addr::at(zb, 1) },
        bias: if bias_mode == 0 && out == ScalarType::I32 { Addr::at(c, 1) } else { Addr::at(bias, 2) },
        m: i(m),
        n: i(n),
        k: i(k),
        lda: i(lda),
        ldb: i(ldb),
        ldc: i(ldc),
        a_signed: i(a_signed),
        b_signed: i(b_signed),
        a_zeros: i(a_zeros),
        b_zeros: i(b_zeros),
        bias_mode: i(bias_mode),
        b_packed: i(0),
    };
    (h, q)
}

#[test]
fn qgemm_matches_the_interpreter() {
    for case in QGEMM_CASES {
        let (mut h, q) = qgemm_case(case, ScalarType::I32);
        let mut kern = Kernel::new("qgemm");
        kern.body = vec![Stmt::Call(q.into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn qgemm_requantize_matches_the_interpreter() {
    // Each product with scales per tensor, row and column into both output types.
    for (case, scale_mode, zero, signed) in QGEMM_CASES.iter().zip([(0, 3, 1), (1, 128, 0), (2, -7, 1), (1, 0, 0)]).map(|(c, (s, z, y))| (*c, s, z, y)) {
        let (m, n) = (case.0, case.1);
        let (mut h, q) = qgemm_case(case, if signed != 0 { ScalarType::I8 } else { ScalarType::U8 });
        // Scales that put the results on both sides of the output's range.
        let scales: Vec<f32> = (0..m.max(n) + 1).map(|i| [1.0 / 256.0, 0.013, 3.0e-4, 1.0e-5][i as usize % 4]).collect();
        let s = h.input_of(ScalarType::F32, &scales.iter().map(|v| u64::from(v.to_bits())).collect::<Vec<_>>());
        let mut kern = Kernel::new("qgemm_requantize");
        let y = q.c.clone();
        kern.body = vec![Stmt::Call(q.requantized(y, Addr::at(s, 1), Expr::idx(scale_mode), Expr::idx(zero), Expr::idx(signed)).into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn dwconv2d_requantize_matches_the_interpreter() {
    // (planes, channels, h, w, k, stride, pad, x_signed, y_signed, bias_mode), at element
    // offsets into larger buffers.
    for (planes, channels, h, w, k, s, p, x_signed, y_signed, bias_mode) in [(4, 2, 9, 11, 3, 1, 1, 0, 1, 1), (3, 3, 12, 12, 3, 2, 1, 1, 0, 0), (2, 2, 40, 37, 5, 1, 2, 0, 0, 1)] {
        let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
        let mut r = Rng::new(8);
        let ty = |signed: i64| if signed != 0 { ScalarType::I8 } else { ScalarType::U8 };
        let mut h_ = Harness::new();
        let x = h_.input_of(ty(x_signed), &(0..planes * h * w + 2).map(|_| r.next_u64() & 0xff).collect::<Vec<_>>());
        let wts: Vec<u64> = (0..channels * k * k + 1).map(|_| u64::from(((r.next_u64() % 255) as f32 - 127.0).to_bits())).collect();
        let wb = h_.input_of(ScalarType::F32, &wts);
        let bias = h_.input_of(ScalarType::I32, &(0..channels + 1).map(|_| (r.next_u64() % 4001) as u32 as u64).collect::<Vec<_>>());
        let scales = h_.input_of(ScalarType::F32, &(0..channels + 1).map(|c| u64::from([0.002f32, 4.0e-4, 0.01][c as usize % 3].to_bits())).collect::<Vec<_>>());
        let y = h_.output(ElemType::Scalar(ty(y_signed)), (planes * oh * ow + 1) as u64);
        let i = Expr::idx;
        let c = call::DwConv2dRequantize {
            x: Addr::at(x, 2),
            w: Addr::at(wb, 1),
            bias: Addr::at(bias, 1),
            scales: Addr::at(scales, 1),
            y: Addr::at(y, 1),
            planes: i(planes),
            channels: i(channels),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(k),
            kw: i(k),
            sh: i(s),
            sw: i(s),
            ph: i(p),
            pw: i(p),
            dh: i(1),
            dw: i(1),
            x_signed: i(x_signed),
            x_zero: i(if x_signed != 0 { -2 } else { 127 }),
            bias_mode: i(bias_mode),
            zero: i(if y_signed != 0 { 1 } else { 128 }),
            y_signed: i(y_signed),
        };
        let mut kern = Kernel::new("dwconv2d_requantize");
        kern.body = vec![Stmt::Call(c.into())];
        h_.push(kern);
        h_.run().unwrap();
    }
}

#[test]
fn layernorm_matches_the_interpreter() {
    // (rows, cols, bias, rms), at element offsets into larger buffers; an absent bias is the
    // scale's own address, as lowering passes it.
    for (rows, cols, bias, rms) in [(3, 256, 1, 0), (5, 37, 0, 0), (2, 20, 0, 1), (1, 1, 1, 0)] {
        let n = rows * cols;
        let mut h = Harness::new();
        let x = h.input_of(ScalarType::F32, &f32_data(n as usize + 3, 1));
        let scale = h.input_of(ScalarType::F32, &f32_data(cols as usize + 1, 2));
        let b = h.input_of(ScalarType::F32, &f32_data(cols as usize + 2, 3));
        let y = h.output(ElemType::Scalar(ScalarType::F32), n as u64 + 2);
        let mut kern = Kernel::new("layernorm");
        let i = Expr::idx;
        let norm = call::LayerNorm {
            x: Addr::at(x, 3),
            scale: Addr::at(scale, 1),
            b: if bias == 0 { Addr::at(scale, 1) } else { Addr::at(b, 2) },
            y: Addr::at(y, 1),
            // An i32 operand is extended to i64, as the interpreter allows.
            rows: Expr::int(ScalarType::I32, rows),
            cols: i(cols),
            bias: i(bias),
            rms: i(rms),
            epsilon: Expr::f32(1e-5),
        };
        kern.body = vec![Stmt::Call(norm.into())];
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn epilogue_matches_the_interpreter() {
    // (rows, cols, bias mode, period, residual, act, alpha, beta), at element offsets into
    // larger buffers; absent operands are the output's own address, as lowering passes them.
    let cases = [
        (3, 5, 0, 0, 0, 1, 0.0, 0.0),
        (4, 7, 1, 3, 1, 2, -0.5, 0.75),
        (2, 9, 2, 0, 1, 7, 0.0, 0.0),
        (5, 3, 1, 5, 0, 4, 0.0, 0.0),
        (1, 33, 2, 0, 0, 3, 0.1, 0.0),
        (6, 4, 0, 0, 1, 8, 0.0, 0.0),
        (2, 2, 1, 2, 1, 6, 0.0, 0.0),
    ];
    for (rows, cols, mode, period, residual, act, alpha, beta) in cases {
        let n = rows * cols;
        let mut h = Harness::new();
        let start = h.input_of(ScalarType::F32, &f32_data(n as usize + 1, 1));
        let b = h.input_of(ScalarType::F32, &f32_data(cols.max(period) as usize + 2, 2));
        let z = h.input_of(ScalarType::F32, &f32_data(n as usize + 3, 3));
        let y = h.output(ElemType::Scalar(ScalarType::F32), n as u64 + 2);
        let mut kern = Kernel::new("epilogue");
        let i = Expr::idx;
        kern.body = kern.nest(&[n as u64], |_, idx| vec![Stmt::Store { buf: y, index: idx[0].clone() + 1, value: Expr::load(start, idx[0].clone() + 1) }]);
        let epilogue = call::Epilogue {
            y: Addr::at(y, 1),
            b: if mode == 0 { Addr::at(y, 1) } else { Addr::at(b, 2) },
            z: if residual == 0 { Addr::at(y, 1) } else { Addr::at(z, 3) },
            rows: i(rows),
            // An i32 operand is extended to i64, as the interpreter allows.
            cols: Expr::int(ScalarType::I32, cols),
            bias_mode: i(mode),
            period: i(period),
            residual: i(residual),
            act: i(act),
            alpha: Expr::f32(alpha),
            beta: Expr::f32(beta),
        };
        kern.body.push(Stmt::Call(epilogue.into()));
        h.push(kern);
        h.run().unwrap();
    }
}

#[test]
fn im2col_matches_the_interpreter() {
    // (channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw), padded after by one row and column, at
    // element offsets into larger buffers.
    let cases = [(2, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1), (3, 9, 20, 3, 3, 2, 2, 1, 1, 1, 1), (2, 7, 33, 2, 5, 1, 3, 0, 2, 2, 1), (1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1), (4, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1)];
    for (channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw) in cases {
        let oh = (h + ph + 1 - ((kh - 1) * dh + 1)) / sh + 1;
        let ow = (w + pw + 1 - ((kw - 1) * dw + 1)) / sw + 1;
        let (x_len, col_len) = (channels * h * w, channels * kh * kw * oh * ow);
        let mut hs = Harness::new();
        let x = hs.input_of(ScalarType::F32, &f32_data(x_len as usize + 3, 1));
        let col = hs.output(ElemType::Scalar(ScalarType::F32), col_len as u64 + 2);
        let mut kern = Kernel::new("im2col");
        let i = Expr::idx;
        let im2col = call::Im2col {
            x: Addr::at(x, 3),
            col: Addr::at(col, 1),
            // An i32 operand is extended to i64, as the interpreter allows.
            channels: Expr::int(ScalarType::I32, channels),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(kh),
            kw: i(kw),
            sh: i(sh),
            sw: i(sw),
            ph: i(ph),
            pw: i(pw),
            dh: i(dh),
            dw: i(dw),
        };
        kern.body = vec![Stmt::Call(im2col.into())];
        hs.push(kern);
        hs.run().unwrap();
    }
}

#[test]
fn im2col_bytes_matches_the_interpreter() {
    // (channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw, pad, signed), padded after by one row
    // and column, at element offsets into larger buffers.
    let cases = [(2, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 128, 0), (3, 9, 20, 3, 3, 2, 2, 1, 1, 1, 1, -3, 1), (2, 7, 33, 2, 5, 1, 3, 0, 2, 2, 1, 7, 0), (1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1)];
    for (channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw, pad, signed) in cases {
        let oh = (h + ph + 1 - ((kh - 1) * dh + 1)) / sh + 1;
        let ow = (w + pw + 1 - ((kw - 1) * dw + 1)) / sw + 1;
        let (x_len, col_len) = (channels * h * w, channels * kh * kw * oh * ow);
        let ty = if signed != 0 { ScalarType::I8 } else { ScalarType::U8 };
        let mut r = Rng::new(9);
        let bytes: Vec<u64> = (0..x_len + 3).map(|_| r.next_u64() & 0xff).collect();
        let mut hs = Harness::new();
        let x = hs.input_of(ty, &bytes);
        let col = hs.output(ElemType::Scalar(ty), col_len as u64 + 2);
        let mut kern = Kernel::new("im2col_bytes");
        let i = Expr::idx;
        let im2col = call::Im2colBytes {
            x: Addr::at(x, 3),
            col: Addr::at(col, 1),
            channels: i(channels),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(kh),
            kw: i(kw),
            sh: i(sh),
            sw: i(sw),
            ph: i(ph),
            pw: i(pw),
            dh: i(dh),
            dw: i(dw),
            pad: i(pad),
            signed: i(signed),
        };
        kern.body = vec![Stmt::Call(im2col.into())];
        hs.push(kern);
        hs.run().unwrap();
    }
}

#[test]
fn maxpool2d_matches_the_interpreter() {
    // (planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw), padded after by one row and column, at
    // element offsets into larger buffers.
    let cases = [(2, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1), (3, 7, 33, 2, 3, 1, 1, 0, 1, 1, 1), (2, 8, 20, 2, 2, 1, 3, 1, 0, 2, 1), (1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)];
    for (planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw) in cases {
        let oh = (h + ph + 1 - ((kh - 1) * dh + 1)) / sh + 1;
        let ow = (w + pw + 1 - ((kw - 1) * dw + 1)) / sw + 1;
        let (x_len, y_len) = (planes * h * w, planes * oh * ow);
        let mut hs = Harness::new();
        let x = hs.input_of(ScalarType::F32, &f32_data(x_len as usize + 3, 1));
        let y = hs.output(ElemType::Scalar(ScalarType::F32), y_len as u64 + 2);
        let mut kern = Kernel::new("maxpool");
        let i = Expr::idx;
        let pool = call::MaxPool2d {
            x: Addr::at(x, 3),
            y: Addr::at(y, 1),
            // An i32 operand is extended to i64, as the interpreter allows.
            planes: Expr::int(ScalarType::I32, planes),
            ih: i(h),
            iw: i(w),
            oh: i(oh),
            ow: i(ow),
            kh: i(kh),
            kw: i(kw),
            sh: i(sh),
            sw: i(sw),
            ph: i(ph),
            pw: i(pw),
            dh: i(dh),
            dw: i(dw),
        };
        kern.body = vec![Stmt::Call(pool.into())];
        hs.push(kern);
        hs.run().unwrap();
    }
}

const MATH: [MathFn; 18] = [
    MathFn::Exp,
    MathFn::Log,
    MathFn::Pow,
    MathFn::Tanh,
    MathFn::Erf,
    MathFn::Sin,
    MathFn::Cos,
    MathFn::Tan,
    MathFn::Asin,
    MathFn::Acos,
    MathFn::Atan,
    MathFn::Sinh,
    MathFn::Cosh,
    MathFn::Asinh,
    MathFn::Acosh,
    MathFn::Atanh,
    MathFn::Softplus,
    MathFn::Rint,
];

/// A sweep of arguments: the special samples plus a dense grid over [−12, 12].
fn sweep(t: ScalarType) -> Vec<u64> {
    let mut v = samples(t);
    for i in -1200..=1200 {
        let x = f64::from(i) / 100.0 + 0.003;
        v.push(if t == ScalarType::F32 { u64::from((x as f32).to_bits()) } else { x.to_bits() });
    }
    // Around the exponential's subnormal results and the bound below which it is 0.
    for x in [-87.5f64, -95.0, -103.99, -104.0, -104.01, -110.0, -1.0e30] {
        v.push(if t == ScalarType::F32 { u64::from((x as f32).to_bits()) } else { x.to_bits() });
    }
    v
}

#[test]
fn math_functions_match_the_interpreter() {
    for t in [ScalarType::F32, ScalarType::F64] {
        let xs = sweep(t);
        let n = xs.len() as u64;
        let mut h = Harness::new();
        let a = h.input_of(t, &xs);
        let b = h.input_of(t, &xs.iter().rev().copied().collect::<Vec<_>>());
        for f in MATH {
            // Every function but f64 erf computes exactly what the interpreter does: the same
            // std function, in f64, rounded once, or for f32 exp, tanh and erf the same
            // approximation (`kiln_runtime::vmath`), in vector lanes and the scalar tail alike.
            // The interpreter's f64 erf is a different formula from the runtime's Cody
            // approximation (kiln_runtime::erf, within 4.8 ulp): its Maclaurin series loses
            // bits near |x| = 2.5, up to 70.5 ulp (measured against mpmath over [-6, 6]).
            let tol = match (f, t) {
                (MathFn::Erf, ScalarType::F64) => Tol::Ulps(80),
                _ => Tol::Exact,
            };
            let out = h.output_tol(ElemType::Scalar(t), n, tol);
            h.push(crate::harness::map_kernel(&format!("{f:?}"), n, |_, i| {
                let args = if f == MathFn::Pow { vec![Expr::load(a, i.clone()), Expr::load(b, i.clone())] } else { vec![Expr::load(a, i.clone())] };
                vec![Stmt::Store { buf: out, index: i, value: Expr::Math(f, args) }]
            }));
        }
        h.run().unwrap();
    }
}

#[test]
fn topk_matches_the_interpreter() {
    // (outer, len, inner, k, largest), at element offsets into larger buffers; the data has
    // ties, NaN, zeros of both signs and infinities.
    let special = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, 0.5, 0.5];
    for (outer, len, inner, k, largest) in [(1, 40, 1, 7, 1), (3, 17, 2, 17, 0), (2, 9, 5, 1, 1), (1, 300, 1, 0, 1), (4, 6, 3, 4, 0)] {
        let n = (outer * len * inner) as usize;
        let mut r = Rng::new(17);
        let data: Vec<u64> = (0..n + 2).map(|e| u64::from(if e % 5 == 0 { special[e / 5 % special.len()] } else { r.unit_f32() }.to_bits())).collect();
        let mut h = Harness::new();
        let x = h.input_of(ScalarType::F32, &data);
        let out = (outer * k * inner) as u64;
        let y = h.output(ElemType::Scalar(ScalarType::F32), out + 1);
        let indices = h.output(ElemType::Scalar(ScalarType::I64), out + 3);
        let mut kern = Kernel::new("topk");
        let i = Expr::idx;
        let topk = call::TopK { x: Addr::at(x, 2), y: Addr::at(y, 1), indices: Addr::at(indices, 3), outer: i(outer), len: i(len), inner: i(inner), k: i(k), largest: i(largest) };
        kern.body = vec![Stmt::Call(topk.into())];
        h.push(kern);
        h.run().unwrap();
    }
}
