//! Compiled models: specializations per input shape, an arena pool, and `run`.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use kiln_codegen::JitProgram;
use kiln_schedule::plan::MemoryPlan;
use kiln_loops::{BufferKind, Program};
use kiln_runtime::pool::Pool;
use kiln_runtime::stop::{Reason, Stop};
use kiln_tir::{DType, Graph, Tensor, TensorData};

use crate::pipeline::{Bindings, Pipeline, Stage};
use crate::staged::{self, Staged};
use crate::{CompileOptions, Error, Result};

/// The alignment of every buffer generated code and kernels read: enough for any element and
/// for 128-bit vectors.
const ALIGN: usize = 16;

fn is_aligned(bytes: &[u8]) -> bool {
    bytes.as_ptr() as usize % ALIGN == 0
}

/// `bytes` copied to memory aligned to [`ALIGN`].
fn aligned_copy(bytes: &[u8]) -> Bytes {
    /// 16-byte words holding the bytes, shown as the bytes.
    struct Words(Vec<u128>, usize);
    impl AsRef<[u8]> for Words {
        fn as_ref(&self) -> &[u8] {
            // SAFETY: the words own at least `self.1` initialized bytes.
            unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.1) }
        }
    }
    let mut words = vec![0u128; bytes.len().div_ceil(ALIGN)];
    // SAFETY: `words` holds at least `bytes.len()` bytes and does not overlap `bytes`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
    Bytes::from_owner(Words(words, bytes.len()))
}

/// How one run may be stopped from outside ([`CompiledModel::run_with`]).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Stops the run once another thread sets it to true.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Stops the run once this instant has passed.
    pub deadline: Option<Instant>,
}

impl RunOptions {
    /// Options with a deadline `timeout` from now.
    pub fn timeout(timeout: std::time::Duration) -> RunOptions {
        RunOptions { cancel: None, deadline: Instant::now().checked_add(timeout) }
    }
}

/// [`Error::Stopped`] if the run on this thread should stop now.
pub(crate) fn stopped() -> Option<Error> {
    kiln_runtime::stop::reason().map(|r| Error::Stopped(match r {
        Reason::Cancelled => "the run was cancelled",
        Reason::DeadlineExceeded => "the run passed its deadline",
    }))
}

/// A model ready to run: `Send + Sync`, reentrant.
pub struct CompiledModel {
    graph: Graph,
    inputs: Vec<InputSpec>,
    /// One slot per key, filled by its first compilation. Only the slot is locked while it
    /// compiles, so runs of shapes already compiled never wait for a new shape's compilation.
    specs: Mutex<HashMap<Key, Arc<Slot>>>,
    /// Counts lookups, for finding the least recently used specialization.
    clock: std::sync::atomic::AtomicU64,
    /// For each set of input shapes, the inputs whose values the compiled code depends on.
    value_inputs: Mutex<HashMap<Vec<Vec<u64>>, Vec<usize>>>,
    /// The stages every specialization is compiled through.
    pipeline: Pipeline,
    /// The intra-op threads every run enters (shared with the later stages of staged runs).
    pool: Arc<Pool>,
}

/// What one set of input shapes and shape-deciding values compiled to.
#[derive(Clone)]
enum Entry {
    /// Code for the whole model.
    Code(Arc<Specialization>),
    /// Stages split where a shape comes from data.
    Staged(Arc<Staged>),
}

/// One key's place in the cache: its entry once compiled, and when it was last looked up.
#[derive(Default)]
struct Slot {
    entry: Mutex<Option<Entry>>,
    used: std::sync::atomic::AtomicU64,
}

/// Whether a slot holds compiled code, or `None` while it compiles (its lock is taken). A
/// compilation that panicked leaves the lock poisoned and the slot empty.
fn filled(slot: &Slot) -> Option<bool> {
    match slot.entry.try_lock() {
        Ok(e) => Some(e.is_some()),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner().is_some()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Drops the least recently used compiled specializations other than `keeping` until at most
/// `keep` remain. Runs holding one keep its code alive until they finish; a slot still
/// compiling is never dropped, and an empty one (its compilation failed) goes first.
fn evict_to(specs: &mut HashMap<Key, Arc<Slot>>, keep: usize, keeping: &Key) {
    while specs.len() > keep {
        let oldest = specs
            .iter()
            .filter(|(k, s)| *k != keeping && filled(s).is_some())
            .min_by_key(|(_, s)| (filled(s) == Some(true), s.used.load(std::sync::atomic::Ordering::Relaxed)))
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => drop(specs.remove(&k)),
            None => return,
        }
    }
}

/// What a specialization is compiled for: input shapes, and the values of the inputs that
/// decide shapes inside the model (empty for most models).
type Key = (Vec<Vec<u64>>, Vec<(usize, Bytes)>);

/// A graph input's name, dtype and (possibly symbolic) shape.
#[derive(Clone, Debug)]
struct InputSpec {
    name: String,
    dtype: DType,
    /// `Some(d)` for a known dim, `None` for a symbolic one.
    dims: Vec<Option<u64>>,
}

/// The model compiled for one set of concrete input shapes.
pub struct Specialization {
    program: Program,
    plan: MemoryPlan,
    jit: JitProgram,
    outputs: Vec<(DType, Vec<u64>)>,
    /// Addresses of constant buffers (kept alive by `program`), by buffer index.
    const_addrs: Vec<Option<usize>>,
    arenas: Mutex<Vec<Arena>>,
    /// What the optimizer did, when it ran.
    opt_stats: Option<kiln_passes::Stats>,
}

/// Scratch memory for one run: a page-aligned mapping of its own, in huge pages where the
/// kernel gives them (`kiln_runtime::memory::map_anon`), faulted in by the first run.
struct Arena(memmap2::MmapMut);

impl Arena {
    fn new(bytes: u64) -> Result<Arena> {
        let mapped = usize::try_from(bytes).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory)).and_then(|len| kiln_runtime::memory::map_anon(len, false, true));
        mapped.map(Arena).map_err(|e| Error::Run(format!("cannot map the {bytes}-byte arena: {e}")))
    }

    fn base(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }
}

impl CompiledModel {
    pub(crate) fn new(graph: Graph, options: &CompileOptions) -> Result<CompiledModel> {
        let pool = Pool::new(options.threads).map_err(|error| Error::Threads { threads: options.threads, error })?;
        let model = CompiledModel::with(graph, options.pipeline(), Arc::new(pool));
        // Compile now what can be compiled now, so errors surface at compile time.
        let mut shapes = Vec::new();
        let mut complete = true;
        for spec in &model.inputs {
            match options.input_shapes.iter().find(|(n, _)| *n == spec.name) {
                Some((_, dims)) => shapes.push(dims.clone()),
                None => match spec.dims.iter().copied().collect::<Option<Vec<u64>>>() {
                    Some(d) => shapes.push(d),
                    None => complete = false,
                },
            }
        }
        if let Some((name, _)) = options
            .input_shapes
            .iter()
            .find(|(n, _)| !model.inputs.iter().any(|s| s.name == *n))
        {
            return Err(Error::UnknownInput(name.clone()));
        }
        if complete && model.value_inputs(&shapes)?.is_empty() {
            model.entry(&shapes, &[])?;
        }
        Ok(model)
    }

    /// A model of `graph` compiled by the same pipeline into the same thread pool: the stages
    /// after a split.
    pub(crate) fn sibling(&self, graph: Graph) -> Result<CompiledModel> {
        Ok(CompiledModel::with(graph, self.pipeline.clone(), self.pool.clone()))
    }

    fn with(graph: Graph, pipeline: Pipeline, pool: Arc<Pool>) -> CompiledModel {
        let inputs: Vec<InputSpec> = graph
            .inputs()
            .iter()
            .map(|&v| {
                let val = graph.value(v);
                InputSpec {
                    name: val.name.clone(),
                    dtype: val.ty.dtype,
                    dims: val.ty.shape.iter().map(kiln_tir::Dim::known).collect(),
                }
            })
            .collect();
        CompiledModel { graph, inputs, specs: Mutex::new(HashMap::new()), clock: Default::default(), value_inputs: Mutex::new(HashMap::new()), pipeline, pool }
    }

    /// Runs `f` inside the thread pool.
    /// The resource limits its compilations and runs keep to.
    pub(crate) fn limits(&self) -> &crate::ResourceLimits {
        &self.pipeline.options().limits
    }

    pub(crate) fn in_pool<R>(&self, f: impl FnOnce() -> R) -> R {
        self.pool.enter(f)
    }

    /// The names of the model's inputs, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|s| s.name.as_str()).collect()
    }

    /// The model's inputs in order: name, element type and dims as declared (a symbolic dim is
    /// [`kiln_tir::Dim::Sym`], its name in its `Display`).
    pub fn inputs(&self) -> Vec<(&str, &kiln_tir::TensorType)> {
        self.graph.inputs().iter().map(|&v| self.graph.value(v)).map(|v| (v.name.as_str(), &v.ty)).collect()
    }

    /// The model's outputs in order, as [`CompiledModel::inputs`] gives the inputs. Dims are
    /// what inference derived from the declared inputs; a run's outputs have concrete shapes.
    pub fn outputs(&self) -> Vec<(&str, &kiln_tir::TensorType)> {
        self.graph.outputs().iter().map(|&v| self.graph.value(v)).map(|v| (v.name.as_str(), &v.ty)).collect()
    }

    /// The inputs whose values the code compiled for `shapes` depends on: none when every
    /// shape in the model is static once the input shapes are bound; otherwise the inputs that
    /// look like shape parameters (`infer::shape_deciding_inputs`), which are then compiled as
    /// constants (one specialization per value).
    fn value_inputs(&self, shapes: &[Vec<u64>]) -> Result<Vec<usize>> {
        let mut memo = self.value_inputs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = memo.get(shapes) {
            return Ok(v.clone());
        }
        let chosen = crate::pipeline::shape_deciding_inputs(&self.graph, shapes)?;
        memo.insert(shapes.to_vec(), chosen.clone());
        Ok(chosen)
    }

    /// The compiled code for these input shapes and shape-deciding input values, compiling it
    /// on first use. A model that runs in stages (shapes from data) has no single program: an
    /// error says so.
    pub fn specialization(&self, shapes: &[Vec<u64>], values: &[(usize, Tensor)]) -> Result<Arc<Specialization>> {
        match self.entry(shapes, values)? {
            Entry::Code(s) => Ok(s),
            Entry::Staged(_) => Err(Error::Run("these input shapes make a model that runs in stages (a shape comes from data); it has no single program".into())),
        }
    }

    /// What these input shapes and values compile to, compiling on first use.
    fn entry(&self, shapes: &[Vec<u64>], values: &[(usize, Tensor)]) -> Result<Entry> {
        let key: Key = (
            shapes.to_vec(),
            values
                .iter()
                .map(|(i, t)| (*i, t.raw().map(Bytes::copy_from_slice).unwrap_or_default()))
                .collect(),
        );
        let now = self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = {
            let mut specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
            specs.entry(key.clone()).or_default().clone()
        };
        slot.used.store(now, std::sync::atomic::Ordering::Relaxed);
        let mut slot = slot.entry.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = &*slot {
            return Ok(entry.clone());
        }
        match self.compile_entry(shapes, values) {
            Ok(entry) => {
                *slot = Some(entry.clone());
                drop(slot);
                // Only a shape that compiled makes room: shapes that fail evict nothing.
                let mut specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
                evict_to(&mut specs, self.limits().max_specializations.max(1), &key);
                Ok(entry)
            }
            Err(e) => {
                // Shapes that do not compile leave no slot behind: a caller trying many bad
                // shapes does not grow the map.
                drop(slot);
                let mut specs = self.specs.lock().unwrap_or_else(|e| e.into_inner());
                if specs.get(&key).is_some_and(|s| filled(s) == Some(false)) {
                    specs.remove(&key);
                }
                Err(e)
            }
        }
    }

    fn compile_entry(&self, shapes: &[Vec<u64>], values: &[(usize, Tensor)]) -> Result<Entry> {
        let bindings = Bindings { symbols: Vec::new(), input_shapes: shapes.iter().cloned().enumerate().collect(), input_values: values.to_vec() };
        let bound = self.pipeline.run(&self.graph, &bindings, Stage::Bind)?.graph;
        Ok(match staged::split(&bound) {
            Some(split) => Entry::Staged(Arc::new(Staged::new(&self.pipeline, &bound, &split, self)?)),
            // In the pool, so compile-time work that splits (packing weights) uses its threads.
            None => Entry::Code(Arc::new(self.pool.enter(|| Specialization::compile_bound(&self.pipeline, bound))?)),
        })
    }

    /// Runs the model on inputs given in the model's input order.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        kiln_runtime::trace::span("run", "run", || match self.prepare(inputs)? {
            Entry::Code(spec) => self.pool.enter(|| spec.run(inputs, None)),
            Entry::Staged(staged) => staged.run(self, inputs),
        })
    }

    /// [`CompiledModel::run`] that stops early with [`Error::Stopped`] when `options` say so:
    /// checked before the run, between its stages, and once per iteration of every `Loop` (the
    /// only work whose time its tensors' sizes do not bound). Compiling a new specialization
    /// for these inputs' shapes is not interrupted.
    pub fn run_with(&self, inputs: &[Tensor], options: &RunOptions) -> Result<Vec<Tensor>> {
        let stop = Stop { cancel: options.cancel.clone(), deadline: options.deadline };
        kiln_runtime::stop::with(&stop, || {
            let result = stopped().map_or_else(|| self.run(inputs), Err);
            // A run that failed because it was told to stop reports that, not the check it hit.
            match result {
                Err(e) => Err(stopped().unwrap_or(e)),
                ok => ok,
            }
        })
    }

    /// How many specializations have been compiled so far (one per set of input shapes and
    /// shape-deciding input values seen).
    pub fn specializations(&self) -> usize {
        let slots: Vec<Arc<Slot>> = self.specs.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        let entries: Vec<Entry> = slots.iter().filter_map(|slot| slot.entry.lock().unwrap_or_else(|e| e.into_inner()).clone()).collect();
        entries.iter().map(|e| 1 + if let Entry::Staged(s) = e { s.specializations() } else { 0 }).sum()
    }

    /// Threads each run uses (the caller included).
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Runs the model once, kernel by kernel, and returns each kernel's name and wall time in
    /// execution order (the outputs are discarded). For finding where time goes; a timed
    /// kernel runs alone, so the sum is a little above a plain run's latency.
    pub fn profile(&self, inputs: &[Tensor]) -> Result<Vec<(String, std::time::Duration)>> {
        let Entry::Code(spec) = self.prepare(inputs)? else {
            return Err(Error::Run("a model that runs in stages (a shape comes from data) cannot be profiled kernel by kernel yet".into()));
        };
        let mut times = Vec::with_capacity(spec.program.kernels.len());
        self.pool.enter(|| spec.run(inputs, Some(&mut times)))?;
        Ok(spec.program.kernels.iter().map(|k| k.name.clone()).zip(times).collect())
    }

    /// Checks `inputs` and finds (or compiles) their specialization.
    fn prepare(&self, inputs: &[Tensor]) -> Result<Entry> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            });
        }
        let mut shapes = Vec::with_capacity(inputs.len());
        for (spec, t) in self.inputs.iter().zip(inputs) {
            check_input(spec, t)?;
            shapes.push(t.shape.clone());
        }
        let values: Vec<(usize, Tensor)> = self
            .value_inputs(&shapes)?
            .into_iter()
            .map(|i| (i, inputs[i].clone()))
            .collect();
        self.entry(&shapes, &values)
    }

    /// Runs the model on inputs given by name (every input exactly once).
    pub fn run_named(&self, inputs: &[(&str, Tensor)]) -> Result<Vec<Tensor>> {
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for (name, _) in inputs {
            if !self.inputs.iter().any(|s| s.name == *name) {
                return Err(Error::UnknownInput(name.to_string()));
            }
        }
        for spec in &self.inputs {
            let found: Vec<&Tensor> = inputs
                .iter()
                .filter(|(n, _)| *n == spec.name)
                .map(|(_, t)| t)
                .collect();
            match found[..] {
                [t] => ordered.push(t.clone()),
                [] => {
                    return Err(Error::InputShape {
                        name: spec.name.clone(),
                        reason: "not given".into(),
                    });
                }
                _ => {
                    return Err(Error::InputShape {
                        name: spec.name.clone(),
                        reason: "given more than once".into(),
                    });
                }
            }
        }
        self.run(&ordered)
    }
}

fn check_input(spec: &InputSpec, t: &Tensor) -> Result<()> {
    if t.dtype != spec.dtype {
        return Err(Error::InputDType {
            name: spec.name.clone(),
            expected: spec.dtype,
            got: t.dtype,
        });
    }
    let want = || {
        let dims: Vec<String> = spec.dims.iter().map(|d| d.map_or("?".to_string(), |d| d.to_string())).collect();
        format!("[{}]", dims.join(", "))
    };
    if t.shape.len() != spec.dims.len() {
        return Err(Error::InputShape {
            name: spec.name.clone(),
            reason: format!("has rank {}, the model declares rank {} ({}); got shape {:?}", t.shape.len(), spec.dims.len(), want(), t.shape),
        });
    }
    if let Some((k, (d, w))) = t.shape.iter().zip(&spec.dims).enumerate().find(|(_, (d, w))| w.is_some_and(|w| w != **d)) {
        return Err(Error::InputShape {
            name: spec.name.clone(),
            reason: format!("dim {k} is {d}, the model declares {} (shape {}); got shape {:?}", w.unwrap_or(0), want(), t.shape),
        });
    }
    let numel = t.numel().ok_or_else(|| Error::InputShape {
        name: spec.name.clone(),
        reason: "element count overflows".into(),
    })?;
    // Strings never reach compiled code: the nodes that read them run in the evaluator.
    if let TensorData::Strings(items) = &t.data {
        return match t.dtype == DType::String && items.len() as u64 == numel {
            true => Ok(()),
            false => Err(Error::InputShape { name: spec.name.clone(), reason: format!("{} strings for shape {:?}", items.len(), t.shape) }),
        };
    }
    let bytes = t
        .dtype
        .storage_bytes(numel)
        .ok_or_else(|| Error::InputShape {
            name: spec.name.clone(),
            reason: format!("{} inputs are not supported", t.dtype),
        })?;
    match &t.data {
        TensorData::Raw(b) if b.len() as u64 == bytes => Ok(()),
        TensorData::Raw(b) => Err(Error::InputShape {
            name: spec.name.clone(),
            reason: format!(
                "{} bytes for shape {:?} of {}; expected {bytes}",
                b.len(),
                t.shape,
                t.dtype
            ),
        }),
        _ => Err(Error::InputShape {
            name: spec.name.clone(),
            reason: "the tensor has no bytes".into(),
        }),
    }
}

impl Specialization {
    /// Compiles `bound`, a graph whose shapes are all static.
    pub(crate) fn compile_bound(pipeline: &Pipeline, bound: Graph) -> Result<Specialization> {
        let compiled = pipeline.run(&bound, &Bindings::default(), Stage::Codegen)?;
        let (Some(mut program), Some(plan), Some(jit)) = (compiled.program, compiled.plan, compiled.jit) else {
            return Err(Error::Internal("the pipeline stopped before code generation".into()));
        };
        let g = &compiled.graph;
        let outputs = g
            .outputs()
            .iter()
            .map(|&v| (g.ty(v).dtype, g.ty(v).known_dims().unwrap_or_default()))
            .collect();
        // Weights inside a mapped protobuf start at any byte. Generated code reads them there;
        // the runtime's routines read `f32` and `i32` operands as typed slices, so a weight one
        // of them takes at a misaligned address gets an aligned copy.
        crate::trace::stage("align weights", || {
            let need = kiln_codegen::call_alignment(&program);
            for (b, need) in program.buffers.iter_mut().zip(need) {
                if let BufferKind::Const(t) = &mut b.kind
                    && let Some(raw) = t.raw().filter(|r| r.as_ptr() as usize % need != 0)
                {
                    let copy = aligned_copy(raw);
                    kiln_tir::mapped::release(raw);
                    t.data = TensorData::Raw(copy);
                }
            }
        });
        let const_addrs = program
            .buffers
            .iter()
            .map(|b| match &b.kind {
                BufferKind::Const(t) => t.raw().map(|r| r.as_ptr() as usize),
                _ => None,
            })
            .collect();
        Ok(Specialization {
            program,
            plan,
            jit,
            outputs,
            const_addrs,
            arenas: Mutex::new(Vec::new()),
            opt_stats: compiled.optimized.map(|o| o.stats),
        })
    }

    /// The lowered program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The memory plan.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// What the optimizer did for this specialization (`None` when it was off).
    pub fn optimizer_stats(&self) -> Option<&kiln_passes::Stats> {
        self.opt_stats.as_ref()
    }

    /// Runs on inputs already checked against this specialization's shapes; with `times`,
    /// kernel by kernel, pushing each kernel's wall time.
    pub(crate) fn run(&self, inputs: &[Tensor], times: Option<&mut Vec<std::time::Duration>>) -> Result<Vec<Tensor>> {
        let mut outputs: Vec<Vec<u8>> = Vec::with_capacity(self.outputs.len());
        for (i, (dtype, dims)) in self.outputs.iter().enumerate() {
            outputs.push(zeroed(output_bytes(*dtype, dims)).map_err(|bytes| Error::Run(format!("cannot allocate {bytes} bytes for output {i}")))?);
        }
        let pooled = self.arenas.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut arena = match pooled {
            Some(arena) => arena,
            None => Arena::new(self.plan.arena_bytes)?,
        };
        let base = arena.base();
        // Inputs that are slices of a caller's buffer can start at any byte.
        let realigned: Vec<Option<Bytes>> = inputs.iter().map(|t| t.raw().filter(|r| !is_aligned(r)).map(aligned_copy)).collect();
        let mut table: Vec<*mut u8> = Vec::with_capacity(self.program.buffers.len());
        for (i, b) in self.program.buffers.iter().enumerate() {
            let ptr: *mut u8 = match &b.kind {
                // The generated code never stores into inputs (the loop-IR verifier checks it).
                BufferKind::Input(n) => match &realigned[*n] {
                    Some(copy) => copy.as_ptr().cast_mut(),
                    None => inputs[*n].raw().map_or(std::ptr::null_mut(), |r| r.as_ptr().cast_mut()),
                },
                BufferKind::Output(n) => outputs[*n].as_mut_ptr(),
                BufferKind::Const(_) => self.const_addrs[i].unwrap_or(0) as *mut u8,
                BufferKind::Temp => match self.plan.offsets[i] {
                    // SAFETY: the planner keeps every offset + size within `arena_bytes`.
                    Some(off) => unsafe { base.add(off as usize) },
                    None => std::ptr::null_mut(),
                },
            };
            table.push(ptr);
        }
        // SAFETY: the table holds one valid pointer per buffer, each to at least the buffer's
        // byte length (inputs were checked, outputs sized from the same types, temps planned).
        let traced = kiln_runtime::trace::enabled();
        // A run that can be stopped goes kernel by kernel and checks between them, so a
        // deadline or a cancel ends it within one kernel's time.
        let stoppable = kiln_runtime::stop::armed();
        let mut stopped_at = None;
        let status = match times {
            None if !traced && !stoppable => unsafe { self.jit.run(&table) },
            mut times => (0..self.jit.kernel_count()).try_for_each(|k| {
                if stoppable && kiln_runtime::stop::reason().is_some() {
                    stopped_at = Some(k);
                    return Err(u32::MAX);
                }
                let start = std::time::Instant::now();
                // SAFETY: as for `run`; kernels go in order, so each reads what the ones before
                // it wrote.
                let r = unsafe { self.jit.run_kernel(k, &table) };
                if let Some(times) = times.as_mut() {
                    times.push(start.elapsed());
                }
                if traced && let Some(kernel) = self.program.kernels.get(k) {
                    kiln_runtime::trace::record(kernel.name.as_str(), "kernel", start, vec![("nodes", kernel.source.clone())]);
                }
                r
            }),
        };
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(arena);
        if stopped_at.is_some() {
            return Err(stopped().unwrap_or(Error::Stopped("the run was stopped")));
        }
        if let Err(code) = status {
            let message = self
                .program
                .errors
                .get(code as usize)
                .cloned()
                .unwrap_or_else(|| format!("error code {code}"));
            return Err(Error::Run(message));
        }
        Ok(outputs
            .into_iter()
            .zip(&self.outputs)
            .map(|(bytes, (dtype, dims))| Tensor {
                dtype: *dtype,
                shape: dims.clone(),
                data: TensorData::Raw(Bytes::from(bytes)),
            })
            .collect())
    }
}

/// The bytes of an output of `dtype` and `dims` (lowering bounds every buffer, so this fits).
fn output_bytes(dtype: DType, dims: &[u64]) -> u64 {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).and_then(|n| dtype.storage_bytes(n)).unwrap_or(u64::MAX)
}

/// `bytes` zeroed bytes, or `Err(bytes)` when the allocator refuses them.
fn zeroed(bytes: u64) -> std::result::Result<Vec<u8>, u64> {
    let len = usize::try_from(bytes).map_err(|_| bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| bytes)?;
    v.resize(len, 0);
    Ok(v)
}
