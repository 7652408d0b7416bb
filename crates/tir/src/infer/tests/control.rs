//! If, Loop and Scan through region signatures.

use super::{Arg, int, run_with, show, t, ty};
use crate::infer::RegionSig;
use crate::op::*;

fn sig(params: &[&str], results: &[&str]) -> RegionSig {
    RegionSig { params: params.iter().map(|p| t(p)).collect(), results: results.iter().map(|r| t(r)).collect() }
}

fn if_(then: &[&str], els: &[&str], outputs: usize) -> String {
    show(run_with(&Op::If(If {}), &[ty("bool[]")], &[sig(&[], then), sig(&[], els)], outputs))
}

#[test]
fn if_merges_branches() {
    assert_eq!(if_(&["f32[b, 3]", "i64[]"], &["f32[b, 3]", "i64[]"], 2), "f32[b, 3]; i64[]");
    assert_eq!(if_(&["f32[b, 3]"], &["f32[b, 4]"], 1), "f32[b, u1]");
    // Branches of different ranks: the then branch's type, under an assumption binding checks.
    assert_eq!(if_(&["f32[2]"], &["f32[2, 1]"], 1), "f32[2]");
    let known = |c: bool| show(run_with(&Op::If(If {}), &[Arg::Const(crate::Tensor { dtype: crate::DType::Bool, shape: vec![], data: crate::TensorData::Raw(vec![u8::from(c)].into()) })], &[sig(&[], &["f32[2]"]), sig(&[], &["f32[2, 1]"])], 1));
    assert_eq!(known(true), "f32[2]");
    assert_eq!(known(false), "f32[2, 1]");
    assert_eq!(if_(&["f32[2]"], &["f16[2]"], 1), "error: output 0 of the two branches: element types f32 and f16 differ");
    assert_eq!(if_(&["f32[2]"], &["f32[2]", "f32[2]"], 1), "error: the else branch has 2 results for 1 outputs");
    let bad_cond = run_with(&Op::If(If {}), &[ty("bool[2]")], &[sig(&[], &[]), sig(&[], &[])], 0);
    assert_eq!(show(bad_cond), "error: input 0 (`cond`) must be a scalar or a one-element 1-D tensor, found bool[2]");
    let no_regions = run_with(&Op::If(If {}), &[ty("bool[]")], &[], 0);
    assert_eq!(show(no_regions), "error: expected 2 regions, found 0");
}

#[test]
fn loop_stacks_scan_outputs_by_trip_count() {
    let body = sig(&["i64[]", "bool[]", "f32[2]"], &["bool[]", "f32[2]", "f32[3]"]);
    let loop_ = |args: &[Arg]| show(run_with(&Op::Loop(Loop {}), args, std::slice::from_ref(&body), 2));
    assert_eq!(loop_(&[int(5), Arg::Missing, ty("f32[2]")]), "f32[2]; f32[5, 3]");
    assert_eq!(loop_(&[ty("i64[]"), ty("bool[]"), ty("f32[2]")]), "f32[2]; f32[u1, 3]");
    assert_eq!(loop_(&[int(5), ty("bool[]"), ty("f32[2]")]), "f32[2]; f32[u1, 3]");
    // A carried value that changes shape in the body gets a fresh dim.
    let growing = sig(&["i64[]", "bool[]", "f32[n]"], &["bool[]", "f32[n+1]"]);
    let r = run_with(&Op::Loop(Loop {}), &[int(3), Arg::Missing, ty("f32[n]")], &[growing], 1);
    assert_eq!(show(r), "f32[u1]");
    let wrong = sig(&["i64[]", "bool[]"], &["bool[]"]);
    let r = run_with(&Op::Loop(Loop {}), &[int(3), Arg::Missing, ty("f32[2]")], &[wrong], 1);
    assert_eq!(show(r), "error: the body has 2 parameters; the loop carries 1 values plus the iteration number and condition");
}

#[test]
fn scan_inserts_the_sequence_axis() {
    let body = sig(&["f32[4]", "f32[4]"], &["f32[4]", "f32[4]"]);
    let scan = Op::Scan(Scan { num_scan_inputs: 1, ..Default::default() });
    let r = run_with(&scan, &[ty("f32[4]"), ty("f32[seq, 4]")], std::slice::from_ref(&body), 2);
    assert_eq!(show(r), "f32[4]; f32[seq, 4]");
    let axes = Op::Scan(Scan { num_scan_inputs: 1, scan_input_axes: vec![1], scan_output_axes: vec![-1], ..Default::default() });
    let r = run_with(&axes, &[ty("f32[4]"), ty("f32[4, seq]")], &[body], 2);
    assert_eq!(show(r), "f32[4]; f32[4, seq]");
}
