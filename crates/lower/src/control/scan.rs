//! Scan (opset 9 and later): one kernel holding `for t in 0..L` around the body's kernels,
//! spliced in, where `L` is the scanned axis's (static) length.
//!
//! Each iteration first copies slice `t` (or `L−1−t` for a reverse direction) of every scan
//! input along its axis into the buffer of the body's parameter, runs the body, writes each
//! scan output's slice into its output along the output axis, and copies the new states back
//! ([`update_states`]). States live in the Scan's outputs where they are used.

use kiln_tir::op::Scan;
use kiln_tir::NodeId;

use super::region::{copy, splice, temp, update_states, value_type};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Where a scanned slice sits in a larger tensor: `outer` blocks of `len` slices of `inner`
/// elements, read or written at slice `t` (counted from the end when `reverse`).
struct Slicing {
    outer: u64,
    len: u64,
    inner: u64,
    reverse: bool,
}

impl Slicing {
    /// `dims` cut at `axis`, whose extent is `len`.
    fn new(dims: &[u64], axis: usize, len: u64, reverse: bool) -> Slicing {
        Slicing { outer: dims[..axis].iter().product(), len, inner: dims[axis..].iter().product::<u64>() / len.max(1), reverse }
    }

    /// Statements moving slice `t` between `whole` and the contiguous `slice`:
    /// `slice ← whole[t]` when `gather`, else `whole[t] ← slice`.
    fn copy(&self, k: &mut Kernel, t: Var, whole: BufId, slice: BufId, gather: bool) -> Vec<Stmt> {
        let at = if self.reverse { Expr::idx(self.len as i64 - 1) - Expr::Var(t) } else { Expr::Var(t) };
        let (len, inner) = (self.len as i64, self.inner as i64);
        k.nest(&[self.outer, self.inner], |_, i| {
            let (o, e) = (&i[0], &i[1]);
            let w = (o.clone() * len + at.clone()) * inner + e.clone();
            let s = o.clone() * inner + e.clone();
            let (src, src_at, dst, dst_at) = if gather { (whole, w, slice, s) } else { (slice, s, whole, w) };
            vec![Stmt::Store { buf: dst, index: dst_at, value: Expr::load(src, src_at) }]
        })
    }
}

/// An axis attribute (negative counts from `rank`), or why it is out of range.
fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r).contains(&v) { Ok(v as usize) } else { Err(format!("axis {a} is out of range for rank {rank}")) }
}

/// Lowers Scan node `n`.
pub(super) fn lower_scan(cx: &mut Lowerer<'_>, n: NodeId, a: &Scan) -> Result<(), LowerError> {
    let node = cx.node(n);
    let [body] = &node.regions[..] else {
        return Err(cx.unsupported(n, "Scan needs one body"));
    };
    let m = usize::try_from(a.num_scan_inputs).ok().filter(|m| (1..=node.inputs.len()).contains(m)).ok_or_else(|| cx.unsupported(n, "num_scan_inputs is out of range"))?;
    let carried = node.inputs.len() - m;
    if body.params.len() != carried + m || body.results.len() < carried || node.outputs.len() > body.results.len() {
        return Err(cx.unsupported(n, "the body's signature does not fit the node"));
    }
    let scans = body.results.len() - carried;
    let flag = |v: &[i64], j: usize| v.get(j).copied().unwrap_or(0) != 0;
    let mut k = cx.kernel(n);
    let name = k.name.clone();
    let zero = Expr::idx(0);
    let mut pre = Vec::new();

    // Scan inputs and the sequence length.
    let mut inputs = Vec::with_capacity(m);
    let mut seq: Option<u64> = None;
    for j in 0..m {
        let x = cx.required(n, carried + j)?;
        let ax = axis(a.scan_input_axes.get(j).copied().unwrap_or(0), x.rank()).map_err(|e| cx.unsupported(n, format!("scan input {j}: {e}")))?;
        let len = x.dims[ax];
        if seq.is_some_and(|s| s != len) {
            return Err(cx.unsupported(n, "scan inputs have different sequence lengths"));
        }
        seq = Some(len);
        let mut slice_dims = x.dims.clone();
        slice_dims.remove(ax);
        if value_type(cx, body.params[carried + j])? != (slice_dims.clone(), x.elem) {
            return Err(cx.unsupported(n, format!("the body's parameter for scan input {j} is not a {}{slice_dims:?} slice", x.elem.name())));
        }
        inputs.push((Slicing::new(&x.dims, ax, len, flag(&a.scan_input_directions, j)), x, slice_dims));
    }
    let seq = seq.unwrap_or(0);

    // States, initialised before the loop.
    let mut states = Vec::with_capacity(carried);
    for i in 0..carried {
        let init = cx.required(n, i)?;
        let state = match cx.output(n, i)? {
            Some(out) => out,
            None => Operand { buf: temp(cx, format!("{name}_state{i}"), init.elem, init.numel()), dims: init.dims.clone(), elem: init.elem },
        };
        if state.dims != init.dims || state.elem != init.elem || value_type(cx, body.params[i])? != (init.dims.clone(), init.elem) {
            return Err(cx.unsupported(n, format!("state {i} changes type (initial {}{:?})", init.elem.name(), init.dims)));
        }
        pre.extend(copy(&mut k, init.buf, &zero, state.buf, &zero, init.numel()));
        states.push(state);
    }
    let outs = (0..scans).map(|j| cx.output(n, carried + j)).collect::<Result<Vec<_>, _>>()?;
    if seq == 0 {
        k.body = pre;
        cx.push(k);
        return Ok(());
    }

    for (i, s) in states.iter().enumerate() {
        cx.bind(body.params[i], s.buf);
    }
    let mut slices = Vec::with_capacity(m);
    for (j, (_, x, slice_dims)) in inputs.iter().enumerate() {
        let buf = temp(cx, format!("{name}_slice{j}"), x.elem, slice_dims.iter().product());
        cx.bind(body.params[carried + j], buf);
        slices.push(buf);
    }

    let t = k.var(ScalarType::I64);
    let mut step = Vec::new();
    for ((slicing, x, _), &slice) in inputs.iter().zip(&slices) {
        step.extend(slicing.copy(&mut k, t, x.buf, slice, true));
    }
    let kernels = cx.lower_region(body)?;
    step.extend(splice(&mut k, kernels));
    // Scan outputs first: they may read a state the updates below overwrite.
    for (j, out) in outs.iter().enumerate() {
        let Some(out) = out else { continue };
        let src = cx.value(body.results[carried + j])?;
        let ax = axis(a.scan_output_axes.get(j).copied().unwrap_or(0), src.rank() + 1).map_err(|e| cx.unsupported(n, format!("scan output {j}: {e}")))?;
        let mut want = src.dims.clone();
        want.insert(ax, seq);
        if out.dims != want || out.elem != src.elem {
            return Err(cx.unsupported(n, format!("scan output {j} is {}{:?}, the body's slices {}{:?}", out.elem.name(), out.dims, src.elem.name(), src.dims)));
        }
        step.extend(Slicing::new(&out.dims, ax, seq, flag(&a.scan_output_directions, j)).copy(&mut k, t, out.buf, src.buf, false));
    }
    let mut pairs = Vec::with_capacity(carried);
    for (i, state) in states.iter().enumerate() {
        let src = cx.value(body.results[i])?;
        if src.dims != state.dims || src.elem != state.elem {
            return Err(cx.unsupported(n, format!("state {i} changes type in the body ({}{:?} to {}{:?})", state.elem.name(), state.dims, src.elem.name(), src.dims)));
        }
        pairs.push((src, state.clone()));
    }
    step.extend(update_states(cx, &mut k, &pairs));
    pre.push(Stmt::For { var: t, extent: seq, body: step });
    k.body = pre;
    cx.push(k);
    Ok(())
}
