//! kiln's typed tensor IR.
//!
//! A [`Graph`] holds values (each with a dtype and a shape of known or symbolic dims), nodes
//! whose [`Op`] comes from a closed enum with typed attributes, and nested regions for control
//! flow. The IR has a text form that round-trips ([`text`]), a verifier ([`verify`]) and shape
//! inference ([`infer`]).
#![deny(missing_docs)]

pub mod dim;
pub mod dot;
pub mod dtype;
pub mod echo;
pub mod extract;
pub mod graph;
pub mod infer;
pub mod mapped;
pub mod op;
pub mod tensor;
pub mod text;
pub mod types;
pub mod verify;

pub use dim::Dim;
pub use dtype::DType;
pub use graph::{Assumed, Assumption, Graph, Node, NodeId, Region, Value, ValueDef, ValueId};
pub use op::{Op, OpKind};
pub use tensor::{Tensor, TensorData};
pub use types::TensorType;
