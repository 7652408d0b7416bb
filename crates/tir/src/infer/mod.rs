//! Type and shape inference for every op, with symbolic dims carried through.
