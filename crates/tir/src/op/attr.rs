//! Attribute values: the untyped form shared by the importer and the text parser, and the
//! typed enums that replace ONNX's string-valued attributes.

use crate::dtype::DType;
use crate::tensor::Tensor;

/// An attribute value before it is checked against an op's typed field.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f32),
    /// A string (also the spelling of enum-valued attributes).
    Str(String),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f32>),
    /// A list of strings.
    Strs(Vec<String>),
    /// A tensor.
    Tensor(Tensor),
    /// An element type.
    DType(DType),
}

impl AttrValue {
    /// A short name of the value's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            AttrValue::Int(_) => "int",
            AttrValue::Float(_) => "float",
            AttrValue::Str(_) => "string",
            AttrValue::Ints(_) => "ints",
            AttrValue::Floats(_) => "floats",
            AttrValue::Strs(_) => "strings",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::DType(_) => "dtype",
        }
    }
}

/// A Rust type that an op field can have: converts to and from [`AttrValue`].
pub trait Attr: Sized {
    /// The untyped value.
    fn to_value(&self) -> Option<AttrValue>;
    /// The typed value, or a reason it does not fit.
    fn from_value(v: AttrValue) -> Result<Self, String>;
}

fn mismatch<T>(want: &str, got: &AttrValue) -> Result<T, String> {
    Err(format!("expected {want}, found {}", got.kind()))
}

impl Attr for i64 {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Int(*self))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Int(i) => Ok(i),
            other => mismatch("int", &other),
        }
    }
}

impl Attr for f32 {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Float(*self))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Float(f) => Ok(f),
            // Some exporters write integral float attributes as ints.
            AttrValue::Int(i) => Ok(i as f32),
            other => mismatch("float", &other),
        }
    }
}

impl Attr for String {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Str(self.clone()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Str(s) => Ok(s),
            other => mismatch("string", &other),
        }
    }
}

impl Attr for Vec<i64> {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Ints(self.clone()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Ints(i) => Ok(i),
            AttrValue::Floats(f) if f.is_empty() => Ok(Vec::new()),
            AttrValue::Strs(s) if s.is_empty() => Ok(Vec::new()),
            other => mismatch("ints", &other),
        }
    }
}

impl Attr for Vec<f32> {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Floats(self.clone()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Floats(f) => Ok(f),
            AttrValue::Ints(i) if i.is_empty() => Ok(Vec::new()),
            AttrValue::Strs(s) if s.is_empty() => Ok(Vec::new()),
            other => mismatch("floats", &other),
        }
    }
}

impl Attr for Vec<String> {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Strs(self.clone()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Strs(s) => Ok(s),
            AttrValue::Ints(i) if i.is_empty() => Ok(Vec::new()),
            AttrValue::Floats(f) if f.is_empty() => Ok(Vec::new()),
            other => mismatch("strings", &other),
        }
    }
}

impl Attr for Tensor {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Tensor(self.clone()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Tensor(t) => Ok(t),
            other => mismatch("tensor", &other),
        }
    }
}

impl Attr for DType {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::DType(*self))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::DType(d) => Ok(d),
            AttrValue::Int(code) => DType::from_onnx(code as i32)
                .ok_or_else(|| format!("unknown element type code {code}")),
            other => mismatch("dtype", &other),
        }
    }
}

impl<T: Attr> Attr for Option<T> {
    fn to_value(&self) -> Option<AttrValue> {
        self.as_ref().and_then(T::to_value)
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        T::from_value(v).map(Some)
    }
}

/// True when the enum was declared `ignore_case`.
macro_rules! ignore_case {
    () => {
        false
    };
    (ignore_case) => {
        true
    };
}

/// An enum whose values are ONNX attribute spellings; a `Vec` of one is a list attribute.
pub trait AttrEnum: Copy + Sized + 'static {
    /// Every value with its ONNX spelling, in declaration order.
    const SPELLINGS: &'static [(Self, &'static str)];
    /// True if the spelling is matched ignoring ASCII case (as onnxruntime reads it).
    const IGNORE_CASE: bool;

    /// The ONNX spelling, which the text form uses too.
    fn as_str(self) -> &'static str;

    /// The value spelled `s`, or a reason naming the allowed spellings.
    fn parse(s: &str) -> Result<Self, String> {
        let found = Self::SPELLINGS.iter().find(|(_, t)| if Self::IGNORE_CASE { t.eq_ignore_ascii_case(s) } else { *t == s });
        match found {
            Some(&(v, _)) => Ok(v),
            None => {
                let allowed: Vec<String> = Self::SPELLINGS.iter().map(|(_, t)| format!("`{t}`")).collect();
                Err(format!("`{s}` is not one of {}", allowed.join(", ")))
            }
        }
    }
}

impl<E: AttrEnum> Attr for Vec<E> {
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Strs(self.iter().map(|e| e.as_str().to_string()).collect()))
    }
    fn from_value(v: AttrValue) -> Result<Self, String> {
        match v {
            AttrValue::Strs(s) => s.iter().map(|s| E::parse(s)).collect(),
            AttrValue::Ints(i) if i.is_empty() => Ok(Vec::new()),
            AttrValue::Floats(f) if f.is_empty() => Ok(Vec::new()),
            other => mismatch("strings", &other),
        }
    }
}

macro_rules! attr_enums {
    ($($(#[$doc:meta])* $name:ident $($ci:ident)? { $($variant:ident = $text:literal),* $(,)? })*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
            pub enum $name {
                #[default]
                $(
                    #[doc = concat!("`", $text, "`")]
                    $variant,
                )*
            }

            impl $name {
                /// The ONNX spelling, which the text form uses too.
                pub fn as_str(self) -> &'static str {
                    match self {
                        $($name::$variant => $text,)*
                    }
                }
            }

            impl AttrEnum for $name {
                const SPELLINGS: &'static [(Self, &'static str)] = &[$(($name::$variant, $text)),*];
                const IGNORE_CASE: bool = ignore_case!($($ci)?);

                fn as_str(self) -> &'static str {
                    $name::as_str(self)
                }
            }

            impl Attr for $name {
                fn to_value(&self) -> Option<AttrValue> {
                    Some(AttrValue::Str(self.as_str().to_string()))
                }
                fn from_value(v: AttrValue) -> Result<Self, String> {
                    match v {
                        AttrValue::Str(s) => <$name as AttrEnum>::parse(&s),
                        other => mismatch("string", &other),
                    }
                }
            }
        )*
    };
}

// The first variant of each enum is its `Default`; op fields state their ONNX default
// explicitly, so this only matters for required fields.
attr_enums! {
    /// How convolution and pooling pad when explicit pads are not given.
    AutoPad { Notset = "NOTSET", SameUpper = "SAME_UPPER", SameLower = "SAME_LOWER", Valid = "VALID" }
    /// Pad's border mode.
    PadMode { Constant = "constant", Reflect = "reflect", Edge = "edge", Wrap = "wrap" }
    /// Interpolation of Resize and GridSample.
    ResizeMode { Nearest = "nearest", Linear = "linear", Cubic = "cubic", Bilinear = "bilinear", Bicubic = "bicubic" }
    /// How Resize maps output coordinates to input coordinates.
    CoordTransform {
        HalfPixel = "half_pixel",
        HalfPixelSymmetric = "half_pixel_symmetric",
        PytorchHalfPixel = "pytorch_half_pixel",
        AlignCorners = "align_corners",
        Asymmetric = "asymmetric",
        TfCropAndResize = "tf_crop_and_resize",
    }
    /// Rounding of Resize's nearest mode.
    NearestMode { RoundPreferFloor = "round_prefer_floor", RoundPreferCeil = "round_prefer_ceil", Floor = "floor", Ceil = "ceil" }
    /// How Resize treats a requested output size that changes the aspect ratio.
    AspectPolicy { Stretch = "stretch", NotLarger = "not_larger", NotSmaller = "not_smaller" }
    /// Gelu's formula.
    GeluApprox { None = "none", Tanh = "tanh" }
    /// The activation a fused op applies last; `clip` bounds to `[alpha, beta]`, `leaky_relu`
    /// uses `alpha` as the slope, `silu` is `x · sigmoid(x)`, `quant_dequant_u8` is QuantizeLinear to `u8` then
    /// DequantizeLinear with scale `alpha` and zero point `beta` (`_u16` through `u16`).
    Activation {
        None = "none",
        Relu = "relu",
        Clip = "clip",
        LeakyRelu = "leaky_relu",
        Sigmoid = "sigmoid",
        Tanh = "tanh",
        HardSwish = "hard_swish",
        Gelu = "gelu",
        GeluTanh = "gelu_tanh",
        Silu = "silu",
        QuantDequantU8 = "quant_dequant_u8",
        QuantDequantU16 = "quant_dequant_u16",
    }
    /// Channel order of DepthToSpace and SpaceToDepth.
    DepthToSpaceMode { Dcr = "DCR", Crd = "CRD" }
    /// How Scatter* combine updates with existing values.
    ScatterReduction { None = "none", Add = "add", Mul = "mul", Max = "max", Min = "min" }
    /// GridSample's handling of out-of-range coordinates.
    GridPadMode { Zeros = "zeros", Border = "border", Reflection = "reflection" }
    /// RoiAlign's pooling.
    RoiPoolMode { Avg = "avg", Max = "max" }
    /// RoiAlign's coordinate convention.
    RoiCoordMode { HalfPixel = "half_pixel", OutputHalfPixel = "output_half_pixel" }
    /// BitShift's direction.
    ShiftDirection { Right = "RIGHT", Left = "LEFT" }
    /// How Cast and CastLike round into float8 e8m0: away from zero, toward zero, or to the
    /// nearer power of two with ties up.
    RoundMode { Up = "up", Down = "down", Nearest = "nearest" }
    /// CausalConvWithState's fused activation; `silu` and `swish` are the same function.
    ConvActivation { None = "none", Silu = "silu", Swish = "swish" }
    /// Which way RNN, GRU and LSTM walk the sequence.
    RnnDirection { Forward = "forward", Reverse = "reverse", Bidirectional = "bidirectional" }
    /// An activation function of RNN, GRU and LSTM. Names match ignoring case, as onnxruntime
    /// reads them; they print as ONNX spells them.
    RnnActivation ignore_case {
        Relu = "Relu",
        Tanh = "Tanh",
        Sigmoid = "Sigmoid",
        Affine = "Affine",
        LeakyRelu = "LeakyRelu",
        ThresholdedRelu = "ThresholdedRelu",
        ScaledTanh = "ScaledTanh",
        HardSigmoid = "HardSigmoid",
        Elu = "Elu",
        Softsign = "Softsign",
        Softplus = "Softplus",
    }
    /// LinearAttention's recurrence: whether it takes a decay (gated) and a beta (delta).
    UpdateRule { Linear = "linear", Gated = "gated", Delta = "delta", GatedDelta = "gated_delta" }
    /// How NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss combine per-sample losses.
    LossReduction { None = "none", Sum = "sum", Mean = "mean" }
    /// TensorScatter's write mode: `circular` wraps indices around the cache length.
    TensorScatterMode { Linear = "linear", Circular = "circular" }
    /// StringNormalizer's case change.
    CaseChange { None = "NONE", Lower = "LOWER", Upper = "UPPER" }
    /// TfIdfVectorizer's weighting.
    TfIdfMode { Tf = "TF", Idf = "IDF", TfIdf = "TFIDF" }
    /// ImageDecoder's output channels.
    PixelFormat { Rgb = "RGB", Bgr = "BGR", Grayscale = "Grayscale" }
}
