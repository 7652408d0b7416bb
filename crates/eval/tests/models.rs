//! Evaluates the benchmark models (`../shared/models`) end to end and reports the time each
//! takes. Ignored by default: run with `--ignored --nocapture`.
//!
//! With `KILN_MODEL_REFERENCE=DIR`, inputs come from `DIR/NAME/input_K.pb` and the outputs are
//! compared with `DIR/NAME/output_K.pb` (written, for example, by onnx's ReferenceEvaluator).

mod common;

use std::path::{Path, PathBuf};

use kiln_eval::eval_graph;
use kiln_onnx::import::{import_path, read_tensor_file};
use kiln_tir::{DType, Tensor};

/// A deterministic input for a graph parameter of `dtype` and `dims`.
fn input(dtype: DType, dims: &[u64]) -> Tensor {
    let n = dims.iter().product::<u64>() as usize;
    match dtype {
        DType::I64 => common::i64t(dims, &(0..n as i64).map(|i| (i * 7919) % 1000).collect::<Vec<_>>()),
        _ => common::f32t(dims, &common::noise(n, 7)),
    }
}

/// `dir/prefix_K.pb` for K = 0, 1, ... while they exist.
fn numbered(dir: &Path, prefix: &str) -> Vec<Tensor> {
    let mut out = Vec::new();
    loop {
        let p = dir.join(format!("{prefix}_{}.pb", out.len()));
        if !p.is_file() {
            return out;
        }
        out.push(read_tensor_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).1);
    }
}

#[test]
#[ignore]
fn benchmark_models_evaluate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models");
    let reference = std::env::var_os("KILN_MODEL_REFERENCE").map(PathBuf::from);
    for name in ["mlp", "bert_mini", "mobilenet_v2", "resnet50"] {
        let path = dir.join(format!("{name}.onnx"));
        if !path.is_file() {
            println!("{name}: not found at {}", path.display());
            continue;
        }
        let g = import_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (inputs, expected) = match &reference {
            Some(r) => (numbered(&r.join(name), "input"), numbered(&r.join(name), "output")),
            None => (g.inputs().iter().map(|&v| input(g.ty(v).dtype, &g.ty(v).known_dims().expect("static input shape"))).collect(), Vec::new()),
        };
        let start = std::time::Instant::now();
        let out = eval_graph(&g, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}: {:.2} s, outputs {:?}", start.elapsed().as_secs_f64(), out.iter().map(|t| &t.shape).collect::<Vec<_>>());
        for (got, want) in out.iter().zip(&expected) {
            assert_eq!(got.shape, want.shape, "{name}");
            let (g, w) = (common::f32s(got), common::f32s(want));
            let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs() / (1e-4 + b.abs())).fold(0f32, f32::max);
            println!("  worst relative difference from the reference: {worst:.2e}");
            common::assert_close(&g, &w, 1e-3);
        }
    }
}
