//! Differential tests of the egg optimizer: the optimized and unoptimized pipelines compute
//! the same outputs (within the conformance tolerance) on the four shared models and on every
//! node-suite case both compile.

use kiln::{CompileOptions, Limits, Model, Tensor};
use kiln_testkit::{compare_within, ATOL, RTOL};

fn options(optimize: bool) -> CompileOptions {
    CompileOptions { optimizer: optimize.then(Limits::default), ..CompileOptions::default() }
}

fn run(model: &Model, optimize: bool, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let compiled = model.compile(&options(optimize)).map_err(|e| e.to_string())?;
    compiled.run(inputs).map_err(|e| e.to_string())
}

fn same_outputs(name: &str, with: &[Tensor], without: &[Tensor], atol: f64) -> Result<(), String> {
    if with.len() != without.len() {
        return Err(format!("{name}: {} outputs optimized, {} not", with.len(), without.len()));
    }
    for (i, (a, b)) in with.iter().zip(without).enumerate() {
        compare_within(a, b, RTOL, atol).map_err(|e| format!("{name}: output {i}: {e}"))?;
    }
    Ok(())
}

/// Each model: the optimizer must change the graph (it fuses something in every one of them)
/// and keep its outputs.
fn check_model(name: &str) {
    let (inputs, _) = kiln_testkit::read_model_reference(name).unwrap();
    let model = Model::load(kiln_testkit::shared_models().join(format!("{name}.onnx"))).unwrap();
    let shapes: Vec<Vec<u64>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let compiled = model.compile(&options(true)).unwrap();
    let stats = compiled.specialization(&shapes, &[]).unwrap().optimizer_stats().cloned().expect("the optimizer ran");
    assert!(stats.nodes_after < stats.nodes_before, "{name}: the optimizer changed nothing ({} nodes)", stats.nodes_before);
    let with = compiled.run(&inputs).unwrap();
    let without = run(&model, false, &inputs).unwrap();
    // The models' reference tolerance (see models.rs): fused kernels round once where the
    // unfused graph rounds per op.
    same_outputs(name, &with, &without, 1e-4).unwrap();
}

#[test]
fn mlp() {
    check_model("mlp");
}

#[test]
fn resnet50() {
    check_model("resnet50");
}

#[test]
fn mobilenet_v2() {
    check_model("mobilenet_v2");
}

#[test]
fn bert_mini() {
    check_model("bert_mini");
}

/// Every node-suite case that compiles without the optimizer compiles with it and computes the
/// same outputs.
#[test]
fn node_suite() {
    let mut compared = 0;
    let mut failures = Vec::new();
    for case in kiln_testkit::node_cases() {
        let Ok(model) = Model::load(&case.model) else { continue };
        let Ok((inputs, _)) = kiln_testkit::read_case(&case) else { continue };
        let Ok(without) = run(&model, false, &inputs) else { continue };
        match run(&model, true, &inputs) {
            Ok(with) => match same_outputs(&case.name, &with, &without, ATOL) {
                Ok(()) => compared += 1,
                Err(e) => failures.push(e),
            },
            Err(e) => failures.push(format!("{}: fails only when optimized: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), compared + failures.len(), failures.join("\n"));
    assert!(compared > 1500, "only {compared} cases compared");
}
