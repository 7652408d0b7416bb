//! QuantizeLinear / DequantizeLinear and BitCast.

mod common;

use common::*;
use kiln_tir::DType;
use kiln_tir::op::*;

#[test]
fn quantize_rounds_half_to_even_and_saturates() {
    let x = f32t(&[6], &[0.0, 1.0, 3.0, 5.0, 1000.0, -1000.0]);
    let scale = f32t(&[], &[2.0]);
    let zp = u8t(&[], &[10]);
    let y = run(Op::QuantizeLinear(QuantizeLinear::default()), &[&x, &scale, &zp]);
    assert_eq!((y.dtype, ints(&y)), (DType::U8, vec![10, 10, 12, 12, 255, 0]));
    let back = run(Op::DequantizeLinear(DequantizeLinear::default()), &[&y, &scale, &zp]);
    assert_eq!(f32s(&back), vec![0.0, 0.0, 4.0, 4.0, 490.0, -20.0]);
}

#[test]
fn per_axis_and_blocked_scales() {
    let x = f32t(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
    let per_row = f32t(&[2], &[1.0, 0.5]);
    let y = run(Op::QuantizeLinear(QuantizeLinear { axis: 0, output_dtype: Some(DType::I8), ..QuantizeLinear::default() }), &[&x, &per_row]);
    assert_eq!(ints(&y), vec![1, 2, 3, 4, 2, 4, 6, 8]);
    let blocked = f32t(&[2, 2], &[1.0, 2.0, 4.0, 8.0]);
    let y = run(Op::QuantizeLinear(QuantizeLinear { axis: 1, block_size: 2, output_dtype: Some(DType::I8), ..QuantizeLinear::default() }), &[&x, &blocked]);
    assert_eq!(ints(&y), vec![1, 2, 2, 2, 0, 0, 0, 0]);
    let bad = f32t(&[3], &[1.0; 3]);
    let e = run_err(Op::QuantizeLinear(QuantizeLinear { axis: 0, ..QuantizeLinear::default() }), &[&x, &bad]);
    assert!(matches!(e, kiln_eval::EvalError::Invalid { .. }), "{e}");
}

#[test]
fn bitcast_reinterprets_bytes() {
    let x = f32t(&[2], &[1.0, -2.0]);
    let y = run(Op::BitCast(BitCast { to: DType::I32 }), &[&x]);
    assert_eq!(ints(&y), vec![0x3f80_0000, 0xc000_0000u32 as i32 as i64]);
    let e = run_err(Op::BitCast(BitCast { to: DType::I64 }), &[&x]);
    assert!(matches!(e, kiln_eval::EvalError::Invalid { .. }), "{e}");
}
