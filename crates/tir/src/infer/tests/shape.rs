//! Shape manipulation: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile, Shape,
//! Size, ConstantOfShape, Range, DepthToSpace, SpaceToDepth.

use super::{Arg, float, infer1, int, ints, raw, ty};
use crate::dtype::DType;
use crate::op::*;
use crate::tensor::Tensor;

fn reshape(allowzero: i64) -> Op {
    Op::Reshape(Reshape { allowzero })
}

#[test]
fn reshape_zero_copies_and_minus_one_infers() {
    assert_eq!(infer1(reshape(0), &[ty("f32[batch, seq, 256]"), ints(&[0, 0, 4, 64])]), "f32[batch, seq, 4, 64]");
    assert_eq!(infer1(reshape(0), &[ty("f32[batch, seq, 256]"), ints(&[-1, 256])]), "f32[batch*seq, 256]");
    assert_eq!(infer1(reshape(0), &[ty("f32[batch, seq, 256]"), ints(&[0, -1])]), "f32[batch, seq*256]");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[4, -1])]), "f32[4, 6]");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[-1])]), "f32[24]");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[])]), "error: cannot reshape [2, 3, 4] (24 elements) into [] (1 elements)");
    assert_eq!(infer1(reshape(0), &[ty("f32[1]"), ints(&[])]), "f32[]");
}

#[test]
fn reshape_symbolic_remainders_and_errors() {
    // 512 does not divide batch*seq*256 as a polynomial: the size is fresh.
    assert_eq!(infer1(reshape(0), &[ty("f32[batch, seq, 256]"), ints(&[-1, 512])]), "f32[u1, 512]");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[5, -1])]), "error: cannot reshape [2, 3, 4] (24 elements) into [5, -1]");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[5, 5])]), "error: cannot reshape [2, 3, 4] (24 elements) into [5, 5] (25 elements)");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3, 4]"), ints(&[-1, -1])]), "error: shape [-1, -1] has more than one -1");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3]"), ints(&[0, 0, 0])]), "error: shape [0, 0, 0] copies dim 2 (a 0) of an input of rank 2");
    assert_eq!(infer1(reshape(0), &[ty("f32[2, 3]"), ints(&[-2, 3])]), "error: dim 0 of shape [-2, 3] is negative (-2)");
}

#[test]
fn reshape_allowzero_and_computed_shapes() {
    assert_eq!(infer1(reshape(1), &[ty("f32[0, 3]"), ints(&[3, 0])]), "f32[3, 0]");
    assert_eq!(infer1(reshape(1), &[ty("f32[0, 3]"), ints(&[0, -1])]), "error: shape [0, -1] has both 0 and -1 with allowzero = 1");
    assert_eq!(infer1(reshape(0), &[ty("f32[b, 6]"), ty("i64[3]")]), "f32[u1, u2, u3]");
    assert_eq!(infer1(reshape(0), &[ty("f32[b, 6]"), ty("i64[n]")]), "error: the output rank is the length of `shape`, which is not static");
}

#[test]
fn flatten_squeeze_unsqueeze_transpose() {
    assert_eq!(infer1(Op::Flatten(Flatten { axis: 1 }), &[ty("f32[batch, 3, 4]")]), "f32[batch, 12]");
    assert_eq!(infer1(Op::Flatten(Flatten { axis: 0 }), &[ty("f32[batch, 3]")]), "f32[1, batch*3]");
    assert_eq!(infer1(Op::Flatten(Flatten { axis: -1 }), &[ty("f32[2, 3, 4]")]), "f32[6, 4]");
    assert_eq!(infer1(Op::Flatten(Flatten { axis: 4 }), &[ty("f32[2, 3, 4]")]), "error: axis 4 is out of range for rank 3");
    let sq = || Op::Squeeze(Squeeze {});
    assert_eq!(infer1(sq(), &[ty("f32[1, b, 1, 3]")]), "f32[b, 3]");
    assert_eq!(infer1(sq(), &[ty("f32[1, b, 1, 3]"), ints(&[-2])]), "f32[1, b, 3]");
    assert_eq!(infer1(sq(), &[ty("f32[1, b, 1, 3]"), ints(&[3])]), "error: cannot squeeze axis 3 of size 3 in [1, b, 1, 3]");
    let unsq = || Op::Unsqueeze(Unsqueeze {});
    assert_eq!(infer1(unsq(), &[ty("f32[b, 3]"), ints(&[0, -1])]), "f32[1, b, 3, 1]");
    assert_eq!(infer1(unsq(), &[ty("f32[]"), ints(&[0])]), "f32[1]");
    assert_eq!(infer1(unsq(), &[ty("f32[b, 3]"), ints(&[1, 1])]), "error: axis 1 appears twice in [1, 1]");
    assert_eq!(infer1(Op::Transpose(Transpose::default()), &[ty("f32[a, b, c]")]), "f32[c, b, a]");
    assert_eq!(infer1(Op::Transpose(Transpose { perm: vec![0, 2, 1] }), &[ty("f32[a, b, c]")]), "f32[a, c, b]");
    assert_eq!(infer1(Op::Transpose(Transpose { perm: vec![0, 0, 1] }), &[ty("f32[a, b, c]")]), "error: perm value 0 appears twice in [0, 0, 1]");
}

#[test]
fn expand_and_tile() {
    let expand = || Op::Expand(Expand {});
    assert_eq!(infer1(expand(), &[ty("f32[b, 1]"), ints(&[2, 1, 6])]), "f32[2, b, 6]");
    assert_eq!(infer1(expand(), &[ty("f32[3, 1]"), ints(&[2, 6])]), "error: cannot broadcast dim 3 with 2 (shapes [3, 1], [2, 6])");
    assert_eq!(infer1(expand(), &[ty("f32[b, 1]"), ty("i64[3]")]), "f32[u1, b, u2]");
    let tile = || Op::Tile(Tile {});
    assert_eq!(infer1(tile(), &[ty("f32[b, 3]"), ints(&[2, 2])]), "f32[b*2, 6]");
    assert_eq!(infer1(tile(), &[ty("f32[b, 3]"), ints(&[2])]), "error: repeats has 1 values for rank 2");
}

#[test]
fn shape_size_constant_of_shape() {
    let shape = |start, end| Op::Shape(Shape { start, end });
    assert_eq!(infer1(shape(0, None), &[ty("f32[a, b, c]")]), "i64[3]");
    assert_eq!(infer1(shape(1, Some(-1)), &[ty("f32[a, b, c]")]), "i64[1]");
    assert_eq!(infer1(shape(-10, Some(10)), &[ty("f32[a, b, c]")]), "i64[3]");
    assert_eq!(infer1(shape(2, Some(1)), &[ty("f32[a, b, c]")]), "i64[0]");
    assert_eq!(infer1(Op::Size(Size {}), &[ty("f32[a, b]")]), "i64[]");
    let cos = |value| Op::ConstantOfShape(ConstantOfShape { value });
    assert_eq!(infer1(cos(None), &[ints(&[2, 3])]), "f32[2, 3]");
    assert_eq!(infer1(cos(Some(Tensor::from_i64s(&[1], &[7]))), &[ints(&[])]), "i64[]");
    assert_eq!(infer1(cos(None), &[ty("i64[2]")]), "f32[u1, u2]");
    assert_eq!(infer1(cos(Some(Tensor::from_i64s(&[2], &[7, 8]))), &[ints(&[1])]), "error: value must hold one element, found shape [2]");
}

#[test]
fn range_counts_elements() {
    let range = || Op::Range(Range::default());
    assert_eq!(infer1(range(), &[int(3), int(9), int(3)]), "i64[2]");
    assert_eq!(infer1(range(), &[int(10), int(4), int(-2)]), "i64[3]");
    assert_eq!(infer1(range(), &[int(0), int(10), int(-1)]), "i64[0]");
    assert_eq!(infer1(range(), &[float(0.0), float(1.0), float(0.3)]), "f32[4]");
    assert_eq!(infer1(range(), &[float(1.0), float(1.0), float(0.5)]), "f32[0]");
    let f64s = |v: f64| raw(DType::F64, &[], v.to_le_bytes().to_vec());
    assert_eq!(infer1(range(), &[f64s(-1.5), f64s(2.0), f64s(0.5)]), "f64[7]");
    // f16 0.0, 2.5 and 0.5.
    let f16 = |bits: u16| raw(DType::F16, &[], bits.to_le_bytes().to_vec());
    assert_eq!(infer1(range(), &[f16(0x0000), f16(0x4100), f16(0x3800)]), "f16[5]");
    assert_eq!(infer1(range(), &[int(0), ty("i64[]"), int(1)]), "i64[u1]");
    assert_eq!(infer1(range(), &[int(0), int(5), int(0)]), "error: range delta is 0");
    assert_eq!(infer1(range(), &[int(0), float(5.0), int(1)]), "error: input 1 has element type f32; expected i64 (the type of input 0)");
}

#[test]
fn depth_and_space() {
    let d2s = Op::DepthToSpace(DepthToSpace { blocksize: 2, mode: DepthToSpaceMode::Dcr });
    assert_eq!(infer1(d2s.clone(), &[ty("f32[n, 8, h, w]")]), "f32[n, 2, h*2, w*2]");
    assert_eq!(infer1(d2s, &[ty("f32[n, 6, h, w]")]), "error: 6 channels do not divide by blocksize² = 4");
    let s2d = Op::SpaceToDepth(SpaceToDepth { blocksize: 2, mode: DepthToSpaceMode::Dcr });
    assert_eq!(infer1(s2d.clone(), &[ty("f32[n, 3, 4, 6]")]), "f32[n, 12, 2, 3]");
    assert_eq!(infer1(s2d, &[ty("f32[n, 3, 5, 6]")]), "error: spatial size 5 does not divide by blocksize 2");
    assert_eq!(infer1(Op::Identity(Identity {}), &[Arg::Ty(super::t("string[q]"))]), "string[q]");
}
