//! Timing of the heaviest kernels at benchmark-model sizes (run with `--ignored --nocapture`).

mod common;

use common::*;
use kiln_tir::op::{Conv, Op};

#[test]
#[ignore]
fn resnet_sized_conv() {
    let x = f32t(&[1, 64, 56, 56], &noise(64 * 56 * 56, 1));
    let w = f32t(&[64, 64, 3, 3], &noise(64 * 64 * 9, 2));
    let op = Op::Conv(Conv { pads: vec![1, 1, 1, 1], ..Conv::default() });
    let t = std::time::Instant::now();
    let y = run(op, &[&x, &w]);
    let secs = t.elapsed().as_secs_f64();
    let gflop = 2.0 * 64.0 * 64.0 * 9.0 * 56.0 * 56.0 / 1e9;
    println!("conv 64x56x56 3x3: {secs:.3}s, {:.2} GFLOP/s, shape {:?}", gflop / secs, y.shape);
}

#[test]
#[ignore]
fn wide_conv() {
    let x = f32t(&[1, 64, 56, 56], &noise(64 * 56 * 56, 1));
    let w = f32t(&[256, 64, 3, 3], &noise(256 * 64 * 9, 2));
    let op = Op::Conv(Conv { pads: vec![1, 1, 1, 1], ..Conv::default() });
    let t = std::time::Instant::now();
    run(op, &[&x, &w]);
    let secs = t.elapsed().as_secs_f64();
    let gflop = 2.0 * 256.0 * 64.0 * 9.0 * 56.0 * 56.0 / 1e9;
    println!("conv 64->256 x56x56 3x3: {secs:.3}s, {:.2} GFLOP/s", gflop / secs);
}

#[test]
#[ignore]
fn elementwise_overhead() {
    use kiln_tir::op::Relu;
    let n = 64 * 112 * 112;
    let x = f32t(&[1, 64, 112, 112], &noise(n, 1));
    let t = std::time::Instant::now();
    run(Op::Relu(Relu {}), &[&x]);
    let secs = t.elapsed().as_secs_f64();
    println!("relu over {n} f32: {secs:.3}s, {:.1} ns/element", secs * 1e9 / n as f64);
}
