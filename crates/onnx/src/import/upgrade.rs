//! Opset upgrades: older ONNX forms of an op rewritten into the newest form, which is the
//! only one the tensor IR knows.
//!
//! The common change is an attribute that became an input (axes, pads, split, starts/ends,
//! min/max, k, ratio, shape, scales): the attribute's value becomes a constant input. Legacy
//! attributes with no effect on inference (`consumed_inputs`, `is_test`, `broadcast=1`) are
//! dropped. Semantics that cannot be expressed in the new form are reported as unsupported.

use std::collections::HashMap;

use kiln_tir::op::AttrValue;
use kiln_tir::{DType, OpKind, Tensor, TensorType, ValueId};

/// A node on its way to becoming an op: kind, untyped attributes and inputs.
pub struct Pending {
    /// The op kind (an upgrade may change it, e.g. Upsample → Resize).
    pub kind: OpKind,
    /// Attributes by name.
    pub attrs: Vec<(String, AttrValue)>,
    /// Inputs by position.
    pub inputs: Vec<Option<ValueId>>,
    /// Number of outputs the node declares.
    pub num_outputs: usize,
}

/// The op kind for an ONNX op type, including the deprecated types kiln maps to newer ops.
pub fn kind_of(op_type: &str, kinds: &HashMap<&'static str, OpKind>) -> Option<OpKind> {
    match op_type {
        "Upsample" => Some(OpKind::Resize),
        "Scatter" => Some(OpKind::ScatterElements),
        _ => kinds.get(op_type).copied(),
    }
}

impl Pending {
    fn take(&mut self, name: &str) -> Option<AttrValue> {
        let i = self.attrs.iter().position(|(k, _)| k == name)?;
        Some(self.attrs.remove(i).1)
    }

    fn has(&self, name: &str) -> bool {
        self.attrs.iter().any(|(k, _)| k == name)
    }

    fn set(&mut self, name: &str, v: AttrValue) {
        self.take(name);
        self.attrs.push((name.to_string(), v));
    }

    /// Places `v` at input position `pos`, padding with omitted inputs.
    fn set_input(&mut self, pos: usize, v: Option<ValueId>) {
        if self.inputs.len() <= pos {
            self.inputs.resize(pos + 1, None);
        }
        self.inputs[pos] = v;
    }
}

fn ints_tensor(v: &[i64]) -> Tensor {
    Tensor::from_i64s(&[v.len() as u64], v)
}

fn ints_of(v: AttrValue, name: &str) -> Result<Vec<i64>, String> {
    match v {
        AttrValue::Ints(i) => Ok(i),
        AttrValue::Int(i) => Ok(vec![i]),
        other => Err(format!("legacy attribute `{name}` should be ints, found {}", other.kind())),
    }
}

fn float_of(v: AttrValue, name: &str) -> Result<f32, String> {
    match v {
        AttrValue::Float(f) => Ok(f),
        AttrValue::Int(i) => Ok(i as f32),
        other => Err(format!("legacy attribute `{name}` should be a float, found {}", other.kind())),
    }
}

/// A scalar constant of `dtype` holding `value`, for legacy float attributes that became inputs.
fn scalar_like(dtype: DType, value: f32) -> Result<Tensor, String> {
    let bytes: Vec<u8> = match dtype {
        DType::F32 => value.to_le_bytes().to_vec(),
        DType::F64 => f64::from(value).to_le_bytes().to_vec(),
        other => return Err(format!("legacy float attribute on a {other} input")),
    };
    Ok(Tensor { dtype, shape: Vec::new(), data: kiln_tir::TensorData::Raw(bytes.into()) })
}

const REDUCE_OPS: &[OpKind] = &[
    OpKind::ReduceL1,
    OpKind::ReduceL2,
    OpKind::ReduceLogSum,
    OpKind::ReduceLogSumExp,
    OpKind::ReduceMax,
    OpKind::ReduceMean,
    OpKind::ReduceMin,
    OpKind::ReduceProd,
    OpKind::ReduceSumSquare,
];

/// Rewrites `n`, written against default-domain opset `version`, into the newest form.
/// `input_types` are the types of `n`'s inputs; `new_const` adds a constant and returns it.
pub fn upgrade(op_type: &str, version: i64, n: &mut Pending, input_types: &[Option<TensorType>], new_const: &mut dyn FnMut(Tensor) -> ValueId) -> Result<(), String> {
    // Attributes that older opsets carried and that change nothing today.
    if version < 7 {
        n.take("consumed_inputs");
        n.take("is_test");
        if let Some(AttrValue::Int(b)) = n.take("broadcast") {
            let _ = b;
        }
        if n.has("axis") && matches!(n.kind, OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Pow | OpKind::And | OpKind::Or | OpKind::Xor | OpKind::Equal | OpKind::Greater | OpKind::Less) {
            return Err("legacy broadcasting with `axis` (opset < 7)".into());
        }
    }
    let input_dtype = |i: usize| input_types.get(i).and_then(|t| t.as_ref()).map(|t| t.dtype);
    let mut attr_to_input = |n: &mut Pending, name: &str, pos: usize| -> Result<(), String> {
        if let Some(v) = n.take(name) {
            let t = ints_tensor(&ints_of(v, name)?);
            let c = new_const(t);
            n.set_input(pos, Some(c));
        }
        Ok(())
    };
    match n.kind {
        k if REDUCE_OPS.contains(&k) && version < 18 => attr_to_input(n, "axes", 1)?,
        OpKind::ReduceSum if version < 13 => attr_to_input(n, "axes", 1)?,
        OpKind::Squeeze | OpKind::Unsqueeze if version < 13 => attr_to_input(n, "axes", 1)?,
        OpKind::Reshape if version < 5 => attr_to_input(n, "shape", 1)?,
        OpKind::TopK if version < 10 => {
            if let Some(v) = n.take("k") {
                let k = ints_of(v, "k")?;
                let c = new_const(ints_tensor(&k));
                n.set_input(1, Some(c));
            }
        }
        OpKind::Slice if version < 10 => {
            attr_to_input(n, "starts", 1)?;
            attr_to_input(n, "ends", 2)?;
            attr_to_input(n, "axes", 3)?;
        }
        OpKind::Split => {
            if version < 13 {
                attr_to_input(n, "split", 1)?;
            }
            // Before opset 18 an unsized split divided the input evenly among the outputs.
            let sized = n.inputs.get(1).is_some_and(Option::is_some);
            if version < 18 && !sized && !n.has("num_outputs") {
                n.set("num_outputs", AttrValue::Int(n.num_outputs as i64));
            }
        }
        OpKind::Pad if version < 11 => {
            let pads = n.take("pads").or_else(|| n.take("paddings"));
            if let Some(p) = pads {
                let c = new_const(ints_tensor(&ints_of(p, "pads")?));
                n.set_input(1, Some(c));
            }
            if let Some(v) = n.take("value") {
                let dtype = input_dtype(0).ok_or("Pad without an input type")?;
                let c = new_const(scalar_like(dtype, float_of(v, "value")?)?);
                n.set_input(2, Some(c));
            }
        }
        OpKind::Clip if version < 11 => {
            let dtype = input_dtype(0).ok_or("Clip without an input type")?;
            for (name, pos) in [("min", 1), ("max", 2)] {
                if let Some(v) = n.take(name) {
                    let c = new_const(scalar_like(dtype, float_of(v, name)?)?);
                    n.set_input(pos, Some(c));
                }
            }
        }
        OpKind::Dropout if version < 12 => {
            if let Some(v) = n.take("ratio") {
                let dtype = input_dtype(0).ok_or("Dropout without an input type")?;
                let c = new_const(scalar_like(dtype, float_of(v, "ratio")?)?);
                n.set_input(1, Some(c));
            }
        }
        OpKind::BatchNormalization if version < 14 => {
            if let Some(AttrValue::Int(s)) = n.take("spatial") {
                if s != 1 {
                    return Err("BatchNormalization with spatial=0".into());
                }
            }
            if n.num_outputs > 1 {
                return Err("BatchNormalization training outputs before opset 14".into());
            }
        }
        OpKind::Softmax | OpKind::LogSoftmax | OpKind::Hardmax if version < 13 => {
            // Before opset 13 these flattened the input to 2-D around `axis` (default 1); that
            // equals the new per-axis form only when `axis` is the last axis.
            let rank = input_types.first().and_then(|t| t.as_ref()).map(|t| t.rank() as i64).ok_or("no input type")?;
            let axis = match n.take("axis") {
                Some(AttrValue::Int(a)) => a,
                None => 1,
                Some(other) => return Err(format!("axis should be an int, found {}", other.kind())),
            };
            let axis = if axis < 0 { axis + rank } else { axis };
            if axis != rank - 1 && rank > 0 {
                return Err(format!("{op_type} before opset 13 over axes {axis}.. of a rank-{rank} input (2-D coercion)"));
            }
            n.set("axis", AttrValue::Int(-1));
        }
        OpKind::Concat if version < 4 && !n.has("axis") => n.set("axis", AttrValue::Int(1)),
        OpKind::Resize if op_type == "Upsample" => {
            let mode = match n.take("mode") {
                Some(AttrValue::Str(m)) if m == "bilinear" || m == "linear" => "linear",
                Some(AttrValue::Str(m)) if m == "nearest" => "nearest",
                None => "nearest",
                Some(other) => return Err(format!("Upsample mode {other:?}")),
            };
            if let Some(s) = n.take("scales") {
                let AttrValue::Floats(scales) = s else { return Err("Upsample scales should be floats".into()) };
                let c = new_const(Tensor::from_f32s(&[scales.len() as u64], &scales));
                n.set_input(1, Some(c));
            }
            let scales = n.inputs.get(1).copied().flatten();
            n.inputs.truncate(1);
            n.set_input(2, scales);
            n.set("mode", AttrValue::Str(mode.into()));
            n.set("coordinate_transformation_mode", AttrValue::Str("asymmetric".into()));
            n.set("nearest_mode", AttrValue::Str("floor".into()));
        }
        OpKind::Resize if version < 11 => {
            // Resize-10 took (X, scales), used asymmetric coordinates and, like Upsample, took
            // the nearest pixel by truncating (onnxruntime's reading; when shrinking it rounds
            // up instead, which the newest form cannot say).
            let scales = n.inputs.get(1).copied().flatten();
            n.inputs.truncate(1);
            n.set_input(2, scales);
            n.set("coordinate_transformation_mode", AttrValue::Str("asymmetric".into()));
            n.set("nearest_mode", AttrValue::Str("floor".into()));
        }
        OpKind::RoiAlign if version < 16 && !n.has("coordinate_transformation_mode") => {
            n.set("coordinate_transformation_mode", AttrValue::Str("output_half_pixel".into()));
        }
        OpKind::DFT if version < 20 => {
            let axis = match n.take("axis") {
                Some(AttrValue::Int(a)) => a,
                None => 1,
                Some(other) => return Err(format!("axis should be an int, found {}", other.kind())),
            };
            let c = new_const(Tensor::from_i64s(&[], &[axis]));
            n.set_input(2, Some(c));
        }
        OpKind::GroupNormalization if version < 21 => {
            return Err("GroupNormalization before opset 21 (per-group scale and bias)".into());
        }
        OpKind::Scan if version < 9 => return Err("Scan before opset 9 (batched form)".into()),
        _ => {}
    }
    Ok(())
}
