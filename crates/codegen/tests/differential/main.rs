//! Differential tests: every loop-IR construct runs through the interpreter (the oracle) and
//! the JIT on identical memory, and the two must agree bit for bit (see `harness`).

mod api;
mod arith;
mod calls;
mod casts;
mod control;
mod harness;
mod memory;
mod narrow;
mod parallel;
mod vector;
