//! The four shared models run through JIT-compiled code and agree with onnxruntime (rtol 1e-3,
//! atol 1e-4) on the fixed inputs of `scripts/model-reference.sh`.

use kiln::{CompileOptions, Model};

fn check(name: &str) {
    kiln_testkit::check_model_against_onnxruntime(name, |g, inputs| {
        let compiled = Model::from_graph(g.clone()).compile(&CompileOptions::default()).map_err(|e| e.to_string())?;
        compiled.run(inputs).map_err(|e| e.to_string())
    });
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
