//! Test support shared by kiln's crates.
//!
//! [`node_suite`] finds (and on first use generates, through `scripts/gen-node-suite.sh`) the
//! ONNX backend node suite pinned to onnx 1.23.2, and lists its cases; [`filetest`] runs the IR
//! file tests; [`Rng`] is the seeded generator every crate's tests draw their data from.
#![deny(missing_docs)]

pub mod filetest;
pub mod onnx;
mod rng;

pub use rng::Rng;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root exists")
}

/// The directory of `../shared/models` next to the repository.
pub fn shared_models() -> PathBuf {
    repo_root().join("../shared/models")
}

/// One node-suite case: a model and one data set of inputs and expected outputs.
#[derive(Clone, Debug)]
pub struct Case {
    /// The case name, e.g. `test_add_bcast`.
    pub name: String,
    /// `NAME/model.onnx`.
    pub model: PathBuf,
    /// `NAME/test_data_set_0/input_K.pb`, in K order.
    pub inputs: Vec<PathBuf>,
    /// `NAME/test_data_set_0/output_K.pb`, in K order.
    pub outputs: Vec<PathBuf>,
}

/// The node-suite directory, generated on first use. `KILN_NODE_SUITE` overrides the location
/// (the directory must already hold a generated suite).
pub fn node_suite() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("KILN_NODE_SUITE") {
            return PathBuf::from(dir);
        }
        let root = repo_root();
        let out = root.join("build/node-suite");
        let status = Command::new("bash")
            .arg(root.join("scripts/gen-node-suite.sh"))
            .arg(&out)
            .status()
            .expect("bash runs scripts/gen-node-suite.sh");
        assert!(status.success(), "scripts/gen-node-suite.sh failed ({status})");
        out
    })
}

/// Every case of the node suite, sorted by name.
pub fn node_cases() -> Vec<Case> {
    let dir = node_suite();
    let mut cases: Vec<Case> = std::fs::read_dir(dir)
        .expect("the node suite directory is readable")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| {
            let path = e.path();
            let data = path.join("test_data_set_0");
            let numbered = |prefix: &str| {
                let mut files = Vec::new();
                while data.join(format!("{prefix}_{}.pb", files.len())).is_file() {
                    files.push(data.join(format!("{prefix}_{}.pb", files.len())));
                }
                files
            };
            Case { name: e.file_name().to_string_lossy().into_owned(), model: path.join("model.onnx"), inputs: numbered("input"), outputs: numbered("output") }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

pub use kiln_eval::compare::{compare, compare_within, to_f64s as as_f64s, ATOL, RTOL};

/// Reads a case's inputs and expected outputs.
pub fn read_case(case: &Case) -> Result<(Vec<kiln_tir::Tensor>, Vec<kiln_tir::Tensor>), String> {
    let read = |files: &[PathBuf]| -> Result<Vec<kiln_tir::Tensor>, String> {
        files.iter().map(|p| kiln_onnx::import::read_tensor_file(p).map(|t| t.1).map_err(|e| e.to_string())).collect()
    };
    Ok((read(&case.inputs)?, read(&case.outputs)?))
}

/// The onnxruntime reference outputs of the shared models, generated on first use by
/// `scripts/model-reference.sh` (fixed seeded inputs; token ids in 0..8192).
pub fn model_reference() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = repo_root();
        let out = root.join("build/model-reference");
        let status = Command::new("bash").arg(root.join("scripts/model-reference.sh")).arg(&out).status().expect("bash runs scripts/model-reference.sh");
        assert!(status.success(), "scripts/model-reference.sh failed ({status})");
        out
    })
}

/// Inputs and onnxruntime's outputs for shared model `name` (`mlp`, `resnet50`, ...).
pub fn read_model_reference(name: &str) -> Result<(Vec<kiln_tir::Tensor>, Vec<kiln_tir::Tensor>), String> {
    let dir = model_reference().join(name);
    let numbered = |prefix: &str| {
        let mut files = Vec::new();
        while dir.join(format!("{prefix}_{}.pb", files.len())).is_file() {
            files.push(dir.join(format!("{prefix}_{}.pb", files.len())));
        }
        files
    };
    let case = Case { name: name.to_string(), model: shared_models().join(format!("{name}.onnx")), inputs: numbered("input"), outputs: numbered("output") };
    read_case(&case)
}

/// Runs shared model `name` through `run` on the reference inputs and compares every output
/// with onnxruntime's at rtol 1e-3, atol 1e-4; panics naming the model and output on a mismatch.
pub fn check_model_against_onnxruntime(name: &str, run: impl FnOnce(&kiln_tir::Graph, &[kiln_tir::Tensor]) -> Result<Vec<kiln_tir::Tensor>, String>) {
    let g = kiln_onnx::import::import_path(shared_models().join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (inputs, expected) = read_model_reference(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = run(&g, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got.len(), expected.len(), "{name}: output count");
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        compare_within(g, w, 1e-3, 1e-4).unwrap_or_else(|e| panic!("{name} output {k}: {e}"));
    }
}

/// A zoo case: a model and data sets, each at its own input shapes, with onnxruntime's outputs.
#[derive(Clone, Debug)]
pub struct ZooCase {
    /// The case name, e.g. `fpn_broadcast`.
    pub name: String,
    /// `NAME/model.onnx`.
    pub model: PathBuf,
    /// `NAME/test_data_set_K/`, in K order: (inputs, expected outputs) files.
    pub data_sets: Vec<(Vec<PathBuf>, Vec<PathBuf>)>,
    /// `(rtol, atol)` from `NAME/tolerance.txt`, for float outputs of quantized arithmetic.
    pub tolerance: Option<(f64, f64)>,
}

/// The model zoo of `scripts/zoo.sh` (hand-built models for exporters' conventions,
/// onnxruntime's contrib ops and its quantizer's output), generated on first use.
pub fn zoo() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| generate("scripts/zoo.sh", "build/zoo"))
}

/// The zoo of `scripts/zoo-torch.sh`: torchvision and Hugging Face models exported by
/// PyTorch's two exporters, generated on first use (it installs PyTorch: minutes, 6 GB).
pub fn torch_zoo() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| generate("scripts/zoo-torch.sh", "build/zoo-torch"))
}

/// Runs `script` (idempotent) to fill `dir`, both relative to the repository.
fn generate(script: &str, dir: &str) -> PathBuf {
    let root = repo_root();
    let out = root.join(dir);
    let status = Command::new("bash").arg(root.join(script)).arg(&out).status().unwrap_or_else(|e| panic!("bash runs {script}: {e}"));
    assert!(status.success(), "{script} failed ({status})");
    out
}

/// Every case of the zoo of `scripts/zoo.sh`, sorted by name.
pub fn zoo_cases() -> Vec<ZooCase> {
    cases_in(zoo())
}

/// Every case of a zoo directory (`NAME/model.onnx`, `NAME/test_data_set_K/`), sorted by name.
pub fn cases_in(dir: &Path) -> Vec<ZooCase> {
    let numbered = |data: &Path, prefix: &str| {
        let mut files = Vec::new();
        while data.join(format!("{prefix}_{}.pb", files.len())).is_file() {
            files.push(data.join(format!("{prefix}_{}.pb", files.len())));
        }
        files
    };
    let mut cases: Vec<ZooCase> = std::fs::read_dir(dir)
        .expect("the zoo directory is readable")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| {
            let path = e.path();
            let mut data_sets = Vec::new();
            while path.join(format!("test_data_set_{}", data_sets.len())).is_dir() {
                let data = path.join(format!("test_data_set_{}", data_sets.len()));
                data_sets.push((numbered(&data, "input"), numbered(&data, "output")));
            }
            let tolerance = std::fs::read_to_string(path.join("tolerance.txt")).ok().and_then(|t| {
                let mut it = t.split_whitespace().map(str::parse::<f64>);
                Some((it.next()?.ok()?, it.next()?.ok()?))
            });
            ZooCase { name: e.file_name().to_string_lossy().into_owned(), model: path.join("model.onnx"), data_sets, tolerance }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// The largest magnitude of a numeric tensor's elements (0 for other tensors and NaN).
pub fn max_abs(t: &kiln_tir::Tensor) -> f64 {
    as_f64s(t).map(|v| v.iter().fold(0.0f64, |m, x| if x.abs() > m { x.abs() } else { m })).unwrap_or(0.0)
}

/// Compares an output with onnxruntime's: 8-bit integers (quantized values) within one step,
/// other integers exactly, floats at `tolerance` (default rtol 1e-3, atol 1e-4). Returns the
/// largest absolute difference.
pub fn compare_with_onnxruntime(got: &kiln_tir::Tensor, want: &kiln_tir::Tensor, tolerance: Option<(f64, f64)>) -> Result<f64, String> {
    use kiln_tir::DType;
    if got.dtype != want.dtype || got.shape != want.shape {
        return Err(format!("got {}{:?}, want {}{:?}", got.dtype, got.shape, want.dtype, want.shape));
    }
    let (g, w) = match (as_f64s(got), as_f64s(want)) {
        (Ok(g), Ok(w)) => (g, w),
        _ => return compare_within(got, want, 0.0, 0.0).map(|()| 0.0),
    };
    let (rtol, atol) = match want.dtype {
        DType::U8 | DType::I8 => (0.0, 1.0),
        d if d.is_float() => tolerance.unwrap_or((1e-3, 1e-4)),
        _ => (0.0, 0.0),
    };
    let mut worst = 0.0f64;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let d = (a - b).abs();
        if !(d <= atol + rtol * b.abs()) {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}
