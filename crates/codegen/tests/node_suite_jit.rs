//! Lowers every node-suite case kiln imports, JIT-compiles the loop IR and runs it next to the
//! loop-IR interpreter on identical memory.
//!
//! A case passes when the JIT's outputs equal the interpreter's bit for bit (any NaN equals any
//! NaN) and match ONNX's expected outputs. It is unsupported when import, lowering or code
//! generation declines it. When the interpreter itself faults (a lowering bug: an
//! out-of-bounds index), the JIT is not run, since generated code does not check bounds. When
//! both agree on a wrong answer, the lowering is wrong and `node_suite_interp` reports it; this
//! test counts it separately. It fails on JIT failures only: a difference from the
//! interpreter, a wrong answer the interpreter gets right, or an internal codegen error.
//!
//! `KILN_CASES=substring` restricts the run to matching case names.

use std::collections::BTreeMap;

use kiln_codegen::{compile_jit, CodegenError};
use kiln_loops::interp::{self, InterpError};
use kiln_lower::{lower, LowerError};
use kiln_loops::{BufferKind, ElemType, Program, ScalarType};
use kiln_onnx::import::import_path;
use kiln_testkit::{compare, node_cases, read_case, Case};
use kiln_tir::{Graph, Tensor, TensorData};

enum Outcome {
    Pass,
    Unsupported(String),
    /// The interpreter faulted or computed the same wrong answer: a lowering bug.
    Lowering(String),
    Fail(String),
}

/// The initial contents of every buffer.
fn initial_memory(program: &Program, inputs: &[Tensor]) -> Result<Vec<Vec<u8>>, String> {
    program
        .buffers
        .iter()
        .map(|b| {
            Ok(match &b.kind {
                BufferKind::Input(i) => inputs.get(*i).and_then(Tensor::raw).ok_or("missing input")?.to_vec(),
                BufferKind::Const(t) => t.raw().ok_or("constant without bytes")?.to_vec(),
                BufferKind::Output(_) | BufferKind::Temp => vec![0u8; b.bytes() as usize],
            })
        })
        .collect()
}

/// Runs the compiled program on a copy of `memory` (8-byte aligned, at least one word per
/// buffer) and returns the final memory, or the failed check's code.
fn run_jit(program: &Program, memory: &[Vec<u8>]) -> Result<Result<Vec<Vec<u8>>, u32>, CodegenError> {
    let jit = compile_jit(program)?;
    let mut words: Vec<Vec<u64>> = memory.iter().map(|m| vec![0u64; m.len().div_ceil(8).max(1)]).collect();
    for (w, m) in words.iter_mut().zip(memory) {
        as_bytes_mut(w)[..m.len()].copy_from_slice(m);
    }
    let table: Vec<*mut u8> = words.iter_mut().map(|w| w.as_mut_ptr().cast::<u8>()).collect();
    // SAFETY: every buffer is live and as long as the program says; the interpreter has run
    // this program on these inputs without an out-of-bounds access.
    if let Err(code) = unsafe { jit.run(&table) } {
        return Ok(Err(code));
    }
    Ok(Ok(words.iter_mut().zip(memory).map(|(w, m)| as_bytes_mut(w)[..m.len()].to_vec()).collect()))
}

fn as_bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and every byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), w.len() * 8) }
}

/// The first element where two buffers of `elem` differ (NaN equals NaN); for packed types,
/// the first byte.
fn first_difference(elem: ElemType, got: &[u8], want: &[u8]) -> Option<usize> {
    let n = elem.bits().div_ceil(8) as usize;
    got.chunks_exact(n).zip(want.chunks_exact(n)).position(|(g, w)| {
        g != w
            && !match elem {
                ElemType::Scalar(ScalarType::F32) => f32::from_le_bytes(g.try_into().unwrap()).is_nan() && f32::from_le_bytes(w.try_into().unwrap()).is_nan(),
                ElemType::Scalar(ScalarType::F64) => f64::from_le_bytes(g.try_into().unwrap()).is_nan() && f64::from_le_bytes(w.try_into().unwrap()).is_nan(),
                ElemType::F16 => u16::from_le_bytes(g.try_into().unwrap()) & 0x7fff > 0x7c00 && u16::from_le_bytes(w.try_into().unwrap()) & 0x7fff > 0x7c00,
                ElemType::BF16 => u16::from_le_bytes(g.try_into().unwrap()) & 0x7fff > 0x7f80 && u16::from_le_bytes(w.try_into().unwrap()) & 0x7fff > 0x7f80,
                // Integers, and the float8/float4 formats, whose NaNs both sides encode alike.
                _ => false,
            }
    })
}

/// The graph outputs held in `memory`.
fn outputs(g: &Graph, program: &Program, memory: &[Vec<u8>]) -> Result<Vec<Tensor>, String> {
    let mut out = Vec::new();
    for (i, &v) in g.outputs().iter().enumerate() {
        let pos = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).ok_or("output buffer missing")?;
        let ty = g.ty(v);
        out.push(Tensor { dtype: ty.dtype, shape: ty.known_dims().ok_or("symbolic output")?, data: TensorData::Raw(memory[pos].clone().into()) });
    }
    Ok(out)
}

fn run_case(case: &Case) -> Outcome {
    let Ok(g) = import_path(&case.model) else {
        return Outcome::Unsupported("import".into());
    };
    let program = match lower(&g) {
        Ok(p) => p,
        Err(LowerError::Unsupported { op, reason, .. }) => return Outcome::Unsupported(format!("tensor.{op}: {reason}")),
        Err(e @ LowerError::Internal { .. }) => return Outcome::Lowering(e.to_string()),
        Err(e) => return Outcome::Unsupported(e.to_string()),
    };
    let Ok((inputs, expected)) = read_case(case) else {
        return Outcome::Unsupported("test data".into());
    };
    let memory = match initial_memory(&program, &inputs) {
        Ok(m) => m,
        Err(e) => return Outcome::Unsupported(e),
    };
    let mut want = memory.clone();
    let want_status = match interp::run(&program, &mut want) {
        Ok(()) => Ok(()),
        Err(InterpError::Check { code, .. }) => Err(code),
        Err(e) => return Outcome::Lowering(format!("interpreter fault, JIT not run: {e}")),
    };
    let got = match run_jit(&program, &memory) {
        Ok(Ok(got)) => got,
        Ok(Err(code)) if want_status == Err(code) => return Outcome::Lowering(format!("run-time error {code} in both")),
        Ok(Err(code)) => return Outcome::Fail(format!("JIT stopped with error {code}, the interpreter with {want_status:?}")),
        Err(e @ CodegenError::Unsupported { .. }) => return Outcome::Unsupported(format!("codegen: {e}")),
        Err(e) => return Outcome::Fail(format!("codegen: {e}")),
    };
    if let Err(code) = want_status {
        return Outcome::Fail(format!("the interpreter stopped with error {code}, the JIT did not"));
    }
    for (i, b) in program.buffers.iter().enumerate() {
        if let Some(at) = first_difference(b.elem, &got[i], &want[i]) {
            return Outcome::Fail(format!("buffer @{i} `{}` differs from the interpreter at element {at}", b.name));
        }
    }
    let got = match outputs(&g, &program, &got) {
        Ok(t) => t,
        Err(e) => return Outcome::Fail(e),
    };
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        if let Err(e) = compare(g, w) {
            // The JIT equals the interpreter here, so the lowering computes this wrong answer.
            return Outcome::Lowering(format!("output {k}: {e}"));
        }
    }
    Outcome::Pass
}

#[test]
fn lowered_node_suite_matches_onnx_through_the_jit() {
    let filter = std::env::var("KILN_CASES").unwrap_or_default();
    let cases: Vec<Case> = node_cases().into_iter().filter(|c| c.name.contains(&filter)).collect();
    let (mut pass, mut unsupported, mut lowering, mut failures) = (0, BTreeMap::<String, usize>::new(), Vec::new(), Vec::new());
    for case in &cases {
        match std::panic::catch_unwind(|| run_case(case)).unwrap_or_else(|_| Outcome::Fail("panic".into())) {
            Outcome::Pass => pass += 1,
            Outcome::Unsupported(r) => *unsupported.entry(r.chars().take(90).collect()).or_default() += 1,
            Outcome::Lowering(why) => lowering.push(format!("{}: {why}", case.name)),
            Outcome::Fail(why) => failures.push(format!("{}: {why}", case.name)),
        }
    }
    let n_unsupported: usize = unsupported.values().sum();
    println!(
        "node suite through lowering + JIT: {pass} passed, {n_unsupported} unsupported, {} wrong in lowering (JIT = interpreter), {} failed in the JIT, of {}",
        lowering.len(),
        failures.len(),
        cases.len()
    );
    let mut reasons: Vec<_> = unsupported.into_iter().collect();
    reasons.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (reason, n) in reasons.iter().take(30) {
        println!("  unsupported ×{n:<4} {reason}");
    }
    for l in &lowering {
        println!("  LOWERING {l}");
    }
    for f in &failures {
        println!("  FAILED {f}");
    }
    assert!(failures.is_empty(), "{} lowered cases compute wrong answers through the JIT", failures.len());
}
