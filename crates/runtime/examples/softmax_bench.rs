//! Single-thread time of the row softmax (`kiln_rt_softmax`) per instruction set, on attention
//! scores: a buffer used again and again (in cache), and four buffers in turn (as after the
//! product of each head, when the scores have left L2).
//!
//! ```text
//! cargo run --release -p kiln-runtime --example softmax_bench
//! ```
//!
//! Prints each case's best time over the runs (wall clock) and the elements per nanosecond.

use std::time::{Duration, Instant};

use kiln_runtime::gemm::Isa;
use kiln_runtime::softmax::Softmax;

fn main() {
    let runs = 200;
    // (what, rows, cols)
    let shapes = [("audio_encoder head 500×500", 500, 500), ("bert_mini head 128×128", 128, 128), ("llama_tiny vocab row 1×8192", 1, 8192)];
    for isa in Isa::runnable() {
        println!("{isa:?}");
        for &(what, rows, cols) in &shapes {
            let s = Softmax { rows, cols };
            for buffers in [1usize, 4] {
                let mut xs: Vec<Vec<f32>> = (0..buffers).map(|b| (0..rows * cols).map(|i| ((i * 7 + b) % 113) as f32 * 0.1 - 5.0).collect()).collect();
                let mut best = Duration::MAX;
                for r in 0..runs {
                    let x = &mut xs[r % buffers];
                    // Scores as a product leaves them (a softmax of a softmax stays finite).
                    let t = Instant::now();
                    s.run_with(isa, x);
                    best = best.min(t.elapsed());
                }
                let ns = best.as_secs_f64() * 1e9;
                println!("  {what:<30} {buffers} buffer(s): {:>8.1} µs  {:.2} elements/ns", ns / 1e3, (rows * cols) as f64 / ns);
            }
        }
    }
}
