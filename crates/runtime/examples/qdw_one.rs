use std::time::Instant;
use kiln_runtime::gemm::Isa;
use kiln_runtime::qdwconv::QDwConv2d;
use kiln_runtime::window::Window;
fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|v| v.parse().unwrap()).collect();
    let (c, hw, s, iters) = (a[0], a[1], a[2], a[3]);
    let o = (hw + 2 - 3) / s + 1;
    let q = QDwConv2d { planes: c, channels: c, win: Window { h: hw, w: hw, oh: o, ow: o, kh: 3, kw: 3, sh: s, sw: s, ph: 1, pw: 1, dh: 1, dw: 1 }, x_signed: true, x_zero: -3, bias: true, zero: 5, y_signed: true };
    let (ex, ew, ec, ey) = q.extents();
    let x: Vec<u8> = (0..ex).map(|i| (i * 37 % 251) as u8).collect();
    let w: Vec<f32> = (0..ew).map(|i| (i * 13 % 255) as f32 - 127.0).collect();
    let bias: Vec<i32> = (0..ec as i32).map(|i| i * 31 - 500).collect();
    let scales: Vec<f32> = (0..ec).map(|i| 1.0 / (3000.0 + i as f32)).collect();
    let mut y = vec![0u8; ey];
    let t = Instant::now();
    for _ in 0..iters { q.run_with(Isa::Avx512, &x, &w, &bias, &scales, &mut y); }
    let e = t.elapsed().as_secs_f64() / iters as f64;
    println!("{c} x {hw}^2 s{s}: {:.1} us {:.3} ns/output", e * 1e6, e * 1e9 / ey as f64);
}
