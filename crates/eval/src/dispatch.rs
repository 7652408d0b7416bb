//! Which module evaluates each op: one exhaustive match over [`OpKind`], so an op added to the
//! table does not compile until the evaluator has decided on it (a module, or an explicit
//! "not implemented").
//!
//! Modules match on the [`Op`] for its attributes; one handed an op it does not know answers
//! `None`, which is a routing mistake here and comes back as [`EvalError::Internal`].

use kiln_tir::{Op, OpKind, Tensor};

use crate::args::Args;
use crate::array::Arr;
use crate::error::{EvalError, Result, unsupported};
use crate::{
    binary, cast, conv, fused, gather_scatter, layout, linalg, norm, pool, quant, reduce, select,
    shape_ops, strings, unary,
};

/// A module's entry point over decoded arrays.
type Family = fn(&Op, &Args) -> Option<Result<Vec<Arr>>>;

/// Evaluates `op` with the module that handles it.
pub(crate) fn dispatch(op: &Op, inputs: &[Option<&Tensor>], num_outputs: usize) -> Result<Vec<Tensor>> {
    use OpKind::*;
    let a = Args::new(op.kind().text_name(), inputs, num_outputs);
    let (name, family): (&str, Family) = match op.kind() {
        // Views produce tensors directly: the result shares the input's bytes.
        BitCast | Flatten | Identity | Reshape | Squeeze | Unsqueeze => {
            return tensors(&a, shape_ops::eval_view(op, &a).ok_or_else(|| misrouted(&a, "shape_ops::eval_view"))?);
        }
        // Whole-byte data in memory is gathered as bytes, without decoding it; `eval_raw`
        // declines anything else, which `gather_scatter::eval` then gathers as values.
        Gather => match gather_scatter::eval_raw(op, &a) {
            Some(outs) => return tensors(&a, outs),
            None => ("gather_scatter", gather_scatter::eval),
        },
        Abs | Acos | Acosh | Asin | Asinh | Atan | Atanh | BitwiseNot | Ceil | Celu | Clip | Cos | Cosh | Elu | Erf | Exp | Floor
        | Gelu | HardSigmoid | HardSwish | IsInf | IsNaN | LeakyRelu | Log | Mish | Neg | Not | Reciprocal | Relu | Round
        | Selu | Shrink | Sigmoid | Sign | Sin | Sinh | Softplus | Softsign | Sqrt | Swish | Tan | Tanh | ThresholdedRelu => {
            ("unary", unary::eval)
        }
        Add | And | BitShift | BitwiseAnd | BitwiseOr | BitwiseXor | Div | Equal | Greater | GreaterOrEqual | Less
        | LessOrEqual | Max | Mean | Min | Mod | Mul | Or | PRelu | Pow | Sub | Sum | Where | Xor => ("binary", binary::eval),
        Cast | CastLike => ("cast", cast::eval),
        ConstantOfShape | Dropout | EyeLike | Range | Shape | Size => ("shape_ops", shape_ops::eval),
        Concat | DepthToSpace | Expand | Pad | Slice | SpaceToDepth | Split | Tile | Transpose | Trilu => ("layout", layout::eval),
        Compress | GatherElements | GatherND | NonZero | OneHot | ScatterElements | ScatterND => {
            ("gather_scatter", gather_scatter::eval)
        }
        ArgMax | ArgMin | CumProd | CumSum | Hardmax | LogSoftmax | ReduceL1 | ReduceL2 | ReduceLogSum | ReduceLogSumExp
        | ReduceMax | ReduceMean | ReduceMin | ReduceProd | ReduceSum | ReduceSumSquare | Softmax | TopK => {
            ("reduce", reduce::eval)
        }
        Gemm | MatMul | MatMulInteger => ("linalg", linalg::eval),
        Conv | ConvTranspose => ("conv", conv::eval),
        AveragePool | GlobalAveragePool | GlobalLpPool | GlobalMaxPool | LpPool | MaxPool => ("pool", pool::eval),
        BatchNormalization | GroupNormalization | InstanceNormalization | LRN | LayerNormalization | LpNormalization
        | MeanVarianceNormalization | RMSNormalization => ("norm", norm::eval),
        DequantizeLinear | QuantizeLinear => ("quant", quant::eval),
        FusedConv | FusedMatMul => ("fused", fused::eval),
        NonMaxSuppression | Unique => ("select", select::eval),
        StringConcat | StringNormalizer | StringSplit => ("strings", strings::eval),
        If | Loop | Scan => return Err(unsupported(a.op, "control flow needs its regions: use eval_graph")),
        AffineGrid | Attention | Bernoulli | BlackmanWindow | CausalConvWithState | CenterCropPad | Col2Im | ConvInteger
        | DFT | DeformConv | Det | DynamicQuantizeLinear | Einsum | FusedElementwise | GRU | GridSample | HammingWindow
        | HannWindow | ImageDecoder | LSTM | LinearAttention | MaxRoiPool | MaxUnpool | MelWeightMatrix | Multinomial
        | NegativeLogLikelihoodLoss | QLinearConv | QLinearMatMul | RNN | RandomNormal
        | RandomNormalLike | RandomUniform | RandomUniformLike | RegexFullMatch | Resize | ReverseSequence | RoiAlign
        | RotaryEmbedding | STFT | SoftmaxCrossEntropyLoss | SwiGLU
        | TensorScatter | TfIdfVectorizer => {
            return Err(unsupported(a.op, "the reference evaluator does not implement this op"));
        }
    };
    let outs = family(op, &a).ok_or_else(|| misrouted(&a, name))??;
    enough(&a, outs.len())?;
    outs.into_iter().take(num_outputs).map(|o| o.into_tensor(a.op)).collect()
}

/// The first `num_outputs` of tensors a module produced directly.
fn tensors(a: &Args, outs: Result<Vec<Tensor>>) -> Result<Vec<Tensor>> {
    let mut outs = outs?;
    enough(a, outs.len())?;
    outs.truncate(a.num_outputs);
    Ok(outs)
}

/// An error unless a module's `produced` outputs cover the ones requested.
fn enough(a: &Args, produced: usize) -> Result<()> {
    if produced < a.num_outputs {
        return Err(unsupported(a.op, format!("{} outputs requested, the evaluator produces {produced}", a.num_outputs)));
    }
    Ok(())
}

/// The error for a module that was handed an op it does not evaluate: the match above is wrong.
fn misrouted(a: &Args, family: &str) -> EvalError {
    EvalError::Internal { op: a.op, reason: format!("kiln bug: family {family} got op {}", a.op) }
}

#[cfg(test)]
mod tests {
    use kiln_tir::OpKind;

    use crate::{EvalError, eval_op};

    /// Modules look at the op before its inputs, so evaluating without inputs fails on a
    /// missing input (or an op the evaluator refuses) unless the op was routed to a module
    /// that does not know it.
    #[test]
    fn every_op_reaches_a_module_that_knows_it() {
        for &kind in OpKind::ALL {
            if let Err(EvalError::Internal { reason, .. }) = eval_op(&kind.default_op(), &[], 1) {
                assert!(!reason.starts_with("kiln bug"), "{}: {reason}", kind.text_name());
            }
        }
    }
}
