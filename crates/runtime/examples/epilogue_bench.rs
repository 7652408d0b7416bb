//! Single-thread time of the fused ops' epilogue (`kiln_rt_epilogue`) per activation and
//! instruction set, on MobileNet-V2's largest convolution output (a bias per row) and
//! BERT-mini's FFN product (a bias per column).
//!
//! ```text
//! cargo run --release -p kiln-runtime --example epilogue_bench
//! ```
//!
//! Prints each case's best time over the runs (wall clock; other processes inflate it) and
//! the elements per nanosecond.

use std::time::{Duration, Instant};

use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
use kiln_runtime::gemm::Isa;

fn main() {
    let runs = 50;
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::HardSwish,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Gelu,
        Activation::GeluTanh,
    ];
    // (what, rows, cols, bias, residual)
    let shapes = [
        ("mobilenet 32×112², bias per row", 32, 112 * 112, Bias::PerRow { period: 32 }, false),
        ("mobilenet 24×56², bias per row + z", 24, 56 * 56, Bias::PerRow { period: 24 }, true),
        ("bert FFN 128×1024, bias per column", 128, 1024, Bias::PerColumn, false),
    ];
    for isa in Isa::runnable() {
        println!("{isa:?}");
        for &(what, rows, cols, bias, residual) in &shapes {
            println!("  {what}");
            for act in acts {
                let e = Epilogue { rows, cols, bias, residual, act };
                let y0: Vec<f32> = (0..e.y_len()).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();
                let b: Vec<f32> = (0..e.bias_len()).map(|i| (i % 5) as f32 * 0.1).collect();
                let z: Vec<f32> = (0..e.z_len()).map(|i| (i % 7) as f32 * 0.125).collect();
                let mut y = y0.clone();
                let mut best = Duration::MAX;
                for _ in 0..runs {
                    y.copy_from_slice(&y0);
                    let t = Instant::now();
                    e.run_with(isa, &mut y, &b, &z);
                    best = best.min(t.elapsed());
                }
                println!("    {:12} {:8.1} µs  {:6.2} elements/ns", format!("{act:?}").split([' ', '{']).next().unwrap_or(""), best.as_secs_f64() * 1e6, e.y_len() as f64 / best.as_secs_f64() / 1e9);
            }
        }
    }
}
