//! The four shared models run through JIT-compiled code and agree with onnxruntime (rtol 1e-3,
//! atol 1e-4) on the fixed inputs of `scripts/model-reference.sh`.

use kiln::{CompileOptions, Model};

fn check(name: &str) {
    let model = Model::load(kiln_testkit::shared_models().join(format!("{name}.onnx"))).unwrap();
    let compiled = model.compile(&CompileOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (inputs, expected) = kiln_testkit::read_model_reference(name).unwrap();
    let got = compiled.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got.len(), expected.len(), "{name}: output count");
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
