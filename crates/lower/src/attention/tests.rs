//! The family's lowered node-suite cases pass the loop-IR verifier (the node-suite test only
//! runs them), and edge cases the suite does not reach: the raw product as the fourth output
//! beside a softcap, `f64` data, an out-of-range position id.

use kiln_loops::interp::InterpError;
use crate::linalg::tests::run;
use crate::lower;

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

#[test]
fn node_suite_cases_verify() {
    let ours = ["test_attention_", "test_rotary_embedding", "test_linear_attention_", "test_causal_conv_with_state_"];
    let mut lowered = 0;
    for case in kiln_testkit::node_cases() {
        if !ours.iter().any(|p| case.name.starts_with(p)) || case.name.ends_with("_expanded") {
            continue;
        }
        let Ok(g) = kiln_onnx::import::import_path(&case.model) else { continue };
        let program = lower(&g).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if let Err(errors) = kiln_loops::verify::verify(&program) {
            panic!("{}: {errors:?}", case.name);
        }
        lowered += 1;
    }
    assert!(lowered >= 100, "only {lowered} cases lowered");
}

#[test]
fn mode_0_gives_the_product_before_the_softcap_and_mode_1_after() {
    // One query [1, 2] against keys [3, 4] and [1, 0] with scale 1: products 11 and 1. The
    // function body ONNX defines takes mode 0 before the softcap (the reference op does not).
    let graph = |mode: u32| {
        format!(
            "graph @main() -> (f32[1, 1, 1, 1], f32[1, 1, 1, 2]) {{
  %0 = const dense<f32[1, 1, 1, 2]: [1.0, 2.0]>
  %1 = const dense<f32[1, 1, 2, 2]: [3.0, 4.0, 1.0, 0.0]>
  %2 = const dense<f32[1, 1, 2, 1]: [10.0, 20.0]>
  %3, _, _, %4 = tensor.attention(%0, %1, %2) {{qk_matmul_output_mode = {mode}, scale = 1.0, softcap = 2.0}} : f32[1, 1, 1, 1], f32[1, 1, 1, 2]
  return %3, %4
}}"
        )
    };
    let capped = [2.0 * 5.5f64.tanh(), 2.0 * 0.5f64.tanh()];
    let p0 = 1.0 / (1.0 + (capped[1] - capped[0]).exp());
    let y = 10.0 * p0 + 20.0 * (1.0 - p0);
    let out = run(&graph(0)).unwrap();
    assert_close(&out[0], &[y]);
    assert_close(&out[1], &[11.0, 1.0]);
    let out = run(&graph(1)).unwrap();
    assert_close(&out[1], &capped);
}

#[test]
fn f64_attention_computes_in_f64() {
    let out = run("graph @main() -> (f64[1, 1, 1, 1]) {
  %0 = const dense<f64[1, 1, 1, 1]: [1.0]>
  %1 = const dense<f64[1, 1, 2, 1]: [1.0, 2.0]>
  %2 = const dense<f64[1, 1, 2, 1]: [10.0, 20.0]>
  %3 = tensor.attention(%0, %1, %2) {scale = 1.0} : f64[1, 1, 1, 1]
  return %3
}")
    .unwrap();
    let p0 = 1.0 / (1.0 + 1f64.exp());
    assert!((out[0][0] - (10.0 * p0 + 20.0 * (1.0 - p0))).abs() < 1e-12, "{out:?}");
}

#[test]
fn rotary_position_ids_wrap_when_negative_and_are_checked() {
    let graph = |id: i64| {
        format!(
            "graph @main() -> (f32[1, 1, 1, 2]) {{
  %0 = const dense<f32[1, 1, 1, 2]: [1.0, 2.0]>
  %1 = const dense<f32[2, 1]: [1.0, 0.0]>
  %2 = const dense<f32[2, 1]: [0.0, 1.0]>
  %3 = const dense<i64[1, 1]: [{id}]>
  %4 = tensor.rotary_embedding(%0, %1, %2, %3) : f32[1, 1, 1, 2]
  return %4
}}"
        )
    };
    // Row 1 (cos 0, sin 1) rotates (1, 2) to (−2, 1); id −1 is row 1 too.
    assert_close(&run(&graph(1)).unwrap()[0], &[-2.0, 1.0]);
    assert_close(&run(&graph(-1)).unwrap()[0], &[-2.0, 1.0]);
    assert_close(&run(&graph(0)).unwrap()[0], &[1.0, 2.0]);
    assert!(matches!(run(&graph(2)), Err(InterpError::Check { .. })));
    assert!(matches!(run(&graph(-3)), Err(InterpError::Check { .. })));
}
