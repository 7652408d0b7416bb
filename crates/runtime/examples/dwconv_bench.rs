//! Single-thread depthwise convolution time on MobileNet-V2's 17 depthwise layers (3×3,
//! padding 1, 224×224 input), per instruction set.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example dwconv_bench [C,HW,S]...
//! ```
//!
//! Arguments replace the layers: `C` channels of `HW × HW` planes, stride `S`.
//!
//! Prints each layer's best time over the runs (wall clock; other processes inflate it) and
//! GFLOP/s = 2·multiply-adds / time, then the total.

use std::time::{Duration, Instant};

use kiln_runtime::dwconv::DwConv2d;
use kiln_runtime::gemm::Isa;
use kiln_runtime::window::Window;

/// (channels, input extent, stride, repeats) of each distinct layer.
const LAYERS: [(usize, usize, usize, usize); 10] =
    [(32, 112, 1, 1), (96, 112, 2, 1), (144, 56, 1, 1), (144, 56, 2, 1), (192, 28, 1, 2), (192, 28, 2, 1), (384, 14, 1, 4), (576, 14, 1, 2), (576, 14, 2, 1), (960, 7, 1, 3)];

fn main() {
    let args: Vec<(usize, usize, usize, usize)> = std::env::args()
        .skip(1)
        .map(|a| match a.split(',').map(|v| v.parse::<usize>()).collect::<Result<Vec<_>, _>>().as_deref() {
            Ok(&[c, hw, s]) if hw > 0 && s > 0 => (c, hw, s, 1),
            _ => panic!("layers are C,HW,S, not {a}"),
        })
        .collect();
    let layers = if args.is_empty() { LAYERS.to_vec() } else { args };
    let runs = 200;
    for isa in Isa::runnable() {
        println!("{isa:?}");
        let (mut total, mut macs_total) = (Duration::ZERO, 0usize);
        for &(c, hw, s, repeats) in &layers {
            let o = (hw + 2 - 3) / s + 1;
            let d = DwConv2d { planes: c, channels: c, win: Window { h: hw, w: hw, oh: o, ow: o, kh: 3, kw: 3, sh: s, sw: s, ph: 1, pw: 1, dh: 1, dw: 1 }, accumulate: true };
            let x: Vec<f32> = (0..d.x_len()).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
            let w: Vec<f32> = (0..d.w_len()).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
            let mut y = vec![0.0f32; d.y_len()];
            let mut best = Duration::MAX;
            for _ in 0..runs {
                let t = Instant::now();
                d.run_with(isa, &x, &w, &mut y);
                best = best.min(t.elapsed());
            }
            let macs = c * o * o * 9;
            println!("  {c:4} × {hw:3}² stride {s} ×{repeats}: {:8.1} µs  {:6.1} GFLOP/s", best.as_secs_f64() * 1e6, 2.0 * macs as f64 / best.as_secs_f64() / 1e9);
            total += best * repeats as u32;
            macs_total += macs * repeats;
        }
        println!("  all {} layers ({:.1} M multiply-adds): {:.3} ms", layers.iter().map(|l| l.3).sum::<usize>(), macs_total as f64 / 1e6, total.as_secs_f64() * 1e3);
    }
}
