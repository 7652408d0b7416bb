//! Import: an ONNX model becomes a verified tensor-IR [`Graph`].
//!
//! This is the only place ONNX op-type strings and opset differences exist. Each node is
//! mapped to a typed [`kiln_tir::Op`] in the form of the newest opset (older forms are
//! upgraded by [`upgrade`]), model-local functions are inlined, `If`/`Loop`/`Scan` bodies become
//! nested regions, and every output gets its type from shape inference. The imported graph
//! is checked by the tensor-IR verifier before it is returned.

mod attrs;
mod expand;
mod graph;
mod types;
mod upgrade;

pub use graph::NEWEST_OPSET;
pub use types::read_tensor_file;

pub(crate) use kiln_tir::echo::text as bounded;

use kiln_tir::verify::VerifyError;
use kiln_tir::Graph;

use crate::load::{LoadError, OnnxFile};

/// Why a model could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be read, decoded, or its tensor data resolved.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The model uses something kiln does not support yet: an op, a domain, a value type.
    #[error("{location}: unsupported: {reason}")]
    Unsupported {
        /// The node (`node "name" (OpType)`) or value it concerns.
        location: String,
        /// What is unsupported.
        reason: String,
    },
    /// The model is invalid: a bad attribute, an undefined input, a type error.
    #[error("{location}: {reason}")]
    Invalid {
        /// The node (`node "name" (OpType)`) or value it concerns.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// The imported graph breaks tensor-IR invariants (a kiln bug or an invalid model).
    #[error("the imported graph fails verification:\n{}", .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Verify(Vec<VerifyError>),
}

impl ImportError {
    /// This error, from inside a subgraph or function body, located within `outer` (`node
    /// "if" (If) > then_branch`): the message then names every enclosing node.
    /// Deeply nested models keep the three outermost and three innermost steps.
    pub(crate) fn within(self, outer: &str) -> ImportError {
        let nest = |location: String| {
            let path = format!("{outer} > {location}");
            let steps: Vec<&str> = path.split(" > ").collect();
            if steps.len() <= 7 {
                return path;
            }
            let mut kept = steps[..3].to_vec();
            kept.push("…");
            kept.extend_from_slice(&steps[steps.len() - 3..]);
            kept.join(" > ")
        };
        match self {
            ImportError::Unsupported { location, reason } => ImportError::Unsupported { location: nest(location), reason },
            ImportError::Invalid { location, reason } => ImportError::Invalid { location: nest(location), reason },
            other => other,
        }
    }

    /// True for "kiln does not support this yet", as opposed to an invalid model.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, ImportError::Unsupported { .. })
    }
}

/// Imports the model in `file` into tensor IR and verifies it.
///
/// Weights stay zero-copy: constants are slices of `file`'s buffer, which they keep alive.
pub fn import(file: &OnnxFile) -> Result<Graph, ImportError> {
    import_with(file, &ImportLimits::default())
}

/// Bounds on what one import builds, so that a hostile model is an error rather than an
/// exhausted stack or memory: function-call bombs and recursion, subgraphs nested without end.
#[derive(Clone, Debug)]
pub struct ImportLimits {
    /// Nodes in the imported graph, counting every node of every inlined function call and
    /// subgraph.
    pub max_nodes: usize,
    /// Levels of subgraphs (`If`, `Loop`, `Scan` bodies) and function calls, the main graph
    /// being level 1.
    pub max_depth: usize,
}

impl Default for ImportLimits {
    fn default() -> Self {
        // The largest exported language models have some 10^5 nodes; nesting beyond a few
        // levels is rare outside generated tests.
        ImportLimits { max_nodes: 2_000_000, max_depth: 64 }
    }
}

/// [`import`] within `limits`.
pub fn import_with(file: &OnnxFile, limits: &ImportLimits) -> Result<Graph, ImportError> {
    let g = graph::Importer::new(file, limits)?.run()?;
    kiln_tir::verify::verify(&g).map_err(ImportError::Verify)?;
    Ok(g)
}

/// Loads and imports the model at `path`.
pub fn import_path(path: impl AsRef<std::path::Path>) -> Result<Graph, ImportError> {
    import(&OnnxFile::from_path(path)?)
}
