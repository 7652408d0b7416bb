//! Models that compiled code alone cannot run: shapes that come from data (NonZero, Unique,
//! NonMaxSuppression, Compress, a TopK with a computed `k`, a Loop with a run-time trip count,
//! a Reshape to a computed shape) and string tensors, which compiled code does not hold.
//!
//! Such a bound graph runs in stages split at the first node of either kind (the *splitter*):
//! the nodes before it are compiled with static shapes; the splitter runs in the reference
//! evaluator, which sizes its outputs from their data; the nodes after it form a model of
//! their own whose inputs are the values they read, compiled per shape (and split again if
//! needed) and cached like any other. A service's steady state compiles nothing new for
//! shapes it has seen.

use std::collections::{HashMap, HashSet};

use kiln_tir::{DType, Graph, NodeId, Region, Tensor, ValueDef, ValueId};

use crate::compiled::{CompiledModel, Specialization, stopped};
use crate::pipeline::Pipeline;
use crate::{Error, Result};

/// One bound specialization run in stages.
pub struct Staged {
    /// The compiled nodes before the splitter, reading `prefix_in` and writing `prefix_out`;
    /// `None` when there are none.
    prefix: Option<Specialization>,
    prefix_in: Vec<ValueId>,
    prefix_out: Vec<ValueId>,
    /// The splitter alone, as a graph the evaluator runs; its parameters are the values it reads.
    splitter: Graph,
    /// The nodes after the splitter as a model whose inputs are `rest_in`; `None` when there
    /// are none and the outputs are already known.
    rest: Option<CompiledModel>,
    rest_in: Vec<ValueId>,
    /// The graph's outputs.
    results: Vec<ValueId>,
    /// The graph's inputs, and its constants (which outputs may name).
    params: Vec<ValueId>,
    consts: HashMap<ValueId, Tensor>,
}

/// Whether compiled code cannot run node `n`: it reads or writes strings.
fn is_host(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.inputs.iter().chain(&node.outputs).flatten().any(|v| g.ty(*v).dtype == DType::String)
}

/// The first top-level node of bound graph `g` that compiled code cannot run: one that gives a
/// value a shape no input decides (its inputs all static), or one with strings; `None` when
/// the whole graph compiles.
pub fn splitter(g: &Graph) -> Option<NodeId> {
    let is_static = |v: &ValueId| g.ty(*v).known_dims().is_some();
    g.body.nodes.iter().copied().find(|&n| {
        let node = g.node(n);
        is_host(g, n) || (node.outputs.iter().flatten().any(|v| !is_static(v)) && node.inputs.iter().flatten().all(is_static))
    })
}

/// The values `nodes` (regions included) and `extra` read that are in `available`, in first-use
/// order.
fn reads(g: &Graph, nodes: &[NodeId], extra: &[ValueId], available: &dyn Fn(ValueId) -> bool) -> Vec<ValueId> {
    let mut out: Vec<ValueId> = Vec::new();
    let mut note = |v: ValueId| {
        if available(v) && !out.contains(&v) {
            out.push(v);
        }
    };
    for &n in nodes {
        uses(g, n, &mut note);
    }
    extra.iter().for_each(|&v| note(v));
    out
}

/// `g` with only `nodes`, reading `params` and returning `results`.
fn part(g: &Graph, params: Vec<ValueId>, nodes: Vec<NodeId>, results: Vec<ValueId>) -> Graph {
    let mut p = g.clone();
    p.assumptions.clear();
    for &v in &params {
        p.values[v.index()].def = ValueDef::Param;
        if p.values[v.index()].name.is_empty() {
            p.values[v.index()].name = v.to_string();
        }
    }
    p.body = Region { params, consts: g.body.consts.clone(), nodes, results };
    p
}

impl Staged {
    /// Splits bound graph `g` (of `model`) at `at` and compiles the part before it.
    pub fn new(pipeline: &Pipeline, g: &Graph, at: NodeId, model: &CompiledModel) -> Result<Staged> {
        let pos = g.body.nodes.iter().position(|&n| n == at).ok_or_else(|| Error::Internal(format!("{at} is not a top-level node")))?;
        let (before, after) = (&g.body.nodes[..pos], &g.body.nodes[pos + 1..]);
        let is_param = |v: ValueId| g.body.params.contains(&v);

        let defined: HashSet<ValueId> = before.iter().flat_map(|&n| g.node(n).outputs.iter().flatten().copied()).collect();
        let later: Vec<NodeId> = std::iter::once(at).chain(after.iter().copied()).collect();
        let prefix_out = reads(g, &later, &g.body.results, &|v| defined.contains(&v));
        let prefix_in = reads(g, before, &[], &is_param);
        let prefix = match before {
            [] => None,
            _ => {
                let p = part(g, prefix_in.clone(), before.to_vec(), prefix_out.clone());
                Some(model.in_pool(|| Specialization::compile_bound(pipeline, p))?)
            }
        };

        let outer = |v: ValueId| is_param(v) || defined.contains(&v);
        let split_in = reads(g, &[at], &[], &outer);
        let split_out: Vec<ValueId> = g.node(at).outputs.iter().flatten().copied().collect();
        let splitter = part(g, split_in, vec![at], split_out.clone());

        let known = |v: ValueId| outer(v) || split_out.contains(&v);
        let rest_in = reads(g, after, &g.body.results, &known);
        let rest = match after {
            [] => None,
            _ => Some(model.sibling(part(g, rest_in.clone(), after.to_vec(), g.body.results.clone()))?),
        };
        let consts = g.body.consts.iter().filter_map(|&c| g.const_value(c).map(|t| (c, t.clone()))).collect();
        Ok(Staged { prefix, prefix_in, prefix_out, splitter, rest, rest_in, results: g.body.results.clone(), params: g.body.params.clone(), consts })
    }

    /// Runs the stages on the model's inputs.
    pub fn run(&self, model: &CompiledModel, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut env: HashMap<ValueId, Tensor> = self.params.iter().copied().zip(inputs.iter().cloned()).collect();
        let take = |env: &HashMap<ValueId, Tensor>, ids: &[ValueId]| -> Result<Vec<Tensor>> {
            ids.iter()
                .map(|v| env.get(v).or_else(|| self.consts.get(v)).cloned().ok_or_else(|| Error::Internal(format!("no value for {v} between stages"))))
                .collect()
        };
        if let Some(p) = &self.prefix {
            let ins = take(&env, &self.prefix_in)?;
            let outs = model.in_pool(|| p.run(&ins, None))?;
            env.extend(self.prefix_out.iter().copied().zip(outs));
        }
        let ins = take(&env, &self.splitter.body.params)?;
        let reason = || kiln_runtime::stop::reason().map(|r| format!("{r:?}"));
        let budget = kiln_eval::Budget { max_loop_trips: model.limits().max_loop_trips, should_stop: &reason };
        let outs = kiln_eval::eval_graph_with(&self.splitter, &ins, &budget).map_err(|e| stopped().unwrap_or_else(|| Error::Run(e.to_string())))?;
        if let Some(e) = stopped() {
            return Err(e);
        }
        env.extend(self.splitter.body.results.iter().copied().zip(outs));
        match &self.rest {
            Some(rest) => rest.run(&take(&env, &self.rest_in)?),
            None => take(&env, &self.results),
        }
    }

    /// Specializations compiled for the stages after the split.
    pub fn specializations(&self) -> usize {
        self.rest.as_ref().map_or(0, CompiledModel::specializations)
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
