//! Single-thread time of 2-D max pooling: ResNet-50's (3×3, stride 2, padding 1 over 64 planes
//! of 112²) and a stride-1 and a 2×2 one.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example maxpool_bench
//! ```
//!
//! Prints each case's best time over the runs per instruction set (wall clock; other
//! processes inflate it).

use std::time::{Duration, Instant};

use kiln_runtime::gemm::Isa;
use kiln_runtime::maxpool::MaxPool2d;
use kiln_runtime::window::Window;

fn main() {
    let runs = 50;
    // (planes, extent, window, stride, padding)
    let cases = [(64, 112, 3, 2, 1), (64, 56, 3, 1, 1), (128, 28, 2, 2, 0)];
    for isa in Isa::runnable() {
        println!("{isa:?}");
        for (planes, hw, k, s, p) in cases {
            let o = (hw + 2 * p - k) / s + 1;
            let m = MaxPool2d { planes, win: Window { h: hw, w: hw, oh: o, ow: o, kh: k, kw: k, sh: s, sw: s, ph: p, pw: p, dh: 1, dw: 1 } };
            let x: Vec<f32> = (0..m.x_len()).map(|i| ((i * 7919) % 101) as f32).collect();
            let mut y = vec![0.0f32; m.y_len()];
            let mut best = Duration::MAX;
            for _ in 0..runs {
                let t = Instant::now();
                m.run_with(isa, &x, &mut y);
                best = best.min(t.elapsed());
            }
            println!("  {planes:3} × {hw:3}², {k}×{k} stride {s}: {:8.1} µs", best.as_secs_f64() * 1e6);
            // The same planes blocked (NCHW16c), 16 per vector.
            if isa == Isa::Avx512 && planes % 16 == 0 {
                let mut best = Duration::MAX;
                for _ in 0..runs {
                    let t = Instant::now();
                    // SAFETY: `x` and `y` hold `planes` planes of the window's input and output.
                    unsafe { kiln_runtime::nchwc::maxpool::run(isa, planes / 16, &m.win, x.as_ptr(), y.as_mut_ptr()) };
                    best = best.min(t.elapsed());
                }
                println!("  {planes:3} × {hw:3}², {k}×{k} stride {s}: {:8.1} µs blocked", best.as_secs_f64() * 1e6);
            }
        }
    }
}
