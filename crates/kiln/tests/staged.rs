//! Models that run in stages (a shape comes from data): the splitters that can run together
//! do, and the compiled stages agree with the reference evaluator.

use kiln::{CompileOptions, Model, Tensor};

/// Two NonZeros that read only the inputs, one behind a Neg that stands after the first of
/// them, and a Cast of each one's output. The inputs are data, not shape
/// parameters a specialization would take by value (2-D floats).
const TWO_SPLITTERS: &str = r#"graph @main(%0: f32[2, 3] "a", %1: f32[2, 3] "b") -> (i64[2, n] "ia", f32[2, m] "ib", f32[2, n] "fa", f32[2, 3] "nb") {
  %2 = tensor.nonzero(%0) : i64[2, n]
  %3 = tensor.neg(%1) : f32[2, 3]
  %4 = tensor.nonzero(%3) : i64[2, m]
  %5 = tensor.cast(%2) {to = f32} : f32[2, n]
  %6 = tensor.cast(%4) {to = f32} : f32[2, m]
  return %2, %6, %5, %3
}"#;

#[test]
fn independent_splitters_share_a_stage() {
    let model = Model::from_graph(kiln_tir::text::parse(TWO_SPLITTERS).unwrap());
    let compiled = model.compile(&CompileOptions::default()).unwrap();
    let inputs = [Tensor::from_f32s(&[2, 3], &[0.0, 1.0, 0.0, 2.0, 3.0, 0.0]), Tensor::from_f32s(&[2, 3], &[1.0, 0.0, 0.0, 0.0, -4.0, 0.0])];
    let got = compiled.run(&inputs).unwrap();
    let want = kiln_eval::eval_graph(model.graph(), &inputs).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        kiln_testkit::compare(g, w).unwrap();
    }
    assert_eq!(got[0].shape, vec![2, 3]);
    assert_eq!(got[1].shape, vec![2, 2]);
    // The Neg and both NonZeros run before the Casts' stage: one stage after the first, where
    // splitting at each NonZero in turn made two.
    assert_eq!(compiled.specializations(), 2);
}
