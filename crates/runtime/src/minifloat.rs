//! Narrow floating-point formats held in buffers: float8 e4m3fn, e4m3fnuz, e5m2 and e5m2fnuz,
//! float4 e2m1, and float8 e8m0.
//!
//! Values of these formats are computed as `f32`. [`Format::decode`] is exact (every
//! value is an `f32`); [`Format::encode`] rounds an `f32` to nearest, ties to even, once, with
//! ONNX `Cast`'s rules for values the format cannot hold when `saturate = 0`:
//!
//! | value | e4m3fn | e4m3fnuz | e5m2 | e5m2fnuz | e2m1 |
//! | --- | --- | --- | --- | --- | --- |
//! | beyond the largest finite value (after rounding), ±inf | NaN | NaN | ±inf | NaN | ±6 |
//! | NaN | NaN of its sign | NaN (`0x80`) | NaN of its sign | NaN (`0x80`) | `-0` for `+NaN`, `+0` for `-NaN` |
//! | −0 | −0 | +0 | −0 | +0 | −0 |
//!
//! Saturation (ONNX's default, `saturate = 1`) is not the encoder's business: the lowering
//! clamps to `±`[`Format::max_finite`] first, which gives the same bits since rounding is
//! monotonic and the bound is representable. e2m1 has neither infinities nor NaN and always
//! saturates. These are the rules of the reference evaluator (`kiln-eval`'s `minifloat`,
//! which follows the `ml_dtypes` package of the ONNX reference), restricted to `f32` inputs.
//!
//! float8 e8m0 is a bare exponent: `2^(e − 127)`, `0xff` being NaN. [`e8m0_encode`] takes the
//! exponent field of the `f32`, which is exact for every e8m0 value (`2^−127` is the `f32`
//! subnormal `0x0040_0000`, exponent field 0) and rounds other values toward the power of two
//! at or below their magnitude; infinities and NaN give `0xff`. The sign is ignored. ONNX's
//! other rounding modes are computed by the lowering before the store.
//!
//! The `extern "C"` entry points are the stores of generated code; the interpreter calls the
//! same Rust functions, so both agree by construction. Loads are decoded inline by the code
//! generator and compared with [`Format::decode`] by the differential tests.
//!
//! ```
//! use kiln_runtime::minifloat::{E4M3FN, E5M2};
//! assert_eq!(E4M3FN.decode(0x7e), 448.0);
//! assert_eq!(E4M3FN.encode(464.0), 0x7e); // a tie: to even, 448
//! assert_eq!(E4M3FN.encode(470.0), 0x7f); // rounds beyond 448: NaN
//! assert_eq!(E5M2.encode(f32::INFINITY), 0x7c);
//! assert_eq!(kiln_runtime::minifloat::kiln_rt_f32_to_f8e4m3fn(0.3), u32::from(E4M3FN.encode(0.3)));
//! ```

/// How a format spends its top exponent code and its sign bit on special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specials {
    /// IEEE 754: the top exponent holds infinities and NaNs (e5m2).
    Ieee,
    /// `fn` (finite, NaN): no infinities; only all-ones exponent and mantissa is NaN (e4m3fn).
    FiniteNan,
    /// `fnuz` (finite, NaN, unsigned zero): no infinities, no negative zero; `0x80` is NaN.
    FiniteNanUnsignedZero,
    /// Neither infinities nor NaN (e2m1).
    FiniteOnly,
}

/// A sign-exponent-mantissa format of at most 8 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// Exponent width.
    pub exp_bits: u32,
    /// Mantissa width (without the hidden bit).
    pub man_bits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// What the special codes mean.
    pub specials: Specials,
}

/// float8 e4m3fn.
pub const E4M3FN: Format = Format { exp_bits: 4, man_bits: 3, bias: 7, specials: Specials::FiniteNan };
/// float8 e4m3fnuz.
pub const E4M3FNUZ: Format = Format { exp_bits: 4, man_bits: 3, bias: 8, specials: Specials::FiniteNanUnsignedZero };
/// float8 e5m2.
pub const E5M2: Format = Format { exp_bits: 5, man_bits: 2, bias: 15, specials: Specials::Ieee };
/// float8 e5m2fnuz.
pub const E5M2FNUZ: Format = Format { exp_bits: 5, man_bits: 2, bias: 16, specials: Specials::FiniteNanUnsignedZero };
/// float4 e2m1.
pub const E2M1: Format = Format { exp_bits: 2, man_bits: 1, bias: 1, specials: Specials::FiniteOnly };

/// The quiet NaN `f32` of the given sign (what every decoder here returns for NaN).
fn nan_f32(negative: bool) -> f32 {
    f32::from_bits(0x7fc0_0000 | if negative { 0x8000_0000 } else { 0 })
}

/// `2^k` exactly, for `k` in the normal range of `f64`.
fn exp2i(k: i32) -> f64 {
    let k = k.clamp(-1022, 1023);
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// `floor(log2(a))` for a positive finite `a` (all `f32`s are normal `f64`s).
fn floor_log2(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

impl Format {
    /// The sign bit.
    pub fn sign_bit(self) -> u32 {
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

    /// The largest finite value (448, 240, 57344, 57344, 6).
    pub fn max_finite(self) -> f32 {
        self.decode(self.max_bits())
    }

    /// The exact value of `bits` (only the format's low bits are read). NaNs decode to the
    /// quiet `f32` NaN of their sign (fnuz's NaN to the positive one).
    pub fn decode(self, bits: u32) -> f32 {
        let bits = bits & ((self.sign_bit() << 1) - 1);
        let negative = bits & self.sign_bit() != 0;
        let e = (bits >> self.man_bits) & self.exp_max();
        let m = bits & self.man_max();
        match self.specials {
            Specials::Ieee if e == self.exp_max() => {
                return if m != 0 {
                    nan_f32(negative)
                } else if negative {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                };
            }
            Specials::FiniteNan if e == self.exp_max() && m == self.man_max() => return nan_f32(negative),
            Specials::FiniteNanUnsignedZero if bits == self.sign_bit() => return nan_f32(false),
            _ => {}
        }
        let magnitude = if e == 0 {
            f64::from(m) * exp2i(1 - self.bias - self.man_bits as i32)
        } else {
            f64::from(m + (1 << self.man_bits)) * exp2i(e as i32 - self.bias - self.man_bits as i32)
        };
        (if negative { -magnitude } else { magnitude }) as f32
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
    fn overflow_bits(self, negative: bool) -> u32 {
        let sign = if negative { self.sign_bit() } else { 0 };
        match self.specials {
            Specials::Ieee => sign | (self.exp_max() << self.man_bits),
            Specials::FiniteOnly => sign | self.max_bits(),
            _ => self.nan_bits(negative),
        }
    }

    /// `x` rounded to the format (nearest, ties to even), without saturation (see the module
    /// doc for what becomes of values out of range and NaN).
    pub fn encode(self, x: f32) -> u8 {
        let negative = x.is_sign_negative();
        if x.is_nan() {
            return self.nan_bits(negative) as u8;
        }
        let sign = if negative { self.sign_bit() } else { 0 };
        let a = f64::from(x).abs();
        if a.is_infinite() {
            return self.overflow_bits(negative) as u8;
        }
        let man_bits = self.man_bits as i32;
        let emin = 1 - self.bias;
        let e = if a == 0.0 { emin } else { floor_log2(a).max(emin) };
        // `a / quantum` only shifts the exponent, so it is exact; one rounding follows.
        let quantum = exp2i(e - man_bits);
        let rounded = (a / quantum).round_ties_even() * quantum;
        if rounded > f64::from(self.max_finite()) {
            return self.overflow_bits(negative) as u8;
        }
        if rounded == 0.0 {
            return if self.specials == Specials::FiniteNanUnsignedZero { 0 } else { sign as u8 };
        }
        let er = floor_log2(rounded);
        let bits = if er < emin {
            sign | (rounded / exp2i(emin - man_bits)) as u32
        } else {
            let biased = (er + self.bias) as u32;
            let mant = (rounded / exp2i(er - man_bits)) as u32 - (1 << self.man_bits);
            sign | (biased << self.man_bits) | mant
        };
        bits as u8
    }
}

/// The value of a float8 e8m0 byte: `2^(e − 127)`, or NaN for `0xff`.
pub fn e8m0_decode(bits: u8) -> f32 {
    match bits {
        0xff => nan_f32(false),
        // 2^-127 is an f32 subnormal.
        0 => f32::from_bits(0x0040_0000),
        e => f32::from_bits(u32::from(e) << 23),
    }
}

/// `x` as float8 e8m0: the exponent field of the `f32` (see the module doc).
pub fn e8m0_encode(x: f32) -> u8 {
    (x.to_bits() >> 23) as u8
}

macro_rules! encoders {
    ($($(#[$doc:meta])* $name:ident = $format:expr;)*) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub extern "C" fn $name(x: f32) -> u32 {
                u32::from($format.encode(x))
            }
        )*

        /// `(symbol, address)` of every function in this module.
        pub fn symbols() -> Vec<(&'static str, *const u8)> {
            vec![$((stringify!($name), $name as *const u8),)*]
        }
    };
}

encoders! {
    /// `x` as float8 e4m3fn bits (in the low byte), by [`Format::encode`].
    kiln_rt_f32_to_f8e4m3fn = E4M3FN;
    /// `x` as float8 e4m3fnuz bits (in the low byte), by [`Format::encode`].
    kiln_rt_f32_to_f8e4m3fnuz = E4M3FNUZ;
    /// `x` as float8 e5m2 bits (in the low byte), by [`Format::encode`].
    kiln_rt_f32_to_f8e5m2 = E5M2;
    /// `x` as float8 e5m2fnuz bits (in the low byte), by [`Format::encode`].
    kiln_rt_f32_to_f8e5m2fnuz = E5M2FNUZ;
    /// `x` as float4 e2m1 bits (in the low nibble), by [`Format::encode`].
    kiln_rt_f32_to_f4e2m1 = E2M1;
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [(Format, u32); 5] = [(E4M3FN, 8), (E4M3FNUZ, 8), (E5M2, 8), (E5M2FNUZ, 8), (E2M1, 4)];

    #[test]
    fn max_values() {
        assert_eq!(E4M3FN.max_finite(), 448.0);
        assert_eq!(E4M3FNUZ.max_finite(), 240.0);
        assert_eq!(E5M2.max_finite(), 57344.0);
        assert_eq!(E5M2FNUZ.max_finite(), 57344.0);
        assert_eq!(E2M1.max_finite(), 6.0);
    }

    #[test]
    fn every_code_round_trips() {
        for (fmt, bits) in ALL {
            for code in 0u32..(1 << bits) {
                let v = fmt.decode(code);
                let back = u32::from(fmt.encode(v));
                if v.is_nan() {
                    assert!(fmt.decode(back).is_nan(), "{fmt:?} {code:#x}");
                } else {
                    assert_eq!(back, code, "{fmt:?} {code:#x} = {v}");
                }
            }
        }
    }

    #[test]
    fn rounding_overflow_and_nan() {
        // Ties to even between 0.5 and 0.5625 (e4m3fn mantissa step 1/16 at 2^-1).
        assert_eq!(E4M3FN.decode(u32::from(E4M3FN.encode(0.53125))), 0.5);
        assert_eq!(E4M3FN.encode(f32::INFINITY), 0x7f);
        assert_eq!(E4M3FN.encode(-500.0), 0xff);
        assert_eq!(E4M3FNUZ.encode(f32::NEG_INFINITY), 0x80);
        assert_eq!(E4M3FNUZ.encode(-0.0), 0);
        assert_eq!(E5M2.encode(-1e9), 0xfc);
        assert_eq!(E5M2.encode(f32::NAN), 0x7e);
        assert_eq!(E2M1.encode(100.0), 0x7);
        assert_eq!(E2M1.encode(-3.5), 0xe);
        assert_eq!(E2M1.encode(f32::NAN), 0x8);
        // The smallest subnormals round to zero or up at half of them.
        assert_eq!(E4M3FN.encode(2f32.powi(-10)), 0);
        assert_eq!(E4M3FN.encode(2f32.powi(-10) * 1.01), 1);
    }

    #[test]
    fn e8m0_codes_round_trip() {
        for code in 0..=255u8 {
            assert_eq!(e8m0_encode(e8m0_decode(code)), code);
        }
        assert_eq!(e8m0_encode(3.0), 128);
        assert_eq!(e8m0_encode(-0.75), 126);
        assert_eq!(e8m0_encode(f32::INFINITY), 0xff);
    }
}
