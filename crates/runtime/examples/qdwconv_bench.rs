//! Single-thread quantized depthwise convolution time (`i8` in and out, 3×3, padding 1) on
//! MobileNet-V2's depthwise layers, per instruction set: with AVX-512 the bytes are convolved
//! in place, otherwise through `f32` planes.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example qdwconv_bench [C,HW,S]...
//! ```

use std::time::{Duration, Instant};

use kiln_runtime::gemm::Isa;
use kiln_runtime::qdwconv::QDwConv2d;
use kiln_runtime::window::Window;

/// (channels, input extent, stride) of each distinct layer.
const LAYERS: [(usize, usize, usize); 9] = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1), (576, 14, 2), (960, 7, 1)];

fn main() {
    let args: Vec<(usize, usize, usize)> = std::env::args()
        .skip(1)
        .map(|a| match a.split(',').map(|v| v.parse::<usize>()).collect::<Result<Vec<_>, _>>().as_deref() {
            Ok(&[c, hw, s]) if hw > 0 && s > 0 => (c, hw, s),
            _ => panic!("layers are C,HW,S, not {a}"),
        })
        .collect();
    let layers = if args.is_empty() { LAYERS.to_vec() } else { args };
    for isa in Isa::runnable() {
        println!("{isa:?}");
        let mut total = Duration::ZERO;
        for &(c, hw, s) in &layers {
            let o = (hw + 2 - 3) / s + 1;
            let q = QDwConv2d { planes: c, channels: c, win: Window { h: hw, w: hw, oh: o, ow: o, kh: 3, kw: 3, sh: s, sw: s, ph: 1, pw: 1, dh: 1, dw: 1 }, x_signed: true, x_zero: -3, bias: true, zero: 5, y_signed: true };
            let (ex, ew, ec, ey) = q.extents();
            let x: Vec<u8> = (0..ex).map(|i| (i * 37 % 251) as u8).collect();
            let w: Vec<f32> = (0..ew).map(|i| (i * 13 % 255) as f32 - 127.0).collect();
            let bias: Vec<i32> = (0..ec as i32).map(|i| i * 31 - 500).collect();
            let scales: Vec<f32> = (0..ec).map(|i| 1.0 / (3000.0 + i as f32)).collect();
            let mut y = vec![0u8; ey];
            let mut best = Duration::MAX;
            for _ in 0..200 {
                let t = Instant::now();
                q.run_with(isa, &x, &w, &bias, &scales, &mut y);
                best = best.min(t.elapsed());
            }
            println!("  {c:4} × {hw:3}² stride {s}: {:8.1} µs  {:6.3} ns per output", best.as_secs_f64() * 1e6, best.as_secs_f64() * 1e9 / ey as f64);
            total += best;
        }
        println!("  all: {:.3} ms", total.as_secs_f64() * 1e3);
    }
}
