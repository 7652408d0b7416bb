//! Runs the evaluator on every case of the ONNX backend node suite (imported by kiln-onnx)
//! and compares with the expected outputs: floats within rtol 1e-3 / atol 1e-7 (NaN equals
//! NaN), everything else exactly. Prints pass / unsupported / fail counts.
//!
//! f16 and bf16 results get a few units of their own rounding error instead of rtol 1e-3:
//! the evaluator rounds once per op, while the reference rounds the intermediate steps of
//! composite ops (Softmax inside Attention, ...) too.
//!
//! Cases listed in `node_suite_known_failures.txt` may fail; any other failure, and any case
//! on that list that now passes, fails the test, so the list only shrinks.
//!
//! The suite comes from `kiln_testkit` (generated on first use; `KILN_NODE_SUITE` overrides).

use std::collections::BTreeMap;

use kiln_eval::{EvalError, eval_graph, eval_op};
use kiln_onnx::import::{import_path, read_tensor_file};
use kiln_testkit::{Case, node_cases};
use kiln_tir::op::{Cast, Op};
use kiln_tir::{DType, Tensor, TensorData};

const RTOL: f64 = 1e-3;

/// Relative tolerance for results of `dtype`: four units of f16/bf16 rounding, else [`RTOL`].
fn rtol(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 4.0 * 2f64.powi(-11),
        DType::BF16 => 4.0 * 2f64.powi(-8),
        _ => RTOL,
    }
}
const ATOL: f64 = 1e-7;

/// What happened to one case.
enum Outcome {
    Pass,
    /// The importer or the evaluator does not support something in the case.
    Unsupported(String),
    Fail(String),
}

/// The op-level error inside node wrappers.
fn innermost(e: &EvalError) -> &EvalError {
    match e {
        EvalError::AtNode { source, .. } => innermost(source),
        e => e,
    }
}

/// The elements of a numeric tensor as f64 (decoded by the evaluator's own Cast).
fn as_f64s(t: &Tensor) -> Result<Vec<f64>, String> {
    let out = eval_op(&Op::Cast(Cast { to: DType::F64, ..Cast::default() }), &[Some(t)], 1).map_err(|e| e.to_string())?;
    let raw = out[0].raw().ok_or("no data")?;
    Ok(raw.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
}

fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype != want.dtype || got.shape != want.shape {
        return Err(format!("got {}{:?}, want {}{:?}", got.dtype, got.shape, want.dtype, want.shape));
    }
    if !want.dtype.is_float() {
        return match (&got.data, &want.data) {
            (TensorData::Strings(g), TensorData::Strings(w)) if g == w => Ok(()),
            (TensorData::Raw(g), TensorData::Raw(w)) if g == w => Ok(()),
            _ => Err(format!("{} elements differ", want.dtype)),
        };
    }
    let (g, w) = (as_f64s(got)?, as_f64s(want)?);
    let rtol = rtol(want.dtype);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= ATOL + rtol * b.abs();
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

fn run_case(case: &Case) -> Outcome {
    let g = match import_path(&case.model) {
        Ok(g) => g,
        Err(e) if e.is_unsupported() => return Outcome::Unsupported(format!("import: {e}")),
        Err(e) => return Outcome::Unsupported(format!("import failed: {e}")),
    };
    let read = |files: &[std::path::PathBuf]| -> Result<Vec<Tensor>, String> { files.iter().map(|p| read_tensor_file(p).map(|t| t.1).map_err(|e| e.to_string())).collect() };
    let (inputs, expected) = match (read(&case.inputs), read(&case.outputs)) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => return Outcome::Unsupported(format!("test data: {e}")),
    };
    let got = match eval_graph(&g, &inputs) {
        Ok(got) => got,
        Err(e) if matches!(innermost(&e), EvalError::Unsupported { .. }) => return Outcome::Unsupported(innermost(&e).to_string()),
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    if got.len() != expected.len() {
        return Outcome::Fail(format!("{} outputs, want {}", got.len(), expected.len()));
    }
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        if let Err(e) = compare(g, w) {
            return Outcome::Fail(format!("output {k}: {e}"));
        }
    }
    Outcome::Pass
}

#[test]
fn node_suite_matches_onnx() {
    let cases = node_cases();
    let known: Vec<&str> = include_str!("node_suite_known_failures.txt").lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let (mut pass, mut unsupported, mut failures) = (0, BTreeMap::<String, usize>::new(), Vec::new());
    let mut new_failures = Vec::new();
    let mut fixed = Vec::new();
    for case in &cases {
        let name = case.name.clone();
        let outcome = std::panic::catch_unwind(|| run_case(case)).unwrap_or_else(|_| Outcome::Fail("panic".into()));
        match outcome {
            Outcome::Pass => {
                pass += 1;
                if known.contains(&name.as_str()) {
                    fixed.push(name);
                }
            }
            Outcome::Unsupported(reason) => {
                // Group by the reason's first line without the node name.
                let key = reason.lines().next().unwrap_or("").chars().take(100).collect::<String>();
                *unsupported.entry(key).or_default() += 1;
            }
            Outcome::Fail(why) => {
                if !known.contains(&name.as_str()) {
                    new_failures.push(format!("{name}: {why}"));
                }
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    let n_unsupported: usize = unsupported.values().sum();
    println!("node suite eval: {pass} passed, {n_unsupported} unsupported, {} failed, of {}", failures.len(), cases.len());
    let mut reasons: Vec<_> = unsupported.into_iter().collect();
    reasons.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (reason, n) in reasons.iter().take(40) {
        println!("  unsupported ×{n:<4} {reason}");
    }
    for f in &failures {
        println!("  FAILED {f}");
    }
    assert!(new_failures.is_empty(), "{} cases fail that are not known failures:\n{}", new_failures.len(), new_failures.join("\n"));
    assert!(fixed.is_empty(), "known failures now pass; remove them from node_suite_known_failures.txt: {fixed:?}");
}
