//! The model zoos through compiled code, each model compiled once and run at every data set's
//! input shapes, compared with onnxruntime: `scripts/zoo.sh`'s models written the way exporters
//! and onnxruntime's tools write them (dynamic and unnamed dims, `-1`, lying value_info,
//! legacy opsets, `com.microsoft` contrib ops, quantized forms), and `scripts/zoo-torch.sh`'s
//! torchvision and Hugging Face models from PyTorch's two exporters. A case listed in
//! `tests/zoo/known-failures.txt` must fail (and the test says when one starts passing);
//! every other case must pass.

use std::collections::BTreeMap;

use kiln::{CompileOptions, Model, Tensor};
use kiln_testkit::{ZooCase, cases_in, compare_with_onnxruntime, repo_root, torch_zoo, zoo_cases};

/// Runs every data set of `case` through one compiled model; returns one line per data set
/// (shapes and largest difference), or the first failure.
fn run(case: &ZooCase) -> Result<Vec<String>, String> {
    let model = Model::load(&case.model).map_err(|e| format!("import: {e}"))?;
    let compiled = model.compile(&CompileOptions::default()).map_err(|e| format!("compile: {e}"))?;
    let read = |files: &[std::path::PathBuf]| -> Result<Vec<Tensor>, String> {
        files.iter().map(|p| kiln_onnx::import::read_tensor_file(p).map(|t| t.1).map_err(|e| e.to_string())).collect()
    };
    let mut lines = Vec::new();
    let mut compiled_after_first_round = 0;
    // Each data set twice: the second round must find every specialization compiled.
    for round in 0..2 {
        for (k, (ins, outs)) in case.data_sets.iter().enumerate() {
            let (inputs, expected) = (read(ins)?, read(outs)?);
            let got = compiled.run(&inputs).map_err(|e| format!("data set {k}: run: {e}"))?;
            if got.len() != expected.len() {
                return Err(format!("data set {k}: {} outputs, onnxruntime has {}", got.len(), expected.len()));
            }
            let mut worst = 0.0f64;
            for (j, (g, w)) in got.iter().zip(&expected).enumerate() {
                worst = worst.max(compare_with_onnxruntime(g, w, case.tolerance).map_err(|e| format!("data set {k} output {j}: {e}"))?);
            }
            if round == 0 {
                let shapes: Vec<Vec<u64>> = inputs.iter().map(|t| t.shape.clone()).collect();
                lines.push(format!("{shapes:?} max |diff| {worst:.2e}"));
            }
        }
        if round == 0 {
            compiled_after_first_round = compiled.specializations();
        }
    }
    if compiled.specializations() != compiled_after_first_round {
        return Err(format!("{} specializations after the first round, {} after the second: a repeated input compiled again", compiled_after_first_round, compiled.specializations()));
    }
    Ok(lines)
}

#[test]
fn zoo_matches_onnxruntime() {
    check(&zoo_cases());
}

#[test]
fn torch_exported_models_match_onnxruntime() {
    check(&cases_in(torch_zoo()));
}

/// Runs every case; fails listing each unexpected result.
fn check(cases: &[ZooCase]) {
    let known: BTreeMap<String, String> = std::fs::read_to_string(repo_root().join("tests/zoo/known-failures.txt"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':').map(|(n, r)| (n.trim().to_string(), r.trim().to_string())))
        .collect();
    assert!(!cases.is_empty(), "the zoo is empty");
    let mut problems = Vec::new();
    for case in cases {
        let result = std::panic::catch_unwind(|| run(case)).unwrap_or_else(|_| Err("panicked".into()));
        match (result, known.get(&case.name)) {
            (Ok(lines), None) => eprintln!("pass  {:32} {}", case.name, lines.join("; ")),
            (Ok(_), Some(_)) => problems.push(format!("{}: passes now; remove it from tests/zoo/known-failures.txt", case.name)),
            (Err(e), Some(reason)) => eprintln!("known {:32} {reason} ({e})", case.name),
            (Err(e), None) => problems.push(format!("{}: {e}", case.name)),
        }
    }
    // Names say which zoo a case is from: the torch zoo's start with `tv_` or `hf_`.
    let torch = |name: &str| name.starts_with("tv_") || name.starts_with("hf_");
    for name in known.keys().filter(|n| cases.iter().any(|c| torch(&c.name) == torch(n))) {
        if !cases.iter().any(|c| &c.name == name) {
            problems.push(format!("{name}: listed in tests/zoo/known-failures.txt but not in the zoo"));
        }
    }
    assert!(problems.is_empty(), "{} zoo problems:\n{}", problems.len(), problems.join("\n"));
}

/// The FPN case adds a 1×1 convolution of the input to a pooled-then-upsampled copy: equal
/// sizes only for even heights and widths, which import assumes and binding checks.
#[test]
fn broken_assumptions_and_wrong_shapes_name_the_input_dim_and_node() {
    let case = zoo_cases().into_iter().find(|c| c.name == "fpn_broadcast").expect("the zoo has fpn_broadcast");
    let compiled = Model::load(&case.model).and_then(|m| m.compile(&CompileOptions::default())).expect("fpn_broadcast compiles");
    let x = |dims: &[u64]| Tensor::from_f32s(dims, &vec![0.5; dims.iter().product::<u64>() as usize]);

    let odd = compiled.run(&[x(&[1, 8, 9, 10])]).expect_err("an odd height breaks the FPN's assumption").to_string();
    assert!(odd.contains(r#"node "Add#4" (tensor.add): cannot broadcast dim 9 with 8"#), "{odd}");
    assert!(odd.contains(r#"the model assumes input "x" dim 2 (H = 9) broadcasts with"#), "{odd}");

    let channels = compiled.run(&[x(&[1, 7, 8, 8])]).expect_err("7 channels where 8 are declared").to_string();
    assert!(channels.contains(r#""x""#) && channels.contains("dim 1"), "{channels}");
    let rank = compiled.run(&[x(&[8, 8, 8])]).expect_err("a rank-3 input").to_string();
    assert!(rank.contains(r#""x""#) && rank.contains("rank"), "{rank}");
    // The good shapes still run after the failures.
    compiled.run(&[x(&[1, 8, 8, 10])]).expect("an even size runs");
}
