//! The compiler's one pipeline: import → bind → optimize → lower → schedule → plan → codegen.
//!
//! [`Pipeline::run`] is the only place the stages are put in sequence. [`CompiledModel`]
//! runs it to [`Stage::Codegen`] for each specialization; `kiln dump --stage S` runs the same
//! function to `S` and prints what it holds, so a dump is always the program a compilation
//! builds. Every decision that depends on the machine reads the pipeline's [`Target`].
//!
//! [`CompiledModel`]: crate::CompiledModel

use kiln_codegen::{CodegenOptions, JitProgram};
use kiln_loops::Program;
use kiln_passes::{Limits, Optimized};
use kiln_schedule::plan::MemoryPlan;
use kiln_schedule::ScheduleOptions;
use kiln_schedule::prepack::{Deferred, Packed};
use kiln_target::Target;
use kiln_tir::infer::GraphInferError;
use kiln_tir::{Assumed, Dim, Graph, Tensor};

use crate::{Error, ResourceLimits, Result};

/// A point in the pipeline; the output of each has a text form (`kiln dump --stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// The tensor IR as imported: symbolic dims, declared shapes as hints.
    Import,
    /// Input shapes, symbols and shape-deciding input values bound; shape computations and
    /// computations on weights folded.
    Bind,
    /// The egg optimizer's output (the bound graph when the optimizer is off).
    Optimize,
    /// Portable loop IR.
    Lower,
    /// Loop IR adapted to the target: blocked layouts, weights packed for its kernels.
    Schedule,
    /// The memory plan of the scheduled program.
    Plan,
    /// Machine code.
    Codegen,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 7] =
        [Stage::Import, Stage::Bind, Stage::Optimize, Stage::Lower, Stage::Schedule, Stage::Plan, Stage::Codegen];

    /// The stage's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Import => "import",
            Stage::Bind => "bind",
            Stage::Optimize => "optimize",
            Stage::Lower => "lower",
            Stage::Schedule => "schedule",
            Stage::Plan => "plan",
            Stage::Codegen => "codegen",
        }
    }
}

/// What the pipeline does, besides its target. A plain value: nothing here reads the
/// environment (`CompileOptions::from_env` does, at the edge).
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// The egg optimizer's bounds, or `None` to lower the bound graph as it is.
    pub optimizer: Option<Limits>,
    /// Whether constant weights are packed at compile time into the target kernels' panels.
    pub prepack: bool,
    /// Whether convolution chains take the blocked channel layout when the target's kernels
    /// have it (AVX-512), with `prepack`.
    pub nchwc: bool,
    /// Whether innermost element-wise loops run in 128-bit vectors where the target has them.
    pub vectors: bool,
    /// Threads each run uses: with more than one, generated loops may split over them and
    /// weights are packed beside code generation.
    pub threads: usize,
    /// What a compilation and its runs may take; checked after binding and after planning.
    pub limits: ResourceLimits,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions { optimizer: Some(Limits::default()), prepack: true, nchwc: true, vectors: true, threads: 1, limits: ResourceLimits::default() }
    }
}

/// What binding fixes before anything needs a static shape.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// Symbolic dims by name (`batch = 1`).
    pub symbols: Vec<(String, u64)>,
    /// Concrete shapes of graph inputs, by input index.
    pub input_shapes: Vec<(usize, Vec<u64>)>,
    /// Values of inputs the compiled code depends on (shape parameters), by input index.
    pub input_values: Vec<(usize, Tensor)>,
}

/// What a run of the pipeline produced, up to the stage it stopped at.
pub struct Compilation {
    /// The stage it stopped after.
    pub stage: Stage,
    /// The tensor IR after the last tensor-IR stage that ran.
    pub graph: Graph,
    /// The optimizer's result (stats, provenance), when it ran.
    pub optimized: Option<Optimized>,
    /// The loop IR, from [`Stage::Lower`] on (scheduled from [`Stage::Schedule`] on).
    pub program: Option<Program>,
    /// The memory plan, from [`Stage::Plan`] on.
    pub plan: Option<MemoryPlan>,
    /// The machine code, at [`Stage::Codegen`].
    pub jit: Option<JitProgram>,
}

/// The pipeline for one target and one set of options.
#[derive(Clone, Debug)]
pub struct Pipeline {
    target: Target,
    options: PipelineOptions,
}

impl Pipeline {
    /// A pipeline compiling for `target`.
    pub fn new(target: Target, options: PipelineOptions) -> Pipeline {
        Pipeline { target, options }
    }

    /// The target it compiles for.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Its options.
    pub fn options(&self) -> &PipelineOptions {
        &self.options
    }

    /// The code generator's options for this pipeline's programs.
    pub fn codegen_options(&self) -> CodegenOptions {
        // Loops split over threads only pay with more than one.
        CodegenOptions { parallel_loops: self.options.threads > 1, vectors: self.options.vectors }
    }

    /// Runs `graph` (imported) through every stage up to and including `stop`.
    pub fn run(&self, graph: &Graph, bindings: &Bindings, stop: Stage) -> Result<Compilation> {
        let mut out = Compilation { stage: Stage::Import, graph: graph.clone(), optimized: None, program: None, plan: None, jit: None };
        if stop == Stage::Import {
            return Ok(out);
        }
        out.graph = phase("bind", || bind(graph, bindings))?;
        self.options.limits.check_graph(&out.graph)?;
        out.stage = Stage::Bind;
        if stop == Stage::Bind {
            return Ok(out);
        }
        if let Some(limits) = &self.options.optimizer {
            let opt = phase("optimize", || kiln_passes::optimize(&out.graph, limits))?;
            out.graph = opt.graph.clone();
            out.optimized = Some(opt);
        }
        out.stage = Stage::Optimize;
        if stop == Stage::Optimize {
            return Ok(out);
        }
        self.from_optimized(out, stop)
    }

    /// The stages after the optimizer, on `out.graph`.
    fn from_optimized(&self, mut out: Compilation, stop: Stage) -> Result<Compilation> {
        let mut program = phase("lower", || kiln_lower::lower(&out.graph))?;
        if let Some(optimized) = &out.optimized {
            name_fusions(&mut program, &out.graph, &optimized.explain);
        }
        if !self.target.has_runtime() {
            // Without the runtime every call but copies becomes loops (DESIGN decision 3).
            kiln_lower::plain::expand_calls(&mut program)?;
        }
        if stop == Stage::Lower {
            out.stage = Stage::Lower;
            out.program = Some(program);
            return Ok(out);
        }
        // The calls are rewritten now; the packed copies are made before the program is
        // shown, or while the code compiles when there is a second thread (the two are
        // independent).
        let deferred = phase("schedule", || self.schedule(&mut program));
        let plan = (stop >= Stage::Plan).then(|| phase("plan", || kiln_schedule::plan::plan(&program)));
        if let Some(p) = &plan {
            self.options.limits.check_arena(p.arena_bytes)?;
        }
        let jit = if stop == Stage::Codegen {
            let codegen = self.codegen_options();
            let (jit, packed) = match &deferred {
                Some(d) if self.options.threads > 1 => std::thread::scope(|s| {
                    let packing = s.spawn(|| phase("pack weights", || d.pack()));
                    let jit = phase("codegen", || kiln_codegen::compile_jit_with(&program, &self.target, &codegen));
                    (jit, packing.join().ok().flatten())
                }),
                Some(d) => (phase("codegen", || kiln_codegen::compile_jit_with(&program, &self.target, &codegen)), phase("pack weights", || d.pack())),
                None => (phase("codegen", || kiln_codegen::compile_jit_with(&program, &self.target, &codegen)), None),
            };
            match install(deferred, packed, &mut program) {
                Installed::Done => Some(jit?),
                Installed::OutOfMemory => return self.without_packing().from_optimized(out, stop),
            }
        } else {
            let packed = deferred.as_ref().and_then(Deferred::pack);
            match install(deferred, packed, &mut program) {
                Installed::Done => None,
                Installed::OutOfMemory => return self.without_packing().from_optimized(out, stop),
            }
        };
        out.stage = stop;
        out.program = Some(program);
        out.plan = plan;
        out.jit = jit;
        Ok(out)
    }

    /// Rewrites `program` for the target (`kiln_schedule::schedule`); the packing is deferred.
    fn schedule(&self, program: &mut Program) -> Option<Deferred> {
        let options = ScheduleOptions { prepack: self.options.prepack, nchwc: self.options.nchwc };
        kiln_schedule::schedule(program, &self.target, options)
    }

    /// The same pipeline with nothing packed: what compiles when the packed copies do not fit
    /// in memory.
    fn without_packing(&self) -> Pipeline {
        Pipeline { target: self.target.clone(), options: PipelineOptions { prepack: false, nchwc: false, ..self.options.clone() } }
    }
}

/// Whether the packed weights made it into the program.
enum Installed {
    /// Installed, or nothing to pack.
    Done,
    /// No memory for the packed copies.
    OutOfMemory,
}

fn install(deferred: Option<Deferred>, packed: Option<Packed>, program: &mut Program) -> Installed {
    match (deferred, packed) {
        (Some(d), Some(data)) => {
            d.install(program, data);
            Installed::Done
        }
        (Some(_), None) => Installed::OutOfMemory,
        (None, _) => Installed::Done,
    }
}

/// `graph` with `bindings` applied, then shape computations folded and every type inferred
/// again when anything was symbolic, then computations on weights folded. An error at a node whose broadcast import had to assume
/// says what was assumed and which input dims broke it.
fn bind(graph: &Graph, bindings: &Bindings) -> Result<Graph> {
    bind_inner(graph, bindings).map_err(|errs| Error::Bind(join(&explain(graph, bindings, errs))))
}

fn bind_inner(graph: &Graph, bindings: &Bindings) -> std::result::Result<Graph, Vec<GraphInferError>> {
    let mut g = graph.clone();
    if !bindings.symbols.is_empty() {
        let refs: Vec<(&str, u64)> = bindings.symbols.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        kiln_tir::infer::bind_symbols(&mut g, &refs)?;
    }
    if !bindings.input_shapes.is_empty() && g.inputs().iter().any(|&v| g.ty(v).known_dims().is_none()) {
        kiln_tir::infer::bind_input_shapes(&mut g, &bindings.input_shapes)?;
    }
    if !bindings.input_values.is_empty() {
        kiln_tir::infer::substitute_input_values(&mut g, &bindings.input_values)?;
    }
    if !bindings.input_values.is_empty() || !graph.assumptions.is_empty() || graph.values.iter().any(|v| v.ty.known_dims().is_none()) {
        // Shapes computed from what was just bound become constants (and Ifs whose condition
        // did, their branch), then types settle.
        kiln_eval::fold::fold_graph(&mut g);
        kiln_tir::infer::infer_graph(&mut g)?;
    }
    // Products between DequantizeLinear and QuantizeLinear become integer operators while their
    // weights are still integers; then rearranged and dequantized weights become plain
    // weights, computed once.
    kiln_passes::qdq::integer_operators(&mut g);
    kiln_eval::fold_weights(&mut g);
    // An If still choosing between ranks depends on data kiln does not specialize on.
    let open: Vec<GraphInferError> = g
        .assumptions
        .iter()
        .filter(|a| matches!(a.what, Assumed::Branch { .. }))
        .map(|a| {
            let node = g.node(a.node);
            let message = format!("{}; the condition depends on run-time data that is not a shape-deciding input", a.what);
            GraphInferError { node: Some(a.node), node_name: node.name.clone(), op: node.op.kind().text_name(), message }
        })
        .collect();
    if !open.is_empty() {
        return Err(open);
    }
    Ok(g)
}

/// Binding errors, each followed by what import assumed at its node, with the input dims
/// behind the assumption's symbols and their bound sizes.
fn explain(graph: &Graph, bindings: &Bindings, errs: Vec<GraphInferError>) -> Vec<String> {
    let describe = |d: &Dim| -> String {
        let [s] = d.symbols()[..] else { return d.to_string() };
        if *d != Dim::sym(s) {
            return d.to_string();
        }
        for (index, &input) in graph.inputs().iter().enumerate() {
            let value = graph.value(input);
            if let Some(k) = value.ty.shape.iter().position(|x| x == d) {
                let bound = bindings.input_shapes.iter().find(|(i, _)| *i == index).and_then(|(_, dims)| dims.get(k));
                return match bound {
                    Some(n) => format!("input {:?} dim {k} ({s} = {n})", value.name),
                    None => format!("input {:?} dim {k} ({s})", value.name),
                };
            }
        }
        d.to_string()
    };
    errs.into_iter()
        .map(|e| {
            let assumed: Vec<String> = graph
                .assumptions
                .iter()
                .filter(|a| e.node == Some(a.node))
                .filter_map(|a| match &a.what {
                    Assumed::Broadcast(lhs, rhs) => Some(format!("{} broadcasts with {}", describe(lhs), describe(rhs))),
                    Assumed::Branch { .. } => None,
                })
                .collect();
            if assumed.is_empty() { e.to_string() } else { format!("{e}; the model assumes {}", assumed.join(" and ")) }
        })
        .collect()
}

/// The inputs whose values code compiled for `shapes` depends on (`infer::shape_deciding_inputs`
/// on the graph with those shapes bound): none when every shape is static once the input
/// shapes are.
pub fn shape_deciding_inputs(graph: &Graph, shapes: &[Vec<u64>]) -> Result<Vec<usize>> {
    let mut g = graph.clone();
    let shapes: Vec<(usize, Vec<u64>)> = shapes.iter().cloned().enumerate().collect();
    if !shapes.is_empty() && g.inputs().iter().any(|&v| g.ty(v).known_dims().is_none()) {
        kiln_tir::infer::bind_input_shapes(&mut g, &shapes).map_err(|errs| {
            let bindings = Bindings { input_shapes: shapes.clone(), ..Bindings::default() };
            Error::Bind(join(&explain(graph, &bindings, errs)))
        })?;
    }
    Ok(kiln_tir::infer::shape_deciding_inputs(&g))
}

fn join<T: std::fmt::Display>(errs: &[T]) -> String {
    errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
}

/// Kernels lowered from a node the optimizer fused name every ONNX node it computes
/// (`conv + relu`), as the optimizer's provenance gives them, not only the node it is named after.
fn name_fusions(program: &mut kiln_loops::Program, graph: &Graph, explain: &std::collections::HashMap<kiln_tir::NodeId, kiln_passes::Explain>) {
    let fused: std::collections::HashMap<&str, String> = explain
        .iter()
        .filter(|(_, e)| e.sources.len() > 1)
        .map(|(&n, e)| (graph.node(n).name.as_str(), e.sources.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(" + ")))
        .collect();
    for k in &mut program.kernels {
        if let Some(sources) = fused.get(k.source.as_str()) {
            k.source = sources.clone();
        }
    }
}

/// Runs one stage of the pipeline ([`crate::trace::stage`]).
fn phase<R>(name: &str, f: impl FnOnce() -> R) -> R {
    crate::trace::stage(name, f)
}
