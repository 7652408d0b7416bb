//! The fused convolution against `im2col`, `sgemm` and `epilogue` run one after another, on
//! ResNet-50's 53 convolutions, one thread.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example conv_bench
//! KILN_BENCH_ISA=avx2 cargo run --release -p kiln-runtime --example conv_bench
//! ```
//!
//! Each pass runs every layer in network order on its own buffers (so caches hold what they
//! would in a model run, not one layer's operands), both ways; the table gives each distinct
//! layer's best time over the passes (wall clock; other processes inflate it), times its
//! repeats, and the totals.

use std::time::{Duration, Instant};

use kiln_runtime::conv::Conv2d;
use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
use kiln_runtime::gemm::{Isa, Sgemm, Transpose};
use kiln_runtime::im2col::Im2col;
use kiln_runtime::window::Window;

/// (input channels, output channels, input side, kernel, stride, padding, repeats, residual).
type Layer = (usize, usize, usize, usize, usize, usize, usize, bool);

const RESNET50: [Layer; 24] = [
    (3, 64, 224, 7, 2, 3, 1, false),
    (64, 64, 56, 1, 1, 0, 1, false),
    (256, 64, 56, 1, 1, 0, 2, false),
    (64, 64, 56, 3, 1, 1, 3, false),
    (64, 256, 56, 1, 1, 0, 3, true),
    (64, 256, 56, 1, 1, 0, 1, false),
    (256, 128, 56, 1, 1, 0, 1, false),
    (512, 128, 28, 1, 1, 0, 3, false),
    (128, 128, 56, 3, 2, 1, 1, false),
    (128, 128, 28, 3, 1, 1, 3, false),
    (128, 512, 28, 1, 1, 0, 4, true),
    (256, 512, 56, 1, 2, 0, 1, false),
    (512, 256, 28, 1, 1, 0, 1, false),
    (1024, 256, 14, 1, 1, 0, 5, false),
    (256, 256, 28, 3, 2, 1, 1, false),
    (256, 256, 14, 3, 1, 1, 5, false),
    (256, 1024, 14, 1, 1, 0, 6, true),
    (512, 1024, 28, 1, 2, 0, 1, false),
    (1024, 512, 14, 1, 1, 0, 1, false),
    (2048, 512, 7, 1, 1, 0, 2, false),
    (512, 512, 14, 3, 2, 1, 1, false),
    (512, 512, 7, 3, 1, 1, 2, false),
    (512, 2048, 7, 1, 1, 0, 3, true),
    (1024, 2048, 14, 1, 2, 0, 1, false),
];

struct Case {
    c: Conv2d,
    x: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
    z: Vec<f32>,
    y: Vec<f32>,
    col: Vec<f32>,
}

impl Case {
    fn fused(&mut self, isa: Isa) {
        self.c.run_with(isa, &self.x, &self.w, &self.b, &self.z, &mut self.y);
    }

    fn three_steps(&mut self) {
        let c = &self.c;
        let g = Im2col { channels: c.channels, win: c.win };
        let (k, p) = (c.channels * c.win.kh * c.win.kw, c.win.oh * c.win.ow);
        let pointwise = c.win.kh == 1 && c.win.sh == 1;
        if !pointwise {
            g.run(&self.x, &mut self.col);
        }
        let b = if pointwise { &self.x } else { &self.col };
        Sgemm { m: c.out_channels, n: p, k, lda: k, ldb: p, ldc: p, trans_a: Transpose::No, trans_b: Transpose::No, alpha: 1.0, beta: 0.0 }.run(&self.w, b, &mut self.y);
        Epilogue { rows: c.out_channels, cols: p, bias: Bias::PerRow { period: c.out_channels }, residual: c.residual, act: c.act }.run(&mut self.y, &self.b, &self.z);
    }
}

fn main() {
    let passes = 15;
    // KILN_BENCH_ISA=avx2|portable runs the fused routine with that instruction set's kernels.
    let isa = Isa::from_env("KILN_BENCH_ISA");
    assert!(isa.available(), "this CPU cannot run {isa:?}");
    println!("fused: {isa:?}");
    let mut cases: Vec<(Layer, Vec<Case>)> = RESNET50
        .iter()
        .map(|&l| {
            let (ci, co, side, k, s, p, repeats, residual) = l;
            let o = (side + 2 * p - k) / s + 1;
            let c = Conv2d { batch: 1, channels: ci, out_channels: co, groups: 1, win: Window { h: side, w: side, oh: o, ow: o, kh: k, kw: k, sh: s, sw: s, ph: p, pw: p, dh: 1, dw: 1 }, bias: true, residual, act: Activation::Relu };
            let fill = |n: usize, m: usize| (0..n).map(|i| ((i * m) % 17) as f32 / 17.0 - 0.5).collect::<Vec<f32>>();
            let cases = (0..repeats)
                .map(|_| Case { c, x: fill(c.x_len(), 3), w: fill(c.w_len(), 5), b: fill(co, 7), z: fill(c.z_len(), 11), y: vec![0.0; c.y_len()], col: vec![0.0; ci * k * k * o * o] })
                .collect();
            (l, cases)
        })
        .collect();
    let mut best = vec![[Duration::MAX; 2]; cases.len()];
    for _ in 0..passes {
        for fused in [false, true] {
            for ((_, layer), best) in cases.iter_mut().zip(&mut best) {
                let mut sum = Duration::ZERO;
                for case in layer.iter_mut() {
                    let t = Instant::now();
                    if fused { case.fused(isa) } else { case.three_steps() }
                    sum += t.elapsed();
                }
                let b = &mut best[usize::from(fused)];
                *b = (*b).min(sum);
            }
        }
    }
    println!("{:>5} {:>5} {:>5} {:>2} {:>2} {:>3}  {:>10} {:>10} {:>6}", "cin", "cout", "side", "k", "s", "×", "3-step µs", "fused µs", "ratio");
    let mut total = [Duration::ZERO; 2];
    for (((ci, co, side, k, s, _, repeats, _), _), b) in cases.iter().zip(&best) {
        println!("{ci:5} {co:5} {side:5} {k:2} {s:2} {repeats:3}  {:10.1} {:10.1} {:6.2}", b[0].as_secs_f64() * 1e6, b[1].as_secs_f64() * 1e6, b[1].as_secs_f64() / b[0].as_secs_f64());
        total[0] += b[0];
        total[1] += b[1];
    }
    println!("all 53 convolutions: three steps {:.2} ms, fused {:.2} ms ({:.2}×)", total[0].as_secs_f64() * 1e3, total[1].as_secs_f64() * 1e3, total[1].as_secs_f64() / total[0].as_secs_f64());
}
