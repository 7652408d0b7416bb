//! Elementwise ops, reductions and dtype rules.

use super::{Arg, float, infer, infer1, int, ints, ty};
use crate::dtype::DType;
use crate::op::*;

#[test]
fn broadcasting_aligns_from_the_right() {
    assert_eq!(infer1(Op::Add(Add {}), &[ty("f32[2, 1, 4]"), ty("f32[3, 1]")]), "f32[2, 3, 4]");
    assert_eq!(infer1(Op::Mul(Mul {}), &[ty("f32[]"), ty("f32[5]")]), "f32[5]");
    assert_eq!(infer1(Op::Sub(Sub {}), &[ty("f32[0, 1]"), ty("f32[1, 3]")]), "f32[0, 3]");
}

#[test]
fn broadcasting_keeps_symbols() {
    assert_eq!(infer1(Op::Add(Add {}), &[ty("f32[batch, seq, 1]"), ty("f32[1, seq, 64]")]), "f32[batch, seq, 64]");
    assert_eq!(infer1(Op::Add(Add {}), &[ty("f32[seq*4]"), ty("f32[1]")]), "f32[seq*4]");
    assert_eq!(infer1(Op::Div(Div {}), &[ty("f32[n+1, 2]"), ty("f32[n+1, 1]")]), "f32[n+1, 2]");
}

#[test]
fn broadcasting_rejects_unequal_known_dims() {
    assert_eq!(infer1(Op::Add(Add {}), &[ty("f32[2, 3]"), ty("f32[4]")]), "error: cannot broadcast dim 3 with 4 (shapes [2, 3], [4])");
}

/// Infers `Add` of two shapes and returns the output type with the assumptions reported.
fn add_assuming(a: &str, b: &str) -> (String, Vec<String>) {
    struct Recorder(Vec<String>, u32);
    impl crate::infer::SymbolSource for Recorder {
        fn fresh(&mut self) -> crate::Dim {
            self.1 += 1;
            crate::Dim::sym(&format!("u{}", self.1))
        }
        fn assume(&mut self, what: crate::Assumed) {
            if let crate::Assumed::Broadcast(lhs, rhs) = what {
                self.0.push(format!("{lhs} ~ {rhs}"));
            }
        }
    }
    let (ta, tb) = (super::t(a), super::t(b));
    let inputs = [Some(crate::infer::InferInput { ty: &ta, value: None }), Some(crate::infer::InferInput { ty: &tb, value: None })];
    let mut rec = Recorder(Vec::new(), 0);
    let out = crate::infer::infer_op(&Op::Add(Add {}), &inputs, &[], 1, &mut rec).map(|t| t[0].to_string()).unwrap_or_else(|e| format!("error: {e}"));
    (out, rec.0)
}

#[test]
fn undecidable_broadcasts_are_assumed_and_reported() {
    // A symbol against a known size: the known size, whether the symbol is 1 or equal.
    assert_eq!(add_assuming("f32[n, 96, h]", "f32[120]"), ("f32[n, 96, 120]".to_string(), vec!["h ~ 120".to_string()]));
    // Two different symbols: a fresh one.
    assert_eq!(add_assuming("f32[h, 8]", "f32[w*2, 8]"), ("f32[u1, 8]".to_string(), vec!["h ~ w*2".to_string()]));
    // Nothing to assume when equal or 1.
    assert_eq!(add_assuming("f32[h, 1]", "f32[h, w]"), ("f32[h, w]".to_string(), vec![]));
}

#[test]
fn dtype_rules() {
    assert_eq!(infer1(Op::Add(Add {}), &[ty("f32[2]"), ty("i64[2]")]), "error: input 1 has element type i64; expected f32 (the type of input 0)");
    assert!(infer1(Op::Add(Add {}), &[ty("string[2]"), ty("string[2]")]).starts_with("error: input 0 has element type string; expected a numeric type"));
    assert!(infer1(Op::MatMul(MatMul {}), &[ty("string[2, 2]"), ty("string[2, 2]")]).starts_with("error: input 0 has element type string"));
    assert!(infer1(Op::Sqrt(Sqrt {}), &[ty("i32[2]")]).starts_with("error: input 0 has element type i32; expected a float type"));
    assert_eq!(infer1(Op::Less(Less {}), &[ty("i32[2, 1]"), ty("i32[3]")]), "bool[2, 3]");
    assert_eq!(infer1(Op::Equal(Equal {}), &[ty("string[4]"), ty("string[]")]), "bool[4]");
    assert_eq!(infer1(Op::And(And {}), &[ty("bool[4]"), ty("bool[1]")]), "bool[4]");
    assert_eq!(infer1(Op::IsNaN(IsNaN {}), &[ty("f16[3]")]), "bool[3]");
    assert_eq!(infer1(Op::Pow(Pow {}), &[ty("f32[3]"), ty("i64[]")]), "f32[3]");
    assert_eq!(infer1(Op::Not(Not {}), &[ty("bool[n]")]), "bool[n]");
}

#[test]
fn casts() {
    assert_eq!(infer1(Op::Cast(Cast { to: DType::F16, ..Default::default() }), &[ty("i64[b, 2]")]), "f16[b, 2]");
    assert_eq!(infer1(Op::CastLike(CastLike::default()), &[ty("i64[b]"), ty("bf16[]")]), "bf16[b]");
    assert_eq!(infer1(Op::BitCast(BitCast { to: DType::I32 }), &[ty("f32[4]")]), "i32[4]");
    assert_eq!(infer1(Op::BitCast(BitCast { to: DType::I64 }), &[ty("f32[4]")]), "error: cannot bitcast f32 (32 bits) to i64 (64 bits)");
}

#[test]
fn where_clip_prelu_variadic() {
    assert_eq!(infer1(Op::Where(Where {}), &[ty("bool[b, 1]"), ty("f32[4]"), ty("f32[]")]), "f32[b, 4]");
    assert_eq!(infer1(Op::Clip(Clip {}), &[ty("f32[3]"), Arg::Missing, float(6.0)]), "f32[3]");
    assert_eq!(infer1(Op::PRelu(PRelu {}), &[ty("f32[n, 3, 8]"), ty("f32[3, 1]")]), "f32[n, 3, 8]");
    assert!(infer1(Op::PRelu(PRelu {}), &[ty("f32[3]"), ty("f32[2, 3]")]).starts_with("error: slope of shape [2, 3] does not broadcast"));
    assert_eq!(infer1(Op::Max(Max {}), &[ty("i32[2, 1]"), ty("i32[3]"), ty("i32[1, 1]")]), "i32[2, 3]");
    assert_eq!(infer1(Op::Sum(Sum {}), &[]), "error: expected at least 1 inputs, found 0");
    assert_eq!(infer(Op::Dropout(Dropout::default()), &[ty("f32[2]")], 2), "f32[2]; bool[2]");
    assert!(infer1(Op::SwiGLU(SwiGLU::default()), &[ty("f32[2]"), ty("f32[1]")]).starts_with("error: inputs must have identical shapes"));
}

#[test]
fn reductions_with_constant_axes() {
    let sum = |keepdims| Op::ReduceSum(ReduceSum { keepdims, noop_with_empty_axes: 0 });
    assert_eq!(infer1(sum(1), &[ty("f32[b, 3, 4]"), ints(&[-1])]), "f32[b, 3, 1]");
    assert_eq!(infer1(sum(0), &[ty("f32[b, 3, 4]"), ints(&[0, 2])]), "f32[3]");
    assert_eq!(infer1(sum(0), &[ty("f32[b, 3, 4]")]), "f32[]");
    assert_eq!(infer1(sum(1), &[ty("f32[b, 3, 4]")]), "f32[1, 1, 1]");
    let noop = Op::ReduceMean(ReduceMean { keepdims: 1, noop_with_empty_axes: 1 });
    assert_eq!(infer1(noop, &[ty("f32[b, 3]"), ints(&[])]), "f32[b, 3]");
    assert_eq!(infer1(sum(1), &[ty("f32[2, 3]"), ints(&[2])]), "error: axis 2 is out of range for rank 2");
    assert_eq!(infer1(sum(1), &[ty("f32[2, 3]"), ints(&[1, -1])]), "error: axis -1 appears twice in [1, -1]");
    assert!(infer1(sum(1), &[ty("string[2]")]).starts_with("error: input 0 has element type string"));
}

#[test]
fn reductions_with_computed_axes() {
    let sum = |keepdims| Op::ReduceSum(ReduceSum { keepdims, noop_with_empty_axes: 0 });
    assert_eq!(infer1(sum(1), &[ty("f32[b, 3, 4]"), ty("i64[2]")]), "f32[u1, u2, u3]");
    assert_eq!(infer1(sum(0), &[ty("f32[b, 3, 4]"), ty("i64[2]")]), "f32[u1]");
    assert!(infer1(sum(0), &[ty("f32[b, 3, 4]"), ty("i64[n]")]).starts_with("error: the output rank depends"));
}

#[test]
fn arg_topk_cumsum_softmax() {
    assert_eq!(infer1(Op::ArgMax(ArgMax { axis: 1, keepdims: 0, select_last_index: 0 }), &[ty("f32[b, 5, 2]")]), "i64[b, 2]");
    assert_eq!(infer1(Op::ArgMin(ArgMin { axis: -1, keepdims: 1, select_last_index: 0 }), &[ty("f32[b, 5]")]), "i64[b, 1]");
    let topk = Op::TopK(TopK { axis: -1, largest: 1, sorted: 1 });
    assert_eq!(infer(topk.clone(), &[ty("f32[b, 10]"), ints(&[3])], 2), "f32[b, 3]; i64[b, 3]");
    assert_eq!(infer(topk.clone(), &[ty("f32[b, 10]"), ty("i64[1]")], 2), "f32[b, u1]; i64[b, u1]");
    assert_eq!(infer(topk, &[ty("f32[b, 10]"), ints(&[11])], 2), "error: k = 11 exceeds the axis size 10");
    assert_eq!(infer1(Op::CumSum(CumSum::default()), &[ty("f32[n, 2]"), int(1)]), "f32[n, 2]");
    assert_eq!(infer1(Op::CumSum(CumSum::default()), &[ty("f32[n, 2]"), int(2)]), "error: axis 2 is out of range for rank 2");
    assert_eq!(infer1(Op::Softmax(Softmax { axis: -1 }), &[ty("f16[b, s]")]), "f16[b, s]");
    assert_eq!(infer1(Op::Softmax(Softmax { axis: 2 }), &[ty("f16[b, s]")]), "error: axis 2 is out of range for rank 2");
}
