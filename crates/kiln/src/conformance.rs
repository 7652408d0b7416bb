//! The ONNX backend node suite through compiled code: each case is imported, compiled, run on
//! its inputs and compared with its expected outputs (rtol 1e-3, atol 1e-7, NaN equals NaN,
//! other types exactly; output count and dtypes must match).

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_onnx::import::read_tensor_file;

use crate::{CompileOptions, Model};

/// What happened to one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every output matched.
    Pass,
    /// The case did not compile, did not run, or computed a wrong answer.
    Fail {
        /// The stage that failed: `import`, `compile`, `run`, `compare`, `data`, `panic`.
        stage: &'static str,
        /// Why.
        reason: String,
    },
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case directory's name.
    pub name: String,
    /// Its outcome.
    pub outcome: Outcome,
    /// Wall time for the whole case.
    pub millis: f64,
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    while dir.join(format!("{prefix}_{}.pb", files.len())).is_file() {
        files.push(dir.join(format!("{prefix}_{}.pb", files.len())));
    }
    files
}

fn fail(stage: &'static str, reason: impl ToString) -> Outcome {
    Outcome::Fail { stage, reason: reason.to_string() }
}

/// Runs the case in `dir` (`model.onnx` + `test_data_set_0/`).
pub fn run_case(dir: &Path) -> Outcome {
    let model = match Model::load(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return fail("import", e),
    };
    let data = dir.join("test_data_set_0");
    let read = |files: Vec<PathBuf>| files.iter().map(|p| read_tensor_file(p).map(|t| t.1)).collect::<Result<Vec<_>, _>>();
    let (inputs, expected) = match (read(numbered(&data, "input")), read(numbered(&data, "output"))) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => return fail("data", e),
    };
    let compiled = match model.compile(&CompileOptions::from_env()) {
        Ok(c) => c,
        Err(e) => return fail("compile", e),
    };
    let got = match compiled.run(&inputs) {
        Ok(g) => g,
        Err(e) => return fail("run", e),
    };
    if got.len() != expected.len() {
        return fail("compare", format!("{} outputs, expected {}", got.len(), expected.len()));
    }
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        if let Err(e) = kiln_eval::compare::compare(g, w) {
            return fail("compare", format!("output {k}: {e}"));
        }
    }
    Outcome::Pass
}

/// Runs every case under `suite` (sorted by name); a panic inside kiln fails its case.
pub fn run_suite(suite: &Path, filter: Option<&str>) -> std::io::Result<Vec<CaseResult>> {
    run_suite_with(suite, filter, |_, _, _| {})
}

/// [`run_suite`], calling `progress(done, total, result)` after each case.
pub fn run_suite_with(suite: &Path, filter: Option<&str>, mut progress: impl FnMut(usize, usize, &CaseResult)) -> std::io::Result<Vec<CaseResult>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(suite)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| filter.is_none_or(|f| p.file_name().is_some_and(|n| n.to_string_lossy().contains(f))))
        .collect();
    dirs.sort();
    let total = dirs.len();
    Ok(dirs
        .into_iter()
        .enumerate()
        .map(|(done, dir)| {
            let start = Instant::now();
            let outcome = std::panic::catch_unwind(|| run_case(&dir)).unwrap_or_else(|p| {
                let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                fail("panic", msg)
            });
            let result = CaseResult { name: dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), outcome, millis: start.elapsed().as_secs_f64() * 1e3 };
            progress(done + 1, total, &result);
            result
        })
        .collect())
}
