//! The reference evaluator agrees with onnxruntime on the four shared models (rtol 1e-3,
//! atol 1e-4), on the fixed inputs of `scripts/model-reference.sh`.

use kiln_onnx::import::import_path;

fn check(name: &str) {
    let g = import_path(kiln_testkit::shared_models().join(format!("{name}.onnx"))).unwrap();
    let (inputs, expected) = kiln_testkit::read_model_reference(name).unwrap();
    let got = kiln_eval::eval_graph(&g, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got.len(), expected.len());
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        kiln_testkit::compare_within(g, w, 1e-3, 1e-4).unwrap_or_else(|e| panic!("{name} output {k}: {e}"));
    }
}

#[test]
fn mlp() {
    check("mlp");
}

#[test]
fn resnet50() {
    check("resnet50");
}

#[test]
fn mobilenet_v2() {
    check("mobilenet_v2");
}

#[test]
fn bert_mini() {
    check("bert_mini");
}
