//! Element types: every ONNX tensor element type, with its text name and storage size.

use std::fmt;

macro_rules! dtypes {
    ($($variant:ident = $onnx:literal, $text:literal, $bits:literal, $kind:ident;)*) => {
        /// The element type of a tensor. Discriminants are ONNX `TensorProto.DataType` codes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum DType {
            $(
                #[doc = concat!("`", $text, "` (ONNX data type ", stringify!($onnx), ").")]
                $variant = $onnx,
            )*
        }

        impl DType {
            /// Every element type, in ONNX code order.
            pub const ALL: &'static [DType] = &[$(DType::$variant),*];

            /// The type for an ONNX `TensorProto.DataType` code, if it names one.
            pub fn from_onnx(code: i32) -> Option<DType> {
                match code {
                    $($onnx => Some(DType::$variant),)*
                    _ => None,
                }
            }

            /// The ONNX `TensorProto.DataType` code.
            pub fn onnx_code(self) -> i32 {
                self as i32
            }

            /// The name used by the text form (`f32`, `i64`, `bf16`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(DType::$variant => $text,)*
                }
            }

            /// The type spelled `name` in the text form.
            pub fn from_name(name: &str) -> Option<DType> {
                match name {
                    $($text => Some(DType::$variant),)*
                    _ => None,
                }
            }

            /// Storage size of one element in bits (string elements count as 0: they are not stored inline).
            pub fn bits(self) -> u32 {
                match self {
                    $(DType::$variant => $bits,)*
                }
            }

            /// Which family of values the type holds.
            pub fn kind(self) -> DTypeKind {
                match self {
                    $(DType::$variant => DTypeKind::$kind,)*
                }
            }
        }
    };
}

dtypes! {
    F32 = 1, "f32", 32, Float;
    U8 = 2, "u8", 8, Unsigned;
    I8 = 3, "i8", 8, Signed;
    U16 = 4, "u16", 16, Unsigned;
    I16 = 5, "i16", 16, Signed;
    I32 = 6, "i32", 32, Signed;
    I64 = 7, "i64", 64, Signed;
    String = 8, "string", 0, String;
    Bool = 9, "bool", 8, Bool;
    F16 = 10, "f16", 16, Float;
    F64 = 11, "f64", 64, Float;
    U32 = 12, "u32", 32, Unsigned;
    U64 = 13, "u64", 64, Unsigned;
    C64 = 14, "c64", 64, Complex;
    C128 = 15, "c128", 128, Complex;
    BF16 = 16, "bf16", 16, Float;
    F8E4M3FN = 17, "f8e4m3fn", 8, Float;
    F8E4M3FNUZ = 18, "f8e4m3fnuz", 8, Float;
    F8E5M2 = 19, "f8e5m2", 8, Float;
    F8E5M2FNUZ = 20, "f8e5m2fnuz", 8, Float;
    U4 = 21, "u4", 4, Unsigned;
    I4 = 22, "i4", 4, Signed;
    F4E2M1 = 23, "f4e2m1", 4, Float;
    F8E8M0 = 24, "f8e8m0", 8, Float;
    U2 = 25, "u2", 2, Unsigned;
    I2 = 26, "i2", 2, Signed;
    F6E2M3 = 27, "f6e2m3", 6, Float;
    F6E3M2 = 28, "f6e3m2", 6, Float;
}

/// The family of values an element type holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeKind {
    /// Binary floating point of any width.
    Float,
    /// Two's-complement signed integers.
    Signed,
    /// Unsigned integers.
    Unsigned,
    /// `bool`, stored as one byte holding 0 or 1.
    Bool,
    /// Complex numbers, stored as (re, im) pairs of floats.
    Complex,
    /// Variable-length byte strings.
    String,
}

impl DType {
    /// Bytes needed to store `numel` packed elements (sub-byte types round up), or `None` on
    /// overflow or for strings.
    pub fn storage_bytes(self, numel: u64) -> Option<u64> {
        if self == DType::String {
            return None;
        }
        let bits = numel.checked_mul(u64::from(self.bits()))?;
        Some(bits.div_ceil(8))
    }

    /// True for floating-point types (not complex).
    pub fn is_float(self) -> bool {
        self.kind() == DTypeKind::Float
    }

    /// True for signed or unsigned integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(self.kind(), DTypeKind::Signed | DTypeKind::Unsigned)
    }

    /// True for signed or unsigned integers and floats: the types arithmetic is defined on.
    pub fn is_numeric(self) -> bool {
        self.is_float() || self.is_int()
    }
}

/// `f32`, the type most attributes default to.
impl Default for DType {
    fn default() -> DType {
        DType::F32
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for &d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(DType::from_onnx(d.onnx_code()), Some(d));
        }
        assert_eq!(DType::ALL.len(), 28);
        assert_eq!(DType::from_onnx(0), None);
    }

    #[test]
    fn packed_sizes_round_up() {
        assert_eq!(DType::I4.storage_bytes(3), Some(2));
        assert_eq!(DType::U2.storage_bytes(5), Some(2));
        assert_eq!(DType::F32.storage_bytes(3), Some(12));
        assert_eq!(DType::F32.storage_bytes(u64::MAX), None);
    }
}
