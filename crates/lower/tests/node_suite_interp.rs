//! Lowers every node-suite case kiln imports and runs the loop IR in the interpreter: each
//! case lowers and matches ONNX's expected outputs, or is reported unsupported by lowering.
//! A lowered case that computes a wrong answer fails the test, unless it is listed in
//! `node_suite_interp_known_failures.txt`; a listed case that passes fails it too, so the list
//! only shrinks.
//!
//! The second test runs the same cases with every runtime call expanded to plain loops
//! (`kiln_lower::plain`, what a target without kiln's runtime compiles), against the same
//! list: the expansions must not break a case the runtime's kernels pass.
//!
//! `KILN_CASES=substring` restricts the run to matching case names.

use std::collections::BTreeMap;

use kiln_loops::interp;
use kiln_lower::{lower, LowerError};
use kiln_loops::{BufferKind, Program};
use kiln_onnx::import::import_path;
use kiln_testkit::{compare, node_cases, read_case, Case};
use kiln_tir::{Graph, Tensor, TensorData};

enum Outcome {
    Pass,
    Unsupported(String),
    Fail(String),
}

/// Runs `program` on `inputs` in the interpreter and returns the graph outputs.
fn interpret(g: &Graph, program: &Program, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let mut memory = Vec::with_capacity(program.buffers.len());
    for b in &program.buffers {
        let bytes = match &b.kind {
            BufferKind::Input(i) => inputs.get(*i).and_then(Tensor::raw).ok_or("missing input")?.to_vec(),
            BufferKind::Const(t) => t.raw().ok_or("constant without bytes")?.to_vec(),
            BufferKind::Output(_) | BufferKind::Temp => vec![0u8; b.bytes() as usize],
        };
        memory.push(bytes);
    }
    interp::run(program, &mut memory).map_err(|e| e.to_string())?;
    let mut outputs = Vec::new();
    for (i, &v) in g.outputs().iter().enumerate() {
        let pos = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).ok_or("output buffer missing")?;
        let ty = g.ty(v);
        outputs.push(Tensor { dtype: ty.dtype, shape: ty.known_dims().ok_or("symbolic output")?, data: TensorData::Raw(std::mem::take(&mut memory[pos]).into()) });
    }
    Ok(outputs)
}

fn run_case(case: &Case, plain: bool) -> Outcome {
    let Ok(mut g) = import_path(&case.model) else {
        return Outcome::Unsupported("import".into());
    };
    let Ok((inputs, expected)) = read_case(case) else {
        return Outcome::Unsupported("test data".into());
    };
    // As the compiled-model API does: when shapes depend on small integer inputs, compile
    // with those inputs' values as constants.
    let deciding = kiln_tir::infer::shape_deciding_inputs(&g);
    if !deciding.is_empty() {
        let values: Vec<(usize, Tensor)> = deciding.into_iter().filter_map(|i| Some((i, inputs.get(i)?.clone()))).collect();
        if kiln_tir::infer::substitute_input_values(&mut g, &values).is_err() {
            return Outcome::Unsupported("binding input values".into());
        }
        kiln_eval::fold::fold_graph(&mut g);
        if kiln_tir::infer::infer_graph(&mut g).is_err() {
            return Outcome::Unsupported("inference after binding".into());
        }
    }
    let lowered = lower(&g).and_then(|mut p| {
        if plain {
            kiln_lower::plain::expand_calls(&mut p)?;
        }
        Ok(p)
    });
    let program = match lowered {
        Ok(p) => p,
        Err(LowerError::Unsupported { op, reason, .. }) => return Outcome::Unsupported(format!("tensor.{op}: {reason}")),
        Err(e @ LowerError::Internal { .. }) => return Outcome::Fail(e.to_string()),
        Err(e) => return Outcome::Unsupported(e.to_string()),
    };
    let got = match interpret(&g, &program, &inputs) {
        Ok(got) => got,
        Err(e) => return Outcome::Fail(e),
    };
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        if let Err(e) = compare(g, w) {
            return Outcome::Fail(format!("output {k}: {e}"));
        }
    }
    Outcome::Pass
}

#[test]
fn lowered_node_suite_matches_onnx_in_the_interpreter() {
    suite(false);
}

#[test]
fn with_plain_loops_for_every_runtime_call_too() {
    suite(true);
}

fn suite(plain: bool) {
    let filter = std::env::var("KILN_CASES").unwrap_or_default();
    let cases: Vec<Case> = node_cases().into_iter().filter(|c| c.name.contains(&filter)).collect();
    let known: Vec<&str> = include_str!("node_suite_interp_known_failures.txt").lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let (mut pass, mut unsupported, mut failures) = (0, BTreeMap::<String, usize>::new(), Vec::new());
    let (mut unexpected, mut fixed) = (Vec::new(), Vec::new());
    for case in &cases {
        match std::panic::catch_unwind(|| run_case(case, plain)).unwrap_or_else(|_| Outcome::Fail("panic".into())) {
            Outcome::Pass => {
                pass += 1;
                if known.contains(&case.name.as_str()) {
                    fixed.push(case.name.clone());
                }
            }
            Outcome::Unsupported(r) => *unsupported.entry(r.chars().take(90).collect()).or_default() += 1,
            Outcome::Fail(why) => {
                if !known.contains(&case.name.as_str()) {
                    unexpected.push(case.name.clone());
                }
                failures.push(format!("{}: {why}", case.name));
            }
        }
    }
    let n_unsupported: usize = unsupported.values().sum();
    let how = if plain { "lowering with plain loops" } else { "lowering" };
    println!("node suite through {how} + interpreter: {pass} passed, {n_unsupported} unsupported, {} failed, of {}", failures.len(), cases.len());
    let mut reasons: Vec<_> = unsupported.into_iter().collect();
    reasons.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (reason, n) in reasons.iter().take(30) {
        println!("  unsupported ×{n:<4} {reason}");
    }
    for f in &failures {
        println!("  FAILED {f}");
    }
    assert!(unexpected.is_empty(), "lowered cases compute wrong answers: {unexpected:?}");
    assert!(fixed.is_empty(), "known failures now pass; remove them from the list: {fixed:?}");
}
