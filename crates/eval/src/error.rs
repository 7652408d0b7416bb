//! The evaluator's error type.

/// Why an op or a graph could not be evaluated.
///
/// `op` fields hold the op's text name (`gather`, `conv`, ...) so messages read like the IR.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The evaluator does not implement this op, dtype or attribute combination.
    #[error("{op}: unsupported: {reason}")]
    Unsupported {
        /// Text name of the op.
        op: &'static str,
        /// What is not supported.
        reason: String,
    },
    /// The inputs or attributes are not valid for the op (index out of range, shape
    /// mismatch, division by zero, ...).
    #[error("{op}: {reason}")]
    Invalid {
        /// Text name of the op.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The evaluator hit a bug of its own (a panic it caught); the inputs may be fine.
    #[error("{op}: internal evaluator error: {reason}")]
    Internal {
        /// Text name of the op.
        op: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// A constant's bytes are not available ([`kiln_tir::TensorData::Absent`]), or a value was
    /// read before anything defined it.
    #[error("value `{value}` has no data")]
    MissingData {
        /// The value, by its name or `%N`.
        value: String,
    },
    /// The graph's inputs do not match its parameters.
    #[error("graph input {index}: {reason}")]
    BadInput {
        /// Position among the graph inputs.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An error raised while evaluating a node of a graph.
    #[error("node `{node}`: {source}")]
    AtNode {
        /// The node's ONNX name (or `nodeN` when it has none).
        node: String,
        /// The op-level error.
        source: Box<EvalError>,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = EvalError> = std::result::Result<T, E>;

/// An [`EvalError::Invalid`] for `op`.
pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> EvalError {
    EvalError::Invalid { op, reason: reason.into() }
}

/// An [`EvalError::Unsupported`] for `op`.
pub(crate) fn unsupported(op: &'static str, reason: impl Into<String>) -> EvalError {
    EvalError::Unsupported { op, reason: reason.into() }
}
