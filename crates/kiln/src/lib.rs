//! kiln compiles ONNX models to native code and runs them.
//!
//! ```no_run
//! let model = kiln::Model::load("model.onnx")?;
//! let compiled = model.compile(&kiln::CompileOptions::default())?;
//! let input = kiln::Tensor::from_f32s(&[1, 784], &vec![0.5; 784]);
//! let outputs = compiled.run(&[input])?;
//! println!("{:?}", outputs[0]);
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! A [`CompiledModel`] is `Send + Sync`: share it between threads and call [`CompiledModel::run`]
//! concurrently; each run takes its own scratch arena from a pool. Models with symbolic input
//! dims are compiled once per distinct set of input shapes, on first use.
#![deny(missing_docs)]

pub mod aot;
mod array;
mod compiled;
pub mod conformance;
mod error;
pub mod limits;
pub mod npy;
pub mod pipeline;
mod staged;
pub mod trace;

use std::path::Path;

pub use aot::{ObjectFile, Port};
pub use array::{Element, tensor_from_array, tensor_to_array};
pub use compiled::{CompiledModel, RunOptions, Specialization};
pub use error::{Error, Result};
pub use limits::ResourceLimits;
pub use kiln_passes::{Limits, Stats as OptimizerStats};
pub use kiln_target::Target;
/// Targets: triples, CPU features, runtimes (`kiln_target`).
pub use kiln_target as target;
pub use pipeline::{Bindings, Pipeline, PipelineOptions, Stage};
pub use kiln_tir::{DType, Dim, Tensor, TensorData, TensorType};

/// An imported model: verified tensor IR, not yet compiled.
#[derive(Clone, Debug)]
pub struct Model {
    graph: kiln_tir::Graph,
}

/// Options for [`Model::compile`]. [`Default`] is a plain value (the host, the optimizer on,
/// every core); [`CompileOptions::from_env`] is the one place the `KILN_*` variables are read.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// What the code is compiled for; JIT code must target this machine ([`Target::host`]).
    pub target: Target,
    /// Concrete shapes for inputs, by name, compiled up front. Inputs with symbolic dims that
    /// are not listed are compiled when a run first sees them.
    pub input_shapes: Vec<(String, Vec<u64>)>,
    /// The egg optimizer's bounds, or `None` to lower the imported IR as it is.
    pub optimizer: Option<Limits>,
    /// Threads that each run uses: the calling thread and `threads − 1` pool workers, which
    /// split matrix products, convolutions and other large kernels (results do not depend on
    /// the count). Concurrent runs share the pool: while one run has it, the others compute on
    /// their own threads alone.
    pub threads: usize,
    /// Whether constant weights of products and convolutions are packed at compile time into
    /// the panels the target's kernels read (`kiln_schedule::prepack`), so runs do not pack them.
    pub prepack: bool,
    /// Whether chains of convolutions compute in the blocked channel layout NCHW16c
    /// (`kiln_schedule::nchwc`) when the target has AVX-512 and `prepack` is on.
    pub nchwc: bool,
    /// Whether innermost element-wise loops run four iterations at a time in 128-bit vectors
    /// where the target has them (x86-64 with SSE4.1, aarch64).
    pub vectors: bool,
    /// What one compilation and one run may take.
    pub limits: ResourceLimits,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            target: Target::host(),
            input_shapes: Vec::new(),
            optimizer: Some(Limits::default()),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prepack: true,
            nchwc: true,
            vectors: true,
            limits: ResourceLimits::default(),
        }
    }
}

impl CompileOptions {
    /// The defaults, changed by the environment: `KILN_OPT=0` turns the optimizer off and
    /// `KILN_OPT_NODES`, `KILN_OPT_ITERS`, `KILN_OPT_TIME_MS`, `KILN_OPT_FOLD` bound it
    /// ([`Limits::from_env`]); `KILN_THREADS=N` sets the threads; `KILN_PREPACK=0` and
    /// `KILN_NCHWC=0` turn packing and the blocked layout off; `KILN_SIMD=0` keeps generated
    /// loops scalar; `KILN_RUNTIME=none` compiles
    /// JIT code as for a target without the runtime (every call as loops, libc and libm only).
    pub fn from_env() -> CompileOptions {
        let off = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "0");
        let defaults = CompileOptions::default();
        let mut target = defaults.target.clone();
        if std::env::var("KILN_RUNTIME").is_ok_and(|v| v.trim() == "none") {
            target.runtime = kiln_target::Runtime::None;
        }
        CompileOptions {
            target,
            optimizer: (!off("KILN_OPT")).then(Limits::from_env),
            threads: std::env::var("KILN_THREADS")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(defaults.threads),
            prepack: !off("KILN_PREPACK"),
            nchwc: !off("KILN_NCHWC"),
            vectors: !off("KILN_SIMD"),
            ..defaults
        }
    }

    /// The pipeline these options compile through.
    pub fn pipeline(&self) -> Pipeline {
        Pipeline::new(
            self.target.clone(),
            PipelineOptions { optimizer: self.optimizer.clone(), prepack: self.prepack, nchwc: self.nchwc, vectors: self.vectors, threads: self.threads, limits: self.limits.clone() },
        )
    }
}

impl Model {
    /// Loads and imports an `.onnx` file (weights stay in the mapped file).
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(path, &ResourceLimits::default())
    }

    /// [`Model::load`] within `limits` (`limits.import`).
    pub fn load_with(path: impl AsRef<Path>, limits: &ResourceLimits) -> Result<Model> {
        trace::stage("import", || {
            let file = kiln_onnx::load::OnnxFile::from_path(path).map_err(kiln_onnx::import::ImportError::from)?;
            Ok(Model { graph: kiln_onnx::import::import_with(&file, &limits.import)? })
        })
    }

    /// Imports a model from bytes in memory.
    pub fn from_bytes(bytes: impl Into<bytes::Bytes>) -> Result<Model> {
        let file = kiln_onnx::load::OnnxFile::from_bytes(bytes.into())
            .map_err(kiln_onnx::import::ImportError::from)?;
        Ok(Model {
            graph: kiln_onnx::import::import(&file)?,
        })
    }

    /// Wraps a tensor-IR graph (e.g. parsed from text).
    pub fn from_graph(graph: kiln_tir::Graph) -> Model {
        Model { graph }
    }

    /// The model's tensor IR.
    pub fn graph(&self) -> &kiln_tir::Graph {
        &self.graph
    }

    /// Compiles the model. Inputs whose shapes are fully static, or given in `options`, are
    /// compiled now; the rest when first run.
    pub fn compile(&self, options: &CompileOptions) -> Result<CompiledModel> {
        CompiledModel::new(self.graph.clone(), options)
    }
}
