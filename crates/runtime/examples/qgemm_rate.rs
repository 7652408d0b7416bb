//! Integer-product throughput of `kiln_rt_qgemm` on this machine, one thread: prints GMAC/s
//! for a few shapes (`cargo run --release -p kiln-runtime --example qgemm_rate`).

use std::time::Instant;

use kiln_runtime::qgemm::{QBias, Qgemm};

fn main() {
    for (m, n, k) in [(128, 256, 256), (128, 1024, 256), (6, 1024, 256), (1024, 1024, 256), (128, 256, 1024), (3136, 64, 32), (784, 128, 512)] {
        let q = Qgemm { m, n, k, lda: k, ldb: n, ldc: n, a_signed: false, b_signed: true, a_zeros: 1, b_zeros: 0, bias: QBias::None, b_packed: false };
        let (a, b) = (vec![3u8; m * k], vec![5u8; k * n]);
        let mut c = vec![0i32; m * n];
        let runs = 50;
        q.run(&a, &b, &mut c, &[1], &[], &[]);
        let start = Instant::now();
        for _ in 0..runs {
            q.run(&a, &b, &mut c, &[1], &[], &[]);
        }
        let s = start.elapsed().as_secs_f64() / runs as f64;
        println!("{m:>5} × {n:>5} × {k:>5}: {:8.3} ms  {:6.1} GMAC/s", s * 1e3, (m * n * k) as f64 / s / 1e9);
    }
}
