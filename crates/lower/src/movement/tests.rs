//! Run-time parameters and data-dependent indices: the lowered kernels compute the right
//! answer, and bad values end the run with the node's error instead of touching memory
//! outside a buffer. (The node suite covers the ops' semantics.)

use kiln_tir::text::parse;

use kiln_loops::interp::{self, InterpError};
use kiln_loops::ir::*;
use crate::lower;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Lowers `src` and runs it on `inputs`; returns output 0's bytes.
fn run(src: &str, inputs: &[Vec<u8>]) -> Result<Vec<u8>, InterpError> {
    let g = parse(src).expect("the test graph parses");
    let p = lower(&g).expect("the test graph lowers");
    let mut memory: Vec<Vec<u8>> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(i) => inputs[*i].clone(),
            BufferKind::Const(t) => t.raw().unwrap().to_vec(),
            _ => vec![0; b.bytes() as usize],
        })
        .collect();
    interp::run(&p, &mut memory)?;
    let out = p.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).unwrap();
    Ok(std::mem::take(&mut memory[out]))
}

fn is_check(r: Result<Vec<u8>, InterpError>, what: &str) {
    match r {
        Err(InterpError::Check { message, .. }) => assert!(message.contains(what), "{message}"),
        other => panic!("expected a failed check naming `{what}`, got {other:?}"),
    }
}

const GATHER: &str = "graph @main(%0: f32[3, 2], %1: i64[2]) -> (f32[2, 2]) {
  %2 = tensor.gather(%0, %1) : f32[2, 2]
  return %2
}";

#[test]
fn gather_wraps_negative_indices_and_checks_the_rest() {
    let data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let got = run(GATHER, &[data.clone(), i64s(&[-1, 0])]).unwrap();
    assert_eq!(to_f32s(&got), [4.0, 5.0, 0.0, 1.0]);
    is_check(run(GATHER, &[data.clone(), i64s(&[3, 0])]), "index out of range");
    is_check(run(GATHER, &[data, i64s(&[0, -4])]), "index out of range");
}

const SLICE: &str = "graph @main(%0: f32[6], %1: i64[1], %2: i64[1], %3: i64[1]) -> (f32[2]) {
  %4 = const dense<i64[1]: [0]>
  %5 = tensor.slice(%0, %1, %2, %4, %3) : f32[2]
  return %5
}";

#[test]
fn slice_with_run_time_bounds_checks_them_against_the_shape() {
    let data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let got = run(SLICE, &[data.clone(), i64s(&[-1]), i64s(&[i64::MIN]), i64s(&[-3])]).unwrap();
    assert_eq!(to_f32s(&got), [5.0, 2.0]);
    let got = run(SLICE, &[data.clone(), i64s(&[1]), i64s(&[1000]), i64s(&[i64::MAX])]).unwrap_err();
    assert!(matches!(got, InterpError::Check { .. }));
    let got = run(SLICE, &[data.clone(), i64s(&[1]), i64s(&[4]), i64s(&[2])]).unwrap();
    assert_eq!(to_f32s(&got), [1.0, 3.0]);
    is_check(run(SLICE, &[data.clone(), i64s(&[0]), i64s(&[6]), i64s(&[1])]), "slice bounds");
    is_check(run(SLICE, &[data, i64s(&[0]), i64s(&[6]), i64s(&[0])]), "step is zero");
}

const SCATTER_ND: &str = "graph @main(%0: f32[4], %1: i64[2, 1], %2: f32[2]) -> (f32[4]) {
  %3 = tensor.scatter_nd(%0, %1, %2) {reduction = \"add\"} : f32[4]
  return %3
}";

#[test]
fn scatter_nd_reduces_duplicates_and_checks_indices() {
    let data = f32s(&[1.0, 1.0, 1.0, 1.0]);
    let got = run(SCATTER_ND, &[data.clone(), i64s(&[2, -2]), f32s(&[5.0, 7.0])]).unwrap();
    assert_eq!(to_f32s(&got), [1.0, 1.0, 13.0, 1.0]);
    is_check(run(SCATTER_ND, &[data, i64s(&[0, 4]), f32s(&[5.0, 7.0])]), "index out of range");
}

const COMPRESS: &str = "graph @main(%0: f32[2, 3], %1: bool[3]) -> (f32[2, 2]) {
  %2 = tensor.compress(%0, %1) {axis = 1} : f32[2, 2]
  return %2
}";

#[test]
fn compress_with_a_run_time_condition_checks_the_count() {
    let data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let got = run(COMPRESS, &[data.clone(), vec![1, 0, 1]]).unwrap();
    assert_eq!(to_f32s(&got), [0.0, 2.0, 3.0, 5.0]);
    is_check(run(COMPRESS, &[data.clone(), vec![1, 1, 1]]), "more selected");
    is_check(run(COMPRESS, &[data, vec![0, 0, 1]]), "fewer selected");
}

const EXPAND: &str = "graph @main(%0: f32[3, 1], %1: i64[2]) -> (f32[3, 2]) {
  %2 = tensor.expand(%0, %1) : f32[3, 2]
  return %2
}";

#[test]
fn expand_checks_a_run_time_shape() {
    let data = f32s(&[1.0, 2.0, 3.0]);
    let got = run(EXPAND, &[data.clone(), i64s(&[1, 2])]).unwrap();
    assert_eq!(to_f32s(&got), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    is_check(run(EXPAND, &[data, i64s(&[3, 4])]), "shape input");
}

const REVERSE: &str = "graph @main(%0: f32[3, 2], %1: i64[2]) -> (f32[3, 2]) {
  %2 = tensor.reverse_sequence(%0, %1) {batch_axis = 1, time_axis = 0} : f32[3, 2]
  return %2
}";

#[test]
fn reverse_sequence_checks_lengths() {
    let data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let got = run(REVERSE, &[data.clone(), i64s(&[3, 2])]).unwrap();
    assert_eq!(to_f32s(&got), [4.0, 3.0, 2.0, 1.0, 0.0, 5.0]);
    is_check(run(REVERSE, &[data, i64s(&[4, 1])]), "sequence length");
}

const RESIZE: &str = "graph @main(%0: f32[1, 1, 2, 2], %1: f32[4]) -> (f32[1, 1, 4, 4]) {
  %2 = tensor.resize(%0, _, %1) {mode = \"linear\"} : f32[1, 1, 4, 4]
  return %2
}";

#[test]
fn resize_with_run_time_scales_checks_the_output_shape() {
    let data = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let got = to_f32s(&run(RESIZE, &[data.clone(), f32s(&[1.0, 1.0, 2.0, 2.0])]).unwrap());
    assert_eq!(got[..4], [1.0, 1.25, 1.75, 2.0]);
    is_check(run(RESIZE, &[data, f32s(&[1.0, 1.0, 3.0, 2.0])]), "scales");
}

#[test]
fn f32_resizes_one_axis_at_a_time_agree_with_the_f64_tensor_product() {
    // The same resize of f32 data (separable passes, in f32) and of f64 data (every element
    // directly, in f64): upsampling, downsampling with antialiasing, cubic with excluded
    // outside taps, and a batch axis resized too.
    let cases = [
        ("[1, 2, 3, 5]", "[1, 2, 7, 4]", "mode = \"linear\""),
        ("[1, 2, 9, 8]", "[1, 2, 4, 3]", "antialias = 1, mode = \"linear\""),
        ("[1, 1, 4, 6]", "[1, 1, 6, 9]", "cubic_coeff_a = -0.5, exclude_outside = 1, mode = \"cubic\""),
        ("[2, 1, 3, 3]", "[3, 1, 5, 2]", "coordinate_transformation_mode = \"align_corners\", mode = \"linear\""),
    ];
    for (from, to, attrs) in cases {
        let graph = |t: &str| {
            format!("graph @main(%0: {t}{from}, %1: i64[4]) -> ({t}{to}) {{\n  %2 = tensor.resize(%0, _, _, %1) {{{attrs}}} : {t}{to}\n  return %2\n}}")
        };
        let dims = |s: &str| s.trim_matches(['[', ']']).split(", ").map(|d| d.parse::<i64>().unwrap()).collect::<Vec<_>>();
        let numel: i64 = dims(from).iter().product();
        let data: Vec<f64> = (0..numel).map(|i| ((i * 37 % 23) as f64 - 11.0) / 3.0).collect();
        let sizes = i64s(&dims(to));
        let f32_data = f32s(&data.iter().map(|&v| v as f32).collect::<Vec<_>>());
        let f64_data: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let single = to_f32s(&run(&graph("f32"), &[f32_data, sizes.clone()]).unwrap());
        let double: Vec<f64> = run(&graph("f64"), &[f64_data, sizes]).unwrap().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(single.len(), double.len());
        for (s, d) in single.iter().zip(&double) {
            assert!((f64::from(*s) - d).abs() <= 1e-5 * d.abs().max(1.0), "{attrs}: {single:?} vs {double:?}");
        }
    }
}

#[test]
fn pad_rows_match_the_evaluator_in_every_mode() {
    use crate::linalg::tests::{check, tensor};
    // Constant pads: the last axis as edges around a copied run, with outer axes padded too and
    // with a negative pad that crops; then an unpadded last axis, element by element.
    let cases = [("[0, 1, 2, 3, 0, 2, 1, 4]", "2, 6, 7, 12"), ("[0, 0, -1, 1, 1, 0, 0, 4]", "3, 3, 3, 10"), ("[1, 0, 0, 0, 0, 0, 0, 0]", "3, 3, 4, 5")];
    for mode in ["constant", "edge", "reflect", "wrap"] {
        for (pads, y) in cases {
            let src = format!(
                "graph @main(%0: f32[2, 3, 4, 5]) -> (f32[{y}]) {{\n  %1 = const dense<i64[8]: {pads}>\n  %2 = const dense<f32[]: [0.5]>\n  %3 = tensor.pad(%0, %1, %2) {{mode = \"{mode}\"}} : f32[{y}]\n  return %3\n}}"
            );
            check(&src, &[tensor("f32", &[2, 3, 4, 5], 9, false)]);
        }
    }
}

#[test]
fn nearest_resizes_copy_one_axis_at_a_time() {
    // Up along one axis and down along another, with each rounding mode (half-pixel
    // coordinates), against the definition.
    let pick = |o: u64, input: u64, output: u64, mode: &str| {
        let x = (o as f64 + 0.5) / (output as f64 / input as f64) - 0.5;
        let (lo, frac) = (x.floor(), x - x.floor());
        let i = match mode {
            "floor" => lo,
            "ceil" => x.ceil(),
            "round_prefer_floor" if frac > 0.5 => lo + 1.0,
            "round_prefer_ceil" if frac >= 0.5 => lo + 1.0,
            _ => lo,
        };
        i.clamp(0.0, input as f64 - 1.0) as usize
    };
    let data: Vec<f32> = (0..2 * 5 * 7).map(|i| i as f32).collect();
    for mode in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] {
        let src = format!(
            "graph @main(%0: f32[2, 5, 7]) -> (f32[2, 8, 4]) {{\n  %1 = const dense<i64[3]: [2, 8, 4]>\n  %2 = tensor.resize(%0, _, _, %1) {{mode = \"nearest\", nearest_mode = \"{mode}\"}} : f32[2, 8, 4]\n  return %2\n}}"
        );
        let got = to_f32s(&run(&src, &[f32s(&data)]).unwrap());
        let want: Vec<f32> = (0..2).flat_map(|b| (0..8).flat_map(move |i| (0..4).map(move |j| (b, i, j)))).map(|(b, i, j)| data[(b * 5 + pick(i, 5, 8, mode)) * 7 + pick(j, 7, 4, mode)]).collect();
        assert_eq!(got, want, "{mode}");
    }
}

#[test]
fn resizes_whose_passes_would_outgrow_both_ends_take_one_pass() {
    // 64 × 2 → 2 × 64: the last axis first would make a 64 × 64 intermediate.
    let graph = |from: &str, to: &str| {
        format!("graph @main(%0: f32[{from}], %1: i64[2]) -> (f32[{to}]) {{\n  %2 = tensor.resize(%0, _, _, %1) {{mode = \"linear\"}} : f32[{to}]\n  return %2\n}}")
    };
    let passes = |src: &str| lower(&parse(src).unwrap()).unwrap().buffers.iter().filter(|b| b.name.contains("_pass")).count();
    assert_eq!(passes(&graph("64, 2", "2, 64")), 0);
    assert_eq!(passes(&graph("8, 8", "16, 16")), 1);
}
