//! The pool's fork–join overhead: `for_each` over one task per thread, each task a few
//! microseconds of arithmetic, against the same work on one thread; then the same split after
//! the caller has worked alone for a while (the workers polling, or asleep), and after the
//! caller has slept (the whole process idle, as a service between requests).
//!
//! ```text
//! cargo run --release -p kiln-runtime --example pool_bench
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use kiln_runtime::pool::{self, Pool};

/// About `n` dependent multiply–adds.
fn work(n: usize) -> f64 {
    let mut x = 1.0f64;
    for _ in 0..n {
        x = black_box(x * 1.000_000_1 + 1e-9);
    }
    x
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median µs of `runs` times two tasks' work on this thread alone.
fn serial_us(n: usize, runs: usize) -> f64 {
    median((0..runs).map(|_| {
        let t = Instant::now();
        black_box(work(n));
        black_box(work(n));
        t.elapsed().as_secs_f64() * 1e6
    }).collect())
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    let pool = Pool::new(2).expect("threads");
    println!("| work per task | one thread µs | two threads µs | speed-up |");
    println!("|---|---|---|---|");
    for n in [1_000usize, 4_000, 16_000, 64_000] {
        let serial = serial_us(n, 2000);
        let split = pool.enter(|| median((0..2000).map(|_| {
            let t = Instant::now();
            pool::for_each(2, &|_| {
                black_box(work(n));
            });
            t.elapsed().as_secs_f64() * 1e6
        }).collect()));
        println!("| {n} madds | {serial:.2} | {split:.2} | {:.2} |", serial / split);
    }
    println!();
    println!("| caller alone before the split µs | two tasks of 4000 madds µs (median) | p90 |");
    println!("|---|---|---|");
    for gap in [0u64, 150, 300, 900, 1200, 3000] {
        let mut times: Vec<f64> = pool.enter(|| (0..500).map(|_| {
            spin(Duration::from_micros(gap));
            let t = Instant::now();
            pool::for_each(2, &|_| {
                black_box(work(4000));
            });
            t.elapsed().as_secs_f64() * 1e6
        }).collect());
        times.sort_by(f64::total_cmp);
        println!("| {gap} | {:.2} | {:.2} |", times[times.len() / 2], times[times.len() * 9 / 10]);
    }
    println!();
    println!("| after the caller slept 20 ms: two tasks of | one thread µs | two threads µs (median) | p90 |");
    println!("|---|---|---|---|");
    for n in [16_000usize, 64_000] {
        let serial = serial_us(n, 200);
        let mut times: Vec<f64> = pool.enter(|| (0..100).map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            pool::for_each(2, &|_| {
                black_box(work(n));
            });
            t.elapsed().as_secs_f64() * 1e6
        }).collect());
        times.sort_by(f64::total_cmp);
        println!("| {n} madds | {serial:.1} | {:.1} | {:.1} |", times[times.len() / 2], times[times.len() * 9 / 10]);
    }
}
