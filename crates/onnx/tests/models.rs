//! The four shared benchmark models import, verify and round-trip through the text form.

use kiln_onnx::import::import_path;
use kiln_tir::{text, OpKind};

fn check(name: &str, expect: &[(OpKind, usize)]) {
    let path = kiln_testkit::shared_models().join(format!("{name}.onnx"));
    let g = import_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    for &(kind, count) in expect {
        let n = g.all_nodes().iter().filter(|&&n| g.node(n).op.kind() == kind).count();
        assert_eq!(n, count, "{name}: number of tensor.{} nodes", kind.text_name());
    }
    let printed = text::print(&g);
    let again = text::parse(&printed).unwrap_or_else(|e| panic!("{name}: printed IR does not parse: {e}"));
    assert!(text::print(&again) == printed, "{name}: print → parse → print differs");
    kiln_tir::verify::verify(&again).unwrap_or_else(|e| panic!("{name}: parsed IR fails verification: {e:?}"));
}

#[test]
fn resnet50() {
    check("resnet50", &[(OpKind::Conv, 53), (OpKind::Relu, 49), (OpKind::Gemm, 1)]);
}

#[test]
fn mobilenet_v2() {
    check("mobilenet_v2", &[(OpKind::Conv, 52), (OpKind::Clip, 35)]);
}

#[test]
fn bert_mini() {
    check("bert_mini", &[(OpKind::MatMul, 20), (OpKind::LayerNormalization, 9), (OpKind::Softmax, 4)]);
}

#[test]
fn mlp() {
    check("mlp", &[(OpKind::Gemm, 3), (OpKind::Relu, 2)]);
}

#[test]
fn tiny_cnn_keeps_its_symbolic_batch() {
    let g = import_path(kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx")).unwrap();
    let out = g.ty(g.outputs()[0]);
    assert_eq!(out.to_string(), "f32[batch, 10]");
}
