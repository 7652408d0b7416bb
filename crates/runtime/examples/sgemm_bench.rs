//! Single-thread sgemm throughput: kiln's kernels against the `matrixmultiply` and `gemm` crates.
//!
//! ```text
//! cargo run --release -p kiln-runtime --features bench-peers --example sgemm_bench [M,N,K[,TA,TB]]...
//! ```
//!
//! Prints GFLOP/s (2·m·n·k per call, the best of the timed calls in thread CPU time) for each shape: the squares,
//! ResNet-50's convolutions as im2col products (`m` = output channels, `n` = output pixels, `k` =
//! input channels × taps), BERT-mini's projections and attention, the MLP's GEMV, and then the
//! total over all 53 of ResNet-50's convolutions. Arguments replace the shape list (and skip the
//! total). `KILN_ISA=avx2|portable` and `KILN_BLOCKING=KC,NC` select kiln's
//! kernel and blocking, `KILN_ONLY=1` skips the peers (for tuning), and `KILN_PACKED=1` packs
//! `B` ahead for the detected kernel and times kiln's product on the packed panels, as a
//! model's constant weights run.

use std::time::{Duration, Instant};

use kiln_runtime::gemm::{Blocking, Isa, PackedLayout, Sgemm, Transpose};

/// One product: `op(A)` is `m×k`, `op(B)` is `k×n`, all row-major and tight.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
}

const fn s(name: &'static str, m: usize, n: usize, k: usize) -> Shape {
    Shape { name, m, n, k, trans_a: false, trans_b: false }
}

const SHAPES: &[Shape] = &[
    s("square", 64, 64, 64),
    s("square", 256, 256, 256),
    s("square", 1024, 1024, 1024),
    s("resnet conv1 7x7", 64, 12544, 147),
    s("resnet l1 3x3", 64, 3136, 576),
    s("resnet l1 1x1 up", 256, 3136, 64),
    s("resnet l1 1x1 down", 64, 3136, 256),
    s("resnet l2 3x3", 128, 784, 1152),
    s("resnet (brief) ", 512, 784, 1152),
    s("resnet l3 3x3", 256, 196, 2304),
    s("resnet l4 3x3", 512, 49, 4608),
    s("resnet l4 1x1 up", 2048, 49, 512),
    s("bert qkv proj", 128, 256, 256),
    s("bert ffn up", 128, 1024, 256),
    Shape { name: "bert q·kᵀ", m: 128, n: 128, k: 64, trans_a: false, trans_b: true },
    Shape { name: "mlp gemv (Wᵀ)", m: 1, n: 1024, k: 784, trans_a: false, trans_b: true },
    s("mlp gemv (W)", 1, 1024, 784),
];

/// All 53 convolutions of ResNet-50 at 224 × 224 as im2col products: (m, n, k, how many).
const RESNET50: &[(usize, usize, usize, usize)] = &[
    (64, 12544, 147, 1),
    (64, 3136, 64, 1),
    (64, 3136, 576, 3),
    (256, 3136, 64, 4),
    (64, 3136, 256, 2),
    (128, 3136, 256, 1),
    (128, 784, 1152, 4),
    (512, 784, 128, 4),
    (512, 784, 256, 1),
    (128, 784, 512, 3),
    (256, 784, 512, 1),
    (256, 196, 2304, 6),
    (1024, 196, 256, 6),
    (1024, 196, 512, 1),
    (256, 196, 1024, 5),
    (512, 196, 1024, 1),
    (512, 49, 4608, 3),
    (2048, 49, 512, 3),
    (2048, 49, 1024, 1),
    (512, 49, 2048, 2),
];

fn data(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// This thread's CPU time in seconds: unlike wall time, not inflated while other processes
/// (builds, on a shared machine) hold the core.
fn cpu_time() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Best CPU seconds per call of `f`, over at least 0.25 s and 3 calls after a warm-up call.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let (start, mut best, mut calls) = (Instant::now(), f64::INFINITY, 0);
    while calls < 3 || start.elapsed() < Duration::from_millis(250) {
        let t = cpu_time();
        f();
        let dt = cpu_time() - t;
        // (A thread moved between cores has been seen to read a zero difference.)
        if dt > 0.0 {
            best = best.min(dt);
        }
        calls += 1;
    }
    best
}

fn parse_shape(arg: &str) -> Shape {
    let v: Vec<usize> = arg.split(',').map(|x| x.parse().expect("M,N,K[,TA,TB]")).collect();
    Shape { name: "arg", m: v[0], n: v[1], k: v[2], trans_a: v.get(3).is_some_and(|&t| t != 0), trans_b: v.get(4).is_some_and(|&t| t != 0) }
}

fn main() {
    let isa = Isa::from_env("KILN_ISA");
    let blocking = std::env::var("KILN_BLOCKING").ok().map_or(isa.blocking(), |v| {
        let v: Vec<usize> = v.split(',').map(|x| x.parse().expect("KC,NC")).collect();
        Blocking { kc: v[0], nc: v[1] }
    });
    let args: Vec<Shape> = std::env::args().skip(1).map(|a| parse_shape(&a)).collect();
    let whole_list = args.is_empty();
    let shapes = if whole_list { SHAPES.to_vec() } else { args };
    println!("kiln: {isa:?} {blocking:?}");
    println!("{:<20} {:>5} {:>6} {:>5} {:>3}  {:>8} {:>8} {:>8}   GFLOP/s", "shape", "m", "n", "k", "t", "kiln", "mm 0.3", "gemm");
    for &sh in &shapes {
        let [kiln, mm, gm] = measure(sh, isa, blocking);
        let flops = 2.0 * (sh.m * sh.n * sh.k) as f64 / 1e9;
        let t = format!("{}{}", if sh.trans_a { "T" } else { "N" }, if sh.trans_b { "T" } else { "N" });
        println!("{:<20} {:>5} {:>6} {:>5} {:>3}  {:>8.1} {:>8.1} {:>8.1}", sh.name, sh.m, sh.n, sh.k, t, flops / kiln, flops / mm, flops / gm);
    }
    if whole_list {
        // The whole network's convolutions: total time, and GFLOP/s over it.
        let (mut flops, mut total) = (0.0, [0.0; 3]);
        for &(m, n, k, count) in RESNET50 {
            let times = measure(s("", m, n, k), isa, blocking);
            flops += count as f64 * 2.0 * (m * n * k) as f64 / 1e9;
            for (sum, t) in total.iter_mut().zip(times) {
                *sum += count as f64 * t;
            }
        }
        println!("{:<20} {:>24}  {:>8.1} {:>8.1} {:>8.1}   ({:.2} GFLOP in {:.1} / {:.1} / {:.1} ms)", "resnet50 53 convs", "", flops / total[0], flops / total[1], flops / total[2], flops, 1e3 * total[0], 1e3 * total[1], 1e3 * total[2]);
    }
}

/// Seconds per call of kiln, `matrixmultiply` and `gemm` on `sh` (NaN for skipped peers).
fn measure(sh: Shape, isa: Isa, blocking: Blocking) -> [f64; 3] {
    let tr = |t: bool| if t { Transpose::Yes } else { Transpose::No };
    let g = Sgemm {
        m: sh.m,
        n: sh.n,
        k: sh.k,
        lda: if sh.trans_a { sh.m } else { sh.k },
        ldb: if sh.trans_b { sh.k } else { sh.n },
        ldc: sh.n,
        trans_a: tr(sh.trans_a),
        trans_b: tr(sh.trans_b),
        alpha: 1.0,
        beta: 0.0,
    };
    let (a, b) = (data(g.a_len(), 1), data(g.b_len(), 2));
    let mut c = vec![0f32; g.c_len()];
    // Strides of op(A), op(B) and C as (row, column).
    let (ars, acs) = if sh.trans_a { (1, g.lda as isize) } else { (g.lda as isize, 1) };
    let (brs, bcs) = if sh.trans_b { (1, g.ldb as isize) } else { (g.ldb as isize, 1) };
    let kiln = if std::env::var_os("KILN_PACKED").is_some() {
        // B packed ahead, as a model's constant weights are, for the detected kernel.
        let layout = PackedLayout::detected();
        let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut packed = vec![0u8; 4 * layout.len(g.k, g.n)];
        layout.pack(&bytes, g.k, g.n, g.ldb, g.trans_b, &mut packed);
        let packed: Vec<f32> = packed.chunks_exact(4).map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]])).collect();
        let copies: usize = std::env::var("KILN_PACKED").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
        let copies = vec![packed; copies];
        let mut turn = 0;
        time(|| {
            turn = (turn + 1) % copies.len();
            g.run_packed(&a, &copies[turn], layout, &mut c)
        })
    } else {
        time(|| g.run_with(isa, blocking, &a, &b, &mut c))
    };
    if std::env::var_os("KILN_ONLY").is_some() {
        return [kiln, f64::NAN, f64::NAN];
    }
    let mm = time(|| unsafe {
        // SAFETY: the vectors hold the strided matrices.
        matrixmultiply::sgemm(sh.m, sh.k, sh.n, 1.0, a.as_ptr(), ars, acs, b.as_ptr(), brs, bcs, 0.0, c.as_mut_ptr(), sh.n as isize, 1);
    });
    let gm = time(|| unsafe {
        // SAFETY: as above. gemm computes dst = alpha·dst + beta·lhs·rhs.
        gemm::gemm(sh.m, sh.n, sh.k, c.as_mut_ptr(), 1, sh.n as isize, false, a.as_ptr(), acs, ars, b.as_ptr(), bcs, brs, 0.0, 1.0, false, false, false, gemm::Parallelism::None);
    });
    [kiln, mm, gm]
}
