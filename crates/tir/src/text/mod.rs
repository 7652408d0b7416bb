//! The text form of the tensor IR: a printer and a parser that round-trip.
