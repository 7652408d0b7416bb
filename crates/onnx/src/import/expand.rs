//! ONNX nodes that import as several: onnxruntime's `com.microsoft` contrib ops, which its
//! quantizer and transformer optimizer write into deployed models, and legacy forms with no
//! single-op equivalent in the newest opset.
//!
//! Each expansion is written as default-domain nodes in opset [`OPSET`] over the node's own
//! input and output names, so the generated nodes go through the importer's ordinary path
//! (inference, folding) and the optimizer and kernels serve them like any other. Quantized
//! contrib ops become dequantize → float op → quantize, which is how onnxruntime defines them
//! and how kiln's optimizer already recognizes QDQ patterns.

use kiln_tir::op::AttrValue;
use kiln_tir::{DType, Tensor, TensorData, TensorType};

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

/// SkipLayerNormalization(input, skip, gamma, beta?, bias?) and its simplified (RMS) form
/// (input, skip, gamma, bias?): the sum input + skip + bias, normalized over the last axis;
/// output 3 is the sum itself.
fn skip_norm(b: &mut Builder<'_>) -> Result<(), String> {
    let simplified = b.call.op_type == "SkipSimplifiedLayerNormalization";
    let (x, skip, gamma) = (b.input(0)?, b.input(1)?, b.input(2)?);
    let (beta, bias) = if simplified { (None, b.optional(3)) } else { (b.optional(3), b.optional(4)) };
    let mut sum = b.op("Add", &[&x, &skip], vec![]);
    if let Some(bias) = bias {
        sum = b.op("Add", &[&sum, &bias], vec![]);
    }
    let epsilon = AttrValue::Float(b.float("epsilon", 1e-12)?);
    if b.wants(1) || b.wants(2) {
        return Err(format!("{}'s mean and inv_std_var outputs", b.call.op_type));
    }
    if simplified {
        b.output(0, "RMSNormalization", &[&sum, &gamma], vec![("axis", AttrValue::Int(-1)), ("epsilon", epsilon)]);
    } else {
        let mut inputs = vec![sum.clone(), gamma];
        inputs.extend(beta);
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        b.output(0, "LayerNormalization", &refs, vec![("axis", AttrValue::Int(-1)), ("epsilon", epsilon)]);
    }
    if b.wants(3) {
        b.output(3, "Identity", &[&sum], vec![]);
    }
    Ok(())
}

/// FusedMatMul(A, B): alpha · op(A) · op(B), where op transposes the last two axes when
/// `transA`/`transB` is set.
fn fused_matmul(b: &mut Builder<'_>) -> Result<(), String> {
    if b.int("transBatchA", 0)? != 0 || b.int("transBatchB", 0)? != 0 {
        return Err("FusedMatMul with transBatchA or transBatchB".into());
    }
    let mut operands = Vec::new();
    for (i, attr) in [(0, "transA"), (1, "transB")] {
        let x = b.input(i)?;
        operands.push(if b.int(attr, 0)? != 0 { b.transpose_last_two(&x)? } else { x });
    }
    let alpha = b.float("alpha", 1.0)?;
    if alpha == 1.0 {
        b.output(0, "MatMul", &[&operands[0], &operands[1]], vec![]);
    } else {
        let y = b.op("MatMul", &[&operands[0], &operands[1]], vec![]);
        let dtype = b.dtype(&b.input(0)?)?;
        let a = b.scalar(dtype, alpha)?;
        b.output(0, "Mul", &[&y, &a], vec![]);
    }
    Ok(())
}

/// FusedConv(X, W, B?, Z?): Conv, plus Z, then the named activation.
fn fused_conv(b: &mut Builder<'_>) -> Result<(), String> {
    let activation = match b.attr("activation") {
        None => String::new(),
        Some(AttrValue::Str(s)) => s.clone(),
        Some(other) => return Err(format!("FusedConv activation should be a string, found {}", other.kind())),
    };
    let params = match b.attr("activation_params") {
        None => Vec::new(),
        Some(AttrValue::Floats(f)) => f.clone(),
        Some(other) => return Err(format!("FusedConv activation_params should be floats, found {}", other.kind())),
    };
    let conv_attrs: Vec<(&str, AttrValue)> = ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]
        .into_iter()
        .filter_map(|k| b.attr(k).map(|v| (k, v.clone())))
        .collect();
    let mut inputs = vec![b.input(0)?, b.input(1)?];
    inputs.extend(b.optional(2));
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let mut y = b.op("Conv", &refs, conv_attrs);
    if let Some(z) = b.optional(3) {
        y = b.op("Add", &[&y, &z], vec![]);
    }
    let param = |k: usize, what: &str| params.get(k).copied().ok_or_else(|| format!("FusedConv activation {activation} needs activation_params ({what})"));
    match activation.as_str() {
        "" | "Identity" => b.output(0, "Identity", &[&y], vec![]),
        "Relu" | "Sigmoid" | "Tanh" => {
            let op = match activation.as_str() {
                "Relu" => "Relu",
                "Sigmoid" => "Sigmoid",
                _ => "Tanh",
            };
            b.output(0, op, &[&y], vec![]);
        }
        "LeakyRelu" => b.output(0, "LeakyRelu", &[&y], vec![("alpha", AttrValue::Float(param(0, "alpha")?))]),
        "HardSigmoid" => {
            let attrs = vec![("alpha", AttrValue::Float(param(0, "alpha")?)), ("beta", AttrValue::Float(param(1, "beta")?))];
            b.output(0, "HardSigmoid", &[&y], attrs);
        }
        "Clip" => {
            let dtype = b.dtype(&b.input(0)?)?;
            let lo = b.scalar(dtype, param(0, "min")?)?;
            let hi = b.scalar(dtype, param(1, "max")?)?;
            b.output(0, "Clip", &[&y, &lo, &hi], vec![]);
        }
        other => return Err(format!("FusedConv activation {other:?}")),
    }
    Ok(())
}

/// QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp) and QLinearAveragePool (same
/// inputs, AveragePool's attributes); `channels_last` puts channels on the last axis.
fn qlinear_pool(b: &mut Builder<'_>) -> Result<(), String> {
    let channels_last = b.int("channels_last", 0)? != 0;
    let mut x = b.dequantize(0, 1, 2)?;
    let rank = b.rank(&b.input(0)?)? as i64;
    if channels_last {
        let perm: Vec<i64> = std::iter::once(0).chain(std::iter::once(rank - 1)).chain(1..rank - 1).collect();
        x = b.op("Transpose", &[&x], vec![("perm", AttrValue::Ints(perm))]);
    }
    let mut y = if b.call.op_type == "QLinearGlobalAveragePool" {
        b.op("GlobalAveragePool", &[&x], vec![])
    } else {
        let attrs: Vec<(&str, AttrValue)> = ["auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"]
            .into_iter()
            .filter_map(|k| b.attr(k).map(|v| (k, v.clone())))
            .collect();
        b.op("AveragePool", &[&x], attrs)
    };
    if channels_last {
        let perm: Vec<i64> = std::iter::once(0).chain(2..rank).chain(std::iter::once(1)).collect();
        y = b.op("Transpose", &[&y], vec![("perm", AttrValue::Ints(perm))]);
    }
    b.quantize_output(&y, 3, 4, 0)
}

/// QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): Gemm of the dequantized
/// operands plus the int32 bias C at scale a_scale · b_scale; quantized when y_scale is given,
/// float otherwise.
fn qgemm(b: &mut Builder<'_>) -> Result<(), String> {
    let a = b.dequantize(0, 1, 2)?;
    // A per-channel B scale runs along N: axis 0 of a transposed B ([N, K]), else axis 1.
    let b_axis = if b.int("transB", 0)? != 0 { 0 } else { 1 };
    let bq = b.dequantize_axis(3, 4, 5, b_axis)?;
    let mut inputs = vec![a, bq];
    if let Some(c) = b.optional(6) {
        let (a_scale, b_scale) = (b.input(1)?, b.input(4)?);
        let scale = b.op("Mul", &[&a_scale, &b_scale], vec![]);
        let cf = b.op("Cast", &[&c], vec![("to", AttrValue::Int(i64::from(DType::F32.onnx_code())))]);
        inputs.push(b.op("Mul", &[&cf, &scale], vec![]));
    }
    // The bias is in units of alpha · a_scale · b_scale, like the product.
    let alpha = b.float("alpha", 1.0)?;
    let attrs = vec![
        ("alpha", AttrValue::Float(alpha)),
        ("beta", AttrValue::Float(alpha)),
        ("transA", AttrValue::Int(b.int("transA", 0)?)),
        ("transB", AttrValue::Int(b.int("transB", 0)?)),
    ];
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    if b.optional(7).is_some() {
        let y = b.op("Gemm", &refs, attrs);
        b.quantize_output(&y, 7, 8, 0)
    } else {
        b.output(0, "Gemm", &refs, attrs);
        Ok(())
    }
}

/// DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale,
/// W_zero_point, R_scale, R_zero_point): an LSTM whose int8 weights are stored `[directions,
/// input, 4·hidden]` (transposed from ONNX's layout) with per-tensor or per-gate-column scales.
/// kiln runs it as a float LSTM on the dequantized weights; onnxruntime quantizes X and each
/// step's h to uint8 on the fly, so the two differ by about one such step.
fn dynamic_quantize_lstm(b: &mut Builder<'_>) -> Result<(), String> {
    let mut inputs = vec![b.input(0)?];
    for (w, scale, zero) in [(1, 8, 9), (2, 10, 11)] {
        let q = b.input(w)?;
        let to_f32 = AttrValue::Int(i64::from(DType::F32.onnx_code()));
        let qf = b.op("Cast", &[&q], vec![("to", to_f32.clone())]);
        let centered = match b.optional(zero) {
            Some(z) => {
                let z = b.per_gate_column(&z)?;
                let zf = b.op("Cast", &[&z], vec![("to", to_f32)]);
                b.op("Sub", &[&qf, &zf], vec![])
            }
            None => qf,
        };
        let scale = b.input(scale)?;
        let scale = b.per_gate_column(&scale)?;
        let wf = b.op("Mul", &[&centered, &scale], vec![]);
        inputs.push(b.op("Transpose", &[&wf], vec![("perm", AttrValue::Ints(vec![0, 2, 1]))]));
    }
    for k in 3..8 {
        inputs.push(b.optional(k).unwrap_or_default());
    }
    while inputs.last().is_some_and(String::is_empty) {
        inputs.pop();
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attrs: Vec<(&str, AttrValue)> = ["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget", "layout"]
        .into_iter()
        .filter_map(|k| b.attr(k).map(|v| (k, v.clone())))
        .collect();
    let outputs: Vec<String> = (0..3).map(|k| b.call.outputs.get(k).cloned().unwrap_or_default()).collect();
    b.push("LSTM", &refs, attrs, outputs);
    Ok(())
}

/// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
/// segment_embedding?, gamma, beta?, mask?, position_ids?): the embeddings' sum, layer-normalized;
/// output 1 (mask_index) is each row's count of mask ones, output 2 the sum.
fn embed_layer_norm(b: &mut Builder<'_>) -> Result<(), String> {
    let ids = b.input(0)?;
    let word = b.input(2)?;
    let mut sum = b.op("Gather", &[&word, &ids], vec![]);
    let pos_table = b.input(3)?;
    let positions = match b.optional(8) {
        Some(p) => p,
        None => {
            let seq = b.dim(&ids, 1);
            b.range(&seq)
        }
    };
    let pos = b.op("Gather", &[&pos_table, &positions], vec![]);
    sum = b.op("Add", &[&sum, &pos], vec![]);
    if let (Some(seg_ids), Some(seg_table)) = (b.optional(1), b.optional(4)) {
        let seg = b.op("Gather", &[&seg_table, &seg_ids], vec![]);
        sum = b.op("Add", &[&sum, &seg], vec![]);
    }
    let mut inputs = vec![sum.clone(), b.input(5)?];
    inputs.extend(b.optional(6));
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let epsilon = b.float("epsilon", 1e-12)?;
    b.output(0, "LayerNormalization", &refs, vec![("axis", AttrValue::Int(-1)), ("epsilon", AttrValue::Float(epsilon))]);
    if b.wants(1) {
        let int32 = AttrValue::Int(i64::from(DType::I32.onnx_code()));
        match b.optional(7) {
            Some(mask) => {
                let m = b.op("Cast", &[&mask], vec![("to", int32.clone())]);
                let axes = b.constant(Tensor::from_i64s(&[1], &[1]));
                let counts = b.op("ReduceSum", &[&m, &axes], vec![("keepdims", AttrValue::Int(0))]);
                b.output(1, "Identity", &[&counts], vec![]);
            }
            None => {
                let batch = b.op("Shape", &[&ids], vec![("start", AttrValue::Int(0)), ("end", AttrValue::Int(1))]);
                let zero = Tensor { dtype: DType::I32, shape: vec![1], data: TensorData::Raw(vec![0u8; 4].into()) };
                b.output(1, "ConstantOfShape", &[&batch], vec![("value", AttrValue::Tensor(zero))]);
            }
        }
    }
    if b.wants(2) {
        b.output(2, "Identity", &[&sum], vec![]);
    }
    Ok(())
}

/// Attention(input, weights, bias?, mask_index?, past?, attention_bias?): one projection to
/// Q, K and V, multi-head scaled dot-product attention, heads merged back.
fn attention(b: &mut Builder<'_>) -> Result<(), String> {
    if b.optional(4).is_some() || b.wants(1) || b.optional(6).is_some() {
        return Err("Attention with past state (past, present or past_sequence_length)".into());
    }
    let x = b.input(0)?;
    let heads = b.int("num_heads", 0)?;
    let weights = b.input(1)?;
    let total = b.type_of(&weights)?.shape.get(1).and_then(|d| d.known()).ok_or("Attention weights without a static second dim")?;
    let sizes = match b.attr("qkv_hidden_sizes") {
        Some(AttrValue::Ints(v)) if v.len() == 3 => v.clone(),
        Some(_) => return Err("qkv_hidden_sizes should have three values".into()),
        None if total % 3 == 0 => vec![total as i64 / 3; 3],
        None => return Err(format!("Attention weights of width {total} do not split in three")),
    };
    let mut qkv = b.op("MatMul", &[&x, &weights], vec![]);
    if let Some(bias) = b.optional(2) {
        qkv = b.op("Add", &[&qkv, &bias], vec![]);
    }
    let split = b.constant(Tensor::from_i64s(&[3], &sizes));
    let (q, k, v) = (b.tmp(), b.tmp(), b.tmp());
    b.push("Split", &[&qkv, &split], vec![("axis", AttrValue::Int(-1))], vec![q.clone(), k.clone(), v.clone()]);
    let mask = b.optional(3);
    let bias = b.optional(5);
    let (q, k, v) = (b.split_heads(&q, heads, sizes[0])?, b.split_heads(&k, heads, sizes[1])?, b.split_heads(&v, heads, sizes[2])?);
    let ctx = b.scaled_dot_product(&q, &k, &v, sizes[0] / heads.max(1), mask.as_deref(), bias.as_deref())?;
    b.merge_heads(&ctx, sizes[2])
}

/// MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?) with 3-D
/// query, key and value.
fn multi_head_attention(b: &mut Builder<'_>) -> Result<(), String> {
    if b.optional(6).is_some() || b.optional(7).is_some() || b.wants(1) || b.wants(2) {
        return Err("MultiHeadAttention with past or present key and value".into());
    }
    let heads = b.int("num_heads", 0)?;
    let (q, k, v) = (b.input(0)?, b.input(1)?, b.input(2)?);
    for x in [&q, &k, &v] {
        if b.rank(x)? != 3 {
            return Err("MultiHeadAttention with packed or 4-D key and value".into());
        }
    }
    let width = |b: &Builder<'_>, x: &str| -> Result<i64, String> {
        b.type_of(x)?.shape.get(2).and_then(|d| d.known()).map(|d| d as i64).ok_or_else(|| format!("MultiHeadAttention input {x:?} without a static hidden size"))
    };
    let (dq, dk, dv) = (width(b, &q)?, width(b, &k)?, width(b, &v)?);
    let (mut q, mut k, mut v) = (q, k, v);
    if let Some(bias) = b.optional(3) {
        let split = b.constant(Tensor::from_i64s(&[3], &[dq, dk, dv]));
        let (bq, bk, bv) = (b.tmp(), b.tmp(), b.tmp());
        b.push("Split", &[&bias, &split], vec![("axis", AttrValue::Int(0))], vec![bq.clone(), bk.clone(), bv.clone()]);
        q = b.op("Add", &[&q, &bq], vec![]);
        k = b.op("Add", &[&k, &bk], vec![]);
        v = b.op("Add", &[&v, &bv], vec![]);
    }
    let mask = b.optional(4);
    let bias = b.optional(5);
    let (q, k, v) = (b.split_heads(&q, heads, dq)?, b.split_heads(&k, heads, dk)?, b.split_heads(&v, heads, dv)?);
    let ctx = b.scaled_dot_product(&q, &k, &v, dq / heads.max(1), mask.as_deref(), bias.as_deref())?;
    b.merge_heads(&ctx, dv)
}

/// Writes the generated nodes, naming intermediate values after the expanded node.
struct Builder<'a> {
    call: &'a Call<'a>,
    ty: &'a dyn Fn(&str) -> Option<TensorType>,
    nodes: Vec<Node>,
    next: usize,
}

impl Builder<'_> {
    /// A new intermediate value name.
    fn tmp(&mut self) -> String {
        self.next += 1;
        format!("{}/kiln{}.{}", self.call.name, self.call.id, self.next)
    }

    fn push(&mut self, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>, outputs: Vec<String>) {
        self.nodes.push(Node {
            op_type,
            name: format!("{}/{}{}", self.call.name, op_type, self.nodes.len()),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs,
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        });
    }

    /// A node with one new output, whose name it returns.
    fn op(&mut self, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>) -> String {
        let out = self.tmp();
        self.push(op_type, inputs, attrs, vec![out.clone()]);
        out
    }

    /// A node writing the expanded node's output `k`.
    fn output(&mut self, k: usize, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>) {
        let out = self.call.outputs.get(k).cloned().unwrap_or_default();
        if !out.is_empty() {
            self.push(op_type, inputs, attrs, vec![out]);
        }
    }

    /// Whether output `k` is asked for.
    fn wants(&self, k: usize) -> bool {
        self.call.outputs.get(k).is_some_and(|o| !o.is_empty())
    }

    fn constant(&mut self, t: Tensor) -> String {
        let out = self.tmp();
        self.push("Constant", &[], vec![("value", AttrValue::Tensor(t))], vec![out.clone()]);
        out
    }

    /// A scalar constant of float type `dtype`.
    fn scalar(&mut self, dtype: DType, v: f32) -> Result<String, String> {
        let bytes: Vec<u8> = match dtype {
            DType::F32 => v.to_le_bytes().to_vec(),
            DType::F64 => f64::from(v).to_le_bytes().to_vec(),
            other => return Err(format!("{} on a {other} input", self.call.op_type)),
        };
        Ok(self.constant(Tensor { dtype, shape: Vec::new(), data: TensorData::Raw(bytes.into()) }))
    }

    /// Required input `k`.
    fn input(&self, k: usize) -> Result<String, String> {
        self.optional(k).ok_or_else(|| format!("{} without its input {k}", self.call.op_type))
    }

    /// Optional input `k`, if given.
    fn optional(&self, k: usize) -> Option<String> {
        self.call.inputs.get(k).filter(|s| !s.is_empty()).cloned()
    }

    /// Input `x`, plus optional input `bias` when given.
    fn input_plus_bias(&mut self, x: usize, bias: usize) -> Result<String, String> {
        let x = self.input(x)?;
        Ok(match self.optional(bias) {
            Some(bias) => self.op("Add", &[&x, &bias], vec![]),
            None => x,
        })
    }

    fn type_of(&self, name: &str) -> Result<TensorType, String> {
        (self.ty)(name).ok_or_else(|| format!("{} input {name:?} has no known type", self.call.op_type))
    }

    fn rank(&self, name: &str) -> Result<usize, String> {
        Ok(self.type_of(name)?.rank())
    }

    fn dtype(&self, name: &str) -> Result<DType, String> {
        Ok(self.type_of(name)?.dtype)
    }

    fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.call.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(i)) => Ok(*i),
            Some(other) => Err(format!("attribute `{name}` should be an int, found {}", other.kind())),
        }
    }

    fn float(&self, name: &str, default: f32) -> Result<f32, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(f)) => Ok(*f),
            Some(other) => Err(format!("attribute `{name}` should be a float, found {}", other.kind())),
        }
    }

    /// `x` with its last two axes swapped.
    fn transpose_last_two(&mut self, x: &str) -> Result<String, String> {
        let rank = self.rank(x)?;
        if rank < 2 {
            return Err(format!("{} transposes a rank-{rank} input", self.call.op_type));
        }
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(rank - 2, rank - 1);
        Ok(self.op("Transpose", &[x], vec![("perm", AttrValue::Ints(perm))]))
    }

    /// The float value of quantized input `x` with scale input `scale` and optional zero
    /// point input `zero` (per-tensor, or per-channel along axis 1).
    fn dequantize(&mut self, x: usize, scale: usize, zero: usize) -> Result<String, String> {
        self.dequantize_axis(x, scale, zero, 1)
    }

    fn dequantize_axis(&mut self, x: usize, scale: usize, zero: usize, axis: i64) -> Result<String, String> {
        let mut inputs = vec![self.input(x)?, self.input(scale)?];
        inputs.extend(self.optional(zero));
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        Ok(self.op("DequantizeLinear", &refs, vec![("axis", AttrValue::Int(axis))]))
    }

    /// Quantizes `y` into output 0 with scale input `scale` and zero point input `zero`; an
    /// omitted zero point is 0 of the element type of input `like`.
    fn quantize_output(&mut self, y: &str, scale: usize, zero: usize, like: usize) -> Result<(), String> {
        let scale = self.input(scale)?;
        let zero = match self.optional(zero) {
            Some(z) => z,
            None => {
                let dtype = self.dtype(&self.input(like)?)?;
                let bytes = dtype.storage_bytes(1).and_then(|n| usize::try_from(n).ok()).unwrap_or(1);
                let zero = Tensor { dtype, shape: Vec::new(), data: TensorData::Raw(vec![0u8; bytes].into()) };
                self.constant(zero)
            }
        };
        self.output(0, "QuantizeLinear", &[y, &scale, &zero], vec![]);
        Ok(())
    }

    /// The float product of quantized `a` (zero point `a_zero`, scale `a_scale`) and quantized
    /// input `b` (zero point `b_zero`, scale input `b_scale`).
    fn integer_matmul(&mut self, a: &str, b: usize, a_zero: &str, b_zero: Option<&str>, a_scale: &str, b_scale: usize) -> Result<String, String> {
        self.integer_matmul_opt(a, b, Some(a_zero), b_zero, a_scale, b_scale)
    }

    fn integer_matmul_opt(&mut self, a: &str, b: usize, a_zero: Option<&str>, b_zero: Option<&str>, a_scale: &str, b_scale: usize) -> Result<String, String> {
        let bq = self.input(b)?;
        let inputs: Vec<&str> = match (a_zero, b_zero) {
            (_, Some(bz)) => vec![a, &bq, a_zero.unwrap_or(""), bz],
            (Some(az), None) => vec![a, &bq, az],
            (None, None) => vec![a, &bq],
        };
        let acc = self.op("MatMulInteger", &inputs, vec![]);
        let accf = self.op("Cast", &[&acc], vec![("to", AttrValue::Int(i64::from(DType::F32.onnx_code())))]);
        let b_scale = self.input(b_scale)?;
        let scale = self.op("Mul", &[a_scale, &b_scale], vec![]);
        Ok(self.op("Mul", &[&accf, &scale], vec![]))
    }

    /// A scale or zero point of a `[directions, rows, 4·hidden]` weight, shaped to broadcast
    /// against it: a per-tensor `[1]` as it is, a per-column `[directions, 4·hidden]` with a
    /// middle axis.
    fn per_gate_column(&mut self, x: &str) -> Result<String, String> {
        if self.rank(x)? == 2 {
            let axes = self.constant(Tensor::from_i64s(&[1], &[1]));
            Ok(self.op("Unsqueeze", &[x, &axes], vec![]))
        } else {
            Ok(x.to_string())
        }
    }

    /// Dim `axis` of `x` as a scalar int64.
    fn dim(&mut self, x: &str, axis: i64) -> String {
        let d = self.op("Shape", &[x], vec![("start", AttrValue::Int(axis)), ("end", AttrValue::Int(axis + 1))]);
        let axes = self.constant(Tensor::from_i64s(&[1], &[0]));
        self.op("Squeeze", &[&d, &axes], vec![])
    }

    /// `0, 1, ..., n - 1` for a scalar int64 `n`.
    fn range(&mut self, n: &str) -> String {
        let zero = self.constant(Tensor::from_i64s(&[], &[0]));
        let one = self.constant(Tensor::from_i64s(&[], &[1]));
        self.op("Range", &[&zero, n, &one], vec![])
    }

    /// `[B, S, heads·d]` to `[B, heads, S, d]`.
    fn split_heads(&mut self, x: &str, heads: i64, width: i64) -> Result<String, String> {
        if heads <= 0 || width % heads != 0 {
            return Err(format!("{} with num_heads {heads} over a width of {width}", self.call.op_type));
        }
        let shape = self.constant(Tensor::from_i64s(&[4], &[0, 0, heads, width / heads]));
        let r = self.op("Reshape", &[x, &shape], vec![]);
        Ok(self.op("Transpose", &[&r], vec![("perm", AttrValue::Ints(vec![0, 2, 1, 3]))]))
    }

    /// `[B, heads, S, d]` back to output 0 as `[B, S, width]`.
    fn merge_heads(&mut self, x: &str, width: i64) -> Result<(), String> {
        let t = self.op("Transpose", &[x], vec![("perm", AttrValue::Ints(vec![0, 2, 1, 3]))]);
        let shape = self.constant(Tensor::from_i64s(&[3], &[0, 0, width]));
        self.output(0, "Reshape", &[&t, &shape], vec![]);
        Ok(())
    }

    /// softmax(q·kᵀ·scale + mask + bias)·v over `[B, heads, S, d]` operands. `mask` is
    /// onnxruntime's mask_index: `[B]` valid key lengths, `[B, L]` or `[B, S, L]` ones and zeros;
    /// masked keys get `mask_filter_value`. `unidirectional` masks keys after the query.
    fn scaled_dot_product(&mut self, q: &str, k: &str, v: &str, head: i64, mask: Option<&str>, bias: Option<&str>) -> Result<String, String> {
        let kt = self.op("Transpose", &[k], vec![("perm", AttrValue::Ints(vec![0, 1, 3, 2]))]);
        let scores = self.op("MatMul", &[q, &kt], vec![]);
        let scale = self.float("scale", 0.0)?;
        let scale = if scale == 0.0 { 1.0 / (head.max(1) as f32).sqrt() } else { scale };
        let s = self.scalar(DType::F32, scale)?;
        let mut scores = self.op("Mul", &[&scores, &s], vec![]);
        let filter = self.float("mask_filter_value", -10000.0)?;
        if let Some(mask) = mask {
            let m = self.key_mask(mask, &kt)?;
            let keep = self.op("Cast", &[&m], vec![("to", AttrValue::Int(i64::from(DType::F32.onnx_code())))]);
            let one = self.scalar(DType::F32, 1.0)?;
            let dropped = self.op("Sub", &[&one, &keep], vec![]);
            let f = self.scalar(DType::F32, filter)?;
            let add = self.op("Mul", &[&dropped, &f], vec![]);
            scores = self.op("Add", &[&scores, &add], vec![]);
        }
        if self.int("unidirectional", 0)? != 0 {
            // Ones above the diagonal of a [S, L] matrix mark the future keys.
            let rows = self.op("Shape", &[&scores], vec![("start", AttrValue::Int(2))]);
            let one = Tensor::from_f32s(&[1], &[1.0]);
            let ones = self.op("ConstantOfShape", &[&rows], vec![("value", AttrValue::Tensor(one))]);
            let shift = self.constant(Tensor::from_i64s(&[], &[1]));
            let future = self.op("Trilu", &[&ones, &shift], vec![("upper", AttrValue::Int(1))]);
            let f = self.scalar(DType::F32, filter)?;
            let add = self.op("Mul", &[&future, &f], vec![]);
            scores = self.op("Add", &[&scores, &add], vec![]);
        }
        if let Some(bias) = bias {
            scores = self.op("Add", &[&scores, bias], vec![]);
        }
        let probs = self.op("Softmax", &[&scores], vec![("axis", AttrValue::Int(-1))]);
        Ok(self.op("MatMul", &[&probs, v], vec![]))
    }

    /// A mask_index as a bool-like tensor that broadcasts against `[B, heads, S, L]` scores;
    /// `kt` is the transposed keys `[B, heads, d, L]`.
    fn key_mask(&mut self, mask: &str, kt: &str) -> Result<String, String> {
        match self.rank(mask)? {
            1 => {
                // Valid lengths: key j is kept when j < length[b].
                let len = self.dim(kt, 3);
                let j = self.range(&len);
                let l64 = self.op("Cast", &[mask], vec![("to", AttrValue::Int(i64::from(DType::I64.onnx_code())))]);
                let axes = self.constant(Tensor::from_i64s(&[3], &[1, 2, 3]));
                let l = self.op("Unsqueeze", &[&l64, &axes], vec![]);
                Ok(self.op("Less", &[&j, &l], vec![]))
            }
            2 => {
                let axes = self.constant(Tensor::from_i64s(&[2], &[1, 2]));
                Ok(self.op("Unsqueeze", &[mask, &axes], vec![]))
            }
            3 => {
                let axes = self.constant(Tensor::from_i64s(&[1], &[1]));
                Ok(self.op("Unsqueeze", &[mask, &axes], vec![]))
            }
            r => Err(format!("{} with a rank-{r} mask_index", self.call.op_type)),
        }
    }

    /// Output 0 is `y` plus optional input `bias`.
    fn finish_bias(&mut self, y: &str, bias: usize) -> Result<(), String> {
        match self.optional(bias) {
            Some(bias) => self.output(0, "Add", &[y, &bias], vec![]),
            None => self.output(0, "Identity", &[y], vec![]),
        }
        Ok(())
    }
}
