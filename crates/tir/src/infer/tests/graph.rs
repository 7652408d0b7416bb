//! Whole graphs: infer_graph, bind_symbols, bind_input_shapes, regions.

use super::t;
use crate::graph::{Graph, NodeId, Region, ValueDef, ValueId};
use crate::infer::{bind_input_shapes, bind_symbols, infer_graph};
use crate::op::*;
use crate::tensor::Tensor;

fn param(g: &mut Graph, region: &mut Region, name: &str, ty: &str) -> ValueId {
    let id = g.add_value(t(ty), name, ValueDef::Param);
    region.params.push(id);
    id
}

fn constant(g: &mut Graph, region: &mut Region, value: Tensor) -> ValueId {
    let id = g.add_value(value.ty(), "", ValueDef::Const(value));
    region.consts.push(id);
    id
}

/// Adds a node to `region` with placeholder output types, which inference replaces.
fn node(g: &mut Graph, region: &mut Region, op: Op, name: &str, inputs: &[Option<ValueId>], outputs: usize, regions: Vec<Region>) -> Vec<ValueId> {
    let outs = (0..outputs).map(|i| Some((t("f32[]"), format!("{name}_{i}")))).collect();
    let n: NodeId = g.add_node(op, name, inputs.to_vec(), outs, regions);
    region.nodes.push(n);
    g.node(n).outputs.iter().flatten().copied().collect()
}

fn ty(g: &Graph, v: ValueId) -> String {
    g.ty(v).to_string()
}

/// `x: f32[batch, seq, 256]` reshaped to heads and transposed.
fn attention_heads() -> (Graph, ValueId) {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[batch, seq, 256]");
    let shape = constant(&mut g, &mut body, Tensor::from_i64s(&[4], &[0, 0, 4, 64]));
    let r = node(&mut g, &mut body, Op::Reshape(Reshape::default()), "split_heads", &[Some(x), Some(shape)], 1, vec![]);
    let tr = node(&mut g, &mut body, Op::Transpose(Transpose { perm: vec![0, 2, 1, 3] }), "heads_first", &[Some(r[0])], 1, vec![]);
    body.results.push(tr[0]);
    g.body = body;
    (g, tr[0])
}

#[test]
fn infer_graph_replaces_output_types() {
    let (mut g, out) = attention_heads();
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, out), "f32[batch, 4, seq, 64]");
    bind_symbols(&mut g, &[("batch", 1), ("seq", 128)]).unwrap();
    assert_eq!(ty(&g, g.inputs()[0]), "f32[1, 128, 256]");
    assert_eq!(ty(&g, out), "f32[1, 4, 128, 64]");
}

#[test]
fn bind_input_shapes_binds_symbols() {
    let (mut g, out) = attention_heads();
    bind_input_shapes(&mut g, &[(0, vec![2, 16, 256])]).unwrap();
    assert_eq!(ty(&g, out), "f32[2, 4, 16, 64]");
    let (mut g, _) = attention_heads();
    let errs = bind_input_shapes(&mut g, &[(0, vec![2, 16, 255])]).unwrap_err();
    assert_eq!(errs[0].to_string(), "value %0 (\"x\"): dim 2 is 256, the given shape [2, 16, 255] has 255");
    let errs = bind_input_shapes(&mut g, &[(1, vec![2])]).unwrap_err();
    assert_eq!(errs[0].to_string(), "graph input 1: the graph has only 1 inputs");
}

#[test]
fn bind_input_shapes_unifies_symbols_across_inputs() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let a = param(&mut g, &mut body, "a", "f32[batch, 3]");
    let b = param(&mut g, &mut body, "b", "f32[batch]");
    let c = param(&mut g, &mut body, "c", "f32[seq*2+1]");
    body.results.extend([a, b, c]);
    g.body = body;
    let mut conflict = g.clone();
    let errs = bind_input_shapes(&mut conflict, &[(0, vec![2, 3]), (1, vec![5])]).unwrap_err();
    assert_eq!(errs[0].to_string(), "value %1 (\"b\"): dim 0 (batch) is 2 by the other inputs' sizes, but 5 is given");
    bind_input_shapes(&mut g, &[(0, vec![2, 3]), (2, vec![9])]).unwrap();
    assert_eq!(ty(&g, b), "f32[2]");
    assert_eq!(ty(&g, c), "f32[9]");
    let mut odd = g.clone();
    odd.values[c.index()].ty = t("f32[seq*2]");
    let errs = bind_input_shapes(&mut odd, &[(2, vec![9])]).unwrap_err();
    assert_eq!(errs[0].to_string(), "value %2 (\"c\"): dim 0 (seq*2) cannot be 9 for any size of `seq`");
}

#[test]
fn binding_evaluates_polynomials_with_negative_terms() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[seq]");
    let (one, minus_one) = (constant(&mut g, &mut body, Tensor::from_i64s(&[1], &[1])), constant(&mut g, &mut body, Tensor::from_i64s(&[1], &[-1])));
    let s = node(&mut g, &mut body, Op::Slice(Slice {}), "trim", &[Some(x), Some(one), Some(minus_one)], 1, vec![]);
    body.results.push(s[0]);
    g.body = body;
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, s[0]), "f32[seq-2]");
    bind_symbols(&mut g, &[("seq", 5)]).unwrap();
    assert_eq!(ty(&g, s[0]), "f32[3]");
}

#[test]
fn errors_are_collected_and_name_the_node() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[2, 3]");
    let y = param(&mut g, &mut body, "y", "f32[4]");
    let bad = node(&mut g, &mut body, Op::Add(Add {}), "bad_add", &[Some(x), Some(y)], 1, vec![]);
    let ok = node(&mut g, &mut body, Op::Relu(Relu {}), "relu", &[Some(x)], 1, vec![]);
    node(&mut g, &mut body, Op::MatMul(MatMul {}), "bad_mm", &[Some(x), Some(x)], 1, vec![]);
    body.results.extend([bad[0], ok[0]]);
    g.body = body;
    let errs = infer_graph(&mut g).unwrap_err();
    let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "node \"bad_add\" (tensor.add): cannot broadcast dim 3 with 4 (shapes [2, 3], [4])",
            "node \"bad_mm\" (tensor.matmul): inner dims of [2, 3] and [2, 3] differ: 3 != 2",
        ]
    );
    assert_eq!(errs[0].node, Some(NodeId(0)));
    assert_eq!(errs[0].op, "add");
    assert_eq!(ty(&g, ok[0]), "f32[2, 3]");
}

#[test]
fn fresh_symbols_are_stable_across_runs() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[unk__0, 3]");
    let nz = node(&mut g, &mut body, Op::NonZero(NonZero {}), "nz", &[Some(x)], 1, vec![]);
    body.results.push(nz[0]);
    g.body = body;
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, nz[0]), "i64[2, unk__1]");
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, nz[0]), "i64[2, unk__1]");
}

#[test]
fn if_regions_give_output_types() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let c = param(&mut g, &mut body, "c", "bool[]");
    let x = param(&mut g, &mut body, "x", "f32[b, 4]");
    let mut then = Region::default();
    let t_out = node(&mut g, &mut then, Op::Relu(Relu {}), "then_relu", &[Some(x)], 1, vec![]);
    then.results.push(t_out[0]);
    let mut els = Region::default();
    let axes = constant(&mut g, &mut els, Tensor::from_i64s(&[1], &[1]));
    let e_out = node(&mut g, &mut els, Op::ReduceMax(ReduceMax { keepdims: 1, noop_with_empty_axes: 0 }), "else_max", &[Some(x), Some(axes)], 1, vec![]);
    els.results.push(e_out[0]);
    let out = node(&mut g, &mut body, Op::If(If {}), "branch", &[Some(c)], 1, vec![then, els]);
    body.results.push(out[0]);
    g.body = body;
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, e_out[0]), "f32[b, 1]");
    assert_eq!(ty(&g, out[0]), "f32[b, unk__0]");
}

#[test]
fn loop_body_params_follow_the_carried_inputs() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[2]");
    let m = constant(&mut g, &mut body, Tensor::from_i64s(&[], &[3]));
    let mut lb = Region::default();
    param(&mut g, &mut lb, "i", "i64[]");
    let cond = param(&mut g, &mut lb, "cond", "bool[]");
    let v = param(&mut g, &mut lb, "v", "f32[k]");
    let cond_out = node(&mut g, &mut lb, Op::Identity(Identity {}), "keep_going", &[Some(cond)], 1, vec![]);
    let doubled = node(&mut g, &mut lb, Op::Add(Add {}), "double", &[Some(v), Some(v)], 1, vec![]);
    lb.results.extend([cond_out[0], doubled[0], doubled[0]]);
    let out = node(&mut g, &mut body, Op::Loop(Loop {}), "loop", &[Some(m), None, Some(x)], 2, vec![lb]);
    body.results.extend(out.iter().copied());
    g.body = body;
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, v), "f32[2]");
    assert_eq!(ty(&g, out[0]), "f32[2]");
    assert_eq!(ty(&g, out[1]), "f32[3, 2]");
}

#[test]
fn loop_body_params_relax_when_the_carried_value_grows() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, "x", "f32[0]");
    let m = constant(&mut g, &mut body, Tensor::from_i64s(&[], &[3]));
    let mut lb = Region::default();
    param(&mut g, &mut lb, "i", "i64[]");
    let cond = param(&mut g, &mut lb, "cond", "bool[]");
    let v = param(&mut g, &mut lb, "v", "f32[k]");
    let one = constant(&mut g, &mut lb, Tensor::from_f32s(&[1], &[1.0]));
    let cond_out = node(&mut g, &mut lb, Op::Identity(Identity {}), "keep_going", &[Some(cond)], 1, vec![]);
    let grown = node(&mut g, &mut lb, Op::Concat(Concat { axis: 0 }), "append", &[Some(v), Some(one)], 1, vec![]);
    lb.results.extend([cond_out[0], grown[0]]);
    let out = node(&mut g, &mut body, Op::Loop(Loop {}), "loop", &[Some(m), None, Some(x)], 1, vec![lb]);
    body.results.push(out[0]);
    g.body = body;
    infer_graph(&mut g).unwrap();
    assert_eq!(ty(&g, v), "f32[k]");
    assert_eq!(ty(&g, grown[0]), "f32[k+1]");
    assert_eq!(ty(&g, out[0]), "f32[unk__0]");
}
