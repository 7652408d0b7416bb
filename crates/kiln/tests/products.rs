//! The optimizer never adds matrix products or convolutions: fusing an op into a product whose
//! result is also used elsewhere would compute the product twice, and extraction must count
//! shared work once (`kiln_passes`'s `extract.rs`). Checked on every shared model and every
//! zoo case (at its first data set's input shapes), comparing the bound graph with the
//! optimized one.

use std::path::Path;

use kiln::pipeline::{Bindings, Stage};
use kiln::{CompileOptions, Model};
use kiln_tir::{Graph, OpKind};

/// Ops that run a matrix product or a convolution.
const PRODUCTS: &[OpKind] = &[
    OpKind::MatMul,
    OpKind::Gemm,
    OpKind::FusedMatMul,
    OpKind::MatMulInteger,
    OpKind::QLinearMatMul,
    OpKind::Conv,
    OpKind::FusedConv,
    OpKind::ConvInteger,
    OpKind::QLinearConv,
    OpKind::ConvTranspose,
    OpKind::Einsum,
];

fn products(g: &Graph) -> usize {
    g.body.nodes.iter().filter(|&&n| PRODUCTS.contains(&g.node(n).op.kind())).count()
}

/// Products in the bound and in the optimized graph of `model` at `shapes` (symbolic dims 1
/// when `shapes` is empty).
fn count(model: &Path, shapes: Vec<Vec<u64>>) -> Result<(usize, usize), String> {
    let model = Model::load(model).map_err(|e| e.to_string())?;
    let pipeline = CompileOptions::default().pipeline();
    let shapes = if shapes.is_empty() {
        model.graph().inputs().iter().map(|&v| model.graph().ty(v).shape.iter().map(|d| d.known().unwrap_or(1)).collect()).collect()
    } else {
        shapes
    };
    let bindings = Bindings { input_shapes: shapes.into_iter().enumerate().collect(), ..Bindings::default() };
    let bound = pipeline.run(model.graph(), &bindings, Stage::Bind).map_err(|e| e.to_string())?;
    let optimized = pipeline.run(model.graph(), &bindings, Stage::Optimize).map_err(|e| e.to_string())?;
    Ok((products(&bound.graph), products(&optimized.graph)))
}

#[test]
fn optimization_never_adds_products() {
    let mut models: Vec<(String, std::path::PathBuf, Vec<Vec<u64>>)> = Vec::new();
    let shared = kiln_testkit::shared_models();
    let mut files: Vec<_> = std::fs::read_dir(&shared).expect("the shared models are readable").filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "onnx")).collect();
    files.sort();
    assert!(files.len() >= 9, "expected the nine shared models in {}", shared.display());
    for f in files {
        models.push((f.file_stem().unwrap_or_default().to_string_lossy().into_owned(), f, Vec::new()));
    }
    for case in kiln_testkit::zoo_cases() {
        let shapes = case.data_sets.first().map(|(inputs, _)| inputs.iter().filter_map(|p| kiln_onnx::import::read_tensor_file(p).ok()).map(|t| t.1.shape).collect()).unwrap_or_default();
        models.push((format!("zoo/{}", case.name), case.model, shapes));
    }
    let (mut checked, mut failures, mut unbound) = (0, Vec::new(), Vec::new());
    for (name, path, shapes) in &models {
        match count(path, shapes.clone()) {
            Ok((before, after)) => {
                checked += 1;
                if after > before {
                    failures.push(format!("{name}: {before} products bound, {after} optimized"));
                }
            }
            Err(e) => unbound.push(format!("{name}: {e}")),
        }
    }
    println!("{checked} models checked; not compiled to the optimizer ({}): {unbound:#?}", unbound.len());
    assert!(failures.is_empty(), "{failures:#?}");
    // Every shared model, and nearly every zoo case (some decide shapes from input values).
    assert!(checked + unbound.len() == models.len() && unbound.len() * 10 <= models.len(), "{unbound:#?}");
}
