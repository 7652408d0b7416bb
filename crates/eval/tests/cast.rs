//! Cast: rounding, saturation and packing of every narrow type.

mod common;

use common::*;
use kiln_tir::op::*;
use kiln_tir::{DType, Tensor, TensorData};

fn cast(x: &Tensor, to: DType) -> Tensor {
    run(Op::Cast(Cast { to, ..Cast::default() }), &[x])
}

fn cast_sat(x: &Tensor, to: DType, saturate: i64) -> Tensor {
    run(Op::Cast(Cast { to, saturate, ..Cast::default() }), &[x])
}

fn u16s(t: &Tensor) -> Vec<u16> {
    t.raw().unwrap().chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

#[test]
fn f32_to_f16_rounds_to_nearest_even() {
    let x = f32t(&[8], &[1.0, 0.1, 65504.0, 65520.0, 1e-8, 3e-8, -2.5, f32::NAN]);
    let h = cast(&x, DType::F16);
    assert_eq!(h.dtype, DType::F16);
    assert_eq!(u16s(&h), vec![0x3c00, 0x2e66, 0x7bff, 0x7c00, 0x0000, 0x0001, 0xc100, 0x7e00]);
    let back = f32s(&cast(&h, DType::F32));
    assert_close(&back, &[1.0, 0.099_975_586, 65504.0, f32::INFINITY, 0.0, 5.960_464_5e-8, -2.5, f32::NAN], 0.0);
    // Ties: 2049 lies halfway between f16 neighbours 2048 and 2050; even wins.
    let t = cast(&cast(&f32t(&[2], &[2049.0, 2051.0]), DType::F16), DType::F32);
    assert_eq!(f32s(&t), vec![2048.0, 2052.0]);
}

#[test]
fn f32_to_bf16_ties_to_even() {
    // 1 + 2^-8 and 1 + 3 * 2^-8 lie halfway between bf16 neighbours.
    let x = f32t(&[3], &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -3.0]);
    let b = cast(&x, DType::BF16);
    assert_eq!(u16s(&b), vec![0x3f80, 0x3f82, 0xc040]);
    assert_eq!(f32s(&cast(&b, DType::F32)), vec![1.0, 1.015_625, -3.0]);
}

#[test]
fn float8_saturation() {
    let x = f32t(&[6], &[1e6, -f32::INFINITY, f32::NAN, 0.3, -0.0, 1e-7]);
    let sat = cast_sat(&x, DType::F8E4M3FN, 1);
    assert_eq!(sat.raw().unwrap(), &[0x7e, 0xfe, 0x7f, 0x2a, 0x80, 0x00]);
    let nosat = cast_sat(&x, DType::F8E4M3FN, 0);
    assert_eq!(nosat.raw().unwrap(), &[0x7f, 0xff, 0x7f, 0x2a, 0x80, 0x00]);
    let uz = cast_sat(&x, DType::F8E4M3FNUZ, 0);
    assert_eq!(uz.raw().unwrap(), &[0x80, 0x80, 0x80, 0x32, 0x00, 0x00]);
    let e5 = cast_sat(&x, DType::F8E5M2, 0);
    assert_eq!(e5.raw().unwrap(), &[0x7c, 0xfc, 0x7e, 0x35, 0x80, 0x00]);
    let e5s = cast_sat(&x, DType::F8E5M2, 1);
    assert_eq!(e5s.raw().unwrap()[..2], [0x7b, 0xfb]);
    assert_close(&f32s(&cast(&sat, DType::F32)), &[448.0, -448.0, f32::NAN, 0.3125, -0.0, 0.0], 0.0);
}

#[test]
fn float4_and_e8m0() {
    let x = f32t(&[6], &[0.25, 0.75, 2.5, 5.0, 100.0, -1.25]);
    let f4 = cast(&x, DType::F4E2M1);
    // Packed two per byte, low nibble first: 0, 1.0, 2.0, 4.0, 6.0, -1.0.
    assert_eq!(f4.raw().unwrap(), &[0x20, 0x64, 0xa7]);
    assert_eq!(f32s(&cast(&f4, DType::F32)), vec![0.0, 1.0, 2.0, 4.0, 6.0, -1.0]);
    let e = cast(&f32t(&[3], &[3.0, 1.0, 0.75]), DType::F8E8M0);
    assert_eq!(e.raw().unwrap(), &[129, 127, 127]);
    assert_eq!(f32s(&cast(&e, DType::F32)), vec![4.0, 1.0, 1.0]);
    let down = run(Op::Cast(Cast { to: DType::F8E8M0, round_mode: RoundMode::Down, ..Cast::default() }), &[&f32t(&[1], &[3.0])]);
    assert_eq!(down.raw().unwrap(), &[128]);
}

#[test]
fn float_to_int4_wraps_and_packs() {
    let x = f32t(&[5], &[7.0, -8.0, 8.0, 15.0, 1.9]);
    let q = cast(&x, DType::I4);
    assert_eq!(q.raw().unwrap(), &[0x87, 0xf8, 0x01]);
    assert_eq!(ints(&cast(&q, DType::I64)), vec![7, -8, -8, -1, 1]);
    let u = cast(&x, DType::U4);
    assert_eq!(ints(&cast(&u, DType::I64)), vec![7, 8, 8, 15, 1]);
    let u2 = cast(&f32t(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]), DType::U2);
    assert_eq!(u2.raw().unwrap(), &[0b11_10_01_00, 0]);
}

#[test]
fn float6_packs_in_a_bit_stream() {
    let x = f32t(&[4], &[0.3, 1e6, -7.5, 1.0]);
    let f6 = cast(&x, DType::F6E2M3);
    assert_eq!(f6.raw().unwrap().len(), 3);
    assert_eq!(f32s(&cast(&f6, DType::F32)), vec![0.25, 7.5, -7.5, 1.0]);
    let f6 = cast(&x, DType::F6E3M2);
    assert_eq!(f32s(&cast(&f6, DType::F32)), vec![0.3125, 28.0, -8.0, 1.0]);
}

#[test]
fn integer_and_bool_conversions() {
    let x = f32t(&[4], &[1.9, -1.9, 0.0, 300.0]);
    assert_eq!(ints(&cast(&x, DType::I32)), vec![1, -1, 0, 300]);
    assert_eq!(ints(&cast(&x, DType::I8)), vec![1, -1, 0, 44]);
    assert_eq!(bools(&cast(&x, DType::Bool)), vec![true, true, false, true]);
    let i = i64t(&[3], &[-1, 256, 5]);
    assert_eq!(ints(&cast(&i, DType::U8)), vec![255, 0, 5]);
    assert_eq!(f32s(&cast(&boolt(&[2], &[true, false]), DType::F32)), vec![1.0, 0.0]);
    let big = i64t(&[1], &[(1 << 53) + 1]);
    assert_eq!(f32s(&cast(&big, DType::F32)), vec![9_007_199_254_740_992.0]);
    let like = run(Op::CastLike(CastLike::default()), &[&i, &f32t(&[1], &[0.0])]);
    assert_eq!(f32s(&like), vec![-1.0, 256.0, 5.0]);
}

#[test]
fn strings_round_trip() {
    let x = f32t(&[4], &[0.5, 100.0, 1e-7, f32::NEG_INFINITY]);
    let s = cast(&x, DType::String);
    let TensorData::Strings(v) = &s.data else { panic!("not strings") };
    let text: Vec<&[u8]> = v.iter().map(|b| b.as_ref()).collect();
    assert_eq!(text, vec![&b"0.5"[..], b"100.0", b"1e-07", b"-inf"]);
    assert_eq!(f32s(&cast(&s, DType::F32)), vec![0.5, 100.0, 1e-7, f32::NEG_INFINITY]);
}
