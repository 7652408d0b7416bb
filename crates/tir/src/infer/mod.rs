//! Type and shape inference for every op, with symbolic dims carried through.
//!
//! [`infer_op`] computes the output types of one op from its input types (and the values of
//! inputs that are constants); [`infer_graph`] re-infers a whole graph in order;
//! [`bind_symbols`] and [`bind_input_shapes`] specialize a graph to concrete input shapes.
//!
//! Semantics are those of the newest ONNX opset of each op. Conventions where ONNX leaves a
//! size open:
//!
//! - Whether a symbolic dim broadcasts with a different size is unknown until it is bound: it
//!   is assumed to (the known size wins, two symbols give a fresh one) and the assumption is
//!   reported to the [`SymbolSource`]; `Squeeze` without axes keeps a symbol. Binding the
//!   symbols and re-inferring gives the exact answer, and a broken assumption is then an error.
//! - A size that depends on data that is not a constant (`NonZero`, `Unique`, a `Reshape`
//!   whose shape input is computed, ...) or that has no polynomial form (`floor(seq / 2)`)
//!   becomes a fresh symbol from the caller's `fresh` function. When even the rank is
//!   unknown, inference fails with [`InferError::NotStatic`].
//! - Dims that must be equal at run time (a `Concat`'s other axes, a `MatMul`'s contraction)
//!   are checked when both are known; a known size wins over a symbol.

mod attention;
mod bind;
mod common;
mod control;
mod conv;
mod elementwise;
mod gather;
mod matmul;
mod misc;
mod norm;
mod pool;
mod quant;
mod reduce;
mod rnn;
mod shape_ops;
mod signal;
mod slice;
mod walk;

#[cfg(test)]
mod tests;

use std::fmt;

use crate::dim::Dim;
use crate::dtype::DType;
use crate::graph::{Assumed, NodeId};
use crate::op::Op;
use crate::tensor::Tensor;
use crate::types::TensorType;

pub use bind::{
    bind_input_shapes, bind_input_values, bind_symbols, shape_deciding_inputs,
    substitute_input_values,
};
pub use walk::infer_graph;

use common::{Cx, set};

/// A node input as inference sees it: its type and, when it is a known constant, its value.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    /// The input's type.
    pub ty: &'a TensorType,
    /// The input's value, when it is a constant whose value is known.
    pub value: Option<&'a Tensor>,
}

/// Types of a nested region's parameters and results (If branches, Loop/Scan bodies).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegionSig {
    /// Parameter types, in order.
    pub params: Vec<TensorType>,
    /// Result types, in order.
    pub results: Vec<TensorType>,
}

/// Where inference takes fresh symbols from, and where it reports what it had to assume to
/// go on before symbols and shape-deciding inputs are bound. A closure `|| -> Dim` is a
/// source that ignores assumptions.
pub trait SymbolSource {
    /// A new symbol for a size known only at run time.
    fn fresh(&mut self) -> Dim;
    /// Inference went on under `what`; binding must make it true (or moot).
    fn assume(&mut self, what: Assumed) {
        let _ = what;
    }
}

impl<F: FnMut() -> Dim> SymbolSource for F {
    fn fresh(&mut self) -> Dim {
        self()
    }
}

/// An inference failure; Display explains it (the caller prefixes node name and op type).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferError {
    /// Wrong number of inputs, outputs or regions.
    #[error("expected {expected} {what}, found {found}")]
    Arity {
        /// What is counted: `inputs`, `outputs`, `regions`, ...
        what: &'static str,
        /// The accepted count or range, e.g. `2`, `1 to 3`, `at least 1`.
        expected: String,
        /// The count found.
        found: usize,
    },
    /// A required input is omitted.
    #[error("required input {0} is missing")]
    MissingInput(usize),
    /// An input has an element type the op does not accept.
    #[error("input {input} has element type {found}; expected {expected}")]
    DType {
        /// Input position.
        input: usize,
        /// Its element type.
        found: DType,
        /// What the op accepts there.
        expected: String,
    },
    /// Input shapes that do not fit the op.
    #[error("{0}")]
    Shape(String),
    /// An attribute value that does not fit the op or its inputs.
    #[error("{0}")]
    Attr(String),
    /// The output rank depends on a value that is not a constant.
    #[error("{0}")]
    NotStatic(String),
    /// A size overflows 64 bits.
    #[error("{0}")]
    Overflow(String),
    /// Region signatures (If branches, Loop/Scan bodies) that do not fit the node.
    #[error("{0}")]
    Region(String),
}

/// An inference failure located at a node of a graph (or at a graph input).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphInferError {
    /// The node, or `None` for errors about graph inputs and bindings.
    pub node: Option<NodeId>,
    /// The node's name (or a description of the input for errors without a node).
    pub node_name: String,
    /// The op's text name (`conv`), empty for errors without a node.
    pub op: &'static str,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for GraphInferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.node.is_some() || !self.op.is_empty() {
            write!(
                f,
                "node {:?} (tensor.{}): {}",
                self.node_name, self.op, self.message
            )
        } else {
            write!(f, "{}: {}", self.node_name, self.message)
        }
    }
}

impl std::error::Error for GraphInferError {}

/// Output types of `op` for the given inputs (positions as in ONNX; None = omitted optional input).
///
/// Returns exactly `num_outputs` types (the node's output count, which may be fewer than the
/// op's maximum, e.g. MaxPool without indices, Dropout without mask, BatchNormalization
/// inference mode). `regions` gives the signatures of the node's nested regions in the order
/// [`crate::OpKind::region_names`] lists them. `symbols` makes a new symbol for a dim that
/// depends on runtime data and hears the broadcasts inference had to assume.
pub fn infer_op(
    op: &Op,
    inputs: &[Option<InferInput<'_>>],
    regions: &[RegionSig],
    num_outputs: usize,
    symbols: &mut dyn SymbolSource,
) -> Result<Vec<TensorType>, InferError> {
    let want = op.kind().region_names().len();
    if regions.len() != want {
        return Err(InferError::Arity {
            what: "regions",
            expected: want.to_string(),
            found: regions.len(),
        });
    }
    let mut cx = Cx::new(inputs, regions, num_outputs, symbols);
    let mut out = dispatch(op, &mut cx)?;
    if out.len() < num_outputs {
        return Err(InferError::Arity {
            what: "outputs",
            expected: format!("at most {}", out.len()),
            found: num_outputs,
        });
    }
    out.truncate(num_outputs);
    Ok(out)
}

/// One row per op: which family function infers it, with the type set it accepts.
fn dispatch(op: &Op, cx: &mut Cx<'_, '_>) -> Result<Vec<TensorType>, InferError> {
    use elementwise as ew;
    match op {
        // Unary maps: the output has the input's type.
        Op::Abs(_) | Op::Sign(_) => ew::unary(cx, set::NUMERIC),
        Op::Neg(_) | Op::Relu(_) => ew::unary(cx, set::SIGNED),
        Op::Shrink(_) => ew::unary(cx, set::NUMERIC),
        Op::Acos(_)
        | Op::Acosh(_)
        | Op::Asin(_)
        | Op::Asinh(_)
        | Op::Atan(_)
        | Op::Atanh(_)
        | Op::Cos(_)
        | Op::Cosh(_) => ew::unary(cx, set::FLOAT),
        Op::Sin(_)
        | Op::Sinh(_)
        | Op::Tan(_)
        | Op::Tanh(_)
        | Op::Ceil(_)
        | Op::Floor(_)
        | Op::Round(_)
        | Op::Erf(_) => ew::unary(cx, set::FLOAT),
        Op::Exp(_)
        | Op::Log(_)
        | Op::Sqrt(_)
        | Op::Reciprocal(_)
        | Op::Sigmoid(_)
        | Op::Softplus(_)
        | Op::Softsign(_) => ew::unary(cx, set::FLOAT),
        Op::Celu(_)
        | Op::Elu(_)
        | Op::Selu(_)
        | Op::LeakyRelu(_)
        | Op::HardSigmoid(_)
        | Op::HardSwish(_)
        | Op::Mish(_) => ew::unary(cx, set::FLOAT),
        Op::ThresholdedRelu(_) | Op::Gelu(_) | Op::Swish(_) => ew::unary(cx, set::FLOAT),
        Op::BitwiseNot(_) => ew::unary(cx, set::INTEGER),
        Op::Not(_) => ew::unary(cx, set::BOOL),
        Op::Identity(_) => ew::unary(cx, set::ANY),
        Op::IsInf(_) | Op::IsNaN(_) => ew::unary_to(cx, set::FLOAT_F8, DType::Bool),
        Op::RegexFullMatch(_) => ew::unary_to(cx, set::STRING, DType::Bool),
        Op::Cast(a) => ew::unary_to(cx, set::ANY, a.to),
        Op::CastLike(_) => ew::cast_like(cx),
        Op::BitCast(a) => ew::bitcast(cx, a.to),
        Op::Dropout(_) => ew::dropout(cx),
        Op::Clip(_) => ew::clip(cx),

        // Broadcasting binary and variadic maps.
        Op::Add(_) | Op::Sub(_) | Op::Mul(_) | Op::Div(_) | Op::Mod(_) => {
            ew::binary(cx, set::NUMERIC, None)
        }
        Op::BitwiseAnd(_) | Op::BitwiseOr(_) | Op::BitwiseXor(_) | Op::BitShift(_) => {
            ew::binary(cx, set::INTEGER, None)
        }
        Op::And(_) | Op::Or(_) | Op::Xor(_) => ew::binary(cx, set::BOOL, None),
        Op::Equal(_) => ew::binary(cx, set::EQUATABLE, Some(DType::Bool)),
        Op::Greater(_) | Op::GreaterOrEqual(_) | Op::Less(_) | Op::LessOrEqual(_) => {
            ew::binary(cx, set::NUMERIC, Some(DType::Bool))
        }
        Op::StringConcat(_) => ew::binary(cx, set::STRING, None),
        Op::Pow(_) => ew::pow(cx),
        Op::PRelu(_) => ew::prelu(cx),
        Op::SwiGLU(_) => ew::swiglu(cx),
        Op::Where(_) => ew::where_(cx),
        Op::Max(_) | Op::Min(_) => ew::variadic(cx, set::NUMERIC),
        Op::Mean(_) | Op::Sum(_) => ew::variadic(cx, set::FLOAT),

        // Reductions, scans and per-axis normalizations.
        Op::ReduceL1(a) => reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceL2(a) => reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceLogSum(a) => reduce::reduce(cx, set::FLOAT, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceLogSumExp(a) => {
            reduce::reduce(cx, set::FLOAT, a.keepdims, a.noop_with_empty_axes)
        }
        Op::ReduceMax(a) => reduce::reduce(cx, set::ORDERED, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceMean(a) => reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceMin(a) => reduce::reduce(cx, set::ORDERED, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceProd(a) => reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceSum(a) => reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes),
        Op::ReduceSumSquare(a) => {
            reduce::reduce(cx, set::REDUCIBLE, a.keepdims, a.noop_with_empty_axes)
        }
        Op::ArgMax(a) => reduce::arg(cx, a.axis, a.keepdims),
        Op::ArgMin(a) => reduce::arg(cx, a.axis, a.keepdims),
        Op::CumSum(_) | Op::CumProd(_) => reduce::cumulative(cx),
        Op::TopK(a) => reduce::topk(cx, a.axis),
        Op::Softmax(a) => reduce::along_axis(cx, set::FLOAT, a.axis),
        Op::LogSoftmax(a) => reduce::along_axis(cx, set::FLOAT, a.axis),
        Op::Hardmax(a) => reduce::along_axis(cx, set::FLOAT, a.axis),
        Op::LpNormalization(a) => reduce::along_axis(cx, set::FLOAT, a.axis),

        // Normalization layers.
        Op::BatchNormalization(_) => norm::batch_norm(cx),
        Op::LayerNormalization(a) => norm::layer_norm(cx, a),
        Op::GroupNormalization(a) => norm::group_norm(cx, a),
        Op::InstanceNormalization(_) => norm::instance_norm(cx),
        Op::RMSNormalization(a) => norm::rms_norm(cx, a),
        Op::LRN(a) => norm::lrn(cx, a),
        Op::MeanVarianceNormalization(a) => norm::mvn(cx, a),

        // Convolution and pooling.
        Op::Conv(a) => conv::conv(cx, a),
        Op::FusedConv(a) => conv::fused_conv(cx, a),
        Op::ConvInteger(a) => conv::conv_integer(cx, a),
        Op::QLinearConv(a) => conv::qlinear_conv(cx, a),
        Op::ConvTranspose(a) => conv::conv_transpose(cx, a),
        Op::DeformConv(a) => conv::deform_conv(cx, a),
        Op::CausalConvWithState(_) => conv::causal_conv(cx),
        Op::Col2Im(a) => conv::col2im(cx, a),
        Op::AveragePool(a) => pool::average_pool(cx, a),
        Op::MaxPool(a) => pool::max_pool(cx, a),
        Op::LpPool(a) => pool::lp_pool(cx, a),
        Op::GlobalAveragePool(_) | Op::GlobalMaxPool(_) | Op::GlobalLpPool(_) => {
            pool::global_pool(cx)
        }
        Op::MaxRoiPool(a) => pool::max_roi_pool(cx, a),
        Op::MaxUnpool(a) => pool::max_unpool(cx, a),
        Op::RoiAlign(a) => pool::roi_align(cx, a),

        // Products.
        Op::MatMul(_) => matmul::matmul(cx),
        Op::MatMulInteger(_) => matmul::matmul_integer(cx),
        Op::QLinearMatMul(_) => matmul::qlinear_matmul(cx),
        Op::Gemm(a) => matmul::gemm(cx, a),
        Op::FusedMatMul(a) => matmul::fused_matmul(cx, a),
        Op::Einsum(a) => matmul::einsum(cx, &a.equation),
        Op::Det(_) => matmul::det(cx),

        // Shape manipulation.
        Op::Reshape(a) => shape_ops::reshape(cx, a.allowzero),
        Op::Flatten(a) => shape_ops::flatten(cx, a.axis),
        Op::Squeeze(_) => shape_ops::squeeze(cx),
        Op::Unsqueeze(_) => shape_ops::unsqueeze(cx),
        Op::Transpose(a) => shape_ops::transpose(cx, &a.perm),
        Op::Expand(_) => shape_ops::expand(cx),
        Op::Tile(_) => shape_ops::tile(cx),
        Op::Shape(a) => shape_ops::shape(cx, a.start, a.end),
        Op::Size(_) => shape_ops::size(cx),
        Op::ConstantOfShape(a) => shape_ops::constant_of_shape(cx, a.value.as_ref()),
        Op::Range(_) => shape_ops::range(cx),
        Op::DepthToSpace(a) => shape_ops::depth_to_space(cx, a.blocksize),
        Op::SpaceToDepth(a) => shape_ops::space_to_depth(cx, a.blocksize),
        Op::Slice(_) => slice::slice(cx),
        Op::Split(a) => slice::split(cx, a),
        Op::Concat(a) => slice::concat(cx, a.axis),
        Op::Pad(_) => slice::pad(cx),
        Op::CenterCropPad(a) => slice::center_crop_pad(cx, &a.axes),
        Op::Resize(a) => slice::resize(cx, a),

        // Indexing.
        Op::Gather(a) => gather::gather(cx, a.axis),
        Op::GatherElements(a) => gather::gather_elements(cx, a.axis),
        Op::GatherND(a) => gather::gather_nd(cx, a.batch_dims),
        Op::ScatterElements(a) => gather::scatter_elements(cx, a.axis),
        Op::ScatterND(_) => gather::scatter_nd(cx),
        Op::TensorScatter(a) => gather::tensor_scatter(cx, a.axis),
        Op::OneHot(a) => gather::one_hot(cx, a.axis),
        Op::Compress(a) => gather::compress(cx, a.axis),
        Op::NonZero(_) => gather::nonzero(cx),
        Op::Unique(a) => gather::unique(cx, a.axis),
        Op::Trilu(_) => gather::trilu(cx),
        Op::ReverseSequence(a) => gather::reverse_sequence(cx, a),

        // Quantization.
        Op::QuantizeLinear(a) => quant::quantize(cx, a),
        Op::DequantizeLinear(a) => quant::dequantize(cx, a),
        Op::DynamicQuantizeLinear(_) => quant::dynamic_quantize(cx),

        // Recurrent and attention layers.
        Op::RNN(a) => rnn::rnn(
            cx,
            rnn::Cell {
                gates: 1,
                direction: a.direction,
                hidden_size: a.hidden_size,
                layout: a.layout,
                max_inputs: 6,
                outputs: 2,
            },
        ),
        Op::GRU(a) => rnn::rnn(
            cx,
            rnn::Cell {
                gates: 3,
                direction: a.direction,
                hidden_size: a.hidden_size,
                layout: a.layout,
                max_inputs: 6,
                outputs: 2,
            },
        ),
        Op::LSTM(a) => rnn::rnn(
            cx,
            rnn::Cell {
                gates: 4,
                direction: a.direction,
                hidden_size: a.hidden_size,
                layout: a.layout,
                max_inputs: 8,
                outputs: 3,
            },
        ),
        Op::Attention(a) => attention::attention(cx, a),
        Op::RotaryEmbedding(a) => attention::rotary_embedding(cx, a),
        Op::LinearAttention(a) => attention::linear_attention(cx, a),

        // Signal processing.
        Op::DFT(a) => signal::dft(cx, a),
        Op::STFT(a) => signal::stft(cx, a.onesided),
        Op::BlackmanWindow(a) => signal::window(cx, a.output_datatype),
        Op::HammingWindow(a) => signal::window(cx, a.output_datatype),
        Op::HannWindow(a) => signal::window(cx, a.output_datatype),
        Op::MelWeightMatrix(a) => signal::mel_weight_matrix(cx, a.output_datatype),

        // Control flow.
        Op::If(_) => control::if_(cx),
        Op::Loop(_) => control::loop_(cx),
        Op::FusedElementwise(_) => control::fused_elementwise(cx),
        Op::Scan(a) => control::scan(cx, a),

        // Everything else.
        Op::RandomNormal(a) => misc::random(cx, a.dtype, &a.shape),
        Op::RandomUniform(a) => misc::random(cx, a.dtype, &a.shape),
        Op::RandomNormalLike(a) => misc::random_like(cx, a.dtype),
        Op::RandomUniformLike(a) => misc::random_like(cx, a.dtype),
        Op::Bernoulli(a) => misc::bernoulli(cx, a.dtype),
        Op::Multinomial(a) => misc::multinomial(cx, a),
        Op::EyeLike(a) => misc::eye_like(cx, a.dtype),
        Op::NegativeLogLikelihoodLoss(a) => misc::nll_loss(cx, a.reduction),
        Op::SoftmaxCrossEntropyLoss(a) => misc::softmax_cross_entropy(cx, a.reduction),
        Op::NonMaxSuppression(_) => misc::non_max_suppression(cx),
        Op::GridSample(_) => misc::grid_sample(cx),
        Op::AffineGrid(_) => misc::affine_grid(cx),
        Op::StringNormalizer(a) => misc::string_normalizer(cx, a),
        Op::StringSplit(_) => misc::string_split(cx),
        Op::ImageDecoder(a) => misc::image_decoder(cx, a.pixel_format),
        Op::TfIdfVectorizer(a) => misc::tf_idf(cx, a),
    }
}
