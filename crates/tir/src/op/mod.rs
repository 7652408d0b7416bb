//! The closed set of tensor-IR operations.

mod attr;
#[macro_use]
mod define;
mod pads;
mod table;

pub use attr::*;
pub use define::AttrError;
pub use pads::{PadsError, WindowAxis, window_pads};
pub use table::*;
