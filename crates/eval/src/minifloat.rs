//! Narrow binary floating-point formats: f16, bf16, the float8 family, float6, float4 e2m1
//! and e8m0.
//!
//! Each format is decoded exactly into `f64` and encoded from `f64` with one round to nearest,
//! ties to even, following ONNX's `Cast` rules for overflow, NaN and saturation (which match
//! the `ml_dtypes` package the ONNX reference uses).

use kiln_tir::op::RoundMode;

/// How a format spends its top exponent code and its sign bit on special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE 754: the top exponent holds infinities and NaNs.
    Ieee,
    /// `fn` (finite, NaN): no infinities; only all-ones exponent and mantissa is NaN.
    FiniteNan,
    /// `fnuz` (finite, NaN, unsigned zero): no infinities, no negative zero; `0x80` is NaN.
    FiniteNanUnsignedZero,
    /// Neither infinities nor NaN (float4 e2m1, float6).
    FiniteOnly,
}

/// A sign-exponent-mantissa format of at most 16 bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MiniFloat {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    specials: Specials,
}

/// IEEE half precision.
pub(crate) const F16: MiniFloat = MiniFloat { exp_bits: 5, man_bits: 10, bias: 15, specials: Specials::Ieee };
/// bfloat16.
pub(crate) const BF16: MiniFloat = MiniFloat { exp_bits: 8, man_bits: 7, bias: 127, specials: Specials::Ieee };
/// float8 e4m3fn.
pub(crate) const E4M3FN: MiniFloat = MiniFloat { exp_bits: 4, man_bits: 3, bias: 7, specials: Specials::FiniteNan };
/// float8 e4m3fnuz.
pub(crate) const E4M3FNUZ: MiniFloat = MiniFloat { exp_bits: 4, man_bits: 3, bias: 8, specials: Specials::FiniteNanUnsignedZero };
/// float8 e5m2.
pub(crate) const E5M2: MiniFloat = MiniFloat { exp_bits: 5, man_bits: 2, bias: 15, specials: Specials::Ieee };
/// float8 e5m2fnuz.
pub(crate) const E5M2FNUZ: MiniFloat = MiniFloat { exp_bits: 5, man_bits: 2, bias: 16, specials: Specials::FiniteNanUnsignedZero };
/// float4 e2m1.
pub(crate) const E2M1: MiniFloat = MiniFloat { exp_bits: 2, man_bits: 1, bias: 1, specials: Specials::FiniteOnly };
/// float6 e2m3.
pub(crate) const E2M3: MiniFloat = MiniFloat { exp_bits: 2, man_bits: 3, bias: 1, specials: Specials::FiniteOnly };
/// float6 e3m2.
pub(crate) const E3M2: MiniFloat = MiniFloat { exp_bits: 3, man_bits: 2, bias: 3, specials: Specials::FiniteOnly };

/// `2^k` exactly, for `k` in the normal range of `f64`.
fn exp2i(k: i32) -> f64 {
    let k = k.clamp(-1022, 1023);
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// A NaN carrying a sign, so that a float8 `-NaN` survives decoding and re-encoding.
fn signed_nan(negative: bool) -> f64 {
    if negative { -f64::NAN } else { f64::NAN }
}

/// `floor(log2(a))` for a positive finite `a` (subnormal `f64`s answer below -1022).
fn floor_log2(a: f64) -> i32 {
    let biased = ((a.to_bits() >> 52) & 0x7ff) as i32;
    if biased == 0 { -1080 } else { biased - 1023 }
}

impl MiniFloat {
    fn sign_bit(self) -> u32 {
        1 << (self.exp_bits + self.man_bits)
    }

    fn exp_max(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    fn man_max(self) -> u32 {
        (1 << self.man_bits) - 1
    }

    /// The bits of the largest finite positive value.
    fn max_bits(self) -> u32 {
        let (e, m) = match self.specials {
            Specials::Ieee => (self.exp_max() - 1, self.man_max()),
            Specials::FiniteNan => (self.exp_max(), self.man_max() - 1),
            Specials::FiniteNanUnsignedZero | Specials::FiniteOnly => (self.exp_max(), self.man_max()),
        };
        (e << self.man_bits) | m
    }

    /// The largest finite value.
    pub(crate) fn max_finite(self) -> f64 {
        self.decode(self.max_bits())
    }

    /// The exact value of `bits` (only the format's low bits are read).
    pub(crate) fn decode(self, bits: u32) -> f64 {
        let bits = bits & ((self.sign_bit() << 1) - 1);
        let negative = bits & self.sign_bit() != 0;
        let e = (bits >> self.man_bits) & self.exp_max();
        let m = bits & self.man_max();
        match self.specials {
            Specials::Ieee if e == self.exp_max() => {
                return if m != 0 {
                    signed_nan(negative)
                } else if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                };
            }
            Specials::FiniteNan if e == self.exp_max() && m == self.man_max() => return signed_nan(negative),
            Specials::FiniteNanUnsignedZero if bits == self.sign_bit() => return f64::NAN,
            _ => {}
        }
        let magnitude = if e == 0 {
            f64::from(m) * exp2i(1 - self.bias - self.man_bits as i32)
        } else {
            f64::from(m + (1 << self.man_bits)) * exp2i(e as i32 - self.bias - self.man_bits as i32)
        };
        if negative { -magnitude } else { magnitude }
    }

    /// The bits of a NaN with the given sign, where the format has one.
    fn nan_bits(self, negative: bool) -> u32 {
        let sign = if negative { self.sign_bit() } else { 0 };
        match self.specials {
            Specials::Ieee => sign | (self.exp_max() << self.man_bits) | (1 << (self.man_bits - 1)),
            Specials::FiniteNan => sign | (self.exp_max() << self.man_bits) | self.man_max(),
            Specials::FiniteNanUnsignedZero => self.sign_bit(),
            // ml_dtypes turns NaN into a zero of the opposite sign; ONNX leaves it undefined.
            Specials::FiniteOnly => {
                if negative {
                    0
                } else {
                    self.sign_bit()
                }
            }
        }
    }

    /// The bits for a value whose rounded magnitude exceeds the largest finite one.
    fn overflow_bits(self, negative: bool, saturate: bool) -> u32 {
        let sign = if negative { self.sign_bit() } else { 0 };
        if saturate || self.specials == Specials::FiniteOnly {
            return sign | self.max_bits();
        }
        match self.specials {
            Specials::Ieee => sign | (self.exp_max() << self.man_bits),
            _ => self.nan_bits(negative),
        }
    }

    /// Rounds `x` to the format (nearest, ties to even). With `saturate`, infinities and values
    /// beyond the finite range become the largest finite value of their sign; without it they
    /// become infinity (IEEE formats) or NaN (formats without infinities).
    pub(crate) fn encode(self, x: f64, saturate: bool) -> u32 {
        let negative = x.is_sign_negative();
        if x.is_nan() {
            return self.nan_bits(negative);
        }
        let sign = if negative { self.sign_bit() } else { 0 };
        let a = x.abs();
        if a.is_infinite() {
            return self.overflow_bits(negative, saturate);
        }
        let man_bits = self.man_bits as i32;
        let emin = 1 - self.bias;
        let e = if a == 0.0 { emin } else { floor_log2(a).max(emin) };
        // `a / quantum` only shifts the exponent, so it is exact; one rounding follows.
        let quantum = exp2i(e - man_bits);
        let rounded = (a / quantum).round_ties_even() * quantum;
        if rounded > self.max_finite() {
            return self.overflow_bits(negative, saturate);
        }
        if rounded == 0.0 {
            return if self.specials == Specials::FiniteNanUnsignedZero { 0 } else { sign };
        }
        let er = floor_log2(rounded);
        if er < emin {
            let mant = (rounded / exp2i(emin - man_bits)) as u32;
            sign | mant
        } else {
            let biased = (er + self.bias) as u32;
            let mant = (rounded / exp2i(er - man_bits)) as u32 - (1 << self.man_bits);
            sign | (biased << self.man_bits) | mant
        }
    }
}

/// The value of a float8 e8m0 byte: `2^(e - 127)`, or NaN for `0xff`.
pub(crate) fn e8m0_decode(bits: u8) -> f64 {
    if bits == 0xff { f64::NAN } else { exp2i(i32::from(bits) - 127) }
}

/// Encodes `x` (first rounded to `f32`, as ONNX does) to float8 e8m0. The sign is ignored,
/// as in the ONNX reference; negative inputs are undefined behavior in the spec.
pub(crate) fn e8m0_encode(x: f64, saturate: bool, round: RoundMode) -> u8 {
    let bits = (x as f32).to_bits();
    let exponent = ((bits >> 23) & 0xff) as u16;
    if exponent == 0xff {
        return 0xff;
    }
    let increment = match round {
        RoundMode::Down => false,
        RoundMode::Up => bits & 0x7f_ffff != 0,
        RoundMode::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let round_bit = bits & 0x20_0000 != 0;
            let sticky = bits & 0x1f_ffff != 0;
            let lsb = exponent > 0;
            guard && (round_bit || sticky || lsb)
        }
    };
    let increment = increment && !(saturate && exponent == 0xfe);
    (exponent + u16::from(increment)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_values() {
        assert_eq!(F16.max_finite(), 65504.0);
        assert_eq!(E4M3FN.max_finite(), 448.0);
        assert_eq!(E4M3FNUZ.max_finite(), 240.0);
        assert_eq!(E5M2.max_finite(), 57344.0);
        assert_eq!(E5M2FNUZ.max_finite(), 57344.0);
        assert_eq!(E2M1.max_finite(), 6.0);
        assert_eq!(E2M3.max_finite(), 7.5);
        assert_eq!(E3M2.max_finite(), 28.0);
    }

    #[test]
    fn every_code_round_trips() {
        for (fmt, bits) in [(F16, 16), (BF16, 16), (E4M3FN, 8), (E4M3FNUZ, 8), (E5M2, 8), (E5M2FNUZ, 8), (E2M1, 4), (E2M3, 6), (E3M2, 6)] {
            for code in 0u32..(1 << bits) {
                let v = fmt.decode(code);
                if v.is_nan() {
                    assert!(fmt.decode(fmt.encode(v, false)).is_nan());
                } else if fmt.specials == Specials::FiniteNanUnsignedZero && v == 0.0 {
                    assert_eq!(fmt.encode(v, false), 0);
                } else {
                    assert_eq!(fmt.encode(v, false), code, "{fmt:?} {code:#x} = {v}");
                }
            }
        }
    }
}
