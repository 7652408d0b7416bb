//! Models whose shapes come from data: NonZero, Unique, NonMaxSuppression, Compress, a TopK
//! with a computed `k`, a Loop with a run-time trip count, a Reshape to a computed shape.
//!
//! Once its input shapes are bound, such a model still has values whose shape is a symbol no
//! input decides. It runs in stages split at the first node that makes one (the *splitter*):
//! the nodes before it are compiled with static shapes; the splitter runs in the reference
//! evaluator, which sizes its outputs from their data; the nodes after it form a model of
//! their own whose inputs include the splitter's outputs, compiled per shape (and split again
//! if needed) and cached like any other. A service's steady state compiles nothing.

use std::collections::HashSet;

use kiln_tir::{Graph, NodeId, Region, Tensor, ValueDef, ValueId};

use crate::compiled::{CompiledModel, Specialization};
use crate::pipeline::Pipeline;
use crate::{Error, Result};

/// One bound specialization run in stages.
pub struct Staged {
    /// The compiled nodes before the splitter (`None` when there are none), its outputs
    /// `prefix_out` in order.
    prefix: Option<Specialization>,
    prefix_out: Vec<ValueId>,
    /// The splitter alone, as a graph the evaluator runs: its parameters are its non-constant
    /// inputs.
    splitter: Graph,
    /// The rest, a model whose inputs are the graph's inputs, then `prefix_out`, then the
    /// splitter's outputs.
    rest: CompiledModel,
}

/// The first top-level node of bound graph `g` that gives a value a shape no input decides,
/// with all its inputs static; `None` when every value is static.
pub fn splitter(g: &Graph) -> Option<NodeId> {
    let is_static = |v: &ValueId| g.ty(*v).known_dims().is_some();
    g.body.nodes.iter().copied().find(|&n| {
        let node = g.node(n);
        node.outputs.iter().flatten().any(|v| !is_static(v)) && node.inputs.iter().flatten().all(is_static)
    })
}

impl Staged {
    /// Splits bound graph `g` at `at` and compiles the part before it for `shapes`.
    pub fn new(pipeline: &Pipeline, g: &Graph, at: NodeId, shapes: &[Vec<u64>], rest_of: &CompiledModel) -> Result<Staged> {
        let pos = g.body.nodes.iter().position(|&n| n == at).ok_or_else(|| Error::Internal(format!("{at} is not a top-level node")))?;
        let (before, after) = (&g.body.nodes[..pos], &g.body.nodes[pos + 1..]);
        let split = g.node(at);

        // Values the prefix defines that the splitter or anything after it reads.
        let defined: HashSet<ValueId> = before.iter().flat_map(|&n| g.node(n).outputs.iter().flatten().copied()).collect();
        let mut used_later: Vec<ValueId> = Vec::new();
        let mut note = |v: ValueId| {
            if defined.contains(&v) && !used_later.contains(&v) {
                used_later.push(v);
            }
        };
        uses(g, at, &mut note);
        for &n in after {
            uses(g, n, &mut note);
        }
        g.body.results.iter().for_each(|&v| note(v));

        let prefix = if before.is_empty() {
            None
        } else {
            let mut p = g.clone();
            p.assumptions.clear();
            p.body.nodes = before.to_vec();
            p.body.results = used_later.clone();
            Some(Specialization::compile_bound(pipeline, p, shapes)?)
        };

        // The splitter reads graph inputs and prefix values, its regions included.
        let mut s = g.clone();
        s.assumptions.clear();
        let mut params: Vec<ValueId> = Vec::new();
        uses(g, at, &mut |v| {
            let outer = g.body.params.contains(&v) || defined.contains(&v);
            if outer && !params.contains(&v) {
                params.push(v);
            }
        });
        s.body = Region { params, consts: g.body.consts.clone(), nodes: vec![at], results: split.outputs.iter().flatten().copied().collect() };

        let mut r = g.clone();
        r.assumptions.clear();
        let mut params = g.body.params.clone();
        params.extend(used_later.iter().copied());
        params.extend(split.outputs.iter().flatten().copied());
        for &v in &params[g.body.params.len()..] {
            r.values[v.index()].def = ValueDef::Param;
            if r.values[v.index()].name.is_empty() {
                r.values[v.index()].name = format!("{v}");
            }
        }
        r.body.params = params;
        r.body.nodes = after.to_vec();
        let rest = rest_of.sibling(r)?;
        Ok(Staged { prefix, prefix_out: used_later, splitter: s, rest })
    }

    /// Runs the stages on the model's inputs.
    pub fn run(&self, model: &CompiledModel, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let prefix_values = match &self.prefix {
            Some(p) => model.in_pool(|| p.run(inputs, None))?,
            None => Vec::new(),
        };
        let lookup = |v: ValueId| -> Option<Tensor> {
            if let Some(k) = model.graph().body.params.iter().position(|&p| p == v) {
                return inputs.get(k).cloned();
            }
            self.prefix_out.iter().position(|&p| p == v).and_then(|k| prefix_values.get(k).cloned())
        };
        let split_inputs: Vec<Tensor> = self
            .splitter
            .body
            .params
            .iter()
            .map(|&v| lookup(v).ok_or_else(|| Error::Internal(format!("no value for the splitter's input {v}"))))
            .collect::<Result<_>>()?;
        let split_outputs = kiln_eval::eval_graph(&self.splitter, &split_inputs).map_err(|e| Error::Run(e.to_string()))?;
        let mut rest_inputs = inputs.to_vec();
        rest_inputs.extend(prefix_values);
        rest_inputs.extend(split_outputs);
        self.rest.run(&rest_inputs)
    }

    /// Specializations compiled for the stages after the split.
    pub fn specializations(&self) -> usize {
        self.rest.specializations()
    }
}

/// Calls `note` on every value node `n` reads, in its regions too.
fn uses(g: &Graph, n: NodeId, note: &mut dyn FnMut(ValueId)) {
    let node = g.node(n);
    node.inputs.iter().flatten().for_each(|&v| note(v));
    for r in &node.regions {
        for &m in &r.nodes {
            uses(g, m, note);
        }
        r.results.iter().for_each(|&v| note(v));
    }
}
