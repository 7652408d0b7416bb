//! onnxruntime's transformer-fusion contrib ops: normalizations with a residual, fused
//! products and convolutions, embeddings and attention.

use kiln_tir::op::AttrValue;
use kiln_tir::{DType, Tensor, TensorData};

use super::builder::Builder;

/// SkipLayerNormalization(input, skip, gamma, beta?, bias?) and its simplified (RMS) form
/// (input, skip, gamma, bias?): the sum input + skip + bias, normalized over the last axis;
/// output 3 is the sum itself.
pub(super) fn skip_norm(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn fused_matmul(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn fused_conv(b: &mut Builder<'_>) -> Result<(), String> {
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

/// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
/// segment_embedding?, gamma, beta?, mask?, position_ids?): the embeddings' sum, layer-normalized;
/// output 1 (mask_index) is each row's count of mask ones, output 2 the sum.
pub(super) fn embed_layer_norm(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn attention(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn multi_head_attention(b: &mut Builder<'_>) -> Result<(), String> {
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

impl Builder<'_> {
    /// `[B, S, heads·d]` to `[B, heads, S, d]`.
    pub(super) fn split_heads(&mut self, x: &str, heads: i64, width: i64) -> Result<String, String> {
        if heads <= 0 || width % heads != 0 {
            return Err(format!("{} with num_heads {heads} over a width of {width}", self.call.op_type));
        }
        let shape = self.constant(Tensor::from_i64s(&[4], &[0, 0, heads, width / heads]));
        let r = self.op("Reshape", &[x, &shape], vec![]);
        Ok(self.op("Transpose", &[&r], vec![("perm", AttrValue::Ints(vec![0, 2, 1, 3]))]))
    }

    /// `[B, heads, S, d]` back to output 0 as `[B, S, width]`.
    pub(super) fn merge_heads(&mut self, x: &str, width: i64) -> Result<(), String> {
        let t = self.op("Transpose", &[x], vec![("perm", AttrValue::Ints(vec![0, 2, 1, 3]))]);
        let shape = self.constant(Tensor::from_i64s(&[3], &[0, 0, width]));
        self.output(0, "Reshape", &[&t, &shape], vec![]);
        Ok(())
    }

    /// softmax(q·kᵀ·scale + mask + bias)·v over `[B, heads, S, d]` operands. `mask` is
    /// onnxruntime's mask_index: `[B]` valid key lengths, `[B, L]` or `[B, S, L]` ones and zeros;
    /// masked keys get `mask_filter_value`. `unidirectional` masks keys after the query.
    pub(super) fn scaled_dot_product(&mut self, q: &str, k: &str, v: &str, head: i64, mask: Option<&str>, bias: Option<&str>) -> Result<String, String> {
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
    pub(super) fn key_mask(&mut self, mask: &str, kt: &str) -> Result<String, String> {
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
}
