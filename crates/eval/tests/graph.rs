//! Whole-graph evaluation: plain chains, constants, If/Loop/Scan regions reading outer values,
//! and errors that name the node.

mod common;

use common::*;
use kiln_eval::{EvalError, eval_graph};
use kiln_tir::op::*;
use kiln_tir::{DType, Graph, NodeId, Region, Tensor, TensorType, ValueDef, ValueId};

fn ty(dtype: DType, dims: &[u64]) -> TensorType {
    TensorType::known(dtype, dims)
}

/// Adds a one-output node to `g` and to `region`, returning its output.
fn node(g: &mut Graph, region: &mut Region, op: Op, name: &str, inputs: &[ValueId], out: TensorType) -> ValueId {
    let id = g.add_node(op, name, inputs.iter().map(|&v| Some(v)).collect(), vec![Some((out, String::new()))], vec![]);
    region.nodes.push(id);
    g.node(id).outputs[0].unwrap()
}

fn param(g: &mut Graph, region: &mut Region, t: TensorType, name: &str) -> ValueId {
    let v = g.add_value(t, name, ValueDef::Param);
    region.params.push(v);
    v
}

fn constant(g: &mut Graph, t: Tensor) -> ValueId {
    g.add_value(t.ty(), "", ValueDef::Const(t))
}

#[test]
fn chain_with_constants() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, ty(DType::F32, &[3]), "x");
    let c = constant(&mut g, f32t(&[3], &[1.0, -5.0, 1.0]));
    let y = node(&mut g, &mut body, Op::Add(Add {}), "add", &[x, c], ty(DType::F32, &[3]));
    let z = node(&mut g, &mut body, Op::Relu(Relu {}), "relu", &[y], ty(DType::F32, &[3]));
    body.results = vec![z, y];
    g.body = body;
    let out = eval_graph(&g, &[f32t(&[3], &[1.0, 2.0, -3.0])]).unwrap();
    assert_eq!(f32s(&out[0]), vec![2.0, 0.0, 0.0]);
    assert_eq!(f32s(&out[1]), vec![2.0, -3.0, -2.0]);
}

#[test]
fn bad_inputs_are_reported() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, ty(DType::F32, &[2]), "x");
    body.results = vec![x];
    g.body = body;
    assert!(matches!(eval_graph(&g, &[]), Err(EvalError::BadInput { .. })));
    assert!(matches!(eval_graph(&g, &[i64t(&[2], &[1, 2])]), Err(EvalError::BadInput { index: 0, .. })));
    assert!(matches!(eval_graph(&g, &[f32t(&[3], &[1.0, 2.0, 3.0])]), Err(EvalError::BadInput { index: 0, .. })));
}

#[test]
fn errors_name_the_node() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let x = param(&mut g, &mut body, ty(DType::F32, &[2]), "x");
    let i = param(&mut g, &mut body, ty(DType::I64, &[1]), "i");
    let y = node(&mut g, &mut body, Op::Gather(Gather { axis: 0 }), "embed", &[x, i], ty(DType::F32, &[1]));
    body.results = vec![y];
    g.body = body;
    let err = eval_graph(&g, &[f32t(&[2], &[1.0, 2.0]), i64t(&[1], &[5])]).unwrap_err();
    match &err {
        EvalError::AtNode { node, source } => {
            assert_eq!(node, "embed");
            assert!(matches!(**source, EvalError::Invalid { op: "gather", .. }));
        }
        e => panic!("unexpected {e}"),
    }
    assert!(err.to_string().contains("embed") && err.to_string().contains("out of range"), "{err}");
}

#[test]
fn if_branches_read_outer_values() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let cond = param(&mut g, &mut body, ty(DType::Bool, &[]), "cond");
    let x = param(&mut g, &mut body, ty(DType::F32, &[2]), "x");
    let mut then_r = Region::default();
    let t = node(&mut g, &mut then_r, Op::Add(Add {}), "double", &[x, x], ty(DType::F32, &[2]));
    then_r.results = vec![t];
    let mut else_r = Region::default();
    let e = node(&mut g, &mut else_r, Op::Neg(Neg {}), "negate", &[x], ty(DType::F32, &[2]));
    else_r.results = vec![e];
    let id: NodeId = g.add_node(Op::If(If {}), "branch", vec![Some(cond)], vec![Some((ty(DType::F32, &[2]), "y".into()))], vec![then_r, else_r]);
    body.nodes.push(id);
    body.results = vec![g.node(id).outputs[0].unwrap()];
    g.body = body;
    let x_in = f32t(&[2], &[1.0, -2.0]);
    assert_eq!(f32s(&eval_graph(&g, &[boolt(&[], &[true]), x_in.clone()]).unwrap()[0]), vec![2.0, -4.0]);
    assert_eq!(f32s(&eval_graph(&g, &[boolt(&[], &[false]), x_in]).unwrap()[0]), vec![-1.0, 2.0]);
}

#[test]
fn loop_carries_state_and_stacks_scan_outputs() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let m = param(&mut g, &mut body, ty(DType::I64, &[]), "m");
    let cond = constant(&mut g, boolt(&[], &[true]));
    let v0 = constant(&mut g, i64t(&[], &[0]));
    let mut lb = Region::default();
    let iter = param(&mut g, &mut lb, ty(DType::I64, &[]), "iter");
    let c_in = param(&mut g, &mut lb, ty(DType::Bool, &[]), "c_in");
    let v = param(&mut g, &mut lb, ty(DType::I64, &[]), "v");
    let next = node(&mut g, &mut lb, Op::Add(Add {}), "acc", &[v, iter], ty(DType::I64, &[]));
    lb.results = vec![c_in, next, next];
    let outs = vec![Some((ty(DType::I64, &[]), "final".into())), Some((TensorType { dtype: DType::I64, shape: vec![kiln_tir::Dim::Known(0)] }, "all".into()))];
    let id = g.add_node(Op::Loop(Loop {}), "loop", vec![Some(m), Some(cond), Some(v0)], outs, vec![lb]);
    body.nodes.push(id);
    body.results = g.node(id).outputs.iter().map(|o| o.unwrap()).collect();
    g.body = body;
    let out = eval_graph(&g, &[i64t(&[], &[4])]).unwrap();
    assert_eq!(ints(&out[0]), vec![6]);
    assert_eq!((out[1].shape.clone(), ints(&out[1])), (vec![4], vec![0, 1, 3, 6]));
    let out = eval_graph(&g, &[i64t(&[], &[0])]).unwrap();
    assert_eq!((ints(&out[0]), out[1].shape.clone()), (vec![0], vec![0]));
}

#[test]
fn scan_runs_a_cumulative_sum() {
    let mut g = Graph::default();
    let mut body = Region::default();
    let init = param(&mut g, &mut body, ty(DType::F32, &[2]), "init");
    let xs = param(&mut g, &mut body, ty(DType::F32, &[3, 2]), "xs");
    let mut sb = Region::default();
    let s = param(&mut g, &mut sb, ty(DType::F32, &[2]), "s");
    let x = param(&mut g, &mut sb, ty(DType::F32, &[2]), "x");
    let next = node(&mut g, &mut sb, Op::Add(Add {}), "step", &[s, x], ty(DType::F32, &[2]));
    sb.results = vec![next, next];
    let op = Op::Scan(Scan { num_scan_inputs: 1, scan_input_directions: vec![1], ..Scan::default() });
    let outs = vec![Some((ty(DType::F32, &[2]), "last".into())), Some((ty(DType::F32, &[3, 2]), "steps".into()))];
    let id = g.add_node(op, "scan", vec![Some(init), Some(xs)], outs, vec![sb]);
    body.nodes.push(id);
    body.results = g.node(id).outputs.iter().map(|o| o.unwrap()).collect();
    g.body = body;
    let out = eval_graph(&g, &[f32t(&[2], &[0.0, 100.0]), f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]).unwrap();
    assert_eq!(f32s(&out[0]), vec![9.0, 112.0]);
    assert_eq!(f32s(&out[1]), vec![5.0, 106.0, 8.0, 110.0, 9.0, 112.0]);
}
