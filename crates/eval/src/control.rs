//! Control flow: If, Loop and Scan, evaluated by running their regions in the graph's
//! environment.

use kiln_tir::op::Scan;
use kiln_tir::{Node, Region, Tensor, ValueId};

use crate::array::{Arr, norm_axis};
use crate::error::{Result, invalid, unsupported};
use crate::graph::Env;
use crate::layout::{slice_axis, transpose};

/// Most iterations a Loop without a trip count may run before the evaluator gives up.
const MAX_ITERATIONS: i64 = 1 << 24;

/// A bool scalar's value.
fn truth(op: &'static str, t: &Tensor) -> Result<bool> {
    let a = Arr::from_tensor(op, t)?;
    match a.b(op)? {
        [b] => Ok(*b),
        v => Err(invalid(op, format!("condition must hold one bool, holds {}", v.len()))),
    }
}

/// The region at `i`, or an error.
fn region<'n>(op: &'static str, node: &'n Node, i: usize) -> Result<&'n Region> {
    node.regions.get(i).ok_or_else(|| invalid(op, format!("region {i} is missing")))
}

/// Arrays of one shape stacked along a new axis 0; `empty` gives the dtype and item shape
/// when there are none.
fn stack(op: &'static str, items: &[Arr], empty: (kiln_tir::DType, Vec<usize>)) -> Result<Arr> {
    let Some(first) = items.first() else {
        let mut shape = vec![0];
        shape.extend(empty.1);
        let x = Arr::from_tensor(op, &Tensor { dtype: empty.0, shape: shape.iter().map(|&d| d as u64).collect(), data: kiln_tir::TensorData::Raw(bytes::Bytes::new()) })?;
        return Ok(x);
    };
    let mut shape = vec![items.len()];
    shape.extend(&first.shape);
    let mut buf = first.buf.empty_like();
    for it in items {
        if it.shape != first.shape || it.dtype != first.dtype {
            return Err(invalid(op, format!("iteration outputs differ: {}{:?} vs {}{:?}", first.dtype, first.shape, it.dtype, it.shape)));
        }
        buf.extend_range(op, &it.buf, 0..it.len())?;
    }
    Ok(Arr { dtype: first.dtype, shape, buf })
}

impl Env<'_> {
    /// The declared dtype and dims (unknown dims as 0) of a value, for empty scan outputs.
    fn declared(&self, id: ValueId) -> (kiln_tir::DType, Vec<usize>) {
        let ty = self.g.ty(id);
        (ty.dtype, ty.shape.iter().map(|d| d.known().unwrap_or(0) as usize).collect())
    }

    fn bind_params(&mut self, op: &'static str, r: &Region, values: Vec<Tensor>) -> Result<()> {
        if r.params.len() != values.len() {
            return Err(invalid(op, format!("body takes {} parameters, {} given", r.params.len(), values.len())));
        }
        for (&p, t) in r.params.iter().zip(values) {
            self.set(p, t);
        }
        Ok(())
    }

    /// Present inputs of `node` from position `from`, in order.
    fn inputs_from(&self, node: &Node, from: usize) -> Result<Vec<Tensor>> {
        node.inputs.iter().skip(from).flatten().map(|&v| self.get(v).cloned()).collect()
    }

    pub(crate) fn run_if(&mut self, node: &Node) -> Result<Vec<Tensor>> {
        const OP: &str = "if";
        let cond = node.inputs.first().copied().flatten().ok_or_else(|| invalid(OP, "condition input is missing"))?;
        let branch = region(OP, node, if truth(OP, self.get(cond)?)? { 0 } else { 1 })?;
        self.run_region(branch)?;
        self.results(branch)
    }

    pub(crate) fn run_loop(&mut self, node: &Node) -> Result<Vec<Tensor>> {
        const OP: &str = "loop";
        let body = region(OP, node, 0)?;
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let max_trip = match input(0) {
            Some(m) => Some(Arr::from_tensor(OP, self.get(m)?)?.as_i64s(OP)?.first().copied().ok_or_else(|| invalid(OP, "trip count is empty"))?),
            None => None,
        };
        let mut cond = match input(1) {
            Some(c) => truth(OP, self.get(c)?)?,
            None => true,
        };
        let mut carried = self.inputs_from(node, 2)?;
        let n_scan = body.results.len().checked_sub(1 + carried.len()).ok_or_else(|| invalid(OP, "body has too few results"))?;
        let mut scans: Vec<Vec<Arr>> = vec![Vec::new(); n_scan];
        if let Some(m) = max_trip.filter(|&m| m > 0 && m as u64 > self.budget.max_loop_trips) {
            return Err(invalid(OP, format!("trip count {m} is over the limit of {} iterations", self.budget.max_loop_trips)));
        }
        let mut i: i64 = 0;
        while cond && max_trip.is_none_or(|m| i < m) {
            if max_trip.is_none() && i >= MAX_ITERATIONS {
                return Err(unsupported(OP, format!("loop ran {MAX_ITERATIONS} iterations without stopping")));
            }
            if let Some(why) = (self.budget.should_stop)() {
                return Err(invalid(OP, why));
            }
            let mut params = vec![Tensor::from_i64s(&[], &[i]), Arr::bools(vec![], vec![cond]).into_tensor(OP)?];
            params.append(&mut carried);
            self.bind_params(OP, body, params)?;
            self.run_region(body)?;
            let mut results = self.results(body)?.into_iter();
            cond = results.next().map(|t| truth(OP, &t)).transpose()?.unwrap_or(false);
            carried = results.by_ref().take(body.results.len() - 1 - n_scan).collect();
            for (s, t) in scans.iter_mut().zip(results) {
                s.push(Arr::from_tensor(OP, &t)?);
            }
            i += 1;
        }
        let n_carried = carried.len();
        let mut outs = carried;
        for (k, items) in scans.iter().enumerate() {
            let empty = self.declared(body.results[1 + n_carried + k]);
            outs.push(stack(OP, items, empty)?.into_tensor(OP)?);
        }
        Ok(outs)
    }

    pub(crate) fn run_scan(&mut self, node: &Node, o: &Scan) -> Result<Vec<Tensor>> {
        const OP: &str = "scan";
        let body = region(OP, node, 0)?;
        let all = self.inputs_from(node, 0)?;
        let m = usize::try_from(o.num_scan_inputs).ok().filter(|&m| m <= all.len()).ok_or_else(|| invalid(OP, "num_scan_inputs does not fit the inputs"))?;
        let n = all.len() - m;
        let k = body.results.len().checked_sub(n).ok_or_else(|| invalid(OP, "body has too few results"))?;
        let attr = |list: &[i64], i: usize| list.get(i).copied().unwrap_or(0);
        let mut seq_len = None;
        let mut scan_inputs = Vec::with_capacity(m);
        for (j, t) in all[n..].iter().enumerate() {
            let x = Arr::from_tensor(OP, t)?;
            let ax = norm_axis(OP, attr(&o.scan_input_axes, j), x.shape.len())?;
            if *seq_len.get_or_insert(x.shape[ax]) != x.shape[ax] {
                return Err(invalid(OP, "scan inputs differ in sequence length"));
            }
            scan_inputs.push((x, ax, attr(&o.scan_input_directions, j) != 0));
        }
        let len = seq_len.unwrap_or(0);
        let mut state: Vec<Tensor> = all[..n].to_vec();
        let mut outs: Vec<Vec<Arr>> = vec![Vec::new(); k];
        for t in 0..len {
            let mut params = state;
            for (x, ax, reverse) in &scan_inputs {
                let at = if *reverse { len - 1 - t } else { t };
                let mut shape = x.shape.clone();
                shape.remove(*ax);
                params.push(slice_axis(OP, x, *ax, at, 1)?.with_shape(shape).into_tensor(OP)?);
            }
            self.bind_params(OP, body, params)?;
            self.run_region(body)?;
            let mut results = self.results(body)?.into_iter();
            state = results.by_ref().take(n).collect();
            for (s, r) in outs.iter_mut().zip(results) {
                s.push(Arr::from_tensor(OP, &r)?);
            }
        }
        let mut result = state;
        for (j, mut items) in outs.into_iter().enumerate() {
            if attr(&o.scan_output_directions, j) != 0 {
                items.reverse();
            }
            let stacked = stack(OP, &items, self.declared(body.results[n + j]))?;
            let rank = stacked.shape.len();
            let ax = norm_axis(OP, attr(&o.scan_output_axes, j), rank)?;
            let mut perm: Vec<usize> = (1..rank).collect();
            perm.insert(ax, 0);
            result.push(transpose(OP, &stacked, &perm)?.into_tensor(OP)?);
        }
        Ok(result)
    }
}
