//! `sequence_lens`, which the node suite never sets, on a recurrence simple enough to follow
//! by hand: `h ← relu(x + h)` with unit weights, so each step adds its input.

use kiln_tir::text::parse;

use kiln_loops::interp;
use kiln_loops::ir::*;
use crate::lower;

/// Lowers `src` (a graph without parameters) and returns its `f32` outputs.
fn run(src: &str) -> Vec<Vec<f32>> {
    let g = parse(src).expect("the test graph parses");
    let program = lower(&g).expect("the test graph lowers");
    kiln_loops::verify::verify(&program).expect("the lowered program verifies");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory).expect("the program runs");
    (0..g.outputs().len())
        .map(|i| {
            let b = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).expect("output buffer");
            memory[b].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        })
        .collect()
}

/// A bidirectional RNN over `x[t, b]` (3 steps, 2 rows) with the given lengths.
fn cumulative(lens: [i32; 2]) -> Vec<Vec<f32>> {
    run(&format!(
        "graph @main() -> (f32[3, 2, 2, 1], f32[2, 2, 1]) {{
  %0 = const dense<f32[3, 2, 1]: [1.0, 10.0, 2.0, 20.0, 3.0, 30.0]>
  %1 = const dense<f32[2, 1, 1]: [1.0, 1.0]>
  %2 = const dense<i32[2]: [{}, {}]>
  %3, %4 = tensor.rnn(%0, %1, %1, _, %2) {{activations = [\"Relu\", \"Relu\"], direction = \"bidirectional\", hidden_size = 1}} : f32[3, 2, 2, 1], f32[2, 2, 1]
  return %3, %4
}}",
        lens[0], lens[1]
    ))
}

#[test]
fn rows_stop_at_their_length_and_reverse_starts_there() {
    let out = cumulative([3, 1]);
    // Y[t, direction, row]: forward sums 1, 3, 6 and 10; reverse sums from the row's last step.
    assert_eq!(out[0], vec![1.0, 10.0, 6.0, 10.0, 3.0, 0.0, 5.0, 0.0, 6.0, 0.0, 3.0, 0.0]);
    assert_eq!(out[1], vec![6.0, 10.0, 6.0, 10.0]);
}

#[test]
fn a_row_of_length_zero_has_zero_outputs() {
    let out = cumulative([0, 2]);
    assert_eq!(out[0], vec![0.0, 10.0, 0.0, 30.0, 0.0, 30.0, 0.0, 20.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(out[1], vec![0.0, 30.0, 0.0, 30.0]);
}

#[test]
fn a_length_past_the_sequence_is_a_run_time_error() {
    let g = parse(
        "graph @main() -> (f32[1, 1, 1]) {
  %0 = const dense<f32[2, 1, 1]: [1.0, 2.0]>
  %1 = const dense<f32[1, 1, 1]: [1.0]>
  %2 = const dense<i32[1]: [3]>
  %3, %4 = tensor.rnn(%0, %1, %1, _, %2) {hidden_size = 1} : f32[2, 1, 1, 1], f32[1, 1, 1]
  return %4
}",
    )
    .expect("parses");
    let program = lower(&g).expect("lowers");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    assert!(matches!(interp::run(&program, &mut memory), Err(interp::InterpError::Check { .. })));
}
