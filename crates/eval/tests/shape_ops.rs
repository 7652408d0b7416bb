//! Shape computation and data movement: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
//! Concat, Slice, Split, Transpose, Expand, Tile, Pad, ConstantOfShape, Range, Identity.

mod common;

use common::*;
use kiln_eval::EvalError;
use kiln_tir::op::*;
use kiln_tir::{DType, Tensor};

fn iota(shape: &[u64]) -> Tensor {
    let n: u64 = shape.iter().product();
    f32t(shape, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
}

#[test]
fn shape_with_start_and_end() {
    let x = iota(&[2, 3, 4, 5]);
    let s = |start, end| ints(&run(Op::Shape(Shape { start, end }), &[&x]));
    assert_eq!(s(0, None), vec![2, 3, 4, 5]);
    assert_eq!(s(1, Some(-1)), vec![3, 4]);
    assert_eq!(s(-10, Some(10)), vec![2, 3, 4, 5]);
    assert_eq!(s(3, Some(1)), Vec::<i64>::new());
    let size = run(Op::Size(Size {}), &[&x]);
    assert_eq!((size.shape.clone(), ints(&size)), (vec![], vec![120]));
}

#[test]
fn reshape_infers_and_copies_dims() {
    let x = iota(&[2, 3, 4]);
    let r = |spec: &[i64], allowzero| run(Op::Reshape(Reshape { allowzero }), &[&x, &i64t(&[spec.len() as u64], spec)]).shape;
    assert_eq!(r(&[-1], 0), vec![24]);
    assert_eq!(r(&[0, -1], 0), vec![2, 12]);
    assert_eq!(r(&[4, 0, -1], 0), vec![4, 3, 2]);
    assert_eq!(r(&[-1, 6], 1), vec![4, 6]);
    let bad = |spec: &[i64], allowzero| run_err(Op::Reshape(Reshape { allowzero }), &[&x, &i64t(&[spec.len() as u64], spec)]);
    assert!(matches!(bad(&[-1, -1], 0), EvalError::Invalid { .. }));
    assert!(matches!(bad(&[5, -1], 0), EvalError::Invalid { .. }));
    assert!(matches!(bad(&[0, 24], 1), EvalError::Invalid { .. }));
    let empty = iota(&[0, 3]);
    let z = run(Op::Reshape(Reshape { allowzero: 1 }), &[&empty, &i64t(&[2], &[3, 0])]);
    assert_eq!(z.shape, vec![3, 0]);
}

#[test]
fn flatten_squeeze_unsqueeze() {
    let x = iota(&[2, 1, 3, 1]);
    assert_eq!(run(Op::Flatten(Flatten { axis: 2 }), &[&x]).shape, vec![2, 3]);
    assert_eq!(run(Op::Flatten(Flatten { axis: 0 }), &[&x]).shape, vec![1, 6]);
    assert_eq!(run(Op::Flatten(Flatten { axis: -1 }), &[&x]).shape, vec![6, 1]);
    assert_eq!(run(Op::Squeeze(Squeeze {}), &[&x]).shape, vec![2, 3]);
    assert_eq!(run(Op::Squeeze(Squeeze {}), &[&x, &i64t(&[1], &[-1])]).shape, vec![2, 1, 3]);
    assert!(matches!(run_err(Op::Squeeze(Squeeze {}), &[&x, &i64t(&[1], &[0])]), EvalError::Invalid { .. }));
    let y = iota(&[2, 3]);
    assert_eq!(run(Op::Unsqueeze(Unsqueeze {}), &[&y, &i64t(&[2], &[0, -1])]).shape, vec![1, 2, 3, 1]);
    assert_eq!(run(Op::Unsqueeze(Unsqueeze {}), &[&y, &i64t(&[1], &[1])]).shape, vec![2, 1, 3]);
}

#[test]
fn concat_along_middle_axis() {
    let a = iota(&[2, 1, 2]);
    let b = f32t(&[2, 2, 2], &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]);
    let z = run(Op::Concat(Concat { axis: -2 }), &[&a, &b]);
    assert_eq!(z.shape, vec![2, 3, 2]);
    assert_eq!(f32s(&z), vec![0.0, 1.0, 10.0, 11.0, 12.0, 13.0, 2.0, 3.0, 14.0, 15.0, 16.0, 17.0]);
    let shapes = [i64t(&[2], &[1, 2]), i64t(&[1], &[3])];
    assert_eq!(ints(&run(Op::Concat(Concat { axis: 0 }), &[&shapes[0], &shapes[1]])), vec![1, 2, 3]);
}

#[test]
fn slice_positive_negative_and_clamped() {
    let x = iota(&[3, 4]);
    let s = |starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>| {
        let t = |v: &[i64]| i64t(&[v.len() as u64], v);
        let (st, en) = (t(starts), t(ends));
        let ax = axes.map(t);
        let sp = steps.map(t);
        run_opt(Op::Slice(Slice {}), &[Some(&x), Some(&st), Some(&en), ax.as_ref(), sp.as_ref()])
    };
    let y = s(&[1, 0], &[3, 3], None, None);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2, 3], vec![4.0, 5.0, 6.0, 8.0, 9.0, 10.0]));
    // Negative step walks backwards; INT64_MIN-like ends clamp to before the start.
    let y = s(&[-1], &[i64::MIN], Some(&[1]), Some(&[-1]));
    assert_eq!(f32s(&y), vec![3.0, 2.0, 1.0, 0.0, 7.0, 6.0, 5.0, 4.0, 11.0, 10.0, 9.0, 8.0]);
    let y = s(&[10, 3], &[-10, 0], None, Some(&[-2, -2]));
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2, 2], vec![11.0, 9.0, 3.0, 1.0]));
    let y = s(&[1], &[i64::MAX], Some(&[-1]), Some(&[2]));
    assert_eq!(f32s(&y), vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
    let y = s(&[2], &[1], Some(&[1]), None);
    assert_eq!(y.shape, vec![3, 0]);
    assert!(matches!(run_err(Op::Slice(Slice {}), &[&x, &i64t(&[1], &[0]), &i64t(&[1], &[1]), &i64t(&[1], &[0]), &i64t(&[1], &[0])]), EvalError::Invalid { .. }));
}

#[test]
fn split_by_sizes_and_evenly() {
    let x = iota(&[5]);
    let parts = run_n(Op::Split(Split { axis: 0, num_outputs: None }), &[&x, &i64t(&[2], &[2, 3])], 2);
    assert_eq!(f32s(&parts[0]), vec![0.0, 1.0]);
    assert_eq!(f32s(&parts[1]), vec![2.0, 3.0, 4.0]);
    let parts = run_n(Op::Split(Split { axis: 0, num_outputs: Some(3) }), &[&x], 3);
    assert_eq!(parts.iter().map(|p| p.shape[0]).collect::<Vec<_>>(), vec![2, 2, 1]);
    let y = iota(&[2, 4]);
    let parts = run_n(Op::Split(Split { axis: 1, num_outputs: None }), &[&y], 2);
    assert_eq!(f32s(&parts[1]), vec![2.0, 3.0, 6.0, 7.0]);
}

#[test]
fn transpose_expand_tile() {
    let x = iota(&[2, 3]);
    let t = run(Op::Transpose(Transpose::default()), &[&x]);
    assert_eq!((t.shape.clone(), f32s(&t)), (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
    let y = iota(&[2, 3, 4]);
    let t = run(Op::Transpose(Transpose { perm: vec![1, 2, 0] }), &[&y]);
    assert_eq!(t.shape, vec![3, 4, 2]);
    assert_eq!(f32s(&t)[..4], [0.0, 12.0, 1.0, 13.0]);
    assert!(matches!(run_err(Op::Transpose(Transpose { perm: vec![0, 0] }), &[&x]), EvalError::Invalid { .. }));
    let c = f32t(&[3, 1], &[1.0, 2.0, 3.0]);
    let e = run(Op::Expand(Expand {}), &[&c, &i64t(&[3], &[2, 1, 2])]);
    assert_eq!(e.shape, vec![2, 3, 2]);
    assert_eq!(f32s(&e)[..6], [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    let tl = run(Op::Tile(Tile {}), &[&x, &i64t(&[2], &[1, 2])]);
    assert_eq!(f32s(&tl), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0]);
}

#[test]
fn pad_modes() {
    let x = f32t(&[1, 3], &[1.0, 2.0, 3.0]);
    let pads = i64t(&[4], &[0, 2, 0, 1]);
    let p = |mode| f32s(&run(Op::Pad(Pad { mode }), &[&x, &pads]));
    assert_eq!(p(PadMode::Constant), vec![0.0, 0.0, 1.0, 2.0, 3.0, 0.0]);
    assert_eq!(p(PadMode::Edge), vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0]);
    assert_eq!(p(PadMode::Reflect), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
    assert_eq!(p(PadMode::Wrap), vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0]);
    let v = f32t(&[], &[9.0]);
    let axes = i64t(&[1], &[1]);
    let y = run(Op::Pad(Pad { mode: PadMode::Constant }), &[&x, &i64t(&[2], &[1, -1]), &v, &axes]);
    assert_eq!(f32s(&y), vec![9.0, 1.0, 2.0]);
}

#[test]
fn generators() {
    let c = run(Op::ConstantOfShape(ConstantOfShape { value: Some(i64t(&[1], &[7])) }), &[&i64t(&[2], &[2, 2])]);
    assert_eq!((c.dtype, c.shape.clone(), ints(&c)), (DType::I64, vec![2, 2], vec![7; 4]));
    let z = run(Op::ConstantOfShape(ConstantOfShape::default()), &[&i64t(&[1], &[3])]);
    assert_eq!(f32s(&z), vec![0.0; 3]);
    let r = run(Op::Range(Range::default()), &[&i64t(&[], &[10]), &i64t(&[], &[1]), &i64t(&[], &[-3])]);
    assert_eq!(ints(&r), vec![10, 7, 4]);
    let r = run(Op::Range(Range::default()), &[&f32t(&[], &[0.0]), &f32t(&[], &[1.0]), &f32t(&[], &[0.25])]);
    assert_eq!(f32s(&r), vec![0.0, 0.25, 0.5, 0.75]);
    let r = run(Op::Range(Range::default()), &[&i64t(&[], &[5]), &i64t(&[], &[1]), &i64t(&[], &[1])]);
    assert_eq!(r.shape, vec![0]);
    assert!(matches!(run_err(Op::Range(Range::default()), &[&i64t(&[], &[0]), &i64t(&[], &[1]), &i64t(&[], &[0])]), EvalError::Invalid { .. }));
    let x = iota(&[2, 2]);
    assert_eq!(run(Op::Identity(Identity {}), &[&x]), x);
}

#[test]
fn trilu_and_depth_to_space() {
    let x = iota(&[3, 3]);
    assert_eq!(f32s(&run(Op::Trilu(Trilu { upper: 1 }), &[&x])), vec![0.0, 1.0, 2.0, 0.0, 4.0, 5.0, 0.0, 0.0, 8.0]);
    assert_eq!(f32s(&run(Op::Trilu(Trilu { upper: 0 }), &[&x, &i64t(&[], &[-1])])), vec![0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 6.0, 7.0, 0.0]);
    let y = iota(&[1, 4, 1, 1]);
    let d = run(Op::DepthToSpace(DepthToSpace { blocksize: 2, mode: DepthToSpaceMode::Dcr }), &[&y]);
    assert_eq!((d.shape.clone(), f32s(&d)), (vec![1, 1, 2, 2], vec![0.0, 1.0, 2.0, 3.0]));
    let s = run(Op::SpaceToDepth(SpaceToDepth { blocksize: 2, mode: DepthToSpaceMode::Dcr }), &[&d]);
    assert_eq!(s, y);
}
