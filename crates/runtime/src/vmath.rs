//! `f32` transcendental functions for loops the compiler vectorizes: no branches, no calls, no
//! tables, only arithmetic, bit operations and selects, so a loop applying one of them to a
//! slice compiles to vector code under the caller's `#[target_feature]` (the epilogue's
//! Sigmoid, Tanh, Gelu and GeluTanh). The scalar math of [`crate::math`] computes in `f64` and
//! rounds once; these compute in `f32` and are a few ulp off (bounds below, checked by the
//! tests against `f64` references over sweeps and random arguments; results below `2⁻¹²⁶`,
//! subnormal or computed from a subnormal `e^x`, are held to `2⁻¹⁴⁰` absolute instead), with
//! the same special values: NaN in, NaN out; infinities and overflow as the functions' limits.
//!
//! | function | method | worst error measured (bound tested) |
//! | --- | --- | --- |
//! | [`exp`] | `2ⁿ·e^r`, `n = round(x/ln 2)`, Cody–Waite `r`, Cephes' degree-7 polynomial, `2ⁿ` in two factors (subnormal results round once) | 0.96 ulp (1.5) |
//! | [`sigmoid`] | `1 / (1 + e^−x)`, `e^x / (1 + e^x)` below 0 | 2.1 ulp (3) |
//! | [`tanh`] | Cephes' odd polynomial below 0.625, `1 − 2/(e^{2|x|} + 1)` above | 1.3 ulp (2) |
//! | [`erf`] | `x + x·P(x²)` below 1 (`P` of degree 6 fitted for this, 1.4·10⁻⁹ relative in `f64`), `1 − e^{−x²}·Q(1/x)` above (`Q` of degree 9, `erfc(x)·e^{x²}` within 1.7·10⁻⁸) | 1.06 ulp (1.5) |
//! | [`gelu`] | `x/2 · erfc(−x/√2)`: `erfc(a) = u·e^{−a² + P(u)}`, `u = 2/(2 + a)` (the form of Numerical Recipes' `erfcc`), `P` fitted for this (degree 10 in `u − ½` by Estrin's scheme, 8·10⁻⁹ in `f64`), `a² = x²/2` split exactly so large arguments lose nothing | 6.8 ulp (8), relative also in the far negative tail |
//! | [`gelu_tanh`] | `x/2 · (1 + tanh y) = x · sigmoid(2y)`, `y = √(2/π)(x + 0.044715x³)` as the loop IR computes it | 3.1 ulp (4) beyond the rounding of `y` |
//!
//! Polynomials are evaluated by Horner's rule in fused multiply-adds (`mul_add`: one
//! instruction under the kernels' `#[target_feature]`s and on AArch64, a correctly rounded
//! library call on x86-64 CPUs without FMA, so results are the same on every path).
//!
//! The Gelu forms are rewritten so that `1 + erf` and `1 + tanh` never cancel: where they are
//! tiny (large negative `x`) the loop IR's formulas lose every digit, these keep full relative
//! precision.

/// `ln 2` in two parts: the first with 9 significant bits, so `n·LN2_HI` is exact for the `n`
/// here.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// `(e^r − 1 − r)/r²` near 0 (Cephes' expf), highest degree first.
pub(crate) const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];
/// At or below this argument `e^x` is taken as 0.
pub(crate) const EXP_UNDER: f32 = -104.0;
/// `1.5·2²³`: adding it rounds an `f32` below `2²²` in magnitude to an integer, which is then
/// in its low mantissa bits.
const ROUND: f32 = 12_582_912.0;

/// `e^(hi + lo)` where `hi` is exact and `lo` small (a sum more precise than one `f32`).
/// Arguments are clamped to `[−104, 89]`, beyond which the result is `0` or `+inf` anyway.
#[inline(always)]
pub(crate) fn exp_sum(hi: f32, lo: f32) -> f32 {
    let w = hi + lo;
    let clamped = w.clamp(EXP_UNDER, 89.0);
    // A clamped (or NaN) sum loses its parts: the result is 0, inf or NaN.
    let (hi, lo) = if clamped == w { (hi, lo) } else { (clamped, 0.0) };
    let t = clamped * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let ni = t.to_bits() as i32 - ROUND.to_bits() as i32;
    // Exact: `n·LN2_HI` has at most 17 significant bits and `hi` is within a few units of it.
    let r = ((hi - n * LN2_HI) + lo) - n * LN2_LO;
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| p.mul_add(r, c));
    let e = p.mul_add(r * r, r) + 1.0;
    // At or below −104 the result rounds to 0; it is selected rather than computed, because
    // an underflowing product can take a slow path on some cores (the softmax of a causal row,
    // half −∞, ran twice as long on Zen 5).
    let under = w <= EXP_UNDER;
    let ni = if under { 0 } else { ni };
    // 2ⁿ for n in [−150, 128] as two normal powers of two.
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let y = e * pow2(n1) * pow2(n2);
    if under { 0.0 } else { y }
}

/// `e^x`: the loop IR's `f32` exp (the interpreter calls this; generated code emits it).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_sum(x, 0.0)
}

/// `1 / (1 + e^−x)`, as `e^x / (1 + e^x)` below zero so that `e^|x|` never overflows where
/// the result is a tiny (subnormal) number.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    (if x >= 0.0 { 1.0 } else { e }) / (1.0 + e)
}

/// `tanh x`: the loop IR's `f32` tanh (the interpreter calls this; generated code emits it).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let ax = x.abs();
    // Below 0.625: x + x·z·P(z), z = x² (Cephes' tanhf).
    let z = x * x;
    let p: f32 = -5.704_988_7e-3;
    let p = p.mul_add(z, 2.063_909e-2);
    let p = p.mul_add(z, -5.373_971_6e-2);
    let p = p.mul_add(z, 1.333_144_2e-1);
    let p = p.mul_add(z, -3.333_328e-1);
    let small = (x * z).mul_add(p, x);
    // Above: 1 − 2/(e^{2|x|} + 1), no cancellation past 0.625 (NaN goes this way too).
    let large = 1.0 - 2.0 / (exp(ax + ax) + 1.0);
    // tanh is odd: the sign is x's (−0 included).
    (if ax < 0.625 { small } else { large }).copysign(x)
}

/// `erf(x)/x − 1` below 1, in `x²`, highest first (`erf x = x + x·P`, one rounding).
const ERF_SMALL: [f32; 7] = [7.898_066_5e-5, -8.024_312e-4, 5.190_048_8e-3, -2.685_480_6e-2, 0.112_836_12, -0.376_126_3, 0.128_379_17];
/// `erfc(x)·e^{x²}` from 1 to 4, in `1/x`, highest first.
const ERFC_LARGE: [f32; 10] = [2.967_774_5e-2, -0.174_004_9, 0.424_598_37, -0.518_410_86, 0.222_573_97, 0.239_075_45, -0.378_956_73, 2.122_316_1e-2, 0.561_681_6, 1.257_491_5e-4];

/// `erf x`: the loop IR's `f32` erf (the interpreter calls this; generated code emits it). Past
/// `|x| = 3.92` the result rounds to ±1, which `1 − e^{−x²}·Q` gives (the exponential
/// underflows to 0 for infinite `x`); NaN stays NaN.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let mut p = ERF_SMALL[0];
    for c in &ERF_SMALL[1..] {
        p = p.mul_add(z, *c);
    }
    let small = a.mul_add(p, a);
    let t = 1.0 / a;
    let mut q = ERFC_LARGE[0];
    for c in &ERFC_LARGE[1..] {
        q = q.mul_add(t, *c);
    }
    let large = 1.0 - exp(-z) * q;
    (if a < 1.0 { small } else { large }).copysign(x)
}

/// The coefficients [`erf`] evaluates, for code generators that emit it.
pub const ERF_POLYNOMIALS: (&[f32], &[f32]) = (&ERF_SMALL, &ERFC_LARGE);

/// `erfc(|x|/√2)` for Gelu, `x` finite or not; see the module doc.
#[inline(always)]
fn erfc_half_square(x: f32) -> f32 {
    // Beyond |x| = 15 the result is below every f32 (and x²/2 stays far from overflow).
    let x = x.clamp(-15.0, 15.0);
    let a = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let u = 2.0 / (2.0 + a);
    let v = u - 0.5;
    // Estrin's scheme: four dependent steps instead of Horner's ten, which made the whole
    // function one long chain of latencies.
    let v2 = v * v;
    let v4 = v2 * v2;
    let v8 = v4 * v4;
    let q0 = 1.345_286_5f32.mul_add(v, -0.671_794_06);
    let q1 = (-0.375_163_47f32).mul_add(v, 0.189_370_72);
    let q2 = 0.282_174_74f32.mul_add(v, -0.157_810_23);
    let q3 = (-0.293_147_44f32).mul_add(v, 0.109_316_91);
    let q4 = 0.261_285f32.mul_add(v, -0.010_772_618);
    let r0 = q1.mul_add(v2, q0);
    let r1 = q3.mul_add(v2, q2);
    let r2 = (-0.140_617_33f32).mul_add(v2, q4);
    let p = r2.mul_add(v8, r1.mul_add(v4, r0));
    // a² = x²/2 = hi + lo with hi exact: x's leading 12 bits squared fit an f32.
    let xh = f32::from_bits(x.to_bits() & 0xffff_f000);
    let hi = 0.5 * (xh * xh);
    let lo = 0.5 * ((x - xh) * (x + xh));
    u * exp_sum(-hi, p - lo)
}

/// Gelu: `x/2 · (1 + erf(x/√2))`, computed as `x/2 · erfc(−x/√2)`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let e = erfc_half_square(x);
    // 1 + erf(t) = 2 − erfc(t) for t ≥ 0, erfc(−t) below.
    let q = if x >= 0.0 { 2.0 - e } else { e };
    (0.5 * x) * q
}

/// GeluTanh: `x/2 · (1 + tanh y)` with `y = √(2/π)·(x + 0.044715·x³)` (`y` computed as the loop
/// IR does), as `x · sigmoid(2y)`.
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32, sqrt_2_over_pi: f32, cubic: f32) -> f32 {
    let y = sqrt_2_over_pi * (x + cubic * ((x * x) * x));
    x * sigmoid(y + y)
}

#[cfg(test)]
mod tests;
