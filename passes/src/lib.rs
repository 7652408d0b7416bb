//! kiln's tensor-IR optimizer: equality saturation with [egg].
//!
//! [`optimize`] loads the top region of a graph into an e-graph ([`convert`]), runs the rule
//! tables ([`rules`]: folding, casts, algebra, layout, fusion) until saturation or a limit of
//! [`Limits`], extracts the cheapest equivalent graph by the [`cost`] model and rebuilds the
//! tensor IR, keeping for every node the ONNX nodes and rules it came from ([`Explain`]).
//!
//! | file | what |
//! | --- | --- |
//! | `lang.rs` | the e-node language: ops with interned attributes, leaves, `none` |
//! | `analysis.rs` | per-class type and small constant value; conflict checks |
//! | `rules/` | one file per topic; each rule a name, a one-line algebra, a pattern, an applier |
//! | `cost.rs` | the cost model extraction minimizes |
//! | `convert.rs` | tensor IR ↔ e-graph |
//! | `group.rs` | elementwise chains → `fused_elementwise`, after extraction |
//! | `report.rs` | `--stats` and `--explain` text |

pub mod analysis;
pub mod convert;
pub mod cost;
pub mod lang;
pub mod qdq;
mod extract;
mod group;
mod report;
pub mod rules;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use egg::{Id, Runner, StopReason};
use kiln_tir::{Graph, NodeId};

pub use report::{explain_text, stats_text};

/// Bounds on one optimizer run.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Stop growing the e-graph past this many e-nodes (`KILN_OPT_NODES`).
    pub nodes: usize,
    /// At most this many rewrite iterations (`KILN_OPT_ITERS`).
    pub iterations: usize,
    /// Stop after this much time (`KILN_OPT_TIME_MS`), checked before each iteration, so one
    /// iteration (bounded by `nodes`) can run past it. Only a guard against a runaway e-graph:
    /// the node and iteration limits are what stop a run, so that the program compiled does
    /// not depend on the machine's speed or load.
    pub time: Duration,
    /// Constants with more elements than this are not computed (`KILN_OPT_FOLD`).
    pub fold_elements: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 50_000,
            iterations: 12,
            time: Duration::from_secs(5),
            fold_elements: 4096,
        }
    }
}

impl Limits {
    /// The defaults, overridden by the `KILN_OPT_*` environment variables that are set and
    /// parse; the others are ignored.
    pub fn from_env() -> Limits {
        let mut l = Limits::default();
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(v) = var("KILN_OPT_NODES") {
            l.nodes = v as usize;
        }
        if let Some(v) = var("KILN_OPT_ITERS") {
            l.iterations = v as usize;
        }
        if let Some(v) = var("KILN_OPT_TIME_MS") {
            l.time = Duration::from_millis(v);
        }
        if let Some(v) = var("KILN_OPT_FOLD") {
            l.fold_elements = v;
        }
        l
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Why saturation stopped: `saturated`, or the limit that was hit.
    pub stop: String,
    /// Rewrite iterations run.
    pub iterations: usize,
    /// E-nodes and e-classes at the end.
    pub enodes: usize,
    /// E-classes at the end.
    pub eclasses: usize,
    /// Time loading the graph, saturating, extracting and rebuilding.
    pub load: Duration,
    /// Saturation time.
    pub saturate: Duration,
    /// Extraction and rebuilding time.
    pub extract: Duration,
    /// Total.
    pub total: Duration,
    /// Applications per rule, in rule order (zero counts included).
    pub rules: Vec<(&'static str, usize)>,
    /// Elementwise chains fused into `fused_elementwise` nodes after extraction.
    pub chains: usize,
    /// Top-level nodes before and after.
    pub nodes_before: usize,
    /// Top-level nodes after.
    pub nodes_after: usize,
    /// Extracted cost before (the input graph's own choice) and after.
    pub cost_before: f64,
    /// Extracted cost after.
    pub cost_after: f64,
}

/// Where one node of the optimized graph came from.
#[derive(Clone, Debug, Default)]
pub struct Explain {
    /// Nodes of the input graph it computes (their ONNX names and op types), in graph order.
    pub sources: Vec<(String, &'static str)>,
    /// Rules that built it, first applied first; empty for an input node kept as it was.
    pub rules: Vec<&'static str>,
}

/// The optimizer's result.
#[derive(Clone, Debug)]
pub struct Optimized {
    /// The optimized graph.
    pub graph: Graph,
    /// What the run did.
    pub stats: Stats,
    /// Provenance of the optimized graph's top-level nodes.
    pub explain: HashMap<NodeId, Explain>,
}

/// Optimizer failures. They are kiln bugs, not user errors: a rule made two classes equal
/// whose facts disagree.
#[derive(Debug, thiserror::Error)]
pub enum OptError {
    /// Facts of merged classes disagreed.
    #[error("optimizer rules merged values of different types: {0}")]
    Conflict(String),
}

/// The runner's stop reason when [`Limits::time`] has passed.
const TIME_LIMIT: &str = "time limit";

/// Optimizes `g` within `limits`.
pub fn optimize(g: &Graph, limits: &Limits) -> Result<Optimized, OptError> {
    let start = Instant::now();
    let conv = convert::to_egraph(g, limits.fold_elements);
    let loaded = start.elapsed();
    let rule_table = rules::all();
    let rewrites = rules::rewrites(&rule_table);
    let cost_before = input_cost(&conv);
    let convert::Converted {
        eg,
        class_of,
        transparent,
    } = conv;
    let sat_start = Instant::now();
    // egg times its steps with `quanta`'s clock, whose first reading in a process calibrates
    // it by busy loops that can take longer than a model's whole optimization (see
    // docs/performance.md). The runner reads a clock that stands still instead, and the time
    // limit is checked against the OS clock before each iteration (one iteration is bounded
    // by the node limit).
    let (still, _) = quanta::Clock::mock();
    let time = limits.time;
    let runner: Runner<lang::ENode, analysis::Tir, ()> = quanta::with_clock(&still, || {
        Runner::new(analysis::Tir::new(limits.fold_elements))
            .with_egraph(eg)
            .with_node_limit(limits.nodes)
            .with_iter_limit(limits.iterations)
            .with_hook(move |_| if sat_start.elapsed() > time { Err(TIME_LIMIT.to_string()) } else { Ok(()) })
            .with_scheduler(egg::SimpleScheduler)
            .run(&rewrites)
    });
    let saturate = sat_start.elapsed();
    if let Some(c) = runner.egraph.analysis.conflicts.first() {
        return Err(OptError::Conflict(c.clone()));
    }
    let mut counts: Vec<(&'static str, usize)> = rule_table.iter().map(|r| (r.name, 0)).collect();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            if let Some(slot) = counts.iter_mut().find(|(r, _)| *r == name.as_str()) {
                slot.1 += n;
            }
        }
    }
    let stop = match &runner.stop_reason {
        Some(StopReason::Saturated) => "saturated".to_string(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
        Some(StopReason::NodeLimit(n)) => format!("node limit ({n})"),
        Some(StopReason::Other(s)) if s == TIME_LIMIT => format!("time limit ({:.1} ms)", saturate.as_secs_f64() * 1e3),
        Some(StopReason::TimeLimit(t)) => format!("time limit ({:.1} ms)", t * 1e3),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".to_string(),
    };

    let ext_start = Instant::now();
    let conv = convert::Converted {
        eg: runner.egraph,
        class_of,
        transparent,
    };
    let extractor = extract::Tree::new(&conv.eg, cost::CostModel::new(&conv.eg));
    let roots = roots(g, &conv);
    let shared = extract::share(&conv.eg, &roots, &extractor);
    let best = |c: Id| shared.get(&conv.eg.find(c)).cloned().unwrap_or_else(|| extractor.find_best_node(c).clone());
    // Which classes the extraction emits: everything reachable from the roots.
    let chosen = chosen_classes(&conv, &roots, &best);
    let sources = sources_by_class(g, &conv, &chosen, &best);
    let name_of = |c: Id| {
        sources
            .get(&conv.eg.find(c))
            .and_then(|s| s.first())
            .map(|&n| g.node(n).name.clone())
            .unwrap_or_default()
    };
    let mut rebuilt = convert::rebuild(g, &conv, &best, &name_of);
    let created = analysis::Tir::created_canonical(&conv.eg);
    let mut explain: HashMap<NodeId, Explain> = HashMap::new();
    for (&n, &c) in &rebuilt.class_of_node {
        let rules = created.get(&best(c)).map(|c| c.rules.clone()).unwrap_or_default();
        let srcs = sources.get(&conv.eg.find(c)).map(|s| s.iter().map(|&m| (g.node(m).name.clone(), g.node(m).op.kind().ident())).collect()).unwrap_or_default();
        explain.insert(n, Explain { sources: srcs, rules });
    }
    let chains = group::group(&mut rebuilt.graph);
    for (fused, members) in &chains {
        let mut e = Explain::default();
        for m in members {
            let part = explain.get(m).cloned().unwrap_or_default();
            e.sources.extend(part.sources);
            for r in part.rules {
                if !e.rules.contains(&r) {
                    e.rules.push(r);
                }
            }
        }
        e.rules.push(group::RULE);
        explain.insert(*fused, e);
    }
    let (graph, renumbered) = convert::compact(&rebuilt.graph);
    let explain: HashMap<NodeId, Explain> = explain.into_iter().filter_map(|(old, e)| renumbered.get(&old).map(|&n| (n, e))).collect();
    let cost_after = g
        .body
        .results
        .iter()
        .map(|r| extractor.find_best_cost(conv.class_of[r]))
        .fold(0.0, f64::max);
    let extract = ext_start.elapsed();
    let stats = Stats {
        stop,
        iterations: runner.iterations.len(),
        enodes: conv.eg.total_number_of_nodes(),
        eclasses: conv.eg.number_of_classes(),
        load: loaded,
        saturate,
        extract,
        total: start.elapsed(),
        rules: counts,
        chains: chains.len(),
        nodes_before: g.body.nodes.len(),
        nodes_after: graph.body.nodes.len(),
        cost_before,
        cost_after,
    };
    Ok(Optimized {
        graph,
        stats,
        explain,
    })
}

/// The cost of the input graph's most expensive result, by the same model, before any rule.
fn input_cost(conv: &convert::Converted) -> f64 {
    let eg = &conv.eg;
    let ext = extract::Tree::new(eg, cost::CostModel::new(eg));
    conv.class_of
        .values()
        .map(|&c| ext.find_best_cost(c))
        .fold(0.0, f64::max)
}

/// The classes the rebuilt graph must compute: the results and the operands of opaque nodes
/// (their regions' free values included).
fn roots(g: &Graph, conv: &convert::Converted) -> Vec<Id> {
    let transparent: HashSet<NodeId> = conv.transparent.iter().map(|&(n, _)| n).collect();
    let mut roots: Vec<Id> = g.body.results.iter().map(|r| conv.class_of[r]).collect();
    for &n in &g.body.nodes {
        if !transparent.contains(&n) {
            roots.extend(g.node(n).inputs.iter().flatten().filter_map(|v| conv.class_of.get(v)));
            roots.extend(convert::free_values(g, n, &conv.class_of).iter().map(|v| conv.class_of[v]));
        }
    }
    roots.into_iter().map(|r| conv.eg.find(r)).collect()
}

/// Classes the rebuilt graph computes: reachable from the roots.
fn chosen_classes(conv: &convert::Converted, roots: &[Id], best: &dyn Fn(Id) -> lang::ENode) -> HashSet<Id> {
    let eg = &conv.eg;
    let mut seen = HashSet::new();
    let mut stack: Vec<Id> = roots.to_vec();
    while let Some(c) = stack.pop() {
        if seen.insert(c) {
            stack.extend(best(c).args.iter().map(|&a| eg.find(a)));
        }
    }
    seen
}

/// For each chosen op class, the input graph's nodes it computes: those reachable from the
/// class through input edges without entering another chosen class.
fn sources_by_class(
    g: &Graph,
    conv: &convert::Converted,
    chosen: &HashSet<Id>,
    best: &dyn Fn(Id) -> lang::ENode,
) -> HashMap<Id, Vec<NodeId>> {
    let eg = &conv.eg;
    let mut by_class: HashMap<Id, Vec<NodeId>> = HashMap::new();
    for &(n, c) in &conv.transparent {
        by_class.entry(eg.find(c)).or_default().push(n);
    }
    let mut out = HashMap::new();
    for &c in chosen {
        if !matches!(best(c).head, lang::Head::Op(..)) {
            continue;
        }
        let mut found: Vec<NodeId> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![c];
        while let Some(k) = stack.pop() {
            if !seen.insert(k) {
                continue;
            }
            for &n in by_class.get(&k).map(Vec::as_slice).unwrap_or(&[]) {
                found.push(n);
                for v in g.node(n).inputs.iter().flatten() {
                    let Some(&ic) = conv.class_of.get(v) else {
                        continue;
                    };
                    let ic = eg.find(ic);
                    if !chosen.contains(&ic) {
                        stack.push(ic);
                    }
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        out.insert(c, found);
    }
    out
}
