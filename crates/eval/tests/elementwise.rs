//! Elementwise ops: arithmetic with broadcasting, integer semantics, comparisons, logic,
//! activations and Clip.

mod common;

use common::*;
use kiln_eval::EvalError;
use kiln_tir::DType;
use kiln_tir::op::*;

#[test]
fn add_broadcasts_row_and_column() {
    let x = f32t(&[2, 1], &[1.0, 2.0]);
    let y = f32t(&[3], &[10.0, 20.0, 30.0]);
    let z = run(Op::Add(Add {}), &[&x, &y]);
    assert_eq!(z.shape, vec![2, 3]);
    assert_eq!(f32s(&z), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
}

#[test]
fn broadcast_mismatch_is_an_error() {
    let x = f32t(&[2, 3], &[0.0; 6]);
    let y = f32t(&[2], &[0.0; 2]);
    assert!(matches!(run_err(Op::Mul(Mul {}), &[&x, &y]), EvalError::Invalid { op: "mul", .. }));
}

#[test]
fn mixed_types_are_an_error() {
    let x = f32t(&[1], &[1.0]);
    let y = i64t(&[1], &[1]);
    assert!(matches!(run_err(Op::Add(Add {}), &[&x, &y]), EvalError::Invalid { .. }));
}

#[test]
fn integer_arithmetic() {
    let x = i64t(&[4], &[7, -7, 7, -7]);
    let y = i64t(&[4], &[2, 2, -2, -2]);
    assert_eq!(ints(&run(Op::Add(Add {}), &[&x, &y])), vec![9, -5, 5, -9]);
    assert_eq!(ints(&run(Op::Sub(Sub {}), &[&x, &y])), vec![5, -9, 9, -5]);
    assert_eq!(ints(&run(Op::Mul(Mul {}), &[&x, &y])), vec![14, -14, -14, 14]);
    // Division truncates toward zero.
    assert_eq!(ints(&run(Op::Div(Div {}), &[&x, &y])), vec![3, -3, -3, 3]);
    // Mod takes the divisor's sign; fmod the dividend's.
    assert_eq!(ints(&run(Op::Mod(Mod { fmod: 0 }), &[&x, &y])), vec![1, 1, -1, -1]);
    assert_eq!(ints(&run(Op::Mod(Mod { fmod: 1 }), &[&x, &y])), vec![1, -1, 1, -1]);
    assert_eq!(ints(&run(Op::Neg(Neg {}), &[&x])), vec![-7, 7, -7, 7]);
    assert_eq!(ints(&run(Op::Abs(Abs {}), &[&x])), vec![7, 7, 7, 7]);
    assert_eq!(ints(&run(Op::Max(Max {}), &[&x, &y])), vec![7, 2, 7, -2]);
    assert_eq!(ints(&run(Op::Min(Min {}), &[&x, &y])), vec![2, -7, -2, -7]);
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let x = i64t(&[2], &[1, 2]);
    let y = i64t(&[2], &[1, 0]);
    let e = run_err(Op::Div(Div {}), &[&x, &y]);
    assert!(e.to_string().contains("division by zero"), "{e}");
    assert!(matches!(run_err(Op::Mod(Mod { fmod: 0 }), &[&x, &y]), EvalError::Invalid { .. }));
}

#[test]
fn integer_results_wrap_to_their_width() {
    let x = u8t(&[2], &[200, 10]);
    let y = u8t(&[2], &[100, 20]);
    assert_eq!(ints(&run(Op::Add(Add {}), &[&x, &y])), vec![44, 30]);
    assert_eq!(ints(&run(Op::Sub(Sub {}), &[&y, &x])), vec![156, 10]);
    let a = i32t(&[1], &[i32::MAX]);
    let b = i32t(&[1], &[1]);
    assert_eq!(ints(&run(Op::Add(Add {}), &[&a, &b])), vec![i64::from(i32::MIN)]);
}

#[test]
fn float_mod_and_division() {
    let x = f32t(&[3], &[5.5, -5.5, 1.0]);
    let y = f32t(&[3], &[2.0, 2.0, 0.0]);
    assert_close(&f32s(&run(Op::Mod(Mod { fmod: 1 }), &[&x, &y])), &[1.5, -1.5, f32::NAN], 0.0);
    assert_eq!(f32s(&run(Op::Div(Div {}), &[&x, &y])), vec![2.75, -2.75, f32::INFINITY]);
}

#[test]
fn pow_with_integer_and_float_exponents() {
    let x = f32t(&[3], &[2.0, 4.0, -8.0]);
    let y = f32t(&[3], &[3.0, 0.5, 2.0]);
    assert_eq!(f32s(&run(Op::Pow(Pow {}), &[&x, &y])), vec![8.0, 2.0, 64.0]);
    let e = i64t(&[], &[2]);
    assert_eq!(f32s(&run(Op::Pow(Pow {}), &[&x, &e])), vec![4.0, 16.0, 64.0]);
    let xi = i64t(&[3], &[2, 3, -2]);
    let ei = i64t(&[3], &[10, 3, 3]);
    assert_eq!(ints(&run(Op::Pow(Pow {}), &[&xi, &ei])), vec![1024, 27, -8]);
}

#[test]
fn comparisons_and_logic() {
    let x = i64t(&[3], &[1, 2, 3]);
    let y = i64t(&[1], &[2]);
    assert_eq!(bools(&run(Op::Equal(Equal {}), &[&x, &y])), vec![false, true, false]);
    assert_eq!(bools(&run(Op::Less(Less {}), &[&x, &y])), vec![true, false, false]);
    assert_eq!(bools(&run(Op::Greater(Greater {}), &[&x, &y])), vec![false, false, true]);
    assert_eq!(bools(&run(Op::LessOrEqual(LessOrEqual {}), &[&x, &y])), vec![true, true, false]);
    assert_eq!(bools(&run(Op::GreaterOrEqual(GreaterOrEqual {}), &[&x, &y])), vec![false, true, true]);
    let nan = f32t(&[2], &[f32::NAN, 1.0]);
    assert_eq!(bools(&run(Op::Equal(Equal {}), &[&nan, &nan])), vec![false, true]);
    let p = boolt(&[4], &[false, false, true, true]);
    let q = boolt(&[4], &[false, true, false, true]);
    assert_eq!(bools(&run(Op::And(And {}), &[&p, &q])), vec![false, false, false, true]);
    assert_eq!(bools(&run(Op::Or(Or {}), &[&p, &q])), vec![false, true, true, true]);
    assert_eq!(bools(&run(Op::Xor(Xor {}), &[&p, &q])), vec![false, true, true, false]);
    assert_eq!(bools(&run(Op::Not(Not {}), &[&p])), vec![true, true, false, false]);
}

#[test]
fn where_broadcasts_all_three() {
    let c = boolt(&[2, 1], &[true, false]);
    let x = i64t(&[2], &[1, 2]);
    let y = i64t(&[], &[0]);
    let z = run(Op::Where(Where {}), &[&c, &x, &y]);
    assert_eq!(z.shape, vec![2, 2]);
    assert_eq!(ints(&z), vec![1, 2, 0, 0]);
}

#[test]
fn clip_with_optional_bounds() {
    let x = f32t(&[4], &[-2.0, 0.5, 3.0, f32::NAN]);
    let lo = f32t(&[], &[0.0]);
    let hi = f32t(&[], &[1.0]);
    assert_close(&f32s(&run_opt(Op::Clip(Clip {}), &[Some(&x), Some(&lo), Some(&hi)])), &[0.0, 0.5, 1.0, f32::NAN], 0.0);
    assert_close(&f32s(&run_opt(Op::Clip(Clip {}), &[Some(&x), None, Some(&hi)])), &[-2.0, 0.5, 1.0, f32::NAN], 0.0);
    assert_eq!(f32s(&run_opt(Op::Clip(Clip {}), &[Some(&x), Some(&hi), Some(&lo)]))[..3], [0.0, 0.0, 0.0]);
    let xi = i64t(&[3], &[-5, 5, 50]);
    let hi_i = i64t(&[], &[10]);
    assert_eq!(ints(&run_opt(Op::Clip(Clip {}), &[Some(&xi), None, Some(&hi_i)])), vec![-5, 5, 10]);
}

#[test]
fn unary_math_and_activations() {
    let x = f32t(&[3], &[-1.0, 0.0, 2.0]);
    let r = |op| f32s(&run(op, &[&x]));
    assert_eq!(r(Op::Relu(Relu {})), vec![0.0, 0.0, 2.0]);
    assert_close(&r(Op::Sigmoid(Sigmoid {})), &[0.268_941_4, 0.5, 0.880_797_1], 1e-6);
    assert_close(&r(Op::Tanh(Tanh {})), &[-0.761_594_2, 0.0, 0.964_027_6], 1e-6);
    assert_close(&r(Op::Exp(Exp {})), &[0.367_879_4, 1.0, 7.389_056], 1e-6);
    assert_close(&r(Op::Erf(Erf {})), &[-0.842_700_8, 0.0, 0.995_322_3], 1e-6);
    assert_close(&r(Op::Gelu(Gelu::default())), &[-0.158_655_25, 0.0, 1.954_499_7], 1e-6);
    assert_close(&r(Op::Gelu(Gelu { approximate: GeluApprox::Tanh })), &[-0.158_808, 0.0, 1.954_597_7], 1e-6);
    assert_close(&r(Op::LeakyRelu(LeakyRelu { alpha: 0.1 })), &[-0.1, 0.0, 2.0], 1e-7);
    assert_close(&r(Op::Elu(Elu { alpha: 1.0 })), &[-0.632_120_6, 0.0, 2.0], 1e-6);
    assert_close(&r(Op::HardSigmoid(HardSigmoid::default())), &[0.3, 0.5, 0.9], 1e-6);
    assert_close(&r(Op::Softplus(Softplus {})), &[0.313_261_7, std::f32::consts::LN_2, 2.126_928], 1e-6);
    assert_eq!(r(Op::Neg(Neg {})), vec![1.0, -0.0, -2.0]);
    assert_eq!(r(Op::Sign(Sign {})), vec![-1.0, 0.0, 1.0]);
    let s = f32t(&[2], &[4.0, -1.0]);
    assert_close(&f32s(&run(Op::Sqrt(Sqrt {}), &[&s])), &[2.0, f32::NAN], 0.0);
    assert_close(&f32s(&run(Op::Log(Log {}), &[&s])), &[1.386_294_4, f32::NAN], 1e-6);
    let h = f32t(&[4], &[0.5, 1.5, 2.5, -0.5]);
    assert_eq!(f32s(&run(Op::Round(Round {}), &[&h])), vec![0.0, 2.0, 2.0, -0.0]);
}

#[test]
fn variadic_sum_mean_max() {
    let a = f32t(&[2], &[1.0, 5.0]);
    let b = f32t(&[1], &[3.0]);
    let c = f32t(&[2], &[2.0, f32::NAN]);
    assert_eq!(f32s(&run(Op::Sum(Sum {}), &[&a, &b, &a])), vec![5.0, 13.0]);
    assert_eq!(f32s(&run(Op::Mean(Mean {}), &[&a, &b])), vec![2.0, 4.0]);
    assert_close(&f32s(&run(Op::Max(Max {}), &[&a, &b, &c])), &[3.0, f32::NAN], 0.0);
}

#[test]
fn f64_and_f16_keep_their_type() {
    let x = f64t(&[1], &[0.1]);
    let y = run(Op::Add(Add {}), &[&x, &x]);
    assert_eq!(f64s(&y), vec![0.2]);
    let h = raw(DType::F16, &[1], 0x3c00u16.to_le_bytes().to_vec()); // 1.0
    let y = run(Op::Add(Add {}), &[&h, &h]);
    assert_eq!((y.dtype, y.raw().unwrap().to_vec()), (DType::F16, 0x4000u16.to_le_bytes().to_vec()));
}

#[test]
fn bitwise_and_shift() {
    let x = u8t(&[3], &[0b1100, 0xff, 1]);
    let y = u8t(&[3], &[0b1010, 4, 9]);
    assert_eq!(ints(&run(Op::BitwiseAnd(BitwiseAnd {}), &[&x, &y])), vec![0b1000, 4, 1]);
    assert_eq!(ints(&run(Op::BitwiseXor(BitwiseXor {}), &[&x, &y])), vec![0b0110, 0xfb, 8]);
    assert_eq!(ints(&run(Op::BitwiseNot(BitwiseNot {}), &[&x])), vec![0xf3, 0, 0xfe]);
    let s = u8t(&[3], &[2, 4, 9]);
    assert_eq!(ints(&run(Op::BitShift(BitShift { direction: ShiftDirection::Left }), &[&x, &s])), vec![0b110000, 0xf0, 0]);
    assert_eq!(ints(&run(Op::BitShift(BitShift { direction: ShiftDirection::Right }), &[&x, &s])), vec![0b11, 0x0f, 0]);
}
