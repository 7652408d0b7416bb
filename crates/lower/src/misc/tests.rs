//! The family's lowered node-suite cases pass the loop-IR verifier (the node-suite test only
//! runs them), and edge cases the suite does not reach: out-of-range class and batch indices,
//! ignored targets outside the classes, singular and permuted matrices, grid coordinates far
//! outside the image.

use kiln_tir::Tensor;

use kiln_loops::interp::InterpError;
use crate::linalg::tests::run;
use crate::lower;

/// Asserts `got` equals `want` element by element to 1e-6 relative (or absolute near 0).
fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g == w || (g - w).abs() <= 1e-6 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

/// True if `r` is a failed run-time check whose message contains `what`.
fn check_failed(r: Result<Vec<Vec<f64>>, InterpError>, what: &str) -> bool {
    matches!(r, Err(InterpError::Check { message, .. }) if message.contains(what))
}

#[test]
fn node_suite_cases_verify() {
    let ours = [
        "test_nllloss_", "test_sce_", "test_gridsample", "test_affine_grid_", "test_dft", "test_stft", "test_hannwindow", "test_hammingwindow",
        "test_blackmanwindow", "test_melweightmatrix", "test_det_", "test_roialign_", "test_deform_conv", "test_basic_deform_conv",
    ];
    let mut lowered = 0;
    for case in kiln_testkit::node_cases() {
        if !ours.iter().any(|p| case.name.starts_with(p)) || case.name.ends_with("_expanded") {
            continue;
        }
        let Ok(mut g) = kiln_onnx::import::import_path(&case.model) else { continue };
        // Windows, DFT lengths and frame steps are inputs: bind them as the compiled-model API does.
        if g.values.iter().any(|v| v.ty.known_dims().is_none()) {
            let (inputs, _) = kiln_testkit::read_case(&case).expect("test data");
            let values: Vec<(usize, Tensor)> =
                g.inputs().iter().enumerate().filter(|&(i, &v)| g.ty(v).dtype.is_int() && inputs[i].numel().is_some_and(|n| n <= 64)).map(|(i, _)| (i, inputs[i].clone())).collect();
            kiln_tir::infer::substitute_input_values(&mut g, &values).expect("binding");
            kiln_eval::fold::fold_graph(&mut g);
            kiln_tir::infer::infer_graph(&mut g).expect("inference after binding");
        }
        let program = lower(&g).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if let Err(errors) = kiln_loops::verify::verify(&program) {
            panic!("{}: {errors:?}", case.name);
        }
        lowered += 1;
    }
    assert!(lowered >= 100, "only {lowered} cases lowered");
}

#[test]
fn loss_targets_are_checked_unless_ignored() {
    let graph = |target: i64, attrs: &str| {
        format!(
            "graph @main() -> (f32[2]) {{
  %0 = const dense<f32[2, 3]: [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]>
  %1 = const dense<i64[2]: [{target}, 2]>
  %2 = tensor.negative_log_likelihood_loss(%0, %1) {{{attrs}}} : f32[2]
  return %2
}}"
        )
    };
    assert_close(&run(&graph(1, "reduction = \"none\"")).unwrap()[0], &[2.0, 6.0]);
    assert!(check_failed(run(&graph(3, "reduction = \"none\"")), "target class out of range"));
    assert!(check_failed(run(&graph(-1, "reduction = \"none\"")), "target class out of range"));
    // An ignored target is never an index, even far outside the classes.
    assert_close(&run(&graph(-100, "ignore_index = -100, reduction = \"none\"")).unwrap()[0], &[0.0, 6.0]);
}

#[test]
fn loss_mean_divides_by_the_weights_not_ignored() {
    let out = run("graph @main() -> (f32[], f32[]) {
  %0 = const dense<f32[3, 2]: [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]>
  %1 = const dense<i64[3]: [0, 1, 1]>
  %2 = const dense<f32[2]: [2.0, 0.5]>
  %3 = tensor.negative_log_likelihood_loss(%0, %1, %2) {ignore_index = 0} : f32[]
  %4 = tensor.negative_log_likelihood_loss(%0, %1) {ignore_index = 0} : f32[]
  return %3, %4
}")
    .unwrap();
    assert_close(&out[0], &[(0.5 * 4.0 + 0.5 * 6.0) / 1.0]);
    assert_close(&out[1], &[(4.0 + 6.0) / 2.0]);
}

#[test]
fn roi_align_checks_batch_indices() {
    let graph = |index: i64| {
        format!(
            "graph @main() -> (f32[1, 1, 1, 1]) {{
  %0 = const dense<f32[1, 1, 2, 2]: [1.0, 2.0, 3.0, 4.0]>
  %1 = const dense<f32[1, 4]: [0.0, 0.0, 1.0, 1.0]>
  %2 = const dense<i64[1]: [{index}]>
  %3 = tensor.roi_align(%0, %1, %2) {{sampling_ratio = 1}} : f32[1, 1, 1, 1]
  return %3
}}"
        )
    };
    // One sample at the centre of the half-pixel region [-0.5, 0.5]²: pixel (0, 0).
    assert_close(&run(&graph(0)).unwrap()[0], &[1.0]);
    assert!(check_failed(run(&graph(1)), "batch index out of range"));
    assert!(check_failed(run(&graph(-1)), "batch index out of range"));
}

#[test]
fn roi_align_reads_a_channels_last_copy_only_where_it_pays() {
    // The regions all pool image 0: more images make the map dearer to copy, not the result
    // different. One image: two regions of 2×2 bins of four samples on a 4×4 map read it more
    // often than a copy would (so do the adaptive grid's), one 1×1 bin of one sample on an 8×8
    // map does not; 64 images: none pays.
    for (side, count, bins, ratio, copies) in [(4, 2, 2, 2, true), (8, 1, 1, 1, false), (4, 2, 2, 0, true)] {
        for mode in ["avg", "max"] {
            let src = |batch: usize| {
                let numel = batch * 3 * side * side;
                let x: Vec<String> = (0..numel).map(|i| format!("{:.1}", (i * 37 % 23) as f64 - 9.0)).collect();
                let rois = ["0.3, 0.7, 2.9, 3.1", "1.0, 0.2, 3.5, 2.4"][..count].join(", ");
                let indices = vec!["0"; count].join(", ");
                format!(
                    "graph @main() -> (f32[{count}, 3, {bins}, {bins}]) {{
  %0 = const dense<f32[{batch}, 3, {side}, {side}]: [{x}]>
  %1 = const dense<f32[{count}, 4]: [{rois}]>
  %2 = const dense<i64[{count}]: [{indices}]>
  %3 = tensor.roi_align(%0, %1, %2) {{mode = \"{mode}\", output_height = {bins}, output_width = {bins}, sampling_ratio = {ratio}}} : f32[{count}, 3, {bins}, {bins}]
  return %3
}}",
                    x = x.join(", ")
                )
            };
            let copied = |src: &str| lower(&kiln_tir::text::parse(src).unwrap()).unwrap().buffers.iter().any(|b| b.name.ends_with("_nhwc"));
            let (one, many) = (src(1), src(64));
            assert_eq!((copied(&one), copied(&many)), (copies, false), "{side}×{side} map, {count} regions, ratio {ratio}");
            assert_close(&run(&one).unwrap()[0], &run(&many).unwrap()[0]);
        }
    }
}

#[test]
fn det_of_singular_and_permuted_matrices() {
    let out = run("graph @main() -> (f64[3]) {
  %0 = const dense<f64[3, 3, 3]: [1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 0.0]>
  %1 = tensor.det(%0) : f64[3]
  return %1
}")
    .unwrap();
    assert_close(&out[0], &[0.0, -1.0, -24.0]);
}

#[test]
fn grid_sample_far_outside_the_image_stays_in_bounds() {
    let graph = |pad: &str, mode: &str| {
        format!(
            "graph @main() -> (f32[1, 1, 1, 4]) {{
  %0 = const dense<f32[1, 1, 2, 2]: [1.0, 2.0, 3.0, 4.0]>
  %1 = const dense<f32[1, 1, 4, 2]: [1e30, 1e30, -1e30, -1e30, 3.0, -7.0, nan, 0.0]>
  %2 = tensor.grid_sample(%0, %1) {{mode = \"{mode}\", padding_mode = \"{pad}\", align_corners = 1}} : f32[1, 1, 1, 4]
  return %2
}}"
        )
    };
    for mode in ["nearest", "linear", "cubic"] {
        for pad in ["zeros", "border", "reflection"] {
            let out = run(&graph(pad, mode)).unwrap_or_else(|e| panic!("{mode} {pad}: {e}"));
            match pad {
                "zeros" => assert_close(&out[0][..3], &[0.0, 0.0, 0.0]),
                // Clamped to the bottom-right and top-left corners, then (x 1, y 0).
                "border" => assert_close(&out[0][..3], &[4.0, 1.0, 2.0]),
                // Pixel x = 2 reflects to 0 and y = -3 to 1 (aligned corners: borders 0 and 1).
                _ => assert_close(&out[0][2..3], &[3.0]),
            }
        }
    }
}
