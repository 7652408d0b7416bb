//! onnxruntime's quantized contrib ops: dequantize, the float op, quantize — how onnxruntime
//! defines them and how kiln's optimizer recognizes QDQ patterns.

use kiln_tir::op::AttrValue;
use kiln_tir::{DType, Tensor, TensorData};

use super::builder::Builder;

/// QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp) and QLinearAveragePool (same
/// inputs, AveragePool's attributes); `channels_last` puts channels on the last axis.
pub(super) fn qlinear_pool(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn qgemm(b: &mut Builder<'_>) -> Result<(), String> {
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
pub(super) fn dynamic_quantize_lstm(b: &mut Builder<'_>) -> Result<(), String> {
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

impl Builder<'_> {
    /// The float value of quantized input `x` with scale input `scale` and optional zero
    /// point input `zero` (per-tensor, or per-channel along axis 1).
    pub(super) fn dequantize(&mut self, x: usize, scale: usize, zero: usize) -> Result<String, String> {
        self.dequantize_axis(x, scale, zero, 1)
    }

    pub(super) fn dequantize_axis(&mut self, x: usize, scale: usize, zero: usize, axis: i64) -> Result<String, String> {
        let mut inputs = vec![self.input(x)?, self.input(scale)?];
        inputs.extend(self.optional(zero));
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        Ok(self.op("DequantizeLinear", &refs, vec![("axis", AttrValue::Int(axis))]))
    }

    /// Quantizes `y` into output 0 with scale input `scale` and zero point input `zero`; an
    /// omitted zero point is 0 of the element type of input `like`.
    pub(super) fn quantize_output(&mut self, y: &str, scale: usize, zero: usize, like: usize) -> Result<(), String> {
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
    pub(super) fn integer_matmul(&mut self, a: &str, b: usize, a_zero: &str, b_zero: Option<&str>, a_scale: &str, b_scale: usize) -> Result<String, String> {
        self.integer_matmul_opt(a, b, Some(a_zero), b_zero, a_scale, b_scale)
    }

    pub(super) fn integer_matmul_opt(&mut self, a: &str, b: usize, a_zero: Option<&str>, b_zero: Option<&str>, a_scale: &str, b_scale: usize) -> Result<String, String> {
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
    pub(super) fn per_gate_column(&mut self, x: &str) -> Result<String, String> {
        if self.rank(x)? == 2 {
            let axes = self.constant(Tensor::from_i64s(&[1], &[1]));
            Ok(self.op("Unsqueeze", &[x, &axes], vec![]))
        } else {
            Ok(x.to_string())
        }
    }
}
