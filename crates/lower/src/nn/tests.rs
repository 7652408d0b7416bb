//! FusedConv lowered, run in the interpreter and compared with the reference evaluator (which
//! computes it as Conv, Add and the activation): every activation, with and without the bias
//! and the residual addend, in `f32` (im2col, the runtime's over two spatial dims, and
//! `sgemm`, or the runtime's `dwconv2d` when depthwise over two spatial dims, then the
//! runtime's `epilogue`; the direct nest when depthwise over one) and `f64` (the direct nest),
//! over grouped, strided, padded, dilated and 1×1 convolutions.

use kiln_loops::ir::RuntimeFn;
use crate::linalg::tests::{ACTIVATIONS, DTYPES, calls, check, fused_graph};
use kiln_loops::ir::BufferKind;
use kiln_tir::{DType, Tensor, TensorData};

/// A convolution: X dims, W dims, group, strides, dilations, pads (begins then ends).
struct ConvCase {
    x: &'static [u64],
    w: &'static [u64],
    group: u64,
    strides: &'static [u64],
    dilations: &'static [u64],
    pads: &'static [u64],
}

impl ConvCase {
    /// The output dims: `⌊(in + pads − ((k − 1)·d + 1)) / s⌋ + 1` per spatial dim.
    fn y(&self) -> Vec<u64> {
        let r = self.x.len() - 2;
        let mut y = vec![self.x[0], self.w[0]];
        for i in 0..r {
            let span = (self.w[i + 2] - 1) * self.dilations[i] + 1;
            y.push((self.x[i + 2] + self.pads[i] + self.pads[r + i] - span) / self.strides[i] + 1);
        }
        y
    }

    fn attrs(&self) -> String {
        format!(
            "dilations = {:?}, group = {}, pads = {:?}, strides = {:?}",
            self.dilations, self.group, self.pads, self.strides
        )
    }
}

const CONV_CASES: [ConvCase; 8] = [
    // Two groups, strided, asymmetric padding: im2col into a scratch matrix.
    ConvCase {
        x: &[2, 4, 5, 5],
        w: &[6, 2, 3, 3],
        group: 2,
        strides: &[2, 1],
        dilations: &[1, 1],
        pads: &[1, 0, 1, 1],
    },
    // 1×1 without stride or padding: sgemm on the input itself.
    ConvCase {
        x: &[2, 3, 3, 4],
        w: &[4, 3, 1, 1],
        group: 1,
        strides: &[1, 1],
        dilations: &[1, 1],
        pads: &[0, 0, 0, 0],
    },
    // Depthwise: dwconv2d in f32.
    ConvCase {
        x: &[1, 3, 5, 5],
        w: &[3, 1, 3, 3],
        group: 3,
        strides: &[1, 2],
        dilations: &[1, 1],
        pads: &[1, 1, 1, 1],
    },
    // Depthwise over two images, dilated, asymmetric padding, wider than a vector.
    ConvCase {
        x: &[2, 2, 6, 37],
        w: &[2, 1, 2, 3],
        group: 2,
        strides: &[2, 1],
        dilations: &[2, 2],
        pads: &[0, 2, 1, 0],
    },
    // Depthwise over one spatial dim: planes of one row, dwconv2d in f32.
    ConvCase {
        x: &[2, 3, 9],
        w: &[3, 1, 3],
        group: 3,
        strides: &[2],
        dilations: &[1],
        pads: &[1, 1],
    },
    // A channel multiplier (two output channels per group) is not depthwise: im2col.
    ConvCase {
        x: &[1, 2, 4, 4],
        w: &[4, 1, 3, 3],
        group: 2,
        strides: &[1, 1],
        dilations: &[1, 1],
        pads: &[1, 1, 1, 1],
    },
    // One spatial dim, dilated, asymmetric padding.
    ConvCase {
        x: &[1, 2, 7],
        w: &[3, 2, 3],
        group: 1,
        strides: &[1],
        dilations: &[2],
        pads: &[2, 1],
    },
    // Three spatial dims: im2col into a scratch matrix.
    ConvCase {
        x: &[1, 2, 3, 4, 5],
        w: &[3, 2, 2, 2, 3],
        group: 1,
        strides: &[1, 1, 2],
        dilations: &[1, 1, 1],
        pads: &[0, 1, 0, 1, 0, 1],
    },
];

#[test]
fn fused_conv_matches_the_unfused_ops() {
    for dt in DTYPES {
        for c in &CONV_CASES {
            let y = c.y();
            for act in ACTIVATIONS {
                for (with_bias, z) in [(false, false), (true, false), (false, true), (true, true)] {
                    let bias = [c.w[0]];
                    let attrs = format!("{act}, {}", c.attrs());
                    let (src, inputs) = fused_graph(
                        "fused_conv",
                        dt,
                        [c.x, c.w],
                        with_bias.then_some(&bias[..]),
                        z,
                        &y,
                        &attrs,
                    );
                    check(&src, &inputs);
                }
            }
        }
    }
}

#[test]
fn f32_convolutions_call_the_runtime_with_their_epilogue() {
    use RuntimeFn::{Conv2d, Epilogue, Sgemm};
    // (case, dtype, bias, residual addend, activation index, the calls)
    let cases = [
        (&CONV_CASES[2], "f32", true, true, 1, vec![Conv2d]),
        (&CONV_CASES[3], "f32", true, false, 0, vec![Conv2d]),
        (&CONV_CASES[3], "f32", false, false, 0, vec![Conv2d]),
        (&CONV_CASES[3], "f64", true, true, 1, vec![]),
        // Over one or two spatial dims, one fused call whatever the groups (depthwise too),
        // padding and epilogue; over three, an im2col nest and sgemm per image and group, then
        // one epilogue over the output.
        (&CONV_CASES[4], "f32", true, true, 1, vec![Conv2d]),
        (&CONV_CASES[5], "f32", false, true, 0, vec![Conv2d]),
        (&CONV_CASES[0], "f32", false, false, 7, vec![Conv2d]),
        (&CONV_CASES[1], "f32", false, false, 0, vec![Conv2d]),
        (&CONV_CASES[6], "f32", true, false, 0, vec![Conv2d]),
        (&CONV_CASES[7], "f32", true, false, 0, vec![Sgemm, Epilogue]),
    ];
    for (c, dt, with_bias, z, act, want) in cases {
        let bias = [c.w[0]];
        let attrs = format!("{}, {}", ACTIVATIONS[act], c.attrs());
        let (src, _) = fused_graph(
            "fused_conv",
            dt,
            [c.x, c.w],
            with_bias.then_some(&bias[..]),
            z,
            &c.y(),
            &attrs,
        );
        // The sgemm calls sit in a loop over images and groups: one in the body.
        assert_eq!(calls(&src), want, "{src}");
    }
}

/// MaxPool in `f32` over two spatial dims calls the runtime's `maxpool2d` (other ranks, types
/// and the Indices output keep the loop nest), and matches the reference evaluator: strides,
/// dilations, asymmetric padding, `ceil_mode`, a global pool, and NaN in the input.
#[test]
fn max_pool_calls_maxpool2d_and_matches_the_evaluator() {
    use crate::linalg::tests::{tensor, ty};
    // (X dims, attributes, Y dims)
    let cases: [(&[u64], &str, &[u64]); 6] = [
        (&[2, 3, 9, 9], "kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]", &[2, 3, 5, 5]),
        (&[1, 2, 7, 30], "kernel_shape = [2, 3], strides = [1, 1]", &[1, 2, 6, 28]),
        (&[1, 2, 8, 37], "dilations = [2, 1], kernel_shape = [2, 2], pads = [0, 2, 1, 0], strides = [1, 2]", &[1, 2, 7, 19]),
        (&[1, 1, 6, 6], "ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]", &[1, 1, 3, 3]),
        (&[1, 3, 5, 33], "kernel_shape = [5, 33]", &[1, 3, 1, 1]),
        (&[2, 2, 4, 21], "kernel_shape = [3, 3], pads = [2, 2, 2, 2], strides = [3, 3]", &[2, 2, 2, 8]),
    ];
    for dt in DTYPES {
        for (x, attrs, y) in cases {
            let src = format!("graph @main(%0: {}) -> ({yt}) {{\n  %1 = tensor.max_pool(%0) {{{attrs}}} : {yt}\n  return %1\n}}", ty(dt, x), yt = ty(dt, y));
            let want = if dt == "f32" { vec![RuntimeFn::MaxPool2d] } else { vec![] };
            assert_eq!(calls(&src), want, "{src}");
            check(&src, &[tensor(dt, x, 7, true)]);
        }
    }
    // One spatial dim keeps the nest.
    let src = "graph @main(%0: f32[1, 2, 9]) -> (f32[1, 2, 4]) {\n  %1 = tensor.max_pool(%0) {kernel_shape = [3], strides = [2]} : f32[1, 2, 4]\n  return %1\n}";
    assert_eq!(calls(src), vec![], "{src}");
    check(src, &[tensor("f32", &[1, 2, 9], 7, true)]);
}

/// `len` integers in `lo..=hi` from a fixed sequence, as text.
fn ints(len: u64, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (s % (hi - lo + 1) as u64) as i64
        })
        .collect()
}

fn list(v: &[i64]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

/// Whether `src` lowers with a bias made by folding a convolution's row term.
fn folded_row_term(src: &str) -> bool {
    let g = kiln_tir::text::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = crate::lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    program.buffers.iter().any(|b| matches!(b.kind, BufferKind::Const(_)) && b.name.ends_with("_folded_bias"))
}

/// The bytes of output 0 of `src` lowered and interpreted on `inputs`.
fn output_bytes(src: &str, inputs: &[Tensor]) -> Vec<u8> {
    let g = kiln_tir::text::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = crate::lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    kiln_loops::verify::verify(&program).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(i) => inputs[*i].raw().expect("input bytes").to_vec(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    kiln_loops::interp::run(&program, &mut memory).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let b = program.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("output buffer");
    std::mem::take(&mut memory[b])
}

/// The output bytes of the convolutions of `integer_convolutions_are_exact_...` (2-D, square
/// kernel, stride and padding), from the definitions: `Σ (x − x_zero)(w − w_zero[m]) (+ B[m])`
/// over the group's channels and the taps inside the input, in `i64` then wrapped to `i32`,
/// then for QLinearConv `round(acc · s[m] + 10)` in `f64` with `s[m] = 0.02 · w_scale[m] / 0.5`
/// in `f32`, saturated.
#[allow(clippy::too_many_arguments)]
fn conv_reference(x: &[u64], xs: &[u8], wd: &[u64], (group, stride, pad): (u64, u64, u64), w: &[i64], w_zero: &[i64], bias: &[i64], scales: &[String], qlinear: bool) -> Vec<u8> {
    let [n, c, h, wi] = [x[0], x[1], x[2], x[3]].map(|v| v as i64);
    let [m, cg, k] = [wd[0], wd[1], wd[2]].map(|v| v as i64);
    let (g, s, p) = (group as i64, stride as i64, pad as i64);
    let (oh, ow) = ((h + 2 * p - k) / s + 1, (wi + 2 * p - k) / s + 1);
    let x_zero = if qlinear { 128 } else { 3 };
    let mut out = Vec::new();
    for b in 0..n {
        for o in 0..m {
            let c0 = o / (m / g) * cg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc: i64 = if qlinear { bias[o as usize] } else { 0 };
                    for ch in 0..cg {
                        for ky in 0..k {
                            for kx in 0..k {
                                let (iy, ix) = (oy * s - p + ky, ox * s - p + kx);
                                if iy < 0 || ix < 0 || iy >= h || ix >= wi {
                                    continue;
                                }
                                let xv = i64::from(xs[(((b * c + c0 + ch) * h + iy) * wi + ix) as usize]);
                                acc += (xv - x_zero) * (w[(((o * cg + ch) * k + ky) * k + kx) as usize] - w_zero[o as usize]);
                            }
                        }
                    }
                    let acc = acc as i32;
                    if qlinear {
                        let s = 0.02f32 * scales[o as usize].parse::<f32>().expect("a scale") / 0.5f32;
                        out.push((f64::from(acc) * f64::from(s) + 10.0).round_ties_even().clamp(0.0, 255.0) as u8);
                    } else {
                        out.extend(acc.to_le_bytes());
                    }
                }
            }
        }
    }
    out
}

/// Which kernel an integer convolution takes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum IntegerPath {
    /// The runtime's integer product (after a byte im2col unless pointwise), whatever the
    /// weights.
    Qgemm,
    /// The exact `f32` products (`sgemm` or `conv2d`), or for QLinearConv the quantized
    /// depthwise routine, whose sums are the float ones.
    Float,
}

/// QLinearConv and ConvInteger: convolutions other than depthwise ones take the runtime's
/// integer product (QLinearConv's with the requantization fused), constant weights or not;
/// QLinearConv's depthwise ones the quantized depthwise routine, ConvInteger's the exact `f32`
/// products, while `Σ|w − w_zero|·max|x − x_zero| + |B|` stays below 2^24, and one integer
/// product per channel past it. Each gives, byte for byte, what the definitions give, with
/// the weights constant and with them read from an input, for `u8` inputs, `i8` weights with
/// per-channel zero points, a bias.
#[test]
fn integer_convolutions_are_exact_through_the_float_products() {
    // (X dims, W dims, group, stride, pad, weight range, path)
    let cases: [(&[u64], &[u64], u64, u64, u64, i64, IntegerPath); 7] = [
        (&[1, 8, 5, 5], &[6, 8, 1, 1], 1, 1, 0, 127, IntegerPath::Qgemm),
        (&[2, 3, 7, 6], &[4, 3, 3, 3], 1, 2, 1, 100, IntegerPath::Qgemm),
        (&[1, 6, 6, 6], &[6, 1, 3, 3], 6, 1, 1, 127, IntegerPath::Float),
        // 1200 weights near 123 times inputs up to 128 from their zero point pass 2^24, which
        // the integer product does not mind.
        (&[1, 1200, 1, 1], &[2, 1200, 1, 1], 1, 1, 0, 127, IntegerPath::Qgemm),
        // 2700 such weights past a 3×3 window.
        (&[1, 300, 3, 3], &[2, 300, 3, 3], 1, 1, 0, 127, IntegerPath::Qgemm),
        // Two groups of two channels each, padded.
        (&[1, 4, 6, 5], &[6, 2, 3, 3], 2, 1, 1, 127, IntegerPath::Qgemm),
        // A depthwise one past 2^24 (1089 weights near 123 in a 33×33 window, times 128):
        // a product per channel.
        (&[1, 2, 34, 34], &[2, 1, 33, 33], 2, 1, 0, 127, IntegerPath::Qgemm),
    ];
    for (i, &(x, w, group, stride, pad, range, path)) in cases.iter().enumerate() {
        let xn: u64 = x.iter().product();
        let wn: u64 = w.iter().product();
        let m = w[0];
        let out = |d: u64| (d + 2 * pad - w[2]) / stride + 1;
        let y = [x[0], m, out(x[2]), out(x[3])];
        let dims = |d: &[u64]| d.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        let big = i >= 3 && i != 5;
        let weights = if big { ints(wn, 120, 127, 3) } else { ints(wn, -range, range, 3 + i as u64) };
        let w_zero = ints(m, -2, 2, 5);
        let scales: Vec<String> = (0..m).map(|j| format!("{}", 0.01 + 0.001 * j as f64)).collect();
        let bias = ints(m, -500, 500, 7);
        let attrs = format!("group = {group}, kernel_shape = [{}, {}], pads = [{pad}, {pad}, {pad}, {pad}], strides = [{stride}, {stride}]", w[2], w[3]);
        let qlinear = format!(
            "graph @main(%0: u8[{}] \"x\", %10: i8[{}] \"w\") -> (u8[{}] \"y\") {{\n  %1 = const dense<f32[]: [0.02]>\n  %2 = const dense<u8[]: [128]>\n  %3 = const dense<i8[{}]: [{}]>\n  %4 = const dense<f32[{m}]: [{}]>\n  %5 = const dense<i8[{m}]: [{}]>\n  %6 = const dense<f32[]: [0.5]>\n  %7 = const dense<u8[]: [10]>\n  %8 = const dense<i32[{m}]: [{}]>\n  %9 = tensor.qlinear_conv(%0, %1, %2, %3, %4, %5, %6, %7, %8) {{{attrs}}} : u8[{}]\n  return %9\n}}\n",
            dims(x), dims(w), dims(&y), dims(w), list(&weights), scales.join(", "), list(&w_zero), list(&bias), dims(&y)
        );
        let integer = format!(
            "graph @main(%0: u8[{}] \"x\", %10: i8[{}] \"w\") -> (i32[{}] \"y\") {{\n  %1 = const dense<i8[{}]: [{}]>\n  %2 = const dense<u8[]: [3]>\n  %3 = const dense<i8[{m}]: [{}]>\n  %4 = tensor.conv_integer(%0, %1, %2, %3) {{{attrs}}} : i32[{}]\n  return %4\n}}\n",
            dims(x), dims(w), dims(&y), dims(w), list(&weights), list(&w_zero), dims(&y)
        );
        let xs: Vec<u8> = ints(xn, 0, 255, 11 + i as u64).into_iter().map(|v| v as u8).collect();
        let input = Tensor { dtype: DType::U8, shape: x.to_vec(), data: TensorData::Raw(xs.clone().into()) };
        let w_input = Tensor { dtype: DType::I8, shape: w.to_vec(), data: TensorData::Raw(weights.iter().map(|&v| v as u8).collect::<Vec<u8>>().into()) };
        // The same graph reading the weights from its input `w` (%10) instead of the constant.
        let from_input = |src: &str| src.replacen("%3, %4, %5", "%10, %4, %5", 1).replacen("conv_integer(%0, %1,", "conv_integer(%0, %10,", 1);
        for src in [qlinear, integer] {
            let taken = calls(&src);
            let qlinear = src.contains("qlinear_conv");
            // QLinearConv's depthwise convolutions take the quantized depthwise routine, whose
            // sums are the float ones.
            let depthwise = qlinear && path == IntegerPath::Float && group > 1;
            assert_eq!(taken.contains(&RuntimeFn::DwConv2dRequantize), depthwise, "case {i}: the quantized depthwise routine\n{src}");
            let float = taken.iter().any(|c| matches!(c, RuntimeFn::Sgemm | RuntimeFn::Conv2d));
            assert_eq!(float, path == IntegerPath::Float && !depthwise, "case {i}: the float products taken: {float}\n{src}");
            // QLinearConv's pointwise product requantizes as it stores; its float products
            // requantize after.
            let product = if qlinear { RuntimeFn::QgemmRequantize } else { RuntimeFn::Qgemm };
            assert_eq!(taken.contains(&product), path == IntegerPath::Qgemm, "case {i}: the integer product\n{src}");
            assert_eq!(taken.contains(&RuntimeFn::Im2colBytes), path == IntegerPath::Qgemm && w[2] > 1, "case {i}: the byte im2col\n{src}");
            if qlinear && path == IntegerPath::Float && !depthwise {
                assert!(taken.contains(&RuntimeFn::Requantize), "case {i}: the constant scales take the runtime's requantization\n{src}");
            }
            // The integer product of constant weights takes its row term from the bias, with
            // X's zero point moved where the term vanishes (ConvInteger's 3 here; QLinearConv's
            // 128 has none); weights from an input do not.
            assert_eq!(folded_row_term(&src), path == IntegerPath::Qgemm && !qlinear, "case {i}: the row term folded\n{src}");
            assert!(!folded_row_term(&from_input(&src)), "case {i}: the row term folded with the weights an input");
            let inputs = [input.clone(), w_input.clone()];
            let want = conv_reference(x, &xs, w, (group, stride, pad), &weights, &w_zero, &bias, &scales, qlinear);
            assert!(output_bytes(&src, &inputs) == want, "case {i}: the outputs differ\n{src}");
            let from = from_input(&src);
            assert!(output_bytes(&from, &inputs) == want, "case {i}: the outputs differ with the weights an input\n{from}");
        }
    }
}

#[test]
fn conv_transpose_matches_the_evaluator() {
    use crate::linalg::tests::{tensor, ty};
    // (X dims, W dims, attributes, Y dims): the f32 product and col2im, a tap at a time or (past
    // 256 taps) gathered per output; f64 sums directly.
    let cases: [(&[u64], &[u64], &str, &[u64]); 6] = [
        (&[2, 3, 4, 5], &[3, 2, 2, 2], "strides = [2, 2]", &[2, 2, 8, 10]),
        (&[1, 4, 5, 5], &[4, 3, 4, 4], "pads = [1, 1, 1, 1], strides = [2, 2]", &[1, 3, 10, 10]),
        (&[1, 4, 3, 4], &[4, 1, 3, 2], "dilations = [2, 1], group = 2, output_padding = [1, 0], pads = [0, 1, 2, 0], strides = [3, 2]", &[1, 2, 10, 7]),
        (&[2, 2, 7], &[2, 3, 5], "pads = [2, 2], strides = [3]", &[2, 3, 19]),
        (&[1, 2, 3, 3], &[2, 2, 1, 1], "", &[1, 2, 3, 3]),
        (&[1, 2, 2, 2], &[2, 1, 17, 17], "pads = [8, 8, 8, 8]", &[1, 1, 2, 2]),
    ];
    for dt in DTYPES {
        for (x, w, attrs, y) in cases {
            let m = w[1] * if attrs.contains("group = 2") { 2 } else { 1 };
            let src = format!(
                "graph @main(%0: {}, %1: {}, %2: {}) -> ({yt}) {{\n  %3 = tensor.conv_transpose(%0, %1, %2) {{{attrs}}} : {yt}\n  return %3\n}}",
                ty(dt, x),
                ty(dt, w),
                ty(dt, &[m]),
                yt = ty(dt, y)
            );
            let want = if dt == "f32" { vec![RuntimeFn::Sgemm] } else { vec![] };
            assert_eq!(calls(&src), want, "{src}");
            check(&src, &[tensor(dt, x, 3, false), tensor(dt, w, 5, false), tensor(dt, &[m], 7, false)]);
        }
    }
}
