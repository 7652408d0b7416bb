//! Integer-product throughput of `kiln_rt_qgemm` on this machine, one thread: GMAC/s for a
//! few shapes with `i32` results, then the time per output of 1×1 convolutions' shapes
//! (`m` output channels, `n` pixels, `k` input channels) requantized to `i8` with a scale per
//! row, as QLinearConv runs them (`cargo run --release -p kiln-runtime --example qgemm_rate`).

use std::time::Instant;

use kiln_runtime::qgemm::{QBias, QScale, Qgemm, Requant};

/// Seconds per call of `f`, the best of five batches.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let runs = 50;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..runs {
                f();
            }
            start.elapsed().as_secs_f64() / runs as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    for (m, n, k) in [(128, 256, 256), (128, 1024, 256), (6, 1024, 256), (1024, 1024, 256), (128, 256, 1024), (3136, 64, 32), (784, 128, 512)] {
        let q = Qgemm { m, n, k, lda: k, ldb: n, ldc: n, a_signed: false, b_signed: true, a_zeros: 1, b_zeros: 0, bias: QBias::None, b_packed: false };
        let (a, b) = (vec![3u8; m * k], vec![5u8; k * n]);
        let mut c = vec![0i32; m * n];
        let s = time(|| q.run(&a, &b, &mut c, &[1], &[], &[]));
        println!("{m:>5} × {n:>5} × {k:>5}: {:8.3} ms  {:6.1} GMAC/s", s * 1e3, (m * n * k) as f64 / s / 1e9);
    }
    println!("requantized, i8 weights (a zero point per row) × i8 activations, scale per row:");
    for (m, n, k) in [(96, 12544, 16), (96, 1024, 16), (16, 12544, 32), (144, 3136, 24), (24, 3136, 144), (192, 784, 32), (64, 784, 384)] {
        let q = Qgemm { m, n, k, lda: k, ldb: n, ldc: n, a_signed: true, b_signed: true, a_zeros: m, b_zeros: 1, bias: QBias::PerRow, b_packed: false };
        let a: Vec<u8> = (0..m * k).map(|i| (i * 37 % 255) as u8).collect();
        let b: Vec<u8> = (0..k * n).map(|i| (i * 11 % 253) as u8).collect();
        let (za, zb) = (vec![0u8; m], vec![0x80u8]);
        let bias: Vec<i32> = (0..m as i32).map(|i| i * 100 - 3000).collect();
        let scales: Vec<f32> = (0..m).map(|i| 1.0 / (700.0 + 13.0 * i as f32)).collect();
        let r = Requant { scales: QScale::PerRow, zero: -5, signed: true };
        let mut y = vec![0u8; m * n];
        let s = time(|| q.run_requantized(&a, &b, &mut y, &za, &zb, &bias, &scales, &r));
        println!("{m:>5} × {n:>5} × {k:>5}: {:8.3} ms  {:6.3} ns per output", s * 1e3, s * 1e9 / (m * n) as f64);
    }
}
