//! Models that compiled code alone cannot run: shapes that come from data (NonZero, Unique,
//! NonMaxSuppression, Compress, a TopK with a computed `k`, a Loop with a run-time trip count,
//! a Reshape to a computed shape) and string tensors, which compiled code does not hold.
//!
//! Such a bound graph runs in stages. The nodes compiled code cannot run whose inputs are
//! known before any of them runs (the *splitters*) run together in the reference evaluator,
//! which sizes their outputs from their data. Before them, compiled with static shapes, run
//! the nodes that read no splitter's output, wherever they stand in the graph; after them, the
//! nodes that do, as a model of their own whose inputs are the values they read, compiled per
//! shape (and split again if needed) and cached like any other. A detector that filters each
//! class's boxes by score and then takes their top k splits into as many stages as one class
//! takes steps, not one per class. A service's steady state compiles nothing new for shapes it
//! has seen.

use std::collections::{HashMap, HashSet};

use kiln_tir::{DType, Graph, NodeId, Tensor, ValueId};

use crate::compiled::{CompiledModel, Specialization, stopped};
use crate::pipeline::Pipeline;
use crate::{Error, Result};

/// One bound specialization run in stages.
pub struct Staged {
    /// The compiled nodes before the splitters, reading `prefix_in` and writing `prefix_out`;
    /// `None` when there are none.
    prefix: Option<Specialization>,
    prefix_in: Vec<ValueId>,
    prefix_out: Vec<ValueId>,
    /// The splitters alone, as a graph the evaluator runs, reading `split_in` and writing
    /// `split_out`.
    splitter: Graph,
    split_in: Vec<ValueId>,
    split_out: Vec<ValueId>,
    /// The nodes after the splitters as a model whose inputs are `rest_in`; `None` when there
    /// are none and the outputs are already known.
    rest: Option<CompiledModel>,
    rest_in: Vec<ValueId>,
    /// The graph's outputs.
    results: Vec<ValueId>,
    /// The graph's inputs, and the constants among its outputs.
    params: Vec<ValueId>,
    consts: HashMap<ValueId, Tensor>,
}

/// Whether compiled code cannot run node `n`: it reads or writes strings.
fn is_host(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.inputs.iter().chain(&node.outputs).flatten().any(|v| g.ty(*v).dtype == DType::String)
}

/// Whether compiled code cannot run top-level node `n` of bound graph `g` once its inputs are
/// known: it gives a value a shape no input decides (its inputs all static), or has strings.
fn is_splitter(g: &Graph, n: NodeId) -> bool {
    let is_static = |v: &ValueId| g.ty(*v).known_dims().is_some();
    let node = g.node(n);
    is_host(g, n) || (node.outputs.iter().flatten().any(|v| !is_static(v)) && node.inputs.iter().flatten().all(is_static))
}

/// The top-level nodes of a bound graph by stage, each part in graph order.
#[derive(Debug, Default)]
pub struct Split {
    /// The nodes that read no splitter's output, run first as compiled code.
    before: Vec<NodeId>,
    /// The splitters that read no other splitter's output, run next by the evaluator.
    at: Vec<NodeId>,
    /// The nodes that read a splitter's output, directly or through others.
    after: Vec<NodeId>,
}

/// How bound graph `g` runs in stages; `None` when the whole graph compiles.
pub fn split(g: &Graph) -> Option<Split> {
    let mut waits: HashSet<ValueId> = HashSet::new();
    let mut split = Split::default();
    for &n in &g.body.nodes {
        let mut waiting = false;
        uses(g, n, &mut |v| waiting |= waits.contains(&v));
        let part = match (waiting, is_splitter(g, n)) {
            (true, _) => &mut split.after,
            (false, true) => &mut split.at,
            (false, false) => {
                split.before.push(n);
                continue;
            }
        };
        part.push(n);
        waits.extend(g.node(n).outputs.iter().flatten());
    }
    (!split.at.is_empty()).then_some(split)
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

/// `g` with only `nodes`, reading `params` and returning `results`: a graph of its own, as
/// small as what it holds, since a model split many times keeps one per stage.
fn part(g: &Graph, params: &[ValueId], nodes: &[NodeId], results: &[ValueId]) -> Result<Graph> {
    g.extract(params, nodes, results).map_err(|e| Error::Internal(format!("splitting the graph: {e}")))
}

impl Staged {
    /// Splits bound graph `g` (of `model`) as `split` says and compiles the part before the
    /// splitters.
    pub fn new(pipeline: &Pipeline, g: &Graph, split: &Split, model: &CompiledModel) -> Result<Staged> {
        let Split { before, at, after } = split;
        let is_param = |v: ValueId| g.body.params.contains(&v);

        let defined: HashSet<ValueId> = before.iter().flat_map(|&n| g.node(n).outputs.iter().flatten().copied()).collect();
        let later: Vec<NodeId> = at.iter().chain(after).copied().collect();
        let prefix_out = reads(g, &later, &g.body.results, &|v| defined.contains(&v));
        let prefix_in = reads(g, before, &[], &is_param);
        let prefix = match before.as_slice() {
            [] => None,
            _ => {
                let p = part(g, &prefix_in, before, &prefix_out)?;
                Some(model.in_pool(|| Specialization::compile_bound(pipeline, p))?)
            }
        };

        let outer = |v: ValueId| is_param(v) || defined.contains(&v);
        let split_in = reads(g, at, &[], &outer);
        let split_out: Vec<ValueId> = at.iter().flat_map(|&n| g.node(n).outputs.iter().flatten().copied()).collect();
        let splitter = part(g, &split_in, at, &split_out)?;

        let known = |v: ValueId| outer(v) || split_out.contains(&v);
        let rest_in = reads(g, after, &g.body.results, &known);
        let rest = match after.as_slice() {
            [] => None,
            _ => Some(model.sibling(part(g, &rest_in, after, &g.body.results)?)?),
        };
        let consts = g.body.results.iter().filter_map(|&v| g.const_value(v).map(|t| (v, t.clone()))).collect();
        Ok(Staged { prefix, prefix_in, prefix_out, splitter, split_in, split_out, rest, rest_in, results: g.body.results.clone(), params: g.body.params.clone(), consts })
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
        let ins = take(&env, &self.split_in)?;
        let reason = || kiln_runtime::stop::reason().map(|r| format!("{r:?}"));
        let budget = kiln_eval::Budget { max_loop_trips: model.limits().max_loop_trips, should_stop: &reason };
        let outs = kiln_eval::eval_graph_with(&self.splitter, &ins, &budget).map_err(|e| stopped().unwrap_or_else(|| Error::Run(e.to_string())))?;
        if let Some(e) = stopped() {
            return Err(e);
        }
        env.extend(self.split_out.iter().copied().zip(outs));
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
