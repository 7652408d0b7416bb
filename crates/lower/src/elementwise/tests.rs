//! Tricky elementwise semantics, run through lowering and the interpreter.

use kiln_tir::text::parse;

use super::{plan, Nest};
use kiln_loops::interp::{self, InterpError};
use kiln_loops::ir::BufferKind;
use crate::lower;

/// Lowers a graph without inputs (its operands are constants) and runs it; the bytes of
/// output 0.
fn run(src: &str) -> Result<Vec<u8>, InterpError> {
    let g = parse(src).expect("test graph parses");
    let program = lower(&g).expect("test graph lowers");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory)?;
    let out = program.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("output buffer");
    Ok(std::mem::take(&mut memory[out]))
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// A graph computing `op` (with attributes `attrs`, as in the text form) on the constants `a`
/// and `b` of type `ty` (a dtype and shape).
fn binary_with(op: &str, attrs: &str, ty: &str, a: &str, b: &str) -> String {
    format!(
        "graph @main() -> ({ty}) {{\n  %0 = const dense<{ty}: [{a}]>\n  %1 = const dense<{ty}: [{b}]>\n  %2 = tensor.{op}(%0, %1) {attrs} : {ty}\n  return %2\n}}"
    )
}

/// [`binary_with`] without attributes.
fn binary(op: &str, ty: &str, a: &str, b: &str) -> String {
    binary_with(op, "", ty, a, b)
}

#[test]
fn integer_mod_takes_the_divisors_sign_and_fmod_the_dividends() {
    let (a, b) = ("-7, 7, -7, 7, 6", "2, -2, -2, 2, -3");
    assert_eq!(i32s(&run(&binary("mod", "i32[5]", a, b)).unwrap()), [1, -1, -1, 1, 0]);
    assert_eq!(i32s(&run(&binary_with("mod", "{fmod = 1}", "i32[5]", a, b)).unwrap()), [-1, 1, -1, 1, 0]);
}

#[test]
fn float_mod_zero_has_the_divisors_sign() {
    let got = f32s(&run(&binary("mod", "f32[4]", "0.0, 4.0, -1.0, 1.0", "-2.0, 2.0, inf, -inf")).unwrap());
    assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), [(-0.0f32).to_bits(), 0, f32::INFINITY.to_bits(), f32::NEG_INFINITY.to_bits()]);
}

#[test]
fn integer_division_truncates_and_checks_for_zero() {
    assert_eq!(i32s(&run(&binary("div", "i32[3]", "-7, 7, -8", "2, -2, 3")).unwrap()), [-3, -3, -2]);
    let err = run(&binary("div", "i32[2]", "1, 2", "1, 0")).unwrap_err();
    assert!(matches!(err, InterpError::Check { ref message, .. } if message.contains("division by zero")), "{err}");
}

#[test]
fn integer_pow_wraps_and_negative_exponents_truncate() {
    let got = run(&binary("pow", "i32[6]", "2, 3, -2, 2, -1, 2", "10, 3, 3, 31, -3, -1")).unwrap();
    assert_eq!(i32s(&got), [1024, 27, -8, i32::MIN, -1, 0]);
}

#[test]
fn clip_on_integers_with_either_bound_and_min_above_max() {
    let src = |lo: &str, hi: &str| {
        format!(
            "graph @main() -> (i8[5]) {{\n  %0 = const dense<i8[5]: [-128, -5, 0, 5, 127]>\n  %1 = const dense<i8[]: [{lo}]>\n  %2 = const dense<i8[]: [{hi}]>\n  %3 = tensor.clip(%0, %1, %2) : i8[5]\n  return %3\n}}"
        )
    };
    let i8s = |b: Vec<u8>| b.into_iter().map(|v| v as i8).collect::<Vec<_>>();
    assert_eq!(i8s(run(&src("-3", "4")).unwrap()), [-3, -3, 0, 4, 4]);
    assert_eq!(i8s(run(&src("5", "2")).unwrap()), [2, 2, 2, 2, 2]);
    let max_only = "graph @main() -> (i8[3]) {\n  %0 = const dense<i8[3]: [-9, 0, 9]>\n  %1 = const dense<i8[]: [1]>\n  %2 = tensor.clip(%0, _, %1) : i8[3]\n  return %2\n}";
    assert_eq!(i8s(run(max_only).unwrap()), [-9, 0, 1]);
}

#[test]
fn float_to_int_casts_truncate_and_saturate() {
    let cast = |to: &str| {
        format!(
            "graph @main() -> ({to}[6]) {{\n  %0 = const dense<f32[6]: [1e10, -1e10, nan, -2.7, 2.7, 300.0]>\n  %1 = tensor.cast(%0) {{to = {to}}} : {to}[6]\n  return %1\n}}"
        )
    };
    assert_eq!(i32s(&run(&cast("i32")).unwrap()), [i32::MAX, i32::MIN, 0, -2, 2, 300]);
    assert_eq!(run(&cast("u8")).unwrap(), [255, 0, 0, 0, 2, 255]);
}

#[test]
fn f64_to_f16_rounds_once() {
    // 1 + 2⁻¹¹ + 2⁻⁴⁰ is just above the tie between 1 and the next f16; through f32 it would
    // round to the tie and then to even (1.0).
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    let src = format!("graph @main() -> (f16[2]) {{\n  %0 = const dense<f64[2]: [{x:e}, -{x:e}]>\n  %1 = tensor.cast(%0) {{to = f16}} : f16[2]\n  return %1\n}}");
    assert_eq!(run(&src).unwrap(), [0x01, 0x3c, 0x01, 0xbc]);
}

#[test]
fn nests_merge_contiguous_axes_and_drop_broadcast_ones() {
    let scalar: &[u64] = &[];
    let same: &[u64] = &[2, 3, 4];
    let row: &[u64] = &[1, 3, 4];
    let nest = plan(&[2, 3, 4], &[same, row, scalar]).unwrap();
    assert_eq!(nest, Nest { dims: vec![2, 12], operands: vec![Some(vec![2, 12]), Some(vec![1, 12]), None] });
    let col: &[u64] = &[3, 1];
    assert_eq!(plan(&[3, 5], &[col]).unwrap().operands, vec![Some(vec![3, 1])]);
    assert_eq!(plan(&[1, 6], &[&[6]]).unwrap(), Nest { dims: vec![6], operands: vec![Some(vec![6])] });
    assert!(plan(&[3, 4], &[&[4, 4]]).is_none());
}
