//! Single-thread im2col time on ResNet-50's convolutions that need one (every 3×3 and 7×7,
//! and the strided 1×1 projections).
//!
//! ```text
//! cargo run --release -p kiln-runtime --example im2col_bench
//! ```
//!
//! Prints each layer's best time over the runs (wall clock; other processes inflate it) and
//! the column matrix's size over that time, then the total over the network.

use std::time::{Duration, Instant};

use kiln_runtime::im2col::Im2col;
use kiln_runtime::window::Window;

/// (channels, input extent, kernel, stride, padding, repeats) of each distinct layer.
const LAYERS: [(usize, usize, usize, usize, usize, usize); 10] = [
    (3, 224, 7, 2, 3, 1),
    (64, 56, 3, 1, 1, 3),
    (128, 56, 3, 2, 1, 1),
    (128, 28, 3, 1, 1, 3),
    (256, 28, 3, 2, 1, 1),
    (256, 14, 3, 1, 1, 5),
    (512, 14, 3, 2, 1, 1),
    (512, 7, 3, 1, 1, 2),
    (256, 56, 1, 2, 0, 1),
    (512, 28, 1, 2, 0, 1),
];

fn main() {
    let runs = 50;
    let mut total = Duration::ZERO;
    for (c, hw, k, s, p, repeats) in LAYERS {
        let o = (hw + 2 * p - k) / s + 1;
        let g = Im2col { channels: c, win: Window { h: hw, w: hw, oh: o, ow: o, kh: k, kw: k, sh: s, sw: s, ph: p, pw: p, dh: 1, dw: 1 } };
        let x: Vec<f32> = (0..g.x_len()).map(|i| (i % 7) as f32).collect();
        let mut col = vec![0.0f32; g.col_len()];
        let mut best = Duration::MAX;
        for _ in 0..runs {
            let t = Instant::now();
            g.run(&x, &mut col);
            best = best.min(t.elapsed());
        }
        println!("{c:4} × {hw:3}², {k}×{k} stride {s} ×{repeats}: {:8.1} µs  {:6.1} GB/s written", best.as_secs_f64() * 1e6, 4.0 * g.col_len() as f64 / best.as_secs_f64() / 1e9);
        total += best * repeats as u32;
    }
    println!("all layers: {:.3} ms", total.as_secs_f64() * 1e3);
}
