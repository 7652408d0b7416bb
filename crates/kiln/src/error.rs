//! The facade's error type.

use kiln_tir::DType;

/// Everything that can go wrong loading, compiling or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model could not be read or imported.
    #[error(transparent)]
    Import(#[from] kiln_onnx::import::ImportError),
    /// Shapes could not be bound for the given inputs.
    #[error("binding input shapes: {0}")]
    Bind(String),
    /// The optimizer failed (a kiln bug: the model compiles with the optimizer off).
    #[error(transparent)]
    Optimize(#[from] kiln_passes::OptError),
    /// kiln cannot lower the model yet.
    #[error(transparent)]
    Lower(#[from] kiln_lower::LowerError),
    /// Code generation failed.
    #[error(transparent)]
    Codegen(#[from] kiln_codegen::CodegenError),
    /// A run got the wrong number of inputs.
    #[error("expected {expected} inputs, got {got}")]
    InputCount {
        /// Inputs the model takes.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// A run got an input name the model does not have.
    #[error("the model has no input named \"{0}\"")]
    UnknownInput(String),
    /// An input has the wrong element type.
    #[error("input \"{name}\": expected element type {expected}, got {got}")]
    InputDType {
        /// Input name.
        name: String,
        /// What the model takes.
        expected: DType,
        /// What was given.
        got: DType,
    },
    /// An input has the wrong shape or too few bytes.
    #[error("input \"{name}\": {reason}")]
    InputShape {
        /// Input name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The intra-op thread pool could not start its threads.
    #[error("starting {threads} intra-op threads: {error}")]
    Threads {
        /// Threads asked for.
        threads: usize,
        /// Why the operating system refused.
        error: std::io::Error,
    },
    /// The run was stopped from outside: cancelled, or past its deadline
    /// ([`crate::RunOptions`]).
    #[error("{0}")]
    Stopped(&'static str),
    /// A resource limit ([`crate::ResourceLimits`]) would be exceeded.
    #[error("{0}")]
    Limit(String),
    /// The model cannot become an object file as asked (a JIT target, an unbound dim, shapes
    /// that come from data).
    #[error("cannot compile to an object file: {0}")]
    Object(String),
    /// A kiln bug: an invariant between stages did not hold.
    #[error("internal error (a kiln bug): {0}")]
    Internal(String),
    /// The compiled code stopped with a run-time error (an index out of range, ...).
    #[error("run-time error: {0}")]
    Run(String),
}

/// Results of the facade.
pub type Result<T> = std::result::Result<T, Error>;
