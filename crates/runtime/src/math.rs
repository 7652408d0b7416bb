//! Scalar math for generated code: one `f32` and one `f64` entry point per function.
//!
//! The `f32` versions widen to `f64`, call the `f64` function and round once. That is what the
//! loop-IR interpreter does, so compiled code and the oracle agree bit for bit, and the result
//! is almost always the correctly rounded `f32`. Vectorized kernels will bring their own
//! polynomial approximations; these are the scalar reference path.

/// `ln(1 + e^x)` without overflow for large `x` (the interpreter's formula).
fn softplus(x: f64) -> f64 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

macro_rules! unary {
    ($($(#[$doc:meta])* $f32name:ident $f64name:ident = $body:expr;)*) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub extern "C" fn $f32name(x: f32) -> f32 {
                let f: fn(f64) -> f64 = $body;
                f(f64::from(x)) as f32
            }

            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub extern "C" fn $f64name(x: f64) -> f64 {
                let f: fn(f64) -> f64 = $body;
                f(x)
            }
        )*

        /// `(symbol, address)` of every function in this module.
        pub fn symbols() -> Vec<(&'static str, *const u8)> {
            vec![
                $(
                    (stringify!($f32name), $f32name as *const u8),
                    (stringify!($f64name), $f64name as *const u8),
                )*
                ("kiln_rt_powf", kiln_rt_powf as *const u8),
                ("kiln_rt_pow", kiln_rt_pow as *const u8),
                ("kiln_rt_fmodf", kiln_rt_fmodf as *const u8),
                ("kiln_rt_fmod", kiln_rt_fmod as *const u8),
            ]
        }
    };
}

unary! {
    /// e^x
    kiln_rt_expf kiln_rt_exp = f64::exp;
    /// ln x
    kiln_rt_logf kiln_rt_log = f64::ln;
    /// tanh x
    kiln_rt_tanhf kiln_rt_tanh = f64::tanh;
    /// erf x (see [`crate::erf`])
    kiln_rt_erff kiln_rt_erf = crate::erf::erf;
    /// sin x
    kiln_rt_sinf kiln_rt_sin = f64::sin;
    /// cos x
    kiln_rt_cosf kiln_rt_cos = f64::cos;
    /// tan x
    kiln_rt_tanf kiln_rt_tan = f64::tan;
    /// asin x
    kiln_rt_asinf kiln_rt_asin = f64::asin;
    /// acos x
    kiln_rt_acosf kiln_rt_acos = f64::acos;
    /// atan x
    kiln_rt_atanf kiln_rt_atan = f64::atan;
    /// sinh x
    kiln_rt_sinhf kiln_rt_sinh = f64::sinh;
    /// cosh x
    kiln_rt_coshf kiln_rt_cosh = f64::cosh;
    /// asinh x
    kiln_rt_asinhf kiln_rt_asinh = f64::asinh;
    /// acosh x
    kiln_rt_acoshf kiln_rt_acosh = f64::acosh;
    /// atanh x
    kiln_rt_atanhf kiln_rt_atanh = f64::atanh;
    /// ln(1 + e^x), computed without overflow
    kiln_rt_softplusf kiln_rt_softplus = softplus;
    /// Round half to even.
    kiln_rt_rintf kiln_rt_rint = f64::round_ties_even;
}

/// x^y
#[unsafe(no_mangle)]
pub extern "C" fn kiln_rt_powf(x: f32, y: f32) -> f32 {
    f64::from(x).powf(f64::from(y)) as f32
}

/// x^y
#[unsafe(no_mangle)]
pub extern "C" fn kiln_rt_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}

/// Remainder with the sign of the dividend (C `fmodf`; exact, so no widening is needed).
#[unsafe(no_mangle)]
pub extern "C" fn kiln_rt_fmodf(x: f32, y: f32) -> f32 {
    x % y
}

/// Remainder with the sign of the dividend (C `fmod`).
#[unsafe(no_mangle)]
pub extern "C" fn kiln_rt_fmod(x: f64, y: f64) -> f64 {
    x % y
}
