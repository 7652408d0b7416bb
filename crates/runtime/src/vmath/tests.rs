use kiln_testkit::Rng;

use super::*;

/// `got`'s distance from `want` in units of the last place of the `f32` nearest `want`, the
/// unit at least `2⁻¹⁴⁰` (results near or below the subnormal range are held to an absolute
/// bound); 0 when both are the same infinity, or NaN.
fn ulps(got: f32, want: f64) -> f64 {
    if got.is_nan() || want.is_nan() {
        return if got.is_nan() && want.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let w = want as f32;
    if w.is_infinite() || got.is_infinite() {
        return if got == w { 0.0 } else { f64::INFINITY };
    }
    let e = if w == 0.0 { -126 } else { (w.abs().to_bits() >> 23) as i32 - 127 };
    let spacing = 2f64.powi((e - 23).max(-140));
    (f64::from(got) - want).abs() / spacing
}

/// Arguments: special values, a dense sweep of `[−lim, lim]`, and random bit patterns whose
/// magnitude is below `lim` (every exponent, subnormals included).
fn arguments(lim: f32) -> Vec<f32> {
    let mut v = vec![0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, 1e-45, -1e-45, f32::MAX, f32::MIN, lim, -lim];
    let n = 400_000;
    v.extend((0..=n).map(|i| -lim + 2.0 * lim * i as f32 / n as f32));
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    while v.len() < 1_000_000 {
        let x = f32::from_bits(rng.next_u64() as u32);
        if x.abs() <= lim {
            v.push(x);
        }
    }
    v
}

/// The largest ulp error of `f` against `reference` over `xs`, and where.
fn worst(xs: &[f32], f: impl Fn(f32) -> f32, reference: impl Fn(f32) -> f64) -> (f64, f32) {
    xs.iter().map(|&x| (ulps(f(x), reference(x)), x)).fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
}

#[test]
fn exp_is_within_one_and_a_half_ulp() {
    let (e, at) = worst(&arguments(110.0), exp, |x| f64::from(x).exp());
    assert!(e <= 1.5, "exp: {e} ulp at {at}");
}

#[test]
fn sigmoid_is_within_three_ulp() {
    let (e, at) = worst(&arguments(110.0), sigmoid, |x| 1.0 / (1.0 + (-f64::from(x)).exp()));
    assert!(e <= 3.0, "sigmoid: {e} ulp at {at}");
}

#[test]
fn tanh_is_within_two_ulp() {
    let (e, at) = worst(&arguments(20.0), tanh, |x| f64::from(x).tanh());
    assert!(e <= 2.0, "tanh: {e} ulp at {at}");
    assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!((tanh(f32::INFINITY), tanh(f32::NEG_INFINITY)), (1.0, -1.0));
}

#[test]
fn gelu_is_within_eight_ulp_even_in_the_tail() {
    let reference = |x: f32| {
        let x = f64::from(x);
        0.5 * x * crate::erf::erfc(-x / std::f64::consts::SQRT_2)
    };
    let xs: Vec<f32> = arguments(30.0).into_iter().filter(|x| x.is_finite()).collect();
    let (e, at) = worst(&xs, gelu, reference);
    assert!(e <= 8.0, "gelu: {e} ulp at {at}");
    assert!(gelu(f32::NAN).is_nan());
    assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
    // −inf · 0, as the definition's ½x(1 + erf(x/√2)) gives.
    assert!(gelu(f32::NEG_INFINITY).is_nan());
    assert_eq!(gelu(-0.0).to_bits(), (-0.0f32).to_bits());
}

#[test]
fn gelu_tanh_is_within_four_ulp_of_its_rounded_argument() {
    let (k, c) = (0.797_884_6f32, 0.044_715f32);
    let reference = |x: f32| {
        // y exactly as the function rounds it.
        let y = f64::from(k * (x + c * ((x * x) * x)));
        f64::from(x) / (1.0 + (-2.0 * y).exp())
    };
    let xs: Vec<f32> = arguments(30.0).into_iter().filter(|x| x.is_finite()).collect();
    let (e, at) = worst(&xs, |x| gelu_tanh(x, k, c), reference);
    assert!(e <= 4.0, "gelu_tanh: {e} ulp at {at}");
    assert!(gelu_tanh(f32::NAN, k, c).is_nan());
    assert_eq!(gelu_tanh(f32::INFINITY, k, c), f32::INFINITY);
    assert!(gelu_tanh(f32::NEG_INFINITY, k, c).is_nan());
}

#[test]
fn erf_is_within_one_and_a_half_ulp() {
    let (e, at) = worst(&arguments(10.0), erf, |x| crate::erf::erf(f64::from(x)));
    assert!(e <= 1.5, "erf: {e} ulp at {at}");
    // A dense sweep of [−4, 4], where both pieces and their seam are.
    let sweep: Vec<f32> = (-400_000..=400_000).map(|i| i as f32 * 1e-5).collect();
    let (e, at) = worst(&sweep, erf, |x| crate::erf::erf(f64::from(x)));
    assert!(e <= 1.5, "erf: {e} ulp at {at}");
}

#[test]
fn special_values() {
    assert_eq!((exp(0.0), exp(f32::INFINITY), exp(f32::NEG_INFINITY)), (1.0, f32::INFINITY, 0.0));
    assert!(exp(f32::NAN).is_nan() && sigmoid(f32::NAN).is_nan() && tanh(f32::NAN).is_nan() && erf(f32::NAN).is_nan());
    assert_eq!((erf(0.0).to_bits(), erf(-0.0).to_bits()), (0.0f32.to_bits(), (-0.0f32).to_bits()));
    assert_eq!((erf(f32::INFINITY), erf(f32::NEG_INFINITY), erf(3.92), erf(-100.0)), (1.0, -1.0, 1.0, -1.0));
    assert_eq!((exp(89.0), exp(-104.0)), (f32::INFINITY, 0.0));
    assert_eq!((sigmoid(f32::INFINITY), sigmoid(f32::NEG_INFINITY), sigmoid(0.0)), (1.0, 0.0, 0.5));
}
