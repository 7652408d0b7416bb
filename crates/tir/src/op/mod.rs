//! The closed set of tensor-IR operations.

mod attr;
#[macro_use]
mod define;
mod table;

pub use attr::*;
pub use define::AttrError;
pub use table::*;
