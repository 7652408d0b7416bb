use super::*;
use crate::gemm::{Sgemm, Transpose};
use crate::pool::Pool;
use crate::test_data as data;
use crate::window::Window;

/// A convolution of square planes and kernels: `(batch, channels, out_channels, groups)`, input
/// side, kernel side, stride, padding, dilation.
fn conv((batch, channels, out_channels, groups): (usize, usize, usize, usize), side: usize, k: usize, s: usize, p: usize, d: usize, act: Activation) -> Conv2d {
    Conv2d { batch, channels, out_channels, groups, win: Window::padded((side, side + 1), (k, k), (s, s), (d, d), [p; 4]), bias: true, residual: false, act }
}

/// The shapes checked: ResNet-like and MobileNet-like layers, odd sizes, several k blocks,
/// groups, batches, strided and dilated windows, and planes narrower than a tile.
fn shapes() -> Vec<Conv2d> {
    let relu = Activation::Relu;
    let mut v = vec![
        conv((1, 3, 16, 1), 33, 7, 2, 3, 1, relu),
        conv((1, 64, 24, 1), 14, 3, 1, 1, 1, Activation::Clip { min: 0.0, max: 6.0 }),
        conv((2, 16, 40, 1), 9, 1, 1, 0, 1, relu),
        conv((1, 20, 30, 1), 12, 1, 2, 0, 1, Activation::None),
        conv((1, 8, 12, 4), 11, 3, 1, 2, 2, Activation::Gelu),
        conv((2, 6, 4, 2), 5, 3, 2, 1, 1, Activation::Sigmoid),
        conv((1, 50, 9, 1), 4, 3, 1, 1, 1, relu),
        conv((1, 5, 7, 1), 6, 5, 3, 0, 1, Activation::LeakyRelu { alpha: 0.1 }),
    ];
    // Flat planes read in place (the 7×7 stride-2 window above too): the input itself (no
    // padding), a padded copy with dilation and groups, a 5×5 window; strides 2 (with a
    // dilation that leaves phases unused) and 3.
    v.push(conv((1, 16, 24, 1), 20, 3, 1, 0, 1, relu));
    v.push(conv((1, 16, 20, 2), 24, 3, 1, 2, 2, Activation::None));
    v.push(conv((2, 6, 10, 1), 30, 5, 1, 2, 1, relu));
    v.push(conv((1, 8, 16, 1), 31, 3, 2, 2, 2, relu));
    v.push(conv((1, 4, 12, 1), 40, 5, 3, 2, 1, Activation::None));
    // More output channels than one group of AVX2 panels (4 × 16 channels), the last panel part
    // empty.
    v.push(conv((1, 16, 72, 1), 12, 3, 1, 1, 1, relu));
    // More than one group of AVX-512 panels (4 × 64 channels), the last panel part empty.
    v.push(conv((1, 8, 300, 1), 10, 3, 1, 1, 1, relu));
    // More steps (64 channels × 9 taps) than one AVX-512 run of `channels.rs`: the sums wait
    // between runs.
    v.push(conv((1, 64, 64, 1), 10, 3, 1, 1, 1, relu));
    // A residual addend, and no bias.
    v.push(Conv2d { residual: true, ..conv((1, 32, 17, 1), 13, 3, 1, 1, 1, relu) });
    v.push(Conv2d { bias: false, residual: true, ..conv((1, 9, 11, 1), 10, 1, 1, 0, 1, Activation::None) });
    v.push(Conv2d { bias: false, ..conv((1, 9, 11, 1), 10, 3, 1, 1, 1, Activation::None) });
    // Depthwise: strided, dilated, over two images, with a residual addend.
    v.push(conv((1, 24, 24, 24), 17, 3, 2, 1, 1, Activation::Clip { min: 0.0, max: 6.0 }));
    v.push(Conv2d { residual: true, ..conv((2, 7, 7, 7), 40, 5, 1, 4, 2, Activation::Relu) });
    v.push(Conv2d { bias: false, ..conv((1, 5, 5, 5), 3, 3, 1, 1, 1, Activation::None) });
    v
}

/// Whether `c` takes the flat path: a stride-1 window over planes read in place, whose
/// products are not `sgemm`'s.
fn reads_planes_in_place(c: &Conv2d, isa: Isa) -> bool {
    let (cg, mg) = (c.channels / c.groups, c.out_channels / c.groups);
    cg * c.win.kh * c.win.kw > 0 && mg > 1 && c.win.oh * c.win.ow > 1 && flat::Flat::of(&c.win, cg, mg, isa).is_some()
}

/// `im2col`, `sgemm` and `epilogue` one after another with `isa` (`dwconv2d` and `epilogue` for
/// a depthwise convolution): what the fused routine must reproduce bit for bit.
fn three_steps(c: &Conv2d, isa: Isa, x: &[f32], w: &[f32], b: &[f32], z: &[f32]) -> Vec<f32> {
    let g = c.im2col();
    let (cg, mg) = (g.channels, c.out_channels / c.groups);
    let (k, p) = (cg * c.win.kh * c.win.kw, c.win.oh * c.win.ow);
    let mut y = vec![f32::NAN; c.y_len()];
    let mut col = vec![0.0; g.col_len()];
    if cg == 1 && mg == 1 {
        let d = DwConv2d { planes: c.batch * c.channels, channels: c.channels, win: Window { h: c.win.h, w: c.win.w, oh: c.win.oh, ow: c.win.ow, kh: c.win.kh, kw: c.win.kw, sh: c.win.sh, sw: c.win.sw, ph: c.win.ph, pw: c.win.pw, dh: c.win.dh, dw: c.win.dw }, accumulate: false };
        d.run_with(isa, x, w, &mut y);
    }
    for n in (0..c.batch).filter(|_| cg != 1 || mg != 1) {
        for gi in 0..c.groups {
            let x0 = (n * c.channels + gi * cg) * c.win.h * c.win.w;
            g.run(&x[x0..], &mut col);
            let y0 = (n * c.out_channels + gi * mg) * p;
            if reads_planes_in_place(c, isa) {
                // One chain of multiply-adds over k per element (`flat.rs`), fused where the
                // kernel's instruction set fuses them.
                let mul_add = |a: f32, b: f32, c: f32| if isa == Isa::Portable { a * b + c } else { a.mul_add(b, c) };
                for (i, row) in y[y0..][..mg * p].chunks_mut(p).enumerate() {
                    let w = &w[(gi * mg + i) * k..][..k];
                    for (j, out) in row.iter_mut().enumerate() {
                        *out = w.iter().enumerate().fold(0.0f32, |acc, (q, &wq)| mul_add(wq, col[q * p + j], acc));
                    }
                }
                continue;
            }
            let s = Sgemm { m: mg, n: p, k, lda: k, ldb: p, ldc: p, trans_a: Transpose::No, trans_b: Transpose::No, alpha: 1.0, beta: 0.0 };
            s.run_with(isa, isa.blocking(), &w[gi * mg * k..], &col, &mut y[y0..]);
        }
    }
    let bias = if c.bias { Bias::PerRow { period: c.out_channels } } else { Bias::None };
    let e = Epilogue { rows: c.batch * c.out_channels, cols: p, bias, residual: c.residual, act: c.act };
    e.run_with(isa, &mut y, b, z);
    y
}

/// The definition, summed in `f64`.
fn direct(c: &Conv2d, x: &[f32], w: &[f32], b: &[f32], z: &[f32]) -> Vec<f64> {
    let (cg, mg) = (c.channels / c.groups, c.out_channels / c.groups);
    let mut y = Vec::with_capacity(c.y_len());
    for n in 0..c.batch {
        for m in 0..c.out_channels {
            let gi = m / mg;
            for oy in 0..c.win.oh {
                for ox in 0..c.win.ow {
                    let mut s = if c.bias { f64::from(b[m]) } else { 0.0 };
                    for ci in 0..cg {
                        for ky in 0..c.win.kh {
                            for kx in 0..c.win.kw {
                                let iy = (oy * c.win.sh + ky * c.win.dh) as isize - c.win.ph as isize;
                                let ix = (ox * c.win.sw + kx * c.win.dw) as isize - c.win.pw as isize;
                                if (0..c.win.h as isize).contains(&iy) && (0..c.win.w as isize).contains(&ix) {
                                    let xv = x[((n * c.channels + gi * cg + ci) * c.win.h + iy as usize) * c.win.w + ix as usize];
                                    let wv = w[((m * cg + ci) * c.win.kh + ky) * c.win.kw + kx];
                                    s += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                    }
                    if c.residual {
                        s += f64::from(z[y.len()]);
                    }
                    y.push(s);
                }
            }
        }
    }
    y
}

fn operands(c: &Conv2d) -> [Vec<f32>; 4] {
    [data(c.x_len(), 1), data(c.w_len(), 2), data(c.out_channels, 3), data(c.y_len(), 4)]
}

#[test]
fn matches_im2col_sgemm_epilogue_bit_for_bit() {
    for isa in Isa::runnable() {
        let flat = shapes().iter().filter(|c| reads_planes_in_place(c, isa)).count();
        assert!(flat >= 7, "{isa:?}: only {flat} shapes read flat planes");
    }
    for c in shapes() {
        let [x, w, b, z] = operands(&c);
        for isa in Isa::runnable() {
            let want = three_steps(&c, isa, &x, &w, &b, &z);
            let mut y = vec![f32::NAN; c.y_len()];
            c.run_with(isa, &x, &w, &b, &z, &mut y);
            let differ = want.iter().zip(&y).position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differ, None, "{isa:?} {c:?}: {:?}", differ.map(|i| (want[i], y[i])));
        }
    }
}

#[test]
fn computes_the_definition() {
    for c in shapes().into_iter().filter(|c| c.act == Activation::None || c.act == Activation::Relu) {
        let [x, w, b, z] = operands(&c);
        let mut y = vec![f32::NAN; c.y_len()];
        c.run(&x, &w, &b, &z, &mut y);
        for (i, (&got, want)) in y.iter().zip(direct(&c, &x, &w, &b, &z)).enumerate() {
            let want = if c.act == Activation::Relu { want.max(0.0) } else { want };
            assert!((f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()), "{c:?} element {i}: {got} vs {want}");
        }
    }
}

#[test]
fn splits_over_threads_bit_for_bit() {
    // Large enough to split by columns (wide planes) and by rows (narrow ones).
    let wide = conv((1, 32, 64, 1), 40, 3, 1, 1, 1, Activation::Relu);
    let narrow = Conv2d { residual: true, ..conv((1, 256, 96, 1), 6, 3, 1, 1, 1, Activation::Relu) };
    let depthwise = Conv2d { residual: true, ..conv((1, 96, 96, 96), 56, 3, 2, 1, 1, Activation::Relu) };
    // Many output channels over planes wide enough for `channels.rs`: split by panels (each
    // thread packing its own) on two threads, by pixels on three.
    let channels = Conv2d { residual: true, ..conv((1, 16, 256, 1), 10, 3, 1, 1, 1, Activation::Relu) };
    for c in [wide, narrow, depthwise, channels] {
        let [x, w, b, z] = operands(&c);
        let run = || {
            let mut y = vec![f32::NAN; c.y_len()];
            c.run(&x, &w, &b, &z, &mut y);
            y
        };
        let alone = run();
        for threads in [2, 3] {
            let split = Pool::new(threads).unwrap().enter(run);
            assert!(alone.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits()), "{c:?} on {threads} threads");
        }
    }
}

#[test]
fn empty_sums_and_invalid_sizes() {
    // No kernel taps: the epilogue of zeros (bias, then Relu).
    let c = conv((1, 2, 2, 1), 3, 1, 1, 0, 1, Activation::Relu);
    let c = Conv2d { win: Window { kh: 0, kw: 0, oh: 3, ow: 3, ..c.win }, ..c };
    let mut y = vec![f32::NAN; c.y_len()];
    c.run(&vec![1.0; c.x_len()], &[], &[0.5, -0.5], &[], &mut y);
    assert_eq!(y, [[0.5; 9], [0.0; 9]].concat());
    // Groups that do not divide the channels: nothing is written.
    let c = Conv2d { groups: 3, ..conv((1, 4, 4, 1), 3, 1, 1, 0, 1, Activation::None) };
    assert!(!c.is_valid());
    let mut y = vec![7.0; c.y_len()];
    c.run(&[0.0; 48], &[0.0; 16], &[0.0; 4], &[], &mut y);
    assert!(y.iter().all(|&v| v == 7.0));
}

/// Every third element of `z` a special value (NaN, zeros of both signs, infinities, values
/// on the clip bounds) in turn; bias 1 is `−0`, bias 2 NaN.
fn special_values(b: &mut [f32], z: &mut [f32]) {
    let specials = [f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 6.0, -1.0, 1.0];
    for (i, v) in z.iter_mut().enumerate().filter(|(i, _)| i % 3 == 0) {
        *v = specials[i / 3 % specials.len()];
    }
    b[1] = -0.0;
    b[2] = f32::NAN;
}

/// `c` on every instruction set gives [`three_steps`]'s bits (any NaN for a NaN).
fn matches_three_steps(c: &Conv2d, x: &[f32], w: &[f32], b: &[f32], z: &[f32]) {
    for isa in Isa::runnable() {
        let want = three_steps(c, isa, x, w, b, z);
        let mut y = vec![f32::NAN; c.y_len()];
        c.run_with(isa, x, w, b, z, &mut y);
        let differ = want.iter().zip(&y).position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()));
        assert_eq!(differ, None, "{isa:?} {c:?}: {:?}", differ.map(|i| (want[i], y[i])));
    }
}

#[test]
fn epilogue_in_registers_matches_the_pass_on_special_values() {
    // 1×1 convolutions whose full tiles take the epilogue in registers (`gemm::TileEpilogue`)
    // and whose edge tiles take the pass, with NaN, infinities, zeros of both signs and values
    // on the clip bounds in every operand the epilogue adds, against im2col, sgemm and the
    // epilogue pass one after another.
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::Clip { min: -1.0, max: 1.0 },
        // Bounds whose zero sign matters, and a transcendental activation: the pass alone.
        Activation::Clip { min: -0.0, max: 6.0 },
        Activation::Sigmoid,
    ];
    for act in acts {
        for (bias, residual) in [(true, true), (false, true), (true, false), (false, false)] {
            let c = Conv2d { bias, residual, ..conv((1, 8, 20, 1), 10, 1, 1, 0, 1, act) };
            let [mut x, w, mut b, mut z] = operands(&c);
            x[17] = f32::NAN;
            x[300] = f32::INFINITY;
            special_values(&mut b, &mut z);
            b[3] = 6.0;
            matches_three_steps(&c, &x, &w, &b, &z);
        }
    }
}

#[test]
fn depthwise_epilogue_in_registers_matches_the_pass_on_special_values() {
    // Depthwise 3×3 convolutions of padding 1 that `dwconv/direct.rs` reads in place (a small
    // plane of stride 1 as one flat run, and stride 2 a row at a time), which apply the
    // epilogue before storing, with special values in the input, the bias and the addend,
    // against `dwconv2d` and the epilogue pass one after another. One channel's kernel holds
    // an infinity, so its planes take the exact path and the pass between fused planes.
    let acts = [Activation::None, Activation::Relu, Activation::Clip { min: 0.0, max: 6.0 }, Activation::Clip { min: -0.0, max: 6.0 }, Activation::Tanh];
    for (side, stride) in [(7, 1), (13, 2), (40, 2)] {
        for act in acts {
            for (bias, residual) in [(true, true), (false, true), (true, false), (false, false)] {
                let c = Conv2d { bias, residual, ..conv((2, 6, 6, 6), side, 3, stride, 1, 1, act) };
                let [mut x, mut w, mut b, mut z] = operands(&c);
                x[5] = f32::NAN;
                x[side * side + 3] = f32::NEG_INFINITY;
                w[9 * 4 + 2] = f32::INFINITY;
                special_values(&mut b, &mut z);
                matches_three_steps(&c, &x, &w, &b, &z);
            }
        }
    }
}

#[test]
fn runtime_call_arguments_in_their_order() {
    // batch, channels, out_channels, groups; h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    // bias, residual, act (2 = Clip with alpha and beta as its bounds).
    let ints = [2, 6, 4, 2, 9, 8, 5, 4, 3, 2, 2, 2, 1, 0, 1, 1, 1, 0, 2];
    let c = Conv2d::from_args(ints, -1.0, 6.0).unwrap();
    let win = Window { h: 9, w: 8, oh: 5, ow: 4, kh: 3, kw: 2, sh: 2, sw: 2, ph: 1, pw: 0, dh: 1, dw: 1 };
    let want = Conv2d { batch: 2, channels: 6, out_channels: 4, groups: 2, win, bias: true, residual: false, act: Activation::Clip { min: -1.0, max: 6.0 } };
    assert_eq!(c, want);
    // A negative size anywhere, or an unknown activation code, gives no convolution.
    for i in 0..16 {
        let mut bad = ints;
        bad[i] = -1;
        assert_eq!(Conv2d::from_args(bad, 0.0, 0.0), None, "argument {i}");
    }
    let mut bad = ints;
    bad[18] = 99;
    assert_eq!(Conv2d::from_args(bad, 0.0, 0.0), None);
}

#[test]
fn unaligned_operands_give_the_same_bits() {
    // Weights mapped from a model file sit at any byte offset; inputs, addends and outputs come
    // from callers. Every operand here starts one byte past an f32 boundary, on every shape but
    // the depthwise ones (flat planes with each kernel, packed panels): unaligned depthwise
    // planes take `dwconv`'s exact scalar path, which rounds each tap apart (`dwconv/tests.rs`
    // checks it).
    let bytes = |v: &[f32]| -> Vec<u8> { std::iter::once(0u8).chain(v.iter().flat_map(|f| f.to_le_bytes())).collect() };
    for c in shapes().into_iter().filter(|c| c.channels != c.groups || c.out_channels != c.groups) {
        let c = Conv2d { residual: true, ..c };
        let [x, w, b, _] = operands(&c);
        let z = data(c.z_len(), 5);
        let (xb, wb, bb, zb) = (bytes(&x), bytes(&w), bytes(&b), bytes(&z));
        for isa in Isa::runnable() {
            let mut want = vec![f32::NAN; c.y_len()];
            c.run_with(isa, &x, &w, &b, &z, &mut want);
            let mut yb = vec![0u8; 1 + 4 * c.y_len()];
            // SAFETY: each pointer is one byte into a buffer holding the operand's floats
            // after it; the output buffer is apart from the others.
            unsafe { c.run_raw(isa, xb[1..].as_ptr().cast(), wb[1..].as_ptr().cast(), bb[1..].as_ptr().cast(), zb[1..].as_ptr().cast(), yb[1..].as_mut_ptr().cast()) };
            let got = yb[1..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let got: Vec<f32> = got.collect();
            let differ = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differ, None, "{isa:?} {c:?}: {:?}", differ.map(|i| (got[i], want[i])));
        }
    }
}

/// The weights as little-endian bytes, as a model file holds them.
fn bytes(w: &[f32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn packed_weights_give_the_plain_results_bit_for_bit() {
    let mut taken = 0;
    for c in shapes() {
        let [x, w, b, z] = operands(&c);
        for isa in Isa::runnable() {
            let mut want = vec![f32::NAN; c.y_len()];
            c.run_with(isa, &x, &w, &b, &z, &mut want);
            // The width this CPU's kernel reads, and ones it does not (unpacked on the call).
            let own = c.packed_width(isa);
            taken += usize::from(own.is_some());
            for width in own.into_iter().chain([1, 5, 16, 64]) {
                let mut wp = vec![f32::NAN; c.packed_len(width)];
                c.pack_weights(width, &bytes(&w), &mut wp);
                let mut y = vec![f32::NAN; c.y_len()];
                c.run_packed_with(isa, &x, &wp, width, &b, &z, &mut y);
                let differ = want.iter().zip(&y).position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(differ, None, "{isa:?} width {width} (own {own:?}) {c:?}");
            }
        }
    }
    if Isa::Avx2.available() {
        assert!(taken >= 6, "only {taken} shape and instruction set pairs read packed weights");
    }
}

#[test]
fn packed_weights_split_over_threads_bit_for_bit() {
    // Split by panels on two threads, by pixels on three (see `splits_over_threads_bit_for_bit`).
    let c = Conv2d { residual: true, ..conv((1, 16, 256, 1), 10, 3, 1, 1, 1, Activation::Relu) };
    let [x, w, b, z] = operands(&c);
    let Some(width) = c.packed_width(Isa::detected()) else { return };
    let mut wp = vec![0.0; c.packed_len(width)];
    c.pack_weights(width, &bytes(&w), &mut wp);
    let mut alone = vec![f32::NAN; c.y_len()];
    c.run(&x, &w, &b, &z, &mut alone);
    for threads in [2, 3] {
        let split = Pool::new(threads).unwrap().enter(|| {
            let mut y = vec![f32::NAN; c.y_len()];
            c.run_packed_with(Isa::detected(), &x, &wp, width, &b, &z, &mut y);
            y
        });
        assert!(alone.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits()), "{c:?} on {threads} threads");
    }
}
