//! Edge cases the node suite does not reach: NaN and infinities, constant axes lists, integer
//! reductions. Each test lowers a tensor-IR text and runs it in the interpreter.

use kiln_tir::text::parse;

use kiln_loops::interp;
use kiln_loops::ir::*;
use crate::lower;

/// Lowers `src` (a graph without parameters) and returns its outputs as `f64`s.
fn run(src: &str) -> Vec<Vec<f64>> {
    let g = parse(src).expect("the test graph parses");
    let program = lower(&g).expect("the test graph lowers");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory).expect("the program runs");
    let mut outputs = Vec::new();
    for i in 0..g.outputs().len() {
        let b = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).expect("output buffer");
        let bytes = &memory[b];
        let values = match program.buffers[b].elem {
            ElemType::Scalar(ScalarType::F32) => bytes.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap()))).collect(),
            ElemType::Scalar(ScalarType::F64) => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            ElemType::Scalar(ScalarType::I64) => bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            ElemType::Scalar(ScalarType::I32) => bytes.chunks_exact(4).map(|c| f64::from(i32::from_le_bytes(c.try_into().unwrap()))).collect(),
            other => panic!("decode {other:?}"),
        };
        outputs.push(values);
    }
    outputs
}

/// Asserts `got` equals `want` element by element, NaN equal to NaN, to 1e-6 relative.
fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let same = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-6 * w.abs();
        assert!(same, "{got:?} vs {want:?}");
    }
}

#[test]
fn argmax_and_argmin_pick_the_first_or_last_nan() {
    let out = run("graph @main() -> (i64[], i64[], i64[], i64[]) {
  %0 = const dense<f32[5]: [1.0, nan, 3.0, nan, 3.0]>
  %1 = tensor.argmax(%0) {keepdims = 0} : i64[]
  %2 = tensor.argmax(%0) {keepdims = 0, select_last_index = 1} : i64[]
  %3 = tensor.argmin(%0) {keepdims = 0} : i64[]
  %4 = tensor.argmin(%0) {keepdims = 0, select_last_index = 1} : i64[]
  return %1, %2, %3, %4
}");
    assert_eq!(out, vec![vec![1.0], vec![3.0], vec![1.0], vec![3.0]]);
    let out = run("graph @main() -> (i64[], i64[]) {
  %0 = const dense<f32[5]: [1.0, 3.0, 3.0, -2.0, -2.0]>
  %1 = tensor.argmax(%0) {keepdims = 0, select_last_index = 1} : i64[]
  %2 = tensor.argmin(%0) {keepdims = 0} : i64[]
  return %1, %2
}");
    assert_eq!(out, vec![vec![2.0], vec![3.0]]);
}

#[test]
fn reductions_over_constant_axes() {
    // x[i, j, k] = 6i + 2j + k, shape [2, 3, 2]; sums over axes {0, 2} are 14 + 8j... as below.
    let out = run("graph @main() -> (f32[3], f32[1, 3, 1], f32[2, 3, 2], f32[], i32[2]) {
  %0 = const dense<f32[2, 3, 2]: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]>
  %1 = const dense<i64[2]: [0, -1]>
  %2 = const dense<i64[0]: []>
  %3 = tensor.reduce_sum(%0, %1) {keepdims = 0} : f32[3]
  %4 = tensor.reduce_max(%0, %1) : f32[1, 3, 1]
  %5 = tensor.reduce_sum_square(%0, %2) {noop_with_empty_axes = 1} : f32[2, 3, 2]
  %6 = tensor.reduce_mean(%0, %2) {keepdims = 0} : f32[]
  %7 = const dense<i32[2, 2]: [3, 4, -6, 8]>
  %8 = const dense<i64[1]: [1]>
  %9 = tensor.reduce_l2(%7, %8) {keepdims = 0} : i32[2]
  return %3, %4, %5, %6, %9
}");
    assert_close(&out[0], &[0.0 + 1.0 + 6.0 + 7.0, 2.0 + 3.0 + 8.0 + 9.0, 4.0 + 5.0 + 10.0 + 11.0]);
    assert_close(&out[1], &[7.0, 9.0, 11.0]);
    assert_close(&out[2], &(0..12).map(|v| f64::from(v * v)).collect::<Vec<_>>());
    assert_close(&out[3], &[5.5]);
    assert_close(&out[4], &[5.0, 10.0]);
}

#[test]
fn log_sum_exp_is_stable_and_handles_infinities() {
    let out = run("graph @main() -> (f32[4]) {
  %0 = const dense<f32[4, 2]: [1000.0, 1000.0, inf, 1.0, -inf, -inf, -inf, 0.0]>
  %1 = const dense<i64[1]: [1]>
  %2 = tensor.reduce_log_sum_exp(%0, %1) {keepdims = 0} : f32[4]
  return %2
}");
    assert_close(&out[0], &[1000.0 + 2f64.ln(), f64::INFINITY, f64::NEG_INFINITY, 0.0]);
}

#[test]
fn max_propagates_nan_and_empty_sets_give_identities() {
    let out = run("graph @main() -> (f32[2], f32[2, 1], f32[2, 1], f32[2, 1]) {
  %0 = const dense<f32[2, 2]: [1.0, nan, 2.0, 1.0]>
  %1 = const dense<i64[1]: [1]>
  %2 = tensor.reduce_max(%0, %1) {keepdims = 0} : f32[2]
  %3 = const dense<f32[2, 0]: []>
  %4 = tensor.reduce_min(%3, %1) : f32[2, 1]
  %5 = tensor.reduce_prod(%3, %1) : f32[2, 1]
  %6 = tensor.reduce_mean(%3, %1) : f32[2, 1]
  return %2, %4, %5, %6
}");
    assert_close(&out[0], &[f64::NAN, 2.0]);
    assert_close(&out[1], &[f64::INFINITY; 2]);
    assert_close(&out[2], &[1.0; 2]);
    assert_close(&out[3], &[f64::NAN; 2]);
}

#[test]
fn topk_orders_nan_first_and_ties_by_index() {
    let out = run("graph @main() -> (f32[3], i64[3], f32[2], i64[2]) {
  %0 = const dense<f32[5]: [1.0, nan, 3.0, 0.5, 3.0]>
  %1 = const dense<i64[1]: [3]>
  %2 = const dense<i64[1]: [2]>
  %3, %4 = tensor.topk(%0, %1) : f32[3], i64[3]
  %5, %6 = tensor.topk(%0, %2) {largest = 0} : f32[2], i64[2]
  return %3, %4, %5, %6
}");
    assert_close(&out[0], &[f64::NAN, 3.0, 3.0]);
    assert_eq!(out[1], vec![1.0, 2.0, 4.0]);
    assert_close(&out[2], &[0.5, 1.0]);
    assert_eq!(out[3], vec![3.0, 0.0]);
}

#[test]
fn cumsum_with_a_constant_axis() {
    let out = run("graph @main() -> (f32[2, 3], i32[2, 3]) {
  %0 = const dense<f32[2, 3]: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]>
  %1 = const dense<i32[]: [-1]>
  %2 = tensor.cumsum(%0, %1) {exclusive = 1, reverse = 1} : f32[2, 3]
  %3 = const dense<i32[2, 3]: [1, 2, 3, 4, 5, 6]>
  %4 = const dense<i64[]: [0]>
  %5 = tensor.cumprod(%3, %4) : i32[2, 3]
  return %2, %5
}");
    assert_close(&out[0], &[5.0, 3.0, 0.0, 11.0, 6.0, 0.0]);
    assert_eq!(out[1], vec![1.0, 2.0, 3.0, 4.0, 10.0, 18.0]);
}

#[test]
fn lp_normalization_of_a_zero_vector_is_zero() {
    let out = run("graph @main() -> (f32[2, 2]) {
  %0 = const dense<f32[2, 2]: [0.0, 0.0, 3.0, -4.0]>
  %1 = tensor.lp_normalization(%0) {p = 1} : f32[2, 2]
  return %1
}");
    assert_close(&out[0], &[0.0, 0.0, 3.0 / 7.0, -4.0 / 7.0]);
}
