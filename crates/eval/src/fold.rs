//! Folding of shape computations.
//!
//! Exporters compute shapes at run time (`Shape → Gather → Concat → Reshape`), and function
//! bodies are written that way too. kiln compiles for static shapes, so when every input of
//! such a node is known — a constant, or the static shape of a tensor for `Shape`/`Size` — its
//! small result is computed with the reference evaluator and the node becomes a constant
//! (float results too: exporters size resized images as `floor(float(H) * scale)`). The
//! importer folds as it goes; [`fold_graph`] folds again after input shapes or values are
//! bound. Large tensors are left to the optimizer.

use kiln_tir::infer::{infer_op, InferInput, RegionSig};
use kiln_tir::{DType, Dim, Graph, NodeId, Op, OpKind, Tensor, TensorType, ValueDef, ValueId};

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
    // Exporters size resized images in floats: Cast, Mul by the scale, Floor, Cast back;
    // torchvision's transform takes `min(size / min(h, w), max_size / max(h, w))` through
    // Reciprocal; anchor and box arithmetic uses the rest.
    OpKind::Floor,
    OpKind::Ceil,
    OpKind::Round,
    OpKind::Reciprocal,
    OpKind::Sqrt,
    OpKind::Pow,
    OpKind::Exp,
    OpKind::Log,
    OpKind::Sign,
    OpKind::Clip,
    OpKind::LessOrEqual,
    OpKind::GreaterOrEqual,
    OpKind::Xor,
    OpKind::Tile,
    OpKind::Transpose,
    OpKind::Split,
    OpKind::ReduceMean,
    OpKind::ScatterND,
    OpKind::ScatterElements,
    OpKind::GatherElements,
    OpKind::GatherND,
    OpKind::ArgMax,
    OpKind::ArgMin,
    OpKind::CumSum,
    OpKind::NonZero,
    OpKind::Trilu,
];

/// Results larger than this stay nodes: they are data, not shapes.
const MAX_ELEMENTS: u64 = 1024;

fn is_shape_dtype(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32 | DType::Bool | DType::F32 | DType::F64)
}

/// The node's outputs as constants, if it is a shape computation whose inputs are all known.
pub fn fold_node(g: &Graph, op: &Op, inputs: &[Option<ValueId>], outputs: &[TensorType]) -> Option<Vec<Tensor>> {
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
            Op::Size(_) => vec![i64::try_from(dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?).ok()?],
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
    let results = crate::eval_op(op, &tensors, outputs.len()).ok()?;
    // The evaluator's answer must agree with inference, or the fold is not trusted.
    let agrees = results.len() == outputs.len() && results.iter().zip(outputs).all(|(r, t)| r.ty() == *t);
    agrees.then_some(results)
}

/// Re-infers the top region's nodes in order and folds every shape computation whose inputs
/// have become known, and replaces every `If` whose condition has by its branch; returns how
/// many nodes were folded. Folded nodes' outputs become constants in place (their ids do not
/// change) and the nodes leave the region.
pub fn fold_graph(g: &mut Graph) -> usize {
    let mut folded = 0;
    let mut kept: Vec<NodeId> = Vec::with_capacity(g.body.nodes.len());
    let mut fresh_count = 0u32;
    let mut queue: std::collections::VecDeque<NodeId> = g.body.nodes.iter().copied().collect();
    while let Some(n) = queue.pop_front() {
        let node = g.node(n).clone();
        if let Some(branch) = constant_branch(g, &node) {
            let inlined = inline_branch(g, n, branch);
            for id in inlined.into_iter().rev() {
                queue.push_front(id);
            }
            folded += 1;
            continue;
        }
        let types = {
            let inputs: Vec<Option<InferInput<'_>>> = node.inputs.iter().map(|i| i.map(|v| InferInput { ty: g.ty(v), value: g.const_value(v) })).collect();
            let regions: Vec<RegionSig> = node
                .regions
                .iter()
                .map(|r| RegionSig { params: r.params.iter().map(|&p| g.ty(p).clone()).collect(), results: r.results.iter().map(|&p| g.ty(p).clone()).collect() })
                .collect();
            let mut fresh = || {
                fresh_count += 1;
                Dim::sym(&format!("fold{fresh_count}"))
            };
            infer_op(&node.op, &inputs, &regions, node.outputs.len(), &mut fresh).ok()
        };
        let Some(types) = types else {
            kept.push(n);
            continue;
        };
        // Keep symbolic results the graph already had: they carry the names bind gave them.
        for (out, ty) in node.outputs.iter().zip(&types) {
            if let Some(v) = out {
                if ty.known_dims().is_some() || g.ty(*v).rank() != ty.rank() {
                    g.values[v.index()].ty = ty.clone();
                }
            }
        }
        match fold_node(g, &node.op, &node.inputs, &types) {
            Some(consts) => {
                for (out, t) in node.outputs.iter().zip(consts) {
                    if let Some(v) = *out {
                        g.values[v.index()].ty = t.ty();
                        g.values[v.index()].def = ValueDef::Const(t);
                        g.body.consts.push(v);
                    }
                }
                folded += 1;
            }
            None => kept.push(n),
        }
    }
    g.body.nodes = kept;
    folded
}

/// The branch an `If` takes when its condition is a constant.
fn constant_branch(g: &Graph, node: &kiln_tir::Node) -> Option<usize> {
    if !matches!(node.op, Op::If(_)) || node.regions.len() != 2 {
        return None;
    }
    let cond = g.const_value((*node.inputs.first()?)?)?.to_i64s()?;
    Some(if *cond.first()? != 0 { 0 } else { 1 })
}

/// Replaces If node `n` by the nodes of its region `branch` followed by one Identity per
/// output (reusing the If's id for the first), and returns them in order. The branch's
/// constants join the top region.
fn inline_branch(g: &mut Graph, n: NodeId, branch: usize) -> Vec<NodeId> {
    let node = g.node(n).clone();
    let region = node.regions[branch].clone();
    g.body.consts.extend(region.consts.iter().copied());
    let mut order = region.nodes.clone();
    for (k, (out, result)) in node.outputs.iter().zip(&region.results).enumerate() {
        let Some(out) = *out else { continue };
        let op = Op::Identity(kiln_tir::op::Identity {});
        let id = if k == 0 {
            g.nodes[n.index()] = kiln_tir::Node { op, name: node.name.clone(), inputs: vec![Some(*result)], outputs: vec![Some(out)], regions: Vec::new() };
            n
        } else {
            let id = NodeId(g.nodes.len() as u32);
            g.nodes.push(kiln_tir::Node { op, name: format!("{}/{k}", node.name), inputs: vec![Some(*result)], outputs: vec![Some(out)], regions: Vec::new() });
            id
        };
        g.values[out.index()].def = ValueDef::Node { node: id, output: 0 };
        order.push(id);
    }
    if node.outputs.first().is_some_and(Option::is_none) {
        // The If's first output is unused: its id must still leave no node behind.
        g.nodes[n.index()] = kiln_tir::Node { op: Op::Identity(kiln_tir::op::Identity {}), name: node.name.clone(), inputs: vec![region.results.first().copied()], outputs: vec![None], regions: Vec::new() };
    }
    order
}
