//! Control flow: If, Loop, Scan. Their output types come from the regions' signatures.

use crate::dim::Dim;
use crate::graph::Assumed;
use crate::op::Scan;
use crate::types::TensorType;

use super::common::{Cx, Res, axis_in, fmt_dims, known, set, tt, unify};
use super::{InferError, RegionSig};

fn region_err(msg: impl Into<String>) -> InferError {
    InferError::Region(msg.into())
}

/// The type of a value that may come from either of two sources: one dtype and rank; dims
/// that differ become fresh.
fn merge(cx: &mut Cx<'_, '_>, a: &TensorType, b: &TensorType, what: &str) -> Res<TensorType> {
    if a.dtype != b.dtype {
        return Err(region_err(format!("{what}: element types {} and {} differ", a.dtype, b.dtype)));
    }
    if a.rank() != b.rank() {
        return Err(region_err(format!("{what}: ranks differ ({a} and {b})")));
    }
    let shape = a.shape.iter().zip(&b.shape).map(|(x, y)| if x == y { x.clone() } else { cx.fresh() }).collect();
    Ok(tt(a.dtype, shape))
}

/// The single region a Loop or Scan carries.
fn body<'r>(cx: &Cx<'r, '_>) -> &'r RegionSig {
    &cx.regions[0]
}

/// If: each output merges the two branches' results.
pub(super) fn if_(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::BOOL)?;
    cx.scalar_like(0, "cond")?;
    let regions = cx.regions;
    let (then, els) = (&regions[0], &regions[1]);
    let n = cx.num_outputs;
    for (name, r) in [("then", then), ("else", els)] {
        if r.results.len() != n {
            return Err(region_err(format!("the {name} branch has {} results for {n} outputs", r.results.len())));
        }
    }
    // A known condition leaves one branch, whatever the other returns.
    if let Some(cond) = cx.value(0).and_then(crate::Tensor::to_i64s).and_then(|v| v.first().copied()) {
        return Ok(if cond != 0 { then.results.clone() } else { els.results.clone() });
    }
    let mut out = Vec::with_capacity(n);
    for (i, (a, b)) in then.results.iter().zip(&els.results).enumerate() {
        if a.dtype == b.dtype && a.rank() != b.rank() {
            cx.assume(Assumed::Branch { output: i, then: a.clone(), otherwise: b.clone() });
            out.push(a.clone());
            continue;
        }
        out.push(merge(cx, a, b, &format!("output {i} of the two branches"))?);
    }
    Ok(out)
}

/// Loop: the final carried values, then the scan outputs stacked along a new leading axis of
/// the trip count (known only for a constant `M` without a condition input).
pub(super) fn loop_(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.positions(2, usize::MAX)?;
    cx.check_opt(0, set::I64)?;
    cx.check_opt(1, set::BOOL)?;
    cx.scalar_like(0, "M")?;
    cx.scalar_like(1, "cond")?;
    let n = cx.len() - 2;
    let b = body(cx);
    if b.params.len() != n + 2 {
        return Err(region_err(format!("the body has {} parameters; the loop carries {n} values plus the iteration number and condition", b.params.len())));
    }
    let k = b
        .results
        .len()
        .checked_sub(n + 1)
        .ok_or_else(|| region_err(format!("the body has {} results; the loop needs the condition and {n} carried values", b.results.len())))?;
    if b.results[0].dtype != crate::dtype::DType::Bool || b.results[0].shape.iter().any(|d| *d != Dim::Known(1)) {
        return Err(region_err(format!("the body's first result (the condition) must be a bool scalar, found {}", b.results[0])));
    }
    let mut out = Vec::with_capacity(n + k);
    for i in 0..n {
        let init = cx.ty(2 + i)?;
        out.push(merge(cx, init, &b.results[1 + i], &format!("carried value {i} (initial and body result)"))?);
    }
    let trip = match (cx.opt(0), cx.opt(1), cx.int_scalar(0)) {
        (Some(_), None, Some(m)) => known(m, "trip count M")?,
        _ => cx.fresh(),
    };
    for j in 0..k {
        let r = &b.results[1 + n + j];
        let mut shape = vec![trip.clone()];
        shape.extend(r.shape.iter().cloned());
        out.push(tt(r.dtype, shape));
    }
    Ok(out)
}

/// Scan: the final states, then the scan outputs with the sequence length inserted at each
/// output's axis.
pub(super) fn scan(cx: &mut Cx<'_, '_>, a: &Scan) -> Res<Vec<TensorType>> {
    cx.arity(1, usize::MAX)?;
    let m = usize::try_from(a.num_scan_inputs)
        .ok()
        .filter(|m| (1..=cx.len()).contains(m))
        .ok_or_else(|| InferError::Attr(format!("num_scan_inputs {} must be in 1..={}", a.num_scan_inputs, cx.len())))?;
    let n = cx.len() - m;
    let b = body(cx);
    if b.params.len() != n + m {
        return Err(region_err(format!("the body has {} parameters for {n} states and {m} scan inputs", b.params.len())));
    }
    let k = b.results.len().checked_sub(n).ok_or_else(|| region_err(format!("the body has {} results for {n} states", b.results.len())))?;
    let in_axes = super::common::per_axis(&a.scan_input_axes, m, 0, "scan_input_axes")?;
    let out_axes = super::common::per_axis(&a.scan_output_axes, k, 0, "scan_output_axes")?;
    let mut seq: Option<Dim> = None;
    for (j, &ax) in in_axes.iter().enumerate() {
        let t = cx.ty(n + j)?;
        let i = axis_in(ax, t.rank(), t.rank(), "scan_input_axes value")?;
        seq = Some(match seq {
            None => t.shape[i].clone(),
            Some(s) => unify(&s, &t.shape[i], &format!("scan input {j} has another sequence length than {}", fmt_dims(std::slice::from_ref(&s))))?,
        });
    }
    let seq = seq.unwrap_or(Dim::Known(0));
    let mut out = Vec::with_capacity(n + k);
    for i in 0..n {
        let init = cx.ty(i)?;
        out.push(merge(cx, init, &b.results[i], &format!("state {i} (initial and body result)"))?);
    }
    for (j, &ax) in out_axes.iter().enumerate() {
        let r = &b.results[n + j];
        let i = axis_in(ax, r.rank() + 1, r.rank() + 1, "scan_output_axes value")?;
        let mut shape = r.shape.clone();
        shape.insert(i, seq.clone());
        out.push(tt(r.dtype, shape));
    }
    Ok(out)
}

/// FusedElementwise: the inputs have the body's parameter types; the output is its result.
pub(super) fn fused_elementwise(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    let sig = body(cx);
    cx.arity(sig.params.len(), sig.params.len())?;
    for (i, p) in sig.params.iter().enumerate() {
        let t = cx.ty(i)?;
        if t != p {
            return Err(region_err(format!("input {i} is {t}, the body's parameter {p}")));
        }
    }
    match &sig.results[..] {
        [r] => Ok(vec![r.clone()]),
        rs => Err(region_err(format!("the body has {} results, not 1", rs.len()))),
    }
}
