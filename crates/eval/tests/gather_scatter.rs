//! Gather/Scatter family and other indexing ops; bad indices are errors, not panics.

mod common;

use common::*;
use kiln_eval::EvalError;
use kiln_tir::op::*;

#[test]
fn gather_rows_and_negative_indices() {
    let x = f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let idx = i64t(&[2, 2], &[0, 2, -1, 1]);
    let y = run(Op::Gather(Gather { axis: 0 }), &[&x, &idx]);
    assert_eq!(y.shape, vec![2, 2, 2]);
    assert_eq!(f32s(&y), vec![1.0, 2.0, 5.0, 6.0, 5.0, 6.0, 3.0, 4.0]);
    let y = run(Op::Gather(Gather { axis: 1 }), &[&x, &i64t(&[], &[1])]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![3], vec![2.0, 4.0, 6.0]));
    let ids = i32t(&[1], &[2]);
    assert_eq!(f32s(&run(Op::Gather(Gather { axis: 0 }), &[&x, &ids])), vec![5.0, 6.0]);
}

#[test]
fn gather_out_of_range_is_an_error() {
    let x = f32t(&[3], &[1.0, 2.0, 3.0]);
    for bad in [3, -4, i64::MAX, i64::MIN] {
        let e = run_err(Op::Gather(Gather { axis: 0 }), &[&x, &i64t(&[1], &[bad])]);
        assert!(matches!(e, EvalError::Invalid { op: "gather", .. }), "{e}");
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    assert!(matches!(run_err(Op::Gather(Gather { axis: 1 }), &[&x, &i64t(&[1], &[0])]), EvalError::Invalid { .. }));
}

#[test]
fn gather_elements_and_nd() {
    let x = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let idx = i64t(&[2, 2], &[0, 0, 1, 0]);
    assert_eq!(f32s(&run(Op::GatherElements(GatherElements { axis: 1 }), &[&x, &idx])), vec![1.0, 1.0, 4.0, 3.0]);
    assert!(matches!(run_err(Op::GatherElements(GatherElements { axis: 1 }), &[&x, &i64t(&[2, 2], &[0, 2, 0, 0])]), EvalError::Invalid { .. }));
    let nd = i64t(&[2, 2], &[0, 1, 1, 0]);
    assert_eq!(f32s(&run(Op::GatherND(GatherND { batch_dims: 0 }), &[&x, &nd])), vec![2.0, 3.0]);
    let rows = i64t(&[2, 1], &[1, 0]);
    assert_eq!(f32s(&run(Op::GatherND(GatherND { batch_dims: 0 }), &[&x, &rows])), vec![3.0, 4.0, 1.0, 2.0]);
    let batched = i64t(&[2, 1], &[1, 0]);
    assert_eq!(f32s(&run(Op::GatherND(GatherND { batch_dims: 1 }), &[&x, &batched])), vec![2.0, 3.0]);
}

#[test]
fn scatter_elements_and_nd() {
    let x = f32t(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let idx = i64t(&[1, 2], &[1, 3]);
    let upd = f32t(&[1, 2], &[1.1, 2.1]);
    let y = run(Op::ScatterElements(ScatterElements { axis: 1, reduction: ScatterReduction::None }), &[&x, &idx, &upd]);
    assert_close(&f32s(&y), &[1.0, 1.1, 3.0, 2.1, 5.0], 1e-7);
    let dup = i64t(&[1, 2], &[1, 1]);
    let y = run(Op::ScatterElements(ScatterElements { axis: 1, reduction: ScatterReduction::Add }), &[&x, &dup, &upd]);
    assert_close(&f32s(&y), &[1.0, 5.2, 3.0, 4.0, 5.0], 1e-6);
    let z = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let y = run(Op::ScatterND(ScatterND::default()), &[&z, &i64t(&[2, 1], &[3, 0]), &f32t(&[2], &[9.0, 8.0])]);
    assert_eq!(f32s(&y), vec![8.0, 2.0, 3.0, 9.0]);
    assert!(matches!(run_err(Op::ScatterND(ScatterND::default()), &[&z, &i64t(&[1, 1], &[4]), &f32t(&[1], &[0.0])]), EvalError::Invalid { .. }));
}

#[test]
fn one_hot_non_zero_compress() {
    let idx = i64t(&[3], &[0, 2, -1]);
    let depth = i64t(&[], &[3]);
    let vals = f32t(&[2], &[0.0, 1.0]);
    let y = run(Op::OneHot(OneHot { axis: -1 }), &[&idx, &depth, &vals]);
    assert_eq!(y.shape, vec![3, 3]);
    assert_eq!(f32s(&y), vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
    let y = run(Op::OneHot(OneHot { axis: 0 }), &[&idx, &depth, &vals]);
    assert_eq!(f32s(&y), vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    let x = f32t(&[2, 2], &[1.0, 0.0, 0.0, 3.0]);
    let nz = run(Op::NonZero(NonZero {}), &[&x]);
    assert_eq!((nz.shape.clone(), ints(&nz)), (vec![2, 2], vec![0, 1, 0, 1]));
    let c = boolt(&[2], &[false, true]);
    let y = run(Op::Compress(Compress { axis: Some(1) }), &[&x, &c]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2, 1], vec![0.0, 3.0]));
}
