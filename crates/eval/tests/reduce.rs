//! Reductions and single-axis ops: Reduce*, ArgMax/ArgMin, TopK, CumSum.

mod common;

use common::*;
use kiln_tir::op::*;

fn x23() -> kiln_tir::Tensor {
    f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn reduce_mean_sum_with_axes_and_keepdims() {
    let x = x23();
    let axes = i64t(&[1], &[-1]);
    let y = run(Op::ReduceMean(ReduceMean { keepdims: 1, noop_with_empty_axes: 0 }), &[&x, &axes]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![2, 1], vec![2.0, 5.0]));
    let y = run(Op::ReduceSum(ReduceSum { keepdims: 0, noop_with_empty_axes: 0 }), &[&x, &i64t(&[1], &[0])]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![3], vec![5.0, 7.0, 9.0]));
    let y = run_opt(Op::ReduceSum(ReduceSum { keepdims: 0, noop_with_empty_axes: 0 }), &[Some(&x), None]);
    assert_eq!((y.shape.clone(), f32s(&y)), (vec![], vec![21.0]));
    let y = run_opt(Op::ReduceSumSquare(ReduceSumSquare { keepdims: 1, noop_with_empty_axes: 1 }), &[Some(&x), None]);
    assert_eq!((y.shape.clone(), f32s(&y)[..3].to_vec()), (vec![2, 3], vec![1.0, 4.0, 9.0]));
}

#[test]
fn other_reductions() {
    let x = x23();
    let axes = i64t(&[1], &[1]);
    let r = |op| f32s(&run(op, &[&x, &axes]));
    assert_eq!(r(Op::ReduceMax(ReduceMax { keepdims: 0, noop_with_empty_axes: 0 })), vec![3.0, 6.0]);
    assert_eq!(r(Op::ReduceMin(ReduceMin { keepdims: 0, noop_with_empty_axes: 0 })), vec![1.0, 4.0]);
    assert_eq!(r(Op::ReduceProd(ReduceProd { keepdims: 0, noop_with_empty_axes: 0 })), vec![6.0, 120.0]);
    assert_eq!(r(Op::ReduceL1(ReduceL1 { keepdims: 0, noop_with_empty_axes: 0 })), vec![6.0, 15.0]);
    assert_close(&r(Op::ReduceL2(ReduceL2 { keepdims: 0, noop_with_empty_axes: 0 })), &[14f32.sqrt(), 77f32.sqrt()], 1e-7);
    assert_close(&r(Op::ReduceLogSumExp(ReduceLogSumExp { keepdims: 0, noop_with_empty_axes: 0 })), &[3.407_606, 6.407_606], 1e-6);
    let i = i64t(&[2, 2], &[1, 5, -3, 2]);
    assert_eq!(ints(&run(Op::ReduceMax(ReduceMax { keepdims: 0, noop_with_empty_axes: 0 }), &[&i, &axes])), vec![5, 2]);
    let empty = f32t(&[2, 0], &[]);
    let m = run(Op::ReduceMax(ReduceMax { keepdims: 0, noop_with_empty_axes: 0 }), &[&empty, &axes]);
    assert_eq!(f32s(&m), vec![f32::NEG_INFINITY; 2]);
}

#[test]
fn argmax_argmin_topk() {
    let x = f32t(&[2, 3], &[1.0, 3.0, 3.0, 4.0, 0.0, 4.0]);
    let am = |last| ints(&run(Op::ArgMax(ArgMax { axis: 1, keepdims: 0, select_last_index: last }), &[&x]));
    assert_eq!(am(0), vec![1, 0]);
    assert_eq!(am(1), vec![2, 2]);
    let y = run(Op::ArgMin(ArgMin { axis: 0, keepdims: 1, select_last_index: 0 }), &[&x]);
    assert_eq!((y.shape.clone(), ints(&y)), (vec![1, 3], vec![0, 1, 0]));
    let outs = run_n(Op::TopK(TopK { axis: -1, largest: 1, sorted: 1 }), &[&x, &i64t(&[1], &[2])], 2);
    assert_eq!(f32s(&outs[0]), vec![3.0, 3.0, 4.0, 4.0]);
    assert_eq!(ints(&outs[1]), vec![1, 2, 0, 2]);
    let outs = run_n(Op::TopK(TopK { axis: 1, largest: 0, sorted: 1 }), &[&x, &i64t(&[1], &[1])], 2);
    assert_eq!((f32s(&outs[0]), ints(&outs[1])), (vec![1.0, 0.0], vec![0, 1]));
}

#[test]
fn cumsum_exclusive_reverse() {
    let x = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let axis = i64t(&[], &[0]);
    let c = |exclusive, reverse| f32s(&run(Op::CumSum(CumSum { exclusive, reverse }), &[&x, &axis]));
    assert_eq!(c(0, 0), vec![1.0, 3.0, 6.0, 10.0]);
    assert_eq!(c(1, 0), vec![0.0, 1.0, 3.0, 6.0]);
    assert_eq!(c(0, 1), vec![10.0, 9.0, 7.0, 4.0]);
    assert_eq!(c(1, 1), vec![9.0, 7.0, 4.0, 0.0]);
}
