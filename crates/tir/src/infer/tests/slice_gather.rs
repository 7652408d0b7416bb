//! Slice, Split, Concat, Pad, Resize and the indexing ops.

use super::{Arg, floats, infer, infer1, int, ints, raw, ty};
use crate::dtype::DType;
use crate::op::*;

fn slice(args: &[Arg]) -> String {
    infer1(Op::Slice(Slice {}), args)
}

#[test]
fn slice_clamps_known_dims() {
    assert_eq!(slice(&[ty("f32[20, 10, 5]"), ints(&[0, 0]), ints(&[3, 10]), ints(&[0, 1])]), "f32[3, 10, 5]");
    assert_eq!(slice(&[ty("f32[20, 10, 5]"), ints(&[1]), ints(&[1000]), ints(&[1])]), "f32[20, 9, 5]");
    assert_eq!(slice(&[ty("f32[20, 10, 5]"), ints(&[-3]), ints(&[-1]), ints(&[0])]), "f32[2, 10, 5]");
    assert_eq!(slice(&[ty("f32[20]"), ints(&[0]), ints(&[i64::MAX]), ints(&[0]), ints(&[3])]), "f32[7]");
    assert_eq!(slice(&[ty("f32[20]"), ints(&[5]), ints(&[2])]), "f32[0]");
    assert_eq!(slice(&[ty("f32[0]"), ints(&[0]), ints(&[5])]), "f32[0]");
}

#[test]
fn slice_negative_steps() {
    assert_eq!(slice(&[ty("f32[20]"), ints(&[-1]), ints(&[i64::MIN]), ints(&[0]), ints(&[-1])]), "f32[20]");
    assert_eq!(slice(&[ty("f32[20, 10, 5]"), ints(&[20, 10, 4]), ints(&[0, 1, 1]), ints(&[0, 1, 2]), ints(&[-1, -3, -2])]), "f32[19, 3, 2]");
    assert_eq!(slice(&[ty("f32[10]"), ints(&[5]), ints(&[5]), ints(&[0]), ints(&[-1])]), "f32[0]");
    assert_eq!(slice(&[ty("f32[10]"), ints(&[0]), ints(&[5]), ints(&[0]), ints(&[0])]), "error: slice step is 0");
}

#[test]
fn slice_symbolic_dims() {
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[1]), ints(&[i64::MAX]), ints(&[1])]), "f32[b, seq-1]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[1]), ints(&[-1]), ints(&[-1])]), "f32[b, seq-2]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0]), ints(&[1]), ints(&[1])]), "f32[b, 1]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[-1]), ints(&[i64::MAX]), ints(&[1])]), "f32[b, 1]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[-1]), ints(&[i64::MIN]), ints(&[1]), ints(&[-1])]), "f32[b, seq]");
    // An end past 2 may clamp on a short sequence: the size is fresh.
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0]), ints(&[5]), ints(&[1])]), "f32[b, u1]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0]), ty("i64[1]"), ints(&[1])]), "f32[b, u1]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0]), ints(&[1]), ty("i64[1]")]), "f32[u1, u2]");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0]), ints(&[1]), ints(&[2])]), "error: axis 2 is out of range for rank 2");
    assert_eq!(slice(&[ty("f32[b, seq]"), ints(&[0, 0]), ints(&[1]), ints(&[0, 1])]), "error: starts, ends, axes and steps differ in length (2, 1, 2, 2)");
}

#[test]
fn split_sizes() {
    let split = |num_outputs| Op::Split(Split { axis: 1, num_outputs });
    assert_eq!(infer(split(Some(3)), &[ty("f32[b, 7]")], 3), "f32[b, 3]; f32[b, 3]; f32[b, 1]");
    assert_eq!(infer(split(Some(2)), &[ty("f32[b, 8]")], 2), "f32[b, 4]; f32[b, 4]");
    assert_eq!(infer(split(None), &[ty("f32[b, 8]"), ints(&[2, 6])], 2), "f32[b, 2]; f32[b, 6]");
    assert_eq!(infer(split(None), &[ty("f32[b, 8]"), ints(&[2, 5])], 2), "error: split sizes [2, 5] do not add up to the axis size 8");
    assert_eq!(infer(split(None), &[ty("f32[b, s*2]")], 2), "f32[b, s]; f32[b, s]");
    assert_eq!(infer(split(None), &[ty("f32[b, s]")], 2), "f32[b, u1]; f32[b, u2]");
    assert_eq!(infer(split(Some(3)), &[ty("f32[b, 7]")], 2), "error: num_outputs = 3 but the node has 2 outputs");
}

#[test]
fn concat_adds_the_axis() {
    let concat = |axis| Op::Concat(Concat { axis });
    assert_eq!(infer1(concat(1), &[ty("f32[b, seq]"), ty("f32[b, 3]")]), "f32[b, seq+3]");
    assert_eq!(infer1(concat(-1), &[ty("f32[2, 3]"), ty("f32[2, 4]"), ty("f32[2, 0]")]), "f32[2, 7]");
    assert_eq!(infer1(concat(0), &[ty("f32[b, 3]"), ty("f32[1, 3]")]), "f32[b+1, 3]");
    assert_eq!(infer1(concat(0), &[ty("f32[2, 3]"), ty("f32[2, 4]")]), "error: input 1 differs from input 0 on axis 1: 3 != 4");
    assert_eq!(infer1(concat(0), &[ty("f32[2, 3]"), ty("f32[2]")]), "error: input 1 has rank 1, input 0 has rank 2");
    assert_eq!(infer1(concat(0), &[ty("f32[2, n]"), ty("f32[2, 4]")]), "f32[4, 4]");
}

#[test]
fn pad_and_center_crop() {
    let pad = || Op::Pad(Pad::default());
    assert_eq!(infer1(pad(), &[ty("f32[n, 3, h, w]"), ints(&[0, 0, 1, 2, 0, 0, 1, 2])]), "f32[n, 3, h+2, w+4]");
    assert_eq!(infer1(pad(), &[ty("f32[4, 5]"), ints(&[-1, 0, -1, 2])]), "f32[2, 7]");
    assert_eq!(infer1(pad(), &[ty("f32[4, 5]"), ints(&[1, 1]), Arg::Missing, ints(&[-1])]), "f32[4, 7]");
    assert_eq!(infer1(pad(), &[ty("f32[4, 5]"), ints(&[-3, 0, -3, 0])]), "error: pads [-3, 0, -3, 0] remove more than axis 0 of [4, 5] holds");
    assert_eq!(infer1(pad(), &[ty("f32[4, 5]"), ty("i64[4]")]), "f32[u1, u2]");
    let ccp = Op::CenterCropPad(CenterCropPad { axes: vec![-2, -1] });
    assert_eq!(infer1(ccp, &[ty("f32[3, 20, 10]"), ints(&[10, 12])]), "f32[3, 10, 12]");
}

#[test]
fn resize_scales_and_sizes() {
    let resize = |policy| Op::Resize(Resize { keep_aspect_ratio_policy: policy, ..Default::default() });
    let stretch = resize(AspectPolicy::Stretch);
    assert_eq!(infer1(stretch.clone(), &[ty("f32[n, 3, 5, 7]"), Arg::Missing, floats(&[1.0, 1.0, 2.0, 0.5])]), "f32[n, 3, 10, 3]");
    assert_eq!(infer1(stretch.clone(), &[ty("f32[n, 3, h, w]"), Arg::Missing, floats(&[1.0, 1.0, 2.0, 2.0])]), "f32[n, 3, h*2, w*2]");
    assert_eq!(infer1(stretch.clone(), &[ty("f32[1, 1, 4, 4]"), floats(&[]), floats(&[]), ints(&[1, 1, 2, 6])]), "f32[1, 1, 2, 6]");
    let not_larger = resize(AspectPolicy::NotLarger);
    assert_eq!(infer1(not_larger, &[ty("f32[1, 1, 4, 4]"), Arg::Missing, Arg::Missing, ints(&[1, 1, 2, 6])]), "f32[1, 1, 2, 2]");
    let not_smaller = Op::Resize(Resize { keep_aspect_ratio_policy: AspectPolicy::NotSmaller, axes: vec![2, 3], ..Default::default() });
    assert_eq!(infer1(not_smaller, &[ty("f32[1, 1, 4, 4]"), Arg::Missing, Arg::Missing, ints(&[2, 6])]), "f32[1, 1, 6, 6]");
    assert_eq!(infer1(stretch, &[ty("f32[1, 1, 4, 4]")]), "error: one of scales and sizes must be given");
}

#[test]
fn gather_family() {
    let gather = |axis| Op::Gather(Gather { axis });
    assert_eq!(infer1(gather(0), &[ty("f32[vocab, 768]"), ty("i64[b, s]")]), "f32[b, s, 768]");
    assert_eq!(infer1(gather(1), &[ty("f32[b, s, 768]"), int(0)]), "f32[b, 768]");
    assert_eq!(infer1(gather(2), &[ty("f32[b, s]"), int(0)]), "error: axis 2 is out of range for rank 2");
    assert_eq!(infer1(gather(0), &[ty("f32[b, s]"), ty("f32[3]")]), "error: input 1 has element type f32; expected i32 or i64");
    let nd = |batch_dims| Op::GatherND(GatherND { batch_dims });
    assert_eq!(infer1(nd(0), &[ty("f32[2, 3, 4]"), ty("i64[5, 2]")]), "f32[5, 4]");
    assert_eq!(infer1(nd(1), &[ty("f32[2, 3, 4]"), ty("i64[2, 5, 1]")]), "f32[2, 5, 4]");
    assert_eq!(infer1(nd(0), &[ty("f32[2, 3]"), ty("i64[5, 3]")]), "error: indices' last dim 3 must be in 1..=2 for data of rank 2 with 0 batch dims");
    assert_eq!(infer1(Op::GatherElements(GatherElements { axis: 1 }), &[ty("f32[2, 3]"), ty("i32[2, 7]")]), "f32[2, 7]");
    let se = Op::ScatterElements(ScatterElements::default());
    assert_eq!(infer1(se, &[ty("f32[4, 3]"), ty("i64[2, 3]"), ty("f32[2, 3]")]), "f32[4, 3]");
    assert_eq!(infer1(Op::ScatterND(ScatterND::default()), &[ty("f32[4, 3]"), ty("i64[2, 1]"), ty("f32[2, 3]")]), "f32[4, 3]");
}

#[test]
fn data_dependent_sizes() {
    let one_hot = Op::OneHot(OneHot { axis: -1 });
    let values = || ty("f32[2]");
    assert_eq!(infer1(one_hot.clone(), &[ty("i64[b, s]"), int(10), values()]), "f32[b, s, 10]");
    assert_eq!(infer1(one_hot.clone(), &[ty("i64[b, s]"), raw(DType::F32, &[1], 3.0f32.to_le_bytes().to_vec()), values()]), "f32[b, s, 3]");
    assert_eq!(infer1(one_hot, &[ty("i64[b, s]"), ty("i64[]"), values()]), "f32[b, s, u1]");
    let compress = |axis| Op::Compress(Compress { axis });
    let cond = || raw(DType::Bool, &[3], vec![1, 0, 1]);
    assert_eq!(infer1(compress(Some(1)), &[ty("f32[n, 3]"), cond()]), "f32[n, 2]");
    assert_eq!(infer1(compress(None), &[ty("f32[n, 3]"), cond()]), "f32[2]");
    assert_eq!(infer1(compress(Some(0)), &[ty("f32[n, 3]"), ty("bool[n]")]), "f32[u1, 3]");
    assert_eq!(infer1(Op::NonZero(NonZero {}), &[ty("f32[a, b, c]")]), "i64[3, u1]");
    assert_eq!(infer1(Op::NonZero(NonZero {}), &[raw(DType::Bool, &[2, 2], vec![1, 0, 1, 1])]), "i64[2, 3]");
    let unique = |axis| Op::Unique(Unique { axis, sorted: 1 });
    assert_eq!(infer(unique(None), &[ty("f32[a, b]")], 4), "f32[u1]; i64[u1]; i64[a*b]; i64[u1]");
    assert_eq!(infer(unique(Some(1)), &[ty("f32[a, b]")], 4), "f32[a, u1]; i64[u1]; i64[b]; i64[u1]");
    assert_eq!(infer1(Op::NonMaxSuppression(NonMaxSuppression::default()), &[ty("f32[1, n, 4]"), ty("f32[1, 3, n]")]), "i64[u1, 3]");
}
