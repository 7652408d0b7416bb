//! Which family lowers each op: one exhaustive match over [`OpKind`], so an op added to the
//! table does not compile until lowering has decided on it (a family, or an explicit
//! "unsupported" arm).
//!
//! Families match on the [`Op`](kiln_tir::Op) for its attributes and answer `Ok(false)` for an
//! op they do not lower; reaching that answer means the match here is wrong, and it comes
//! back as [`LowerError::Internal`].

use kiln_tir::{NodeId, OpKind};

use crate::{attention, control, elementwise, linalg, misc, movement, nn, norm, quant, reduce, rnn, view};
use crate::{LowerError, Lowerer};

/// A family's entry point: lowers node `n`, or answers `Ok(false)` if it does not handle its op.
type Family = fn(&mut Lowerer<'_>, NodeId) -> Result<bool, LowerError>;

impl Lowerer<'_> {
    /// Lowers node `n` with the family that handles its op.
    pub(crate) fn lower_node(&mut self, n: NodeId) -> Result<(), LowerError> {
        use OpKind::*;
        let kind = self.node(n).op.kind();
        let (name, family): (&str, Family) = match kind {
            Dropout | Flatten | Identity | Reshape | Squeeze | Unsqueeze => ("view", view::lower),
            FusedElementwise => ("elementwise::fused", elementwise::fused::lower),
            Abs | Acos | Acosh | Asin | Asinh | Atan | Atanh | BitwiseNot | Ceil | Cos | Cosh | Erf | Exp | Floor | IsInf
            | IsNaN | Log | Neg | Not | Reciprocal | Round | Sigmoid | Sign | Sin | Sinh | Sqrt | Tan | Tanh => {
                ("elementwise::lower_unary", elementwise::lower_unary)
            }
            Celu | Elu | Gelu | HardSigmoid | HardSwish | LeakyRelu | Mish | Relu | Selu | Shrink | Softplus | Softsign
            | Swish | ThresholdedRelu => ("elementwise::lower_activation", elementwise::lower_activation),
            Clip | PRelu | SwiGLU => ("elementwise::activation", elementwise::activation::lower),
            Add | Div | Max | Mean | Min | Mod | Mul | Pow | Sub | Sum => ("elementwise::arith", elementwise::arith::lower),
            And | BitShift | BitwiseAnd | BitwiseOr | BitwiseXor | Equal | Greater | GreaterOrEqual | Less | LessOrEqual
            | Or | Where | Xor => ("elementwise::logic", elementwise::logic::lower),
            BitCast | Cast | CastLike => ("elementwise::cast", elementwise::cast::lower),
            DequantizeLinear | DynamicQuantizeLinear | QuantizeLinear => ("quant", quant::lower),
            ReduceL1 | ReduceL2 | ReduceLogSum | ReduceLogSumExp | ReduceMax | ReduceMean | ReduceMin | ReduceProd
            | ReduceSum | ReduceSumSquare => ("reduce::reduce_ops", reduce::reduce_ops::lower),
            ArgMax | ArgMin => ("reduce::arg", reduce::arg::lower),
            Hardmax | LogSoftmax | Softmax => ("reduce::softmax", reduce::softmax::lower),
            CumProd | CumSum => ("reduce::scan", reduce::scan::lower),
            TopK => ("reduce::topk", reduce::topk::lower),
            BatchNormalization => ("norm::batch", norm::batch::lower),
            LayerNormalization | RMSNormalization => ("norm::layer", norm::layer::lower),
            GroupNormalization | InstanceNormalization | MeanVarianceNormalization => ("norm::group", norm::group::lower),
            LRN | LpNormalization => ("norm::local", norm::local::lower),
            Einsum | FusedMatMul | Gemm | MatMul | MatMulInteger | QLinearMatMul => ("linalg", linalg::lower),
            AveragePool | Conv | ConvInteger | ConvTranspose | FusedConv | GlobalAveragePool | GlobalLpPool | GlobalMaxPool
            | LpPool | MaxPool | MaxUnpool | QLinearConv => ("nn", nn::lower),
            Concat | DepthToSpace | Expand | SpaceToDepth | Split | Tile | Transpose | Trilu => {
                ("movement::layout", movement::layout::lower)
            }
            CenterCropPad | Compress | Pad | ReverseSequence | Slice => ("movement::crop", movement::crop::lower),
            Gather | GatherElements | GatherND | OneHot | ScatterElements | ScatterND | TensorScatter => {
                ("movement::index", movement::index::lower)
            }
            ConstantOfShape | EyeLike | Range | Shape | Size => ("movement::fill", movement::fill::lower),
            Resize => ("movement::resize", movement::resize::lower),
            Col2Im => ("movement::col2im", movement::col2im::lower),
            Attention | CausalConvWithState | LinearAttention | RotaryEmbedding => ("attention", attention::lower),
            AffineGrid | BlackmanWindow | DFT | DeformConv | Det | GridSample | HammingWindow | HannWindow | MelWeightMatrix
            | NegativeLogLikelihoodLoss | RoiAlign | STFT | SoftmaxCrossEntropyLoss => ("misc", misc::lower),
            GRU | LSTM | RNN => ("rnn", rnn::lower),
            If | Loop | Scan => ("control", control::lower),
            // Buffers are sized when the model is compiled.
            NonMaxSuppression | NonZero | Unique => {
                return Err(self.unsupported(n, "the output shape depends on the input data"));
            }
            Bernoulli | Multinomial | RandomNormal | RandomNormalLike | RandomUniform | RandomUniformLike => {
                return Err(self.unsupported(n, "random values: kiln does not reproduce ONNX's random streams"));
            }
            ImageDecoder | MaxRoiPool | RegexFullMatch | StringConcat | StringNormalizer | StringSplit | TfIdfVectorizer => {
                return Err(self.unsupported(n, "no lowering for this op yet"));
            }
        };
        if family(self, n)? {
            return Ok(());
        }
        let node = self.node(n);
        Err(LowerError::Internal { node: node.name.clone(), op: kind.text_name(), reason: format!("kiln bug: family {name} got op {}", kind.text_name()) })
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use kiln_tir::{DType, Graph, OpKind, Region, TensorType};

    use crate::{LowerError, lower};

    /// Families look at the op before its operands, so a node without inputs reaches the
    /// family's own checks (a missing input, a missing region) unless it was routed to a
    /// family that does not know it.
    #[test]
    fn every_op_reaches_a_family_that_knows_it() {
        for &kind in OpKind::ALL {
            let mut g = Graph::default();
            let regions = kind.region_names().iter().map(|_| Region::default()).collect();
            let out = Some((TensorType::known(DType::F32, &[1]), "y".to_string()));
            let n = g.add_node(kind.default_op(), "n", Vec::new(), vec![out], regions);
            g.body.nodes.push(n);
            // A family may panic on such a malformed node; only the dispatch is under test.
            if let Ok(Err(e @ LowerError::Internal { .. })) = catch_unwind(AssertUnwindSafe(|| lower(&g))) {
                panic!("{e}");
            }
        }
    }
}
