//! Whole-graph evaluation: values in an environment indexed by value id, nodes in region
//! order, errors wrapped with the node's name.

use kiln_tir::{Graph, NodeId, Op, Region, Tensor, TensorData, ValueDef, ValueId};

use crate::error::{EvalError, Result};

/// Runs `g` on `inputs` (in graph-input order) and returns its outputs in graph-output order.
///
/// Control-flow nodes (If, Loop, Scan) evaluate their regions in the same environment, so a
/// region reads values of the regions around it.
pub fn eval_graph(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    eval_graph_with(g, inputs, &Budget::default())
}

/// What one evaluation may take that its tensors' sizes do not bound: loop iterations, and a
/// way to stop it from outside (cancelled, past a deadline).
#[derive(Clone, Copy)]
pub struct Budget<'a> {
    /// Iterations of one `Loop`.
    pub max_loop_trips: u64,
    /// Polled once per loop iteration; `Some(why)` stops the evaluation with that reason.
    pub should_stop: &'a dyn Fn() -> Option<String>,
}

impl Default for Budget<'_> {
    fn default() -> Self {
        Budget { max_loop_trips: 1 << 32, should_stop: &|| None }
    }
}

/// [`eval_graph`] within `budget`.
pub fn eval_graph_with(g: &Graph, inputs: &[Tensor], budget: &Budget<'_>) -> Result<Vec<Tensor>> {
    let params = g.inputs();
    if inputs.len() != params.len() {
        return Err(EvalError::BadInput { index: inputs.len().min(params.len()), reason: format!("graph takes {} inputs, {} given", params.len(), inputs.len()) });
    }
    let mut env = Env::new(g, *budget);
    for (index, (&id, t)) in params.iter().zip(inputs).enumerate() {
        check_input(g, id, t).map_err(|reason| EvalError::BadInput { index, reason })?;
        env.set(id, t.clone());
    }
    env.run_region(&g.body)?;
    g.outputs().iter().map(|&id| env.get(id).cloned()).collect()
}

/// Checks a graph input against its parameter's declared type.
fn check_input(g: &Graph, id: ValueId, t: &Tensor) -> std::result::Result<(), String> {
    let ty = g.ty(id);
    if ty.dtype != t.dtype {
        return Err(format!("expected element type {}, got {}", ty.dtype, t.dtype));
    }
    let rank_ok = ty.shape.len() == t.shape.len();
    let dims_ok = rank_ok && ty.shape.iter().zip(&t.shape).all(|(d, &n)| d.known().is_none_or(|k| k == n));
    if !dims_ok {
        return Err(format!("expected shape {ty}, got {:?}", t.shape));
    }
    let bytes_ok = match &t.data {
        TensorData::Raw(b) => t.numel().and_then(|n| t.dtype.storage_bytes(n)) == Some(b.len() as u64),
        TensorData::Strings(s) => t.numel() == Some(s.len() as u64),
        TensorData::Absent => false,
    };
    if !bytes_ok {
        return Err(format!("data does not hold {:?} elements of {}", t.shape, t.dtype));
    }
    Ok(())
}

/// Values computed so far.
pub(crate) struct Env<'g> {
    pub(crate) g: &'g Graph,
    vals: Vec<Option<Tensor>>,
    pub(crate) budget: Budget<'g>,
}

impl<'g> Env<'g> {
    fn new(g: &'g Graph, budget: Budget<'g>) -> Env<'g> {
        Env { g, vals: vec![None; g.values.len()], budget }
    }

    /// A printable name for a value.
    fn value_name(&self, id: ValueId) -> String {
        let name = &self.g.value(id).name;
        if name.is_empty() { id.to_string() } else { name.clone() }
    }

    /// Binds `id` to `t`.
    pub(crate) fn set(&mut self, id: ValueId, t: Tensor) {
        if let Some(slot) = self.vals.get_mut(id.index()) {
            *slot = Some(t);
        }
    }

    /// The tensor bound to `id`, or its constant.
    pub(crate) fn get(&self, id: ValueId) -> Result<&Tensor> {
        if let Some(Some(t)) = self.vals.get(id.index()) {
            return Ok(t);
        }
        match self.g.values.get(id.index()).map(|v| &v.def) {
            Some(ValueDef::Const(t)) if t.data != TensorData::Absent => Ok(t),
            _ => Err(EvalError::MissingData { value: self.value_name(id) }),
        }
    }

    /// Runs a region's nodes in order.
    pub(crate) fn run_region(&mut self, r: &Region) -> Result<()> {
        for &n in &r.nodes {
            self.run_node(n).map_err(|e| {
                let node = self.g.node(n);
                EvalError::AtNode { node: if node.name.is_empty() { n.to_string() } else { node.name.clone() }, source: Box::new(e) }
            })?;
        }
        Ok(())
    }

    /// The results of region `r` after running it.
    pub(crate) fn results(&self, r: &Region) -> Result<Vec<Tensor>> {
        r.results.iter().map(|&id| self.get(id).cloned()).collect()
    }

    fn run_node(&mut self, id: NodeId) -> Result<()> {
        let node = self.g.node(id);
        let outs = match &node.op {
            Op::If(_) => self.run_if(node)?,
            Op::Loop(_) => self.run_loop(node)?,
            Op::Scan(o) => self.run_scan(node, o)?,
            op => {
                let ins = node.inputs.iter().map(|i| i.map(|v| self.get(v)).transpose()).collect::<Result<Vec<_>>>()?;
                crate::eval_op(op, &ins, node.outputs.len())?
            }
        };
        for (slot, t) in node.outputs.iter().zip(outs) {
            if let Some(v) = slot {
                self.set(*v, t);
            }
        }
        Ok(())
    }
}
