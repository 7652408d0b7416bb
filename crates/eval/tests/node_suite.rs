//! Runs the evaluator on every case of the ONNX backend node suite (imported by kiln-onnx)
//! and compares with the expected outputs: floats within rtol 1e-3 / atol 1e-7 (NaN equals
//! NaN), everything else exactly. Prints pass / unsupported / fail counts.
//!
//! A few f16/bf16 attention cases are known failures: the evaluator rounds once per op, while
//! the reference rounds the intermediate steps of composite ops (Softmax inside Attention).
//!
//! Cases listed in `node_suite_known_failures.txt` may fail; any other failure, and any case
//! on that list that now passes, fails the test, so the list only shrinks.
//!
//! The suite comes from `kiln_testkit` (generated on first use; `KILN_NODE_SUITE` overrides).

use std::collections::BTreeMap;

use kiln_eval::{EvalError, eval_graph};
use kiln_onnx::import::import_path;
use kiln_testkit::{Case, compare, node_cases, read_case};

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

fn run_case(case: &Case) -> Outcome {
    let g = match import_path(&case.model) {
        Ok(g) => g,
        Err(e) if e.is_unsupported() => return Outcome::Unsupported(format!("import: {e}")),
        Err(e) => return Outcome::Unsupported(format!("import failed: {e}")),
    };
    let (inputs, expected) = match read_case(case) {
        Ok(data) => data,
        Err(e) => return Outcome::Unsupported(format!("test data: {e}")),
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
