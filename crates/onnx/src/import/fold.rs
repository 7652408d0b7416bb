//! Import-time folding of shape computations.
//!
//! Exporters compute shapes at run time (`Shape → Gather → Concat → Reshape`), and function
//! bodies are written that way too. kiln compiles for static shapes, so when every input of
//! such a node is known — a constant, or the static shape of a tensor for `Shape`/`Size` — the
//! importer computes its small integer result with the reference evaluator and records a
//! constant instead of the node. Float arithmetic and large tensors are left to the optimizer.

use kiln_tir::{DType, Graph, Op, OpKind, Tensor, TensorType, ValueId};

/// Ops that appear in shape arithmetic.
const SHAPE_OPS: &[OpKind] = &[
    OpKind::Shape,
    OpKind::Size,
    OpKind::Gather,
    OpKind::Concat,
    OpKind::Slice,
    OpKind::Squeeze,
    OpKind::Unsqueeze,
    OpKind::Reshape,
    OpKind::Flatten,
    OpKind::Identity,
    OpKind::Cast,
    OpKind::Add,
    OpKind::Sub,
    OpKind::Mul,
    OpKind::Div,
    OpKind::Mod,
    OpKind::Neg,
    OpKind::Abs,
    OpKind::Min,
    OpKind::Max,
    OpKind::ConstantOfShape,
    OpKind::Range,
    OpKind::Expand,
    OpKind::Equal,
    OpKind::Less,
    OpKind::Greater,
    OpKind::Not,
    OpKind::And,
    OpKind::Or,
    OpKind::Where,
    OpKind::ReduceProd,
    OpKind::ReduceSum,
    OpKind::ReduceMax,
    OpKind::ReduceMin,
];

/// Results larger than this stay nodes: they are data, not shapes.
const MAX_ELEMENTS: u64 = 1024;

fn is_shape_dtype(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32 | DType::Bool)
}

/// The node's outputs as constants, if it is a shape computation whose inputs are all known.
pub fn fold(g: &Graph, op: &Op, inputs: &[Option<ValueId>], outputs: &[TensorType]) -> Option<Vec<Tensor>> {
    let kind = op.kind();
    if !SHAPE_OPS.contains(&kind) || outputs.is_empty() {
        return None;
    }
    for t in outputs {
        if !is_shape_dtype(t.dtype) || t.numel()? > MAX_ELEMENTS {
            return None;
        }
    }
    // Shape and Size only need the input's static type.
    if matches!(kind, OpKind::Shape | OpKind::Size) {
        let dims = g.ty((*inputs.first()?)?).known_dims()?;
        let out = &outputs[0];
        let values: Vec<i64> = match op {
            Op::Size(_) => vec![i64::try_from(dims.iter().product::<u64>()).ok()?],
            Op::Shape(s) => {
                let rank = dims.len() as i64;
                let clamp = |i: i64| (if i < 0 { i + rank } else { i }).clamp(0, rank) as usize;
                let start = clamp(s.start);
                let end = clamp(s.end.unwrap_or(rank));
                dims.get(start..end.max(start))?.iter().map(|&d| i64::try_from(d).ok()).collect::<Option<_>>()?
            }
            _ => return None,
        };
        return Some(vec![Tensor::from_i64s(&out.known_dims()?, &values)]);
    }
    let mut tensors = Vec::with_capacity(inputs.len());
    for input in inputs {
        match input {
            None => tensors.push(None),
            Some(v) => {
                let t = g.const_value(*v)?;
                t.raw()?;
                if t.numel()? > MAX_ELEMENTS {
                    return None;
                }
                tensors.push(Some(t));
            }
        }
    }
    let results = kiln_eval::eval_op(op, &tensors, outputs.len()).ok()?;
    // The evaluator's answer must agree with inference, or the fold is not trusted.
    let agrees = results.len() == outputs.len() && results.iter().zip(outputs).all(|(r, t)| r.ty() == *t);
    agrees.then_some(results)
}
