//! kiln's fused ops, FusedConv and FusedMatMul, against their definitions written out here:
//! the product, the bias, the residual addend, then each activation.

mod common;

use common::*;
use kiln_tir::op::*;

/// The FusedMatMul op with `act` and its parameters.
fn fmm(activation: Activation, alpha: f32, beta: f32, trans_b: i64) -> Op {
    Op::FusedMatMul(FusedMatMul {
        activation,
        alpha,
        beta,
        transB: trans_b,
    })
}

#[test]
fn fused_matmul_adds_bias_and_residual_with_b_transposed() {
    // A [2, 3] · Bᵀ where B is stored [2, 3]; bias [2] along the last axis, Z [2, 2].
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.5, 2.0]);
    let b = f32t(&[2, 3], &[1.0, 0.0, -1.0, 2.0, 1.0, 0.0]);
    let bias = f32t(&[2], &[0.5, -10.0]);
    let z = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    // A·Bᵀ = [[-2, 4], [-3, -1.5]]
    let y = run_opt(
        fmm(Activation::None, 0.0, 0.0, 1),
        &[Some(&a), Some(&b), Some(&bias), Some(&z)],
    );
    assert_eq!(y.shape, [2, 2]);
    assert_close(&f32s(&y), &[-0.5, -4.0, 0.5, -7.5], 0.0);
    let y = run_opt(
        fmm(Activation::Relu, 0.0, 0.0, 1),
        &[Some(&a), Some(&b), None, Some(&z)],
    );
    assert_close(&f32s(&y), &[0.0, 6.0, 0.0, 2.5], 0.0);
}

#[test]
fn fused_matmul_broadcasts_batches_and_promotes_vectors() {
    // A [2, 1, 2] against a shared B [2, 2]: two batches; a vector B leaves rows as the last axis.
    let a = f32t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[1.0, 1.0, 0.0, 1.0]);
    let y = run_opt(
        fmm(Activation::None, 0.0, 0.0, 0),
        &[Some(&a), Some(&b), Some(&f32t(&[2], &[10.0, 20.0]))],
    );
    assert_eq!(y.shape, [2, 1, 2]);
    assert_close(&f32s(&y), &[11.0, 23.0, 13.0, 27.0], 0.0);
    let v = f32t(&[2], &[1.0, -1.0]);
    let y = run_opt(
        fmm(Activation::None, 0.0, 0.0, 0),
        &[Some(&b), Some(&v), Some(&f32t(&[2], &[0.5, 0.25]))],
    );
    assert_eq!(y.shape, [2]);
    assert_close(&f32s(&y), &[0.5, -0.75], 0.0);
}

#[test]
fn every_activation_follows_its_formula() {
    // A [6, 1] · B [1, 1] = [1] is A itself; the bias shifts every element by 0.25.
    let xs = [-4.0f32, -1.0, -0.25, 0.0, 0.5, 2.75];
    let a = f32t(&[6, 1], &xs);
    let one = f32t(&[1, 1], &[1.0]);
    let bias = f32t(&[1], &[0.25]);
    let pre: Vec<f64> = xs.iter().map(|&x| f64::from(x) + 0.25).collect();
    let gelu = |approximate| {
        f32s(&run(
            Op::Gelu(Gelu { approximate }),
            &[&f32t(
                &[6, 1],
                &pre.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            )],
        ))
    };
    let formula = |f: fn(f64) -> f64| pre.iter().map(|&x| f(x) as f32).collect::<Vec<f32>>();
    let cases: [(Activation, Vec<f32>); 10] = [
        (Activation::None, formula(|x| x)),
        (Activation::Relu, formula(|x| x.max(0.0))),
        (Activation::Clip, formula(|x| x.clamp(-0.5, 0.75))),
        (
            Activation::LeakyRelu,
            formula(|x| if x < 0.0 { 0.5 * x } else { x }),
        ),
        (Activation::Sigmoid, formula(|x| 1.0 / (1.0 + (-x).exp()))),
        (Activation::Tanh, formula(f64::tanh)),
        (
            Activation::HardSwish,
            formula(|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        ),
        (Activation::Gelu, gelu(GeluApprox::None)),
        (Activation::GeluTanh, gelu(GeluApprox::Tanh)),
        (Activation::Silu, formula(|x| x / (1.0 + (-x).exp()))),
    ];
    for (act, want) in cases {
        // LeakyRelu reads alpha as its slope; Clip reads alpha and beta as its bounds.
        let alpha = if act == Activation::LeakyRelu {
            0.5
        } else {
            -0.5
        };
        let y = run_opt(
            fmm(act, alpha, 0.75, 0),
            &[Some(&a), Some(&one), Some(&bias)],
        );
        assert_close(&f32s(&y), &want, 1e-6);
    }
}

#[test]
fn clip_keeps_nan() {
    let a = f32t(&[2, 1], &[f32::NAN, 5.0]);
    let one = f32t(&[1, 1], &[1.0]);
    let y = run_opt(fmm(Activation::Clip, -1.0, 1.0, 0), &[Some(&a), Some(&one)]);
    let y = f32s(&y);
    assert!(y[0].is_nan() && y[1] == 1.0, "{y:?}");
}

#[test]
fn fused_conv_is_conv_plus_bias_plus_residual_then_activation() {
    // X [1, 1, 3, 3] ⊛ W [2, 1, 2, 2] with stride 1, no padding: Y [1, 2, 2, 2].
    let x = f64t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let w = f64t(&[2, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0, 0.5, 0.5, 0.5, 0.5]);
    let b = f64t(&[2], &[1.0, -10.0]);
    let z = f64t(&[1, 2, 2, 2], &[0.0, 1.0, 2.0, 3.0, 0.0, -1.0, 0.0, 1.0]);
    // Channel 0: x[i][j] − x[i+1][j+1] = −4 everywhere; channel 1: half each 2×2 window's sum.
    let conv0 = [-4.0; 4];
    let conv1 = [6.0, 8.0, 12.0, 14.0];
    let op = |activation, alpha, beta| {
        Op::FusedConv(FusedConv {
            activation,
            alpha,
            beta,
            ..FusedConv::default()
        })
    };
    let y = run_opt(
        op(Activation::None, 0.0, 0.0),
        &[Some(&x), Some(&w), Some(&b), Some(&z)],
    );
    let pre: Vec<f64> = conv0
        .iter()
        .map(|v| v + 1.0)
        .chain(conv1.iter().map(|v| v - 10.0))
        .zip(f64s(&z))
        .map(|(v, z)| v + z)
        .collect();
    assert_eq!(y.shape, [1, 2, 2, 2]);
    assert_eq!(f64s(&y), pre);
    let y = run_opt(
        op(Activation::Clip, -2.0, 3.0),
        &[Some(&x), Some(&w), Some(&b), Some(&z)],
    );
    assert_eq!(
        f64s(&y),
        pre.iter().map(|v| v.clamp(-2.0, 3.0)).collect::<Vec<_>>()
    );
    let y = run_opt(
        op(Activation::Relu, 0.0, 0.0),
        &[Some(&x), Some(&w), None, Some(&z)],
    );
    let want: Vec<f64> = conv0
        .iter()
        .chain(&conv1)
        .zip(f64s(&z))
        .map(|(v, z)| (v + z).max(0.0))
        .collect();
    assert_eq!(f64s(&y), want);
}

#[test]
fn mismatched_residual_and_vector_transposes_are_errors() {
    let a = f32t(&[2, 3], &[0.0; 6]);
    let b = f32t(&[3], &[0.0; 3]);
    let err = kiln_eval::eval_op(
        &fmm(Activation::None, 0.0, 0.0, 1),
        &[Some(&a), Some(&b)],
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("transB"), "{err}");
    let b = f32t(&[3, 2], &[0.0; 6]);
    let z = f32t(&[2], &[0.0; 2]);
    let err = kiln_eval::eval_op(
        &fmm(Activation::None, 0.0, 0.0, 0),
        &[Some(&a), Some(&b), None, Some(&z)],
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("residual"), "{err}");
}
