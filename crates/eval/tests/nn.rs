//! Neural-network ops: Conv against a direct definition, pooling, normalizations, Softmax,
//! Gemm and MatMul.

mod common;

use common::*;
use kiln_tir::op::*;

/// Conv2d straight from the definition: for every output element, sum over the window.
#[allow(clippy::too_many_arguments)]
fn direct_conv2d(x: &[f32], xs: [usize; 4], w: &[f32], ws: [usize; 4], b: &[f32], group: usize, stride: [usize; 2], dil: [usize; 2], pads: [usize; 4]) -> (Vec<f32>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [m, cg, kh, kw] = ws;
    let oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / stride[0] + 1;
    let ow = (wd + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / stride[1] + 1;
    let mg = m / group;
    let mut out = vec![0f32; n * m * oh * ow];
    for ni in 0..n {
        for oc in 0..m {
            let g = oc / mg;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = b.get(oc).copied().unwrap_or(0.0) as f64;
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (y * stride[0] + ky * dil[0]) as isize - pads[0] as isize;
                                let ix = (xo * stride[1] + kx * dil[1]) as isize - pads[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[((ni * c + g * cg + ci) * h + iy as usize) * wd + ix as usize];
                                let wv = w[((oc * cg + ci) * kh + ky) * kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    out[((ni * m + oc) * oh + y) * ow + xo] = acc as f32;
                }
            }
        }
    }
    (out, [n, m, oh, ow])
}

/// (x shape, w shape, group, strides, dilations, pads)
type ConvCase = ([usize; 4], [usize; 4], usize, [usize; 2], [usize; 2], [usize; 4]);

#[test]
fn conv_matches_direct_definition() {
    let cases: [ConvCase; 5] = [
        ([1, 3, 7, 7], [4, 3, 3, 3], 1, [1, 1], [1, 1], [1, 1, 1, 1]),
        ([2, 4, 8, 6], [6, 2, 3, 2], 2, [2, 1], [1, 2], [0, 1, 2, 0]),
        ([1, 6, 9, 9], [6, 1, 3, 3], 6, [2, 2], [1, 1], [1, 1, 1, 1]),
        ([1, 2, 5, 5], [3, 2, 1, 1], 1, [1, 1], [1, 1], [0, 0, 0, 0]),
        ([1, 2, 10, 10], [2, 2, 3, 3], 1, [3, 2], [2, 2], [2, 0, 1, 3]),
    ];
    for (seed, (xs, ws, group, stride, dil, pads)) in cases.into_iter().enumerate() {
        let x = noise(xs.iter().product(), seed as u64);
        let w = noise(ws.iter().product(), 100 + seed as u64);
        let b = noise(ws[0], 200 + seed as u64);
        let (want, shape) = direct_conv2d(&x, xs, &w, ws, &b, group, stride, dil, pads);
        let u = |v: [usize; 4]| v.map(|d| d as u64);
        let op = Op::Conv(Conv {
            group: group as i64,
            strides: stride.map(|v| v as i64).to_vec(),
            dilations: dil.map(|v| v as i64).to_vec(),
            pads: pads.map(|v| v as i64).to_vec(),
            ..Conv::default()
        });
        let y = run(op, &[&f32t(&u(xs), &x), &f32t(&u(ws), &w), &f32t(&[ws[0] as u64], &b)]);
        assert_eq!(y.shape, u(shape).to_vec(), "case {seed}");
        assert_close(&f32s(&y), &want, 1e-6);
    }
}

#[test]
fn conv_auto_pad_same_and_1d() {
    let x = f32t(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let w = f32t(&[1, 1, 2], &[1.0, 10.0]);
    let upper = run(Op::Conv(Conv { auto_pad: AutoPad::SameUpper, ..Conv::default() }), &[&x, &w]);
    assert_eq!(f32s(&upper), vec![21.0, 32.0, 43.0, 54.0, 5.0]);
    let lower = run(Op::Conv(Conv { auto_pad: AutoPad::SameLower, ..Conv::default() }), &[&x, &w]);
    assert_eq!(f32s(&lower), vec![10.0, 21.0, 32.0, 43.0, 54.0]);
    let valid = run(Op::Conv(Conv { auto_pad: AutoPad::Valid, strides: vec![2], ..Conv::default() }), &[&x, &w]);
    assert_eq!(f32s(&valid), vec![21.0, 43.0]);
    let bad = f32t(&[1, 2, 2], &[0.0; 4]);
    assert!(run_err_is_invalid(Op::Conv(Conv::default()), &[&x, &bad]));
}

fn run_err_is_invalid(op: Op, inputs: &[&kiln_tir::Tensor]) -> bool {
    matches!(run_err(op, inputs), kiln_eval::EvalError::Invalid { .. })
}

#[test]
fn conv_transpose_simple() {
    let x = f32t(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    let w = f32t(&[1, 1, 2], &[1.0, 1.0]);
    let y = run(Op::ConvTranspose(ConvTranspose::default()), &[&x, &w]);
    assert_eq!(f32s(&y), vec![1.0, 3.0, 5.0, 3.0]);
    let y = run(Op::ConvTranspose(ConvTranspose { strides: vec![2], ..ConvTranspose::default() }), &[&x, &w]);
    assert_eq!(f32s(&y), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
}

#[test]
fn pooling() {
    let x = f32t(&[1, 1, 4, 4], &(0..16).map(|v| v as f32).collect::<Vec<_>>());
    let mp = run_n(Op::MaxPool(MaxPool { kernel_shape: vec![2, 2], strides: vec![2, 2], ..MaxPool::default() }), &[&x], 2);
    assert_eq!(f32s(&mp[0]), vec![5.0, 7.0, 13.0, 15.0]);
    assert_eq!(ints(&mp[1]), vec![5, 7, 13, 15]);
    let mp = run_n(Op::MaxPool(MaxPool { kernel_shape: vec![2, 2], strides: vec![2, 2], storage_order: 1, ..MaxPool::default() }), &[&x], 2);
    assert_eq!(ints(&mp[1]), vec![5, 13, 7, 15]);
    let mp = run(Op::MaxPool(MaxPool { kernel_shape: vec![3, 3], pads: vec![1, 1, 1, 1], strides: vec![2, 2], ..MaxPool::default() }), &[&x]);
    assert_eq!(f32s(&mp), vec![5.0, 7.0, 13.0, 15.0]);
    let ap = run(Op::AveragePool(AveragePool { kernel_shape: vec![3, 3], pads: vec![1, 1, 1, 1], strides: vec![2, 2], ..AveragePool::default() }), &[&x]);
    assert_close(&f32s(&ap), &[2.5, 4.0, 8.5, 10.0], 1e-7);
    let ap = run(Op::AveragePool(AveragePool { kernel_shape: vec![3, 3], pads: vec![1, 1, 1, 1], strides: vec![2, 2], count_include_pad: 1, ..AveragePool::default() }), &[&x]);
    assert_close(&f32s(&ap), &[10.0 / 9.0, 24.0 / 9.0, 51.0 / 9.0, 90.0 / 9.0], 1e-6);
    let ceil = run(Op::MaxPool(MaxPool { kernel_shape: vec![3, 3], strides: vec![2, 2], ceil_mode: 1, ..MaxPool::default() }), &[&x]);
    assert_eq!((ceil.shape.clone(), f32s(&ceil)), (vec![1, 1, 2, 2], vec![10.0, 11.0, 14.0, 15.0]));
    let g = run(Op::GlobalAveragePool(GlobalAveragePool {}), &[&x]);
    assert_eq!((g.shape.clone(), f32s(&g)), (vec![1, 1, 1, 1], vec![7.5]));
    let g = run(Op::GlobalMaxPool(GlobalMaxPool {}), &[&x]);
    assert_eq!(f32s(&g), vec![15.0]);
}

#[test]
fn batch_norm_inference() {
    let x = f32t(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let scale = f32t(&[2], &[1.0, 2.0]);
    let bias = f32t(&[2], &[0.0, 1.0]);
    let mean = f32t(&[2], &[1.0, 3.0]);
    let var = f32t(&[2], &[4.0, 1.0]);
    let y = run(Op::BatchNormalization(BatchNormalization { epsilon: 0.0, ..BatchNormalization::default() }), &[&x, &scale, &bias, &mean, &var]);
    assert_close(&f32s(&y), &[0.0, 0.5, 1.0, 3.0], 1e-7);
}

#[test]
fn layer_norm_three_outputs() {
    let x = f32t(&[2, 2], &[1.0, 3.0, 2.0, 2.0]);
    let scale = f32t(&[2], &[1.0, 2.0]);
    let bias = f32t(&[2], &[0.5, 0.0]);
    let outs = run_n(Op::LayerNormalization(LayerNormalization { epsilon: 0.0, ..LayerNormalization::default() }), &[&x, &scale, &bias], 3);
    assert_close(&f32s(&outs[0]), &[-0.5, 2.0, f32::NAN, f32::NAN], 1e-6);
    assert_eq!((outs[1].shape.clone(), f32s(&outs[1])), (vec![2, 1], vec![2.0, 2.0]));
    assert_close(&f32s(&outs[2]), &[1.0, f32::INFINITY], 0.0);
    let outs = run_n(Op::LayerNormalization(LayerNormalization::default()), &[&x, &scale], 1);
    assert_close(&f32s(&outs[0]), &[-0.999_995, 1.999_99, 0.0, 0.0], 1e-6);
}

#[test]
fn softmax_and_log_softmax() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 1000.0, 1000.0, 1000.0]);
    let s = f32s(&run(Op::Softmax(Softmax { axis: -1 }), &[&x]));
    assert_close(&s, &[0.090_030_57, 0.244_728_48, 0.665_240_94, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0], 1e-6);
    let s = f32s(&run(Op::Softmax(Softmax { axis: 0 }), &[&x]));
    assert_close(&s[..3], &[0.0, 0.0, 0.0], 1e-6);
    let l = f32s(&run(Op::LogSoftmax(LogSoftmax { axis: 1 }), &[&x]));
    assert_close(&l[..3], &[-2.407_605_6, -1.407_605_6, -0.407_605_6], 1e-6);
}

#[test]
fn gemm_transposes_and_broadcast_bias() {
    let a = f32t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // transposed 2x3
    let b = f32t(&[2, 3], &[1.0, 0.0, 2.0, 0.0, 1.0, 3.0]); // transposed 3x2
    let c = f32t(&[2], &[100.0, 200.0]);
    let op = Op::Gemm(Gemm { alpha: 2.0, beta: 0.5, transA: 1, transB: 1 });
    let y = run(op, &[&a, &b, &c]);
    // A^T = [[1,2,3],[4,5,6]], B^T = [[1,0],[0,1],[2,3]]: A^T B^T = [[7,11],[16,23]].
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2, 2], vec![64.0, 122.0, 82.0, 146.0]));
    let y = run_opt(Op::Gemm(Gemm::default()), &[Some(&f32t(&[1, 2], &[1.0, 2.0])), Some(&f32t(&[2, 1], &[3.0, 4.0])), None]);
    assert_eq!(f32s(&y), vec![11.0]);
}

#[test]
fn matmul_batched_broadcast_and_vectors() {
    let a = f32t(&[2, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let b = f32t(&[3, 2, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let y = run(Op::MatMul(MatMul {}), &[&a, &b]);
    assert_eq!(y.shape, vec![2, 3, 2, 1]);
    assert_eq!(f32s(&y), vec![1.0, 3.0, 2.0, 4.0, 3.0, 7.0, 5.0, 7.0, 6.0, 8.0, 11.0, 15.0]);
    let v = f32t(&[2], &[1.0, 1.0]);
    let m = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = run(Op::MatMul(MatMul {}), &[&v, &m]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2], vec![4.0, 6.0]));
    let y = run(Op::MatMul(MatMul {}), &[&m, &v]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2], vec![3.0, 7.0]));
    let y = run(Op::MatMul(MatMul {}), &[&v, &v]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![], vec![2.0]));
    let ia = i64t(&[1, 2], &[2, 3]);
    let ib = i64t(&[2, 1], &[4, 5]);
    assert_eq!(ints(&run(Op::MatMul(MatMul {}), &[&ia, &ib])), vec![23]);
    assert!(run_err_is_invalid(Op::MatMul(MatMul {}), &[&f32t(&[2, 3], &[0.0; 6]), &m]));
}
