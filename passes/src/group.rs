//! Elementwise chains → one `fused_elementwise` node, after extraction.
//!
//! The e-graph has no regions, so this grouping runs on the extracted graph: a producer joins
//! its consumer's group when both are elementwise float ops of the whitelist (or per-tensor
//! quantization to and from 8-bit integers), the producer's result has exactly that one use
//! and is not a graph output, and both results have the same element count (so the fused loop over the output computes every member once per element).
//! Each group of two or more becomes one node whose body region holds the members in order;
//! its inputs are the values the members read from outside (constants are read directly from
//! the enclosing region), and it takes over the last member's result value, so uses outside
//! need no renaming.

use std::collections::HashMap;

use kiln_tir::op::FusedElementwise;
use kiln_tir::{DType, Graph, NodeId, Op, OpKind, Region, ValueDef, ValueId};

/// The name provenance gives the grouping.
pub const RULE: &str = "fuse-elementwise-chain";

/// Ops whose lowering is one scalar expression per element, so they can share a loop nest.
fn fusable(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(
        kind,
        Add | Sub | Mul | Div | Max | Min | Pow | Neg | Abs | Reciprocal | Floor | Ceil | Sqrt | Exp | Log | Tanh | Erf | Sigmoid | Relu | LeakyRelu | Elu | Selu | Celu | HardSigmoid | HardSwish | Gelu | Mish | Softplus | Softsign | Sin | Cos
    )
}

fn candidate(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let out = match node.outputs[..] {
        [Some(v)] => v,
        _ => return false,
    };
    let ty = g.ty(out);
    if !node.regions.is_empty() || ty.known_dims().is_none() {
        return false;
    }
    if matches!(node.op, Op::QuantizeLinear(_) | Op::DequantizeLinear(_)) {
        return quantization(g, node, ty.dtype);
    }
    fusable(node.op.kind()) && ty.dtype == DType::F32 && node.inputs.iter().all(|i| i.is_some_and(|v| g.ty(v).dtype == DType::F32))
}

/// QuantizeLinear from `f32` to 8-bit integers, or DequantizeLinear back, with one constant
/// scale (and zero point) for the whole tensor: lowering makes it one expression per element,
/// and a chain holding `quantize → dequantize` never stores the integers.
fn quantization(g: &Graph, node: &kiln_tir::Node, out: DType) -> bool {
    let (Some(Some(x)), Some(Some(scale))) = (node.inputs.first(), node.inputs.get(1)) else { return false };
    let scalar = |v: ValueId| matches!(g.value(v).def, ValueDef::Const(_)) && g.ty(v).numel() == Some(1) && g.ty(v).rank() <= 1;
    let int8 = |d: DType| matches!(d, DType::I8 | DType::U8);
    let (from, integer) = match &node.op {
        Op::QuantizeLinear(q) if q.precision == 0 && q.block_size <= 0 => (DType::F32, out),
        Op::DequantizeLinear(d) if d.block_size <= 0 && out == DType::F32 => (g.ty(*x).dtype, g.ty(*x).dtype),
        _ => return false,
    };
    let zero_ok = match node.inputs.get(2) {
        Some(Some(z)) => scalar(*z) && g.ty(*z).dtype == integer,
        _ => true,
    };
    g.ty(*x).dtype == from && int8(integer) && scalar(*scale) && g.ty(*scale).dtype == DType::F32 && zero_ok
}

/// Number of uses of each value anywhere in `g` (nested regions and graph outputs included).
fn uses(g: &Graph) -> HashMap<ValueId, usize> {
    let mut count: HashMap<ValueId, usize> = HashMap::new();
    fn walk(g: &Graph, r: &Region, count: &mut HashMap<ValueId, usize>) {
        for &n in &r.nodes {
            for v in g.node(n).inputs.iter().flatten() {
                *count.entry(*v).or_default() += 1;
            }
            for sub in &g.node(n).regions {
                walk(g, sub, count);
            }
        }
        for &v in &r.results {
            *count.entry(v).or_default() += 1;
        }
    }
    walk(g, &g.body, &mut count);
    count
}

/// Groups the top region's elementwise chains; returns each new node with its members.
pub fn group(g: &mut Graph) -> Vec<(NodeId, Vec<NodeId>)> {
    let uses = uses(g);
    let outputs: Vec<ValueId> = g.body.results.clone();
    let nodes = g.body.nodes.clone();
    // The group of each node, as the index of its representative in `nodes`.
    let position: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (ci, &c) in nodes.iter().enumerate() {
        if !candidate(g, c) {
            continue;
        }
        let c_numel = g.ty(g.node(c).outputs[0].unwrap_or_else(|| unreachable!("candidates have one output"))).numel();
        for v in g.node(c).inputs.clone().into_iter().flatten() {
            let ValueDef::Node { node: p, .. } = g.value(v).def else { continue };
            let Some(&pi) = position.get(&p) else { continue };
            if candidate(g, p) && uses.get(&v) == Some(&1) && !outputs.contains(&v) && g.ty(v).numel() == c_numel {
                let (a, b) = (find(&mut parent, pi), find(&mut parent, ci));
                parent[a] = b;
            }
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, &n) in nodes.iter().enumerate() {
        if candidate(g, n) {
            let root = find(&mut parent, i);
            groups.entry(root).or_default().push(i);
        }
    }
    let mut made = Vec::new();
    let mut replaced: HashMap<usize, NodeId> = HashMap::new();
    let mut absorbed = vec![false; nodes.len()];
    let mut order: Vec<Vec<usize>> = groups.into_values().filter(|m| m.len() >= 2).collect();
    order.sort_by_key(|m| m[m.len() - 1]);
    for members in order {
        let member_ids: Vec<NodeId> = members.iter().map(|&i| nodes[i]).collect();
        let last = *member_ids.last().unwrap_or_else(|| unreachable!("groups have members"));
        let inside: Vec<ValueId> = member_ids.iter().filter_map(|&m| g.node(m).outputs[0]).collect();
        // Values read from outside become parameters, in first-use order; constants stay
        // references to the enclosing region.
        let mut inputs: Vec<ValueId> = Vec::new();
        for &m in &member_ids {
            for v in g.node(m).inputs.iter().flatten() {
                if !inside.contains(v) && !inputs.contains(v) && !matches!(g.value(*v).def, ValueDef::Const(_)) {
                    inputs.push(*v);
                }
            }
        }
        let params: Vec<ValueId> = inputs.iter().map(|&v| g.add_value(g.ty(v).clone(), "", ValueDef::Param)).collect();
        let rename: HashMap<ValueId, ValueId> = inputs.iter().copied().zip(params.iter().copied()).collect();
        for &m in &member_ids {
            for v in g.nodes[m.index()].inputs.iter_mut().flatten() {
                if let Some(&p) = rename.get(v) {
                    *v = p;
                }
            }
        }
        // The fused node takes over the last member's value; the member gets a fresh one.
        let result = g.node(last).outputs[0].unwrap_or_else(|| unreachable!("candidates have one output"));
        let inner = g.add_value(g.ty(result).clone(), "", ValueDef::Node { node: last, output: 0 });
        g.nodes[last.index()].outputs[0] = Some(inner);
        let name = g.node(member_ids[0]).name.clone();
        let body = Region { params, consts: Vec::new(), nodes: member_ids.clone(), results: vec![inner] };
        let fused = NodeId(g.nodes.len() as u32);
        g.nodes.push(kiln_tir::Node { op: Op::FusedElementwise(FusedElementwise {}), name, inputs: inputs.iter().map(|&v| Some(v)).collect(), outputs: vec![Some(result)], regions: vec![body] });
        g.values[result.index()].def = ValueDef::Node { node: fused, output: 0 };
        for &i in &members {
            absorbed[i] = true;
        }
        replaced.insert(members[members.len() - 1], fused);
        made.push((fused, member_ids));
    }
    g.body.nodes = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, &n)| match replaced.get(&i) {
            Some(&f) => Some(f),
            None if absorbed[i] => None,
            None => Some(n),
        })
        .collect();
    made
}
