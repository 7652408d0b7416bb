//! ONNX nodes that import as several: onnxruntime's `com.microsoft` contrib ops, which its
//! quantizer and transformer optimizer write into deployed models, and legacy forms with no
//! single-op equivalent in the newest opset.
//!
//! Each expansion is written as default-domain nodes in opset [`OPSET`] over the node's own
//! input and output names, so the generated nodes go through the importer's ordinary path
//! (inference, folding) and the optimizer and kernels serve them like any other. Quantized
//! contrib ops become dequantize → float op → quantize, which is how onnxruntime defines them
//! and how kiln's optimizer already recognizes QDQ patterns.

mod builder;
mod quant;
mod transformer;

use kiln_tir::op::AttrValue;
use kiln_tir::TensorType;

use builder::Builder;
use quant::{dynamic_quantize_lstm, qgemm, qlinear_pool};
use transformer::{attention, embed_layer_norm, fused_conv, fused_matmul, multi_head_attention, skip_norm};

/// The opset the generated nodes are written in.
pub const OPSET: i64 = 23;

/// The node being imported, as the model wrote it.
pub struct Call<'a> {
    /// Its op type.
    pub op_type: &'a str,
    /// Its domain (`""` for the default domain).
    pub domain: &'a str,
    /// The model's default-domain opset version.
    pub version: i64,
    /// The node's name.
    pub name: &'a str,
    /// A number no other expansion of this import has, for naming intermediate values.
    pub id: u32,
    /// Input names (`""` for an omitted optional input).
    pub inputs: &'a [String],
    /// Output names (`""` for an output nobody asked for).
    pub outputs: &'a [String],
    /// Attributes.
    pub attrs: &'a [(String, AttrValue)],
}

/// One generated node, in opset [`OPSET`]. A `Constant` carries its tensor as attribute `value`.
pub struct Node {
    /// The default-domain op type.
    pub op_type: &'static str,
    /// A name derived from the expanded node's.
    pub name: String,
    /// Input names.
    pub inputs: Vec<String>,
    /// Output names.
    pub outputs: Vec<String>,
    /// Attributes.
    pub attrs: Vec<(String, AttrValue)>,
}

/// The nodes `call` imports as, `None` when it imports as itself, or an error saying what is
/// unsupported. `ty` gives the type of a value in scope by name.
pub fn expand(call: &Call<'_>, ty: &dyn Fn(&str) -> Option<TensorType>) -> Result<Option<Vec<Node>>, String> {
    let mut b = Builder { call, ty, nodes: Vec::new(), next: 0 };
    let done = match call.domain {
        "com.microsoft" => contrib(&mut b)?,
        "" => legacy(&mut b)?,
        _ => false,
    };
    Ok(done.then_some(b.nodes))
}

/// Legacy default-domain forms, and the one contrib op onnxruntime registers in the default
/// domain.
fn legacy(b: &mut Builder<'_>) -> Result<bool, String> {
    match b.call.op_type {
        "SimplifiedLayerNormalization" => contrib(b),
        // Before opset 13 these flattened the input to 2-D at `axis` (default 1) and normalized
        // each row; unless `axis` is the last axis (which upgrade rewrites in place) that is
        // Flatten → op over the last axis → Reshape back.
        op @ ("Softmax" | "LogSoftmax" | "Hardmax") if b.call.version < 13 => {
            let x = b.input(0)?;
            let rank = b.rank(&x)? as i64;
            let axis = b.int("axis", 1)?;
            let axis = if axis < 0 { axis + rank } else { axis };
            if axis == rank - 1 || rank == 0 {
                return Ok(false);
            }
            let shape = b.op("Shape", &[&x], vec![]);
            let flat = b.op("Flatten", &[&x], vec![("axis", AttrValue::Int(axis))]);
            let op = if op == "Softmax" { "Softmax" } else if op == "LogSoftmax" { "LogSoftmax" } else { "Hardmax" };
            let y = b.op(op, &[&flat], vec![("axis", AttrValue::Int(-1))]);
            b.output(0, "Reshape", &[&y, &shape], vec![]);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// onnxruntime's contrib ops.
fn contrib(b: &mut Builder<'_>) -> Result<bool, String> {
    match b.call.op_type {
        "Gelu" => {
            let x = b.input(0)?;
            b.output(0, "Gelu", &[&x], vec![]);
        }
        "FastGelu" => {
            let x = b.input_plus_bias(0, 1)?;
            b.output(0, "Gelu", &[&x], vec![("approximate", AttrValue::Str("tanh".into()))]);
        }
        "BiasGelu" => {
            let x = b.input_plus_bias(0, 1)?;
            b.output(0, "Gelu", &[&x], vec![]);
        }
        "QuickGelu" => {
            let x = b.input(0)?;
            let alpha = b.float("alpha", 1.702)?;
            let dtype = b.dtype(&x)?;
            let a = b.scalar(dtype, alpha)?;
            let ax = b.op("Mul", &[&x, &a], vec![]);
            let s = b.op("Sigmoid", &[&ax], vec![]);
            b.output(0, "Mul", &[&x, &s], vec![]);
        }
        "BiasAdd" => {
            let x = b.input_plus_bias(0, 1)?;
            let skip = b.input(2)?;
            b.output(0, "Add", &[&x, &skip], vec![]);
        }
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => skip_norm(b)?,
        "SimplifiedLayerNormalization" => {
            if b.wants(1) {
                return Err("SimplifiedLayerNormalization's inv_std_var output".into());
            }
            let (x, scale) = (b.input(0)?, b.input(1)?);
            let attrs = vec![
                ("axis", AttrValue::Int(b.int("axis", -1)?)),
                ("epsilon", AttrValue::Float(b.float("epsilon", 1e-5)?)),
            ];
            b.output(0, "RMSNormalization", &[&x, &scale], attrs);
        }
        "FusedMatMul" => fused_matmul(b)?,
        "FusedConv" => fused_conv(b)?,
        "QLinearAdd" | "QLinearMul" => {
            let a = b.dequantize(0, 1, 2)?;
            let c = b.dequantize(3, 4, 5)?;
            let op = if b.call.op_type == "QLinearAdd" { "Add" } else { "Mul" };
            let y = b.op(op, &[&a, &c], vec![]);
            b.quantize_output(&y, 6, 7, 0)?;
        }
        "QLinearSigmoid" | "QLinearLeakyRelu" => {
            let x = b.dequantize(0, 1, 2)?;
            let y = if b.call.op_type == "QLinearSigmoid" {
                b.op("Sigmoid", &[&x], vec![])
            } else {
                let alpha = b.float("alpha", 0.01)?;
                b.op("LeakyRelu", &[&x], vec![("alpha", AttrValue::Float(alpha))])
            };
            b.quantize_output(&y, 3, 4, 0)?;
        }
        "QLinearConcat" => {
            let n = b.call.inputs.len();
            if n < 5 || (n - 2) % 3 != 0 {
                return Err(format!("QLinearConcat with {n} inputs (expected 2 + 3 per concatenated tensor)"));
            }
            let mut parts = Vec::new();
            for k in 0..(n - 2) / 3 {
                parts.push(b.dequantize(2 + 3 * k, 3 + 3 * k, 4 + 3 * k)?);
            }
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let axis = b.int("axis", 0)?;
            let y = b.op("Concat", &refs, vec![("axis", AttrValue::Int(axis))]);
            b.quantize_output(&y, 0, 1, 2)?;
        }
        "QLinearGlobalAveragePool" | "QLinearAveragePool" => qlinear_pool(b)?,
        "QGemm" => qgemm(b)?,
        "DynamicQuantizeMatMul" => {
            let a = b.input(0)?;
            let (q, scale, zero) = (b.tmp(), b.tmp(), b.tmp());
            b.push("DynamicQuantizeLinear", &[&a], vec![], vec![q.clone(), scale.clone(), zero.clone()]);
            let y = b.integer_matmul(&q, 1, &zero, b.optional(3).as_deref(), &scale, 2)?;
            b.finish_bias(&y, 4)?;
        }
        "MatMulIntegerToFloat" => {
            let a = b.input(0)?;
            let a_zero = b.optional(4);
            let a_scale = b.input(2)?;
            let y = b.integer_matmul_opt(&a, 1, a_zero.as_deref(), b.optional(5).as_deref(), &a_scale, 3)?;
            b.finish_bias(&y, 6)?;
        }
        "EmbedLayerNormalization" => embed_layer_norm(b)?,
        "DynamicQuantizeLSTM" => dynamic_quantize_lstm(b)?,
        "Attention" => attention(b)?,
        "MultiHeadAttention" => multi_head_attention(b)?,
        "RotaryEmbedding" => {
            let (x, pos, cos, sin) = (b.input(0)?, b.input(1)?, b.input(2)?, b.input(3)?);
            if b.rank(&pos)? != 2 {
                return Err("RotaryEmbedding with position_ids of rank 1 (an offset)".into());
            }
            let mut attrs = vec![("interleaved", AttrValue::Int(b.int("interleaved", 0)?)), ("rotary_embedding_dim", AttrValue::Int(b.int("rotary_embedding_dim", 0)?))];
            if let Some(n) = b.attr("num_heads") {
                attrs.push(("num_heads", n.clone()));
            }
            if b.float("scale", 1.0)? != 1.0 || b.int("is_packed_batching", 0)? != 0 {
                return Err("RotaryEmbedding with scale or packed batching".into());
            }
            b.output(0, "RotaryEmbedding", &[&x, &cos, &sin, &pos], attrs);
        }
        other => return Err(format!("com.microsoft operator {other} (kiln imports onnxruntime's quantization and transformer-fusion contrib ops; this one is not among them yet)")),
    }
    Ok(true)
}
