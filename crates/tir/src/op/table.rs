//! The op table: one row per tensor-IR op.
//!
//! Each row is `Name "text_name" [regions] { attribute: Type = default, ... }`. `Name` is the
//! ONNX op type; the semantics are those of the newest ONNX opset (the `since` version in each
//! row's doc), and the importer rewrites older opsets into this form. Attributes are ONNX's,
//! in alphabetical order; a field without a default is required. Inputs an older opset took as
//! attributes (axes, pads, scales, ...) are inputs here, as they are in ONNX today.

use super::attr::*;
use super::define::AttrError;
use crate::dtype::DType;
use crate::tensor::Tensor;

define_ops! {
    /// ONNX `Abs` (opset 13).
    Abs "abs" {}
    /// ONNX `Acos` (opset 22).
    Acos "acos" {}
    /// ONNX `Acosh` (opset 22).
    Acosh "acosh" {}
    /// ONNX `Add` (opset 14).
    Add "add" {}
    /// ONNX `AffineGrid` (opset 20).
    AffineGrid "affine_grid" { align_corners: i64 = 0 }
    /// ONNX `And` (opset 7).
    And "and" {}
    /// ONNX `ArgMax` (opset 13).
    ArgMax "argmax" { axis: i64 = 0, keepdims: i64 = 1, select_last_index: i64 = 0 }
    /// ONNX `ArgMin` (opset 13).
    ArgMin "argmin" { axis: i64 = 0, keepdims: i64 = 1, select_last_index: i64 = 0 }
    /// ONNX `Asin` (opset 22).
    Asin "asin" {}
    /// ONNX `Asinh` (opset 22).
    Asinh "asinh" {}
    /// ONNX `Atan` (opset 22).
    Atan "atan" {}
    /// ONNX `Atanh` (opset 22).
    Atanh "atanh" {}
    /// ONNX `Attention` (opset 25).
    Attention "attention" { is_causal: i64 = 0, kv_num_heads: Option<i64> = None, left_window_size: i64 = -1, q_num_heads: Option<i64> = None, qk_matmul_output_mode: i64 = 0, right_window_size: i64 = -1, scale: Option<f32> = None, softcap: f32 = 0.0_f32, softmax_precision: Option<i64> = None }
    /// ONNX `AveragePool` (opset 22).
    AveragePool "average_pool" { auto_pad: AutoPad = AutoPad::Notset, ceil_mode: i64 = 0, count_include_pad: i64 = 0, dilations: Vec<i64> = Vec::new(), kernel_shape: Vec<i64>, pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `BatchNormalization` (opset 15).
    BatchNormalization "batch_normalization" { epsilon: f32 = 9.999999747378752e-06_f32, momentum: f32 = 0.8999999761581421_f32, training_mode: i64 = 0 }
    /// ONNX `Bernoulli` (opset 22).
    Bernoulli "bernoulli" { dtype: Option<DType> = None, seed: Option<f32> = None }
    /// ONNX `BitCast` (opset 26).
    BitCast "bitcast" { to: DType }
    /// ONNX `BitShift` (opset 28).
    BitShift "bit_shift" { direction: ShiftDirection }
    /// ONNX `BitwiseAnd` (opset 18).
    BitwiseAnd "bitwise_and" {}
    /// ONNX `BitwiseNot` (opset 18).
    BitwiseNot "bitwise_not" {}
    /// ONNX `BitwiseOr` (opset 18).
    BitwiseOr "bitwise_or" {}
    /// ONNX `BitwiseXor` (opset 18).
    BitwiseXor "bitwise_xor" {}
    /// ONNX `BlackmanWindow` (opset 17).
    BlackmanWindow "blackman_window" { output_datatype: DType = DType::F32, periodic: i64 = 1 }
    /// ONNX `Cast` (opset 28).
    Cast "cast" { round_mode: RoundMode = RoundMode::Up, saturate: i64 = 1, to: DType }
    /// ONNX `CastLike` (opset 25).
    CastLike "cast_like" { round_mode: RoundMode = RoundMode::Up, saturate: i64 = 1 }
    /// ONNX `CausalConvWithState` (opset 27).
    CausalConvWithState "causal_conv_with_state" { activation: ConvActivation = ConvActivation::None }
    /// ONNX `Ceil` (opset 13).
    Ceil "ceil" {}
    /// ONNX `Celu` (opset 28).
    Celu "celu" { alpha: f32 = 1.0_f32 }
    /// ONNX `CenterCropPad` (opset 18).
    CenterCropPad "center_crop_pad" { axes: Vec<i64> = Vec::new() }
    /// ONNX `Clip` (opset 13).
    Clip "clip" {}
    /// ONNX `Col2Im` (opset 18).
    Col2Im "col2_im" { dilations: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `Compress` (opset 28).
    Compress "compress" { axis: Option<i64> = None }
    /// ONNX `Concat` (opset 13).
    Concat "concat" { axis: i64 }
    /// ONNX `ConstantOfShape` (opset 25).
    ConstantOfShape "constant_of_shape" { value: Option<Tensor> = None }
    /// ONNX `Conv` (opset 22).
    Conv "conv" { auto_pad: AutoPad = AutoPad::Notset, dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `ConvInteger` (opset 10).
    ConvInteger "conv_integer" { auto_pad: AutoPad = AutoPad::Notset, dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `ConvTranspose` (opset 22).
    ConvTranspose "conv_transpose" { auto_pad: AutoPad = AutoPad::Notset, dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), output_padding: Vec<i64> = Vec::new(), output_shape: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `Cos` (opset 22).
    Cos "cos" {}
    /// ONNX `Cosh` (opset 22).
    Cosh "cosh" {}
    /// ONNX `CumProd` (opset 26).
    CumProd "cumprod" { exclusive: i64 = 0, reverse: i64 = 0 }
    /// ONNX `CumSum` (opset 14).
    CumSum "cumsum" { exclusive: i64 = 0, reverse: i64 = 0 }
    /// ONNX `DFT` (opset 20).
    DFT "dft" { inverse: i64 = 0, onesided: i64 = 0 }
    /// ONNX `DeformConv` (opset 22).
    DeformConv "deform_conv" { dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), offset_group: i64 = 1, pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `DepthToSpace` (opset 28).
    DepthToSpace "depth_to_space" { blocksize: i64, mode: DepthToSpaceMode = DepthToSpaceMode::Dcr }
    /// ONNX `DequantizeLinear` (opset 28).
    DequantizeLinear "dequantize_linear" { axis: i64 = 1, block_size: i64 = 0, output_dtype: Option<DType> = None }
    /// ONNX `Det` (opset 22).
    Det "det" {}
    /// ONNX `Div` (opset 14).
    Div "div" {}
    /// ONNX `Dropout` (opset 22).
    Dropout "dropout" { seed: Option<i64> = None }
    /// ONNX `DynamicQuantizeLinear` (opset 11).
    DynamicQuantizeLinear "dynamic_quantize_linear" {}
    /// ONNX `Einsum` (opset 28).
    Einsum "einsum" { equation: String }
    /// ONNX `Elu` (opset 22).
    Elu "elu" { alpha: f32 = 1.0_f32 }
    /// ONNX `Equal` (opset 19).
    Equal "equal" {}
    /// ONNX `Erf` (opset 13).
    Erf "erf" {}
    /// ONNX `Exp` (opset 13).
    Exp "exp" {}
    /// ONNX `Expand` (opset 13).
    Expand "expand" {}
    /// ONNX `EyeLike` (opset 22).
    EyeLike "eye_like" { dtype: Option<DType> = None, k: i64 = 0 }
    /// ONNX `Flatten` (opset 25).
    Flatten "flatten" { axis: i64 = 1 }
    /// ONNX `Floor` (opset 13).
    Floor "floor" {}
    /// ONNX `GRU` (opset 22).
    GRU "gru" { activation_alpha: Vec<f32> = Vec::new(), activation_beta: Vec<f32> = Vec::new(), activations: Vec<RnnActivation> = Vec::new(), clip: Option<f32> = None, direction: RnnDirection = RnnDirection::Forward, hidden_size: Option<i64> = None, layout: i64 = 0, linear_before_reset: i64 = 0 }
    /// ONNX `Gather` (opset 13).
    Gather "gather" { axis: i64 = 0 }
    /// ONNX `GatherElements` (opset 13).
    GatherElements "gather_elements" { axis: i64 = 0 }
    /// ONNX `GatherND` (opset 13).
    GatherND "gather_nd" { batch_dims: i64 = 0 }
    /// ONNX `Gelu` (opset 20).
    Gelu "gelu" { approximate: GeluApprox = GeluApprox::None }
    /// ONNX `Gemm` (opset 13).
    Gemm "gemm" { alpha: f32 = 1.0_f32, beta: f32 = 1.0_f32, transA: i64 = 0, transB: i64 = 0 }
    /// ONNX `GlobalAveragePool` (opset 22).
    GlobalAveragePool "global_average_pool" {}
    /// ONNX `GlobalLpPool` (opset 22).
    GlobalLpPool "global_lp_pool" { p: i64 = 2 }
    /// ONNX `GlobalMaxPool` (opset 22).
    GlobalMaxPool "global_max_pool" {}
    /// ONNX `Greater` (opset 13).
    Greater "greater" {}
    /// ONNX `GreaterOrEqual` (opset 16).
    GreaterOrEqual "greater_or_equal" {}
    /// ONNX `GridSample` (opset 22).
    GridSample "grid_sample" { align_corners: i64 = 0, mode: ResizeMode = ResizeMode::Linear, padding_mode: GridPadMode = GridPadMode::Zeros }
    /// ONNX `GroupNormalization` (opset 21).
    GroupNormalization "group_normalization" { epsilon: f32 = 9.999999747378752e-06_f32, num_groups: i64, stash_type: DType = DType::F32 }
    /// ONNX `HammingWindow` (opset 17).
    HammingWindow "hamming_window" { output_datatype: DType = DType::F32, periodic: i64 = 1 }
    /// ONNX `HannWindow` (opset 17).
    HannWindow "hann_window" { output_datatype: DType = DType::F32, periodic: i64 = 1 }
    /// ONNX `HardSigmoid` (opset 22).
    HardSigmoid "hard_sigmoid" { alpha: f32 = 0.20000000298023224_f32, beta: f32 = 0.5_f32 }
    /// ONNX `HardSwish` (opset 22).
    HardSwish "hard_swish" {}
    /// ONNX `Hardmax` (opset 13).
    Hardmax "hardmax" { axis: i64 = -1 }
    /// ONNX `Identity` (opset 25).
    Identity "identity" {}
    /// ONNX `If` (opset 25).
    If "if" [then_branch, else_branch] {}
    /// ONNX `ImageDecoder` (opset 20).
    ImageDecoder "image_decoder" { pixel_format: PixelFormat = PixelFormat::Rgb }
    /// ONNX `InstanceNormalization` (opset 22).
    InstanceNormalization "instance_normalization" { epsilon: f32 = 9.999999747378752e-06_f32 }
    /// ONNX `IsInf` (opset 20).
    IsInf "is_inf" { detect_negative: i64 = 1, detect_positive: i64 = 1 }
    /// ONNX `IsNaN` (opset 20).
    IsNaN "is_nan" {}
    /// ONNX `LRN` (opset 13).
    LRN "lrn" { alpha: f32 = 9.999999747378752e-05_f32, beta: f32 = 0.75_f32, bias: f32 = 1.0_f32, size: i64 }
    /// ONNX `LSTM` (opset 22).
    LSTM "lstm" { activation_alpha: Vec<f32> = Vec::new(), activation_beta: Vec<f32> = Vec::new(), activations: Vec<RnnActivation> = Vec::new(), clip: Option<f32> = None, direction: RnnDirection = RnnDirection::Forward, hidden_size: Option<i64> = None, input_forget: i64 = 0, layout: i64 = 0 }
    /// ONNX `LayerNormalization` (opset 17).
    LayerNormalization "layer_normalization" { axis: i64 = -1, epsilon: f32 = 9.999999747378752e-06_f32, stash_type: DType = DType::F32 }
    /// ONNX `LeakyRelu` (opset 16).
    LeakyRelu "leaky_relu" { alpha: f32 = 0.009999999776482582_f32 }
    /// ONNX `Less` (opset 13).
    Less "less" {}
    /// ONNX `LessOrEqual` (opset 16).
    LessOrEqual "less_or_equal" {}
    /// ONNX `LinearAttention` (opset 27).
    LinearAttention "linear_attention" { chunk_size: i64 = 64, kv_num_heads: i64, q_num_heads: i64, scale: f32 = 0.0_f32, update_rule: UpdateRule = UpdateRule::GatedDelta }
    /// ONNX `Log` (opset 13).
    Log "log" {}
    /// ONNX `LogSoftmax` (opset 13).
    LogSoftmax "log_softmax" { axis: i64 = -1 }
    /// ONNX `Loop` (opset 25).
    Loop "loop" [body] {}
    /// ONNX `LpNormalization` (opset 22).
    LpNormalization "lp_normalization" { axis: i64 = -1, p: i64 = 2 }
    /// ONNX `LpPool` (opset 22).
    LpPool "lp_pool" { auto_pad: AutoPad = AutoPad::Notset, ceil_mode: i64 = 0, dilations: Vec<i64> = Vec::new(), kernel_shape: Vec<i64>, p: i64 = 2, pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `MatMul` (opset 13).
    MatMul "matmul" {}
    /// ONNX `MatMulInteger` (opset 10).
    MatMulInteger "matmul_integer" {}
    /// ONNX `Max` (opset 13).
    Max "max" {}
    /// ONNX `MaxPool` (opset 22).
    MaxPool "max_pool" { auto_pad: AutoPad = AutoPad::Notset, ceil_mode: i64 = 0, dilations: Vec<i64> = Vec::new(), kernel_shape: Vec<i64>, pads: Vec<i64> = Vec::new(), storage_order: i64 = 0, strides: Vec<i64> = Vec::new() }
    /// ONNX `MaxRoiPool` (opset 22).
    MaxRoiPool "max_roi_pool" { pooled_shape: Vec<i64>, spatial_scale: f32 = 1.0_f32 }
    /// ONNX `MaxUnpool` (opset 22).
    MaxUnpool "max_unpool" { kernel_shape: Vec<i64>, pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `Mean` (opset 13).
    Mean "mean" {}
    /// ONNX `MeanVarianceNormalization` (opset 13).
    MeanVarianceNormalization "mean_variance_normalization" { axes: Vec<i64> = vec![0, 2, 3] }
    /// ONNX `MelWeightMatrix` (opset 17).
    MelWeightMatrix "mel_weight_matrix" { output_datatype: DType = DType::F32 }
    /// ONNX `Min` (opset 13).
    Min "min" {}
    /// ONNX `Mish` (opset 22).
    Mish "mish" {}
    /// ONNX `Mod` (opset 28).
    Mod "mod" { fmod: i64 = 0 }
    /// ONNX `Mul` (opset 14).
    Mul "mul" {}
    /// ONNX `Multinomial` (opset 22).
    Multinomial "multinomial" { dtype: DType = DType::I32, sample_size: i64 = 1, seed: Option<f32> = None }
    /// ONNX `Neg` (opset 13).
    Neg "neg" {}
    /// ONNX `NegativeLogLikelihoodLoss` (opset 22).
    NegativeLogLikelihoodLoss "negative_log_likelihood_loss" { ignore_index: Option<i64> = None, reduction: LossReduction = LossReduction::Mean }
    /// ONNX `NonMaxSuppression` (opset 11).
    NonMaxSuppression "non_max_suppression" { center_point_box: i64 = 0 }
    /// ONNX `NonZero` (opset 13).
    NonZero "nonzero" {}
    /// ONNX `Not` (opset 1).
    Not "not" {}
    /// ONNX `OneHot` (opset 28).
    OneHot "one_hot" { axis: i64 = -1 }
    /// ONNX `Or` (opset 7).
    Or "or" {}
    /// ONNX `PRelu` (opset 16).
    PRelu "prelu" {}
    /// ONNX `Pad` (opset 25).
    Pad "pad" { mode: PadMode = PadMode::Constant }
    /// ONNX `Pow` (opset 15).
    Pow "pow" {}
    /// ONNX `QLinearConv` (opset 10).
    QLinearConv "qlinear_conv" { auto_pad: AutoPad = AutoPad::Notset, dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// ONNX `QLinearMatMul` (opset 21), and kiln's optional ninth input: an `i32` bias per
    /// column added to the accumulator (a QDQ Gemm's).
    QLinearMatMul "qlinear_matmul" {}
    /// ONNX `QuantizeLinear` (opset 28).
    QuantizeLinear "quantize_linear" { axis: i64 = 1, block_size: i64 = 0, output_dtype: Option<DType> = None, precision: i64 = 0, saturate: i64 = 1 }
    /// ONNX `RMSNormalization` (opset 23).
    RMSNormalization "rms_normalization" { axis: i64 = -1, epsilon: f32 = 9.999999747378752e-06_f32, stash_type: DType = DType::F32 }
    /// ONNX `RNN` (opset 22).
    RNN "rnn" { activation_alpha: Vec<f32> = Vec::new(), activation_beta: Vec<f32> = Vec::new(), activations: Vec<RnnActivation> = Vec::new(), clip: Option<f32> = None, direction: RnnDirection = RnnDirection::Forward, hidden_size: Option<i64> = None, layout: i64 = 0 }
    /// ONNX `RandomNormal` (opset 22).
    RandomNormal "random_normal" { dtype: DType = DType::F32, mean: f32 = 0.0_f32, scale: f32 = 1.0_f32, seed: Option<f32> = None, shape: Vec<i64> }
    /// ONNX `RandomNormalLike` (opset 22).
    RandomNormalLike "random_normal_like" { dtype: Option<DType> = None, mean: f32 = 0.0_f32, scale: f32 = 1.0_f32, seed: Option<f32> = None }
    /// ONNX `RandomUniform` (opset 22).
    RandomUniform "random_uniform" { dtype: DType = DType::F32, high: f32 = 1.0_f32, low: f32 = 0.0_f32, seed: Option<f32> = None, shape: Vec<i64> }
    /// ONNX `RandomUniformLike` (opset 22).
    RandomUniformLike "random_uniform_like" { dtype: Option<DType> = None, high: f32 = 1.0_f32, low: f32 = 0.0_f32, seed: Option<f32> = None }
    /// ONNX `Range` (opset 27).
    Range "range" { stash_type: DType = DType::F32 }
    /// ONNX `Reciprocal` (opset 13).
    Reciprocal "reciprocal" {}
    /// ONNX `ReduceL1` (opset 18).
    ReduceL1 "reduce_l1" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceL2` (opset 18).
    ReduceL2 "reduce_l2" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceLogSum` (opset 28).
    ReduceLogSum "reduce_log_sum" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceLogSumExp` (opset 28).
    ReduceLogSumExp "reduce_log_sum_exp" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceMax` (opset 20).
    ReduceMax "reduce_max" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceMean` (opset 18).
    ReduceMean "reduce_mean" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceMin` (opset 20).
    ReduceMin "reduce_min" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceProd` (opset 18).
    ReduceProd "reduce_prod" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceSum` (opset 13).
    ReduceSum "reduce_sum" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `ReduceSumSquare` (opset 18).
    ReduceSumSquare "reduce_sum_square" { keepdims: i64 = 1, noop_with_empty_axes: i64 = 0 }
    /// ONNX `RegexFullMatch` (opset 20).
    RegexFullMatch "regex_full_match" { pattern: Option<String> = None }
    /// ONNX `Relu` (opset 14).
    Relu "relu" {}
    /// ONNX `Reshape` (opset 25).
    Reshape "reshape" { allowzero: i64 = 0 }
    /// ONNX `Resize` (opset 19).
    Resize "resize" { antialias: i64 = 0, axes: Vec<i64> = Vec::new(), coordinate_transformation_mode: CoordTransform = CoordTransform::HalfPixel, cubic_coeff_a: f32 = -0.75_f32, exclude_outside: i64 = 0, extrapolation_value: f32 = 0.0_f32, keep_aspect_ratio_policy: AspectPolicy = AspectPolicy::Stretch, mode: ResizeMode = ResizeMode::Nearest, nearest_mode: NearestMode = NearestMode::RoundPreferFloor }
    /// ONNX `ReverseSequence` (opset 28).
    ReverseSequence "reverse_sequence" { batch_axis: i64 = 1, time_axis: i64 = 0 }
    /// ONNX `RoiAlign` (opset 22).
    RoiAlign "roi_align" { coordinate_transformation_mode: RoiCoordMode = RoiCoordMode::HalfPixel, mode: RoiPoolMode = RoiPoolMode::Avg, output_height: i64 = 1, output_width: i64 = 1, sampling_ratio: i64 = 0, spatial_scale: f32 = 1.0_f32 }
    /// ONNX `RotaryEmbedding` (opset 23).
    RotaryEmbedding "rotary_embedding" { interleaved: i64 = 0, num_heads: Option<i64> = None, rotary_embedding_dim: i64 = 0 }
    /// ONNX `Round` (opset 22).
    Round "round" {}
    /// ONNX `STFT` (opset 17).
    STFT "stft" { onesided: i64 = 1 }
    /// ONNX `Scan` (opset 25).
    Scan "scan" [body] { num_scan_inputs: i64, scan_input_axes: Vec<i64> = Vec::new(), scan_input_directions: Vec<i64> = Vec::new(), scan_output_axes: Vec<i64> = Vec::new(), scan_output_directions: Vec<i64> = Vec::new() }
    /// ONNX `ScatterElements` (opset 18).
    ScatterElements "scatter_elements" { axis: i64 = 0, reduction: ScatterReduction = ScatterReduction::None }
    /// ONNX `ScatterND` (opset 18).
    ScatterND "scatter_nd" { reduction: ScatterReduction = ScatterReduction::None }
    /// ONNX `Selu` (opset 22).
    Selu "selu" { alpha: f32 = 1.6732631921768188_f32, gamma: f32 = 1.0507010221481323_f32 }
    /// ONNX `Shape` (opset 25).
    Shape "shape" { end: Option<i64> = None, start: i64 = 0 }
    /// ONNX `Shrink` (opset 9).
    Shrink "shrink" { bias: f32 = 0.0_f32, lambd: f32 = 0.5_f32 }
    /// ONNX `Sigmoid` (opset 13).
    Sigmoid "sigmoid" {}
    /// ONNX `Sign` (opset 13).
    Sign "sign" {}
    /// ONNX `Sin` (opset 22).
    Sin "sin" {}
    /// ONNX `Sinh` (opset 22).
    Sinh "sinh" {}
    /// ONNX `Size` (opset 25).
    Size "size" {}
    /// ONNX `Slice` (opset 13).
    Slice "slice" {}
    /// ONNX `Softmax` (opset 13).
    Softmax "softmax" { axis: i64 = -1 }
    /// ONNX `SoftmaxCrossEntropyLoss` (opset 13).
    SoftmaxCrossEntropyLoss "softmax_cross_entropy_loss" { ignore_index: Option<i64> = None, reduction: LossReduction = LossReduction::Mean }
    /// ONNX `Softplus` (opset 22).
    Softplus "softplus" {}
    /// ONNX `Softsign` (opset 22).
    Softsign "softsign" {}
    /// ONNX `SpaceToDepth` (opset 28).
    SpaceToDepth "space_to_depth" { blocksize: i64, mode: DepthToSpaceMode = DepthToSpaceMode::Dcr }
    /// ONNX `Split` (opset 18).
    Split "split" { axis: i64 = 0, num_outputs: Option<i64> = None }
    /// ONNX `Sqrt` (opset 13).
    Sqrt "sqrt" {}
    /// ONNX `Squeeze` (opset 25).
    Squeeze "squeeze" {}
    /// ONNX `StringConcat` (opset 20).
    StringConcat "string_concat" {}
    /// ONNX `StringNormalizer` (opset 10).
    StringNormalizer "string_normalizer" { case_change_action: CaseChange = CaseChange::None, is_case_sensitive: i64 = 0, locale: Option<String> = None, stopwords: Vec<String> = Vec::new() }
    /// ONNX `StringSplit` (opset 20).
    StringSplit "string_split" { delimiter: Option<String> = None, maxsplit: Option<i64> = None }
    /// ONNX `Sub` (opset 14).
    Sub "sub" {}
    /// ONNX `Sum` (opset 13).
    Sum "sum" {}
    /// ONNX `SwiGLU` (opset 28).
    SwiGLU "swiglu" { alpha: f32 = 1.0_f32 }
    /// ONNX `Swish` (opset 24).
    Swish "swish" { alpha: f32 = 1.0_f32 }
    /// ONNX `Tan` (opset 22).
    Tan "tan" {}
    /// ONNX `Tanh` (opset 13).
    Tanh "tanh" {}
    /// ONNX `TensorScatter` (opset 24).
    TensorScatter "tensor_scatter" { axis: i64 = -2, mode: TensorScatterMode = TensorScatterMode::Linear }
    /// ONNX `TfIdfVectorizer` (opset 9).
    TfIdfVectorizer "tf_idf_vectorizer" { max_gram_length: i64, max_skip_count: i64, min_gram_length: i64, mode: TfIdfMode, ngram_counts: Vec<i64>, ngram_indexes: Vec<i64>, pool_int64s: Vec<i64> = Vec::new(), pool_strings: Vec<String> = Vec::new(), weights: Vec<f32> = Vec::new() }
    /// ONNX `ThresholdedRelu` (opset 22).
    ThresholdedRelu "thresholded_relu" { alpha: f32 = 1.0_f32 }
    /// ONNX `Tile` (opset 13).
    Tile "tile" {}
    /// ONNX `TopK` (opset 24).
    TopK "topk" { axis: i64 = -1, largest: i64 = 1, sorted: i64 = 1 }
    /// ONNX `Transpose` (opset 25).
    Transpose "transpose" { perm: Vec<i64> = Vec::new() }
    /// ONNX `Trilu` (opset 14).
    Trilu "trilu" { upper: i64 = 1 }
    /// ONNX `Unique` (opset 28).
    Unique "unique" { axis: Option<i64> = None, sorted: i64 = 1 }
    /// ONNX `Unsqueeze` (opset 25).
    Unsqueeze "unsqueeze" {}
    /// ONNX `Where` (opset 16).
    Where "where" {}
    /// ONNX `Xor` (opset 7).
    Xor "xor" {}

    // kiln's own ops, made by the optimizer (never imported; see `OpKind::is_internal`).

    /// `Y = act(Conv(X, W) + B + Z)`: a convolution with its bias (`[M]`, optional), residual
    /// addend (`Z`, Y's shape, optional) and activation applied in one kernel. Inputs `X, W, B,
    /// Z`; the convolution attributes are Conv's.
    FusedConv "fused_conv" { activation: Activation = Activation::None, alpha: f32 = 0.0_f32, auto_pad: AutoPad = AutoPad::Notset, beta: f32 = 0.0_f32, dilations: Vec<i64> = Vec::new(), group: i64 = 1, kernel_shape: Vec<i64> = Vec::new(), pads: Vec<i64> = Vec::new(), strides: Vec<i64> = Vec::new() }
    /// `Y = act(A · op(B) + bias + Z)`: a (batched, numpy-broadcast) matrix product with a bias
    /// over the last axis (`[N]`, optional), a residual addend (`Z`, Y's shape, optional) and
    /// an activation in one kernel. `op(B)` is `B` transposed in its last two axes when
    /// `transB` is 1. Inputs `A, B, bias, Z`.
    FusedMatMul "fused_matmul" { activation: Activation = Activation::None, alpha: f32 = 0.0_f32, beta: f32 = 0.0_f32, transB: i64 = 0 }
    /// A chain of elementwise ops computed in one loop nest over the output: the body's
    /// parameters are the inputs, its one result the output, and every body value has the
    /// output's element count (nothing is recomputed per broadcast element).
    FusedElementwise "fused_elementwise" [body] {}
}

impl OpKind {
    /// True for kiln's own ops: the optimizer makes them; no ONNX model names them.
    pub fn is_internal(self) -> bool {
        matches!(self, OpKind::FusedConv | OpKind::FusedMatMul | OpKind::FusedElementwise)
    }
}
