//! One convolution timed on its own, its operands rotated through 8 copies so that they come
//! from L3 as in a model run rather than from L1: for tuning a kernel on one layer.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example conv_one -- CIN,COUT,SIDE,K,STRIDE,PAD,RESIDUAL [CALLS]
//! cargo run --release -p kiln-runtime --example conv_one -- 64,64,56,3,1,1,0 200
//! KILN_BENCH_ISA=avx2 cargo run --release -p kiln-runtime --example conv_one -- 256,64,56,1,1,0,0
//! ```
//!
//! `KILN_THREADS` splits each call over a pool of that many threads; GROUPS (default 1) makes
//! grouped and depthwise convolutions. `KILN_COPIES` sets the number of copies (40 sends the weights of a large layer to memory);
//! `KILN_ROTATE` names the operands that rotate (`xwzy` by default), the others staying put.
//! `KILN_NCHWC=1` runs the convolution on NCHW16c tensors instead (`nchwc::conv`), and with it
//! `KILN_IN_PLACE=1` sums the residual in place (the addend is the output buffer itself, as the
//! memory plan lays them out when the addend dies there).
//!
//! Prints the best call's wall-clock time and its rate (bias and ReLU fused; a residual addend
//! when RESIDUAL is 1).

use std::time::Instant;

use kiln_runtime::conv::Conv2d;
use kiln_runtime::epilogue::Activation;
use kiln_runtime::gemm::Isa;
use kiln_runtime::nchwc;
use kiln_runtime::pool::Pool;
use kiln_runtime::window::Window;

fn main() {
    let usage = "usage: conv_one CIN,COUT,SIDE,K,STRIDE,PAD,RESIDUAL[,GROUPS] [CALLS]";
    let spec: Vec<usize> = std::env::args().nth(1).expect(usage).split(',').map(|s| s.parse().expect(usage)).collect();
    let (&[ci, co, side, k, s, p, residual], groups) = (&spec[..7.min(spec.len())], spec.get(7).copied().unwrap_or(1)) else { panic!("{usage}") };
    let calls: usize = std::env::args().nth(2).map_or(200, |s| s.parse().expect(usage));
    let isa = Isa::from_env("KILN_BENCH_ISA");
    assert!(isa.available(), "this CPU cannot run {isa:?}");
    let o = (side + 2 * p - k) / s + 1;
    let win = Window { h: side, w: side, oh: o, ow: o, kh: k, kw: k, sh: s, sw: s, ph: p, pw: p, dh: 1, dw: 1 };
    let c = Conv2d { batch: 1, channels: ci, out_channels: co, groups, win, bias: true, residual: residual != 0, act: Activation::Relu };
    let fill = |n: usize, m: usize| (0..n).map(|i| ((i * m) % 17) as f32 / 17.0 - 0.5).collect::<Vec<f32>>();
    let copies: usize = std::env::var("KILN_COPIES").ok().map_or(8, |s| s.parse().expect("KILN_COPIES"));
    let xs: Vec<_> = (0..copies).map(|_| fill(c.x_len(), 3)).collect();
    let zs: Vec<_> = (0..copies).map(|_| fill(c.z_len(), 11)).collect();
    let mut ys: Vec<_> = (0..copies).map(|_| vec![0.0f32; c.y_len()]).collect();
    let ws: Vec<_> = (0..copies).map(|_| fill(c.w_len(), 5)).collect();
    let b = fill(co, 7);
    // KILN_BENCH_PACKED=1: the weights packed ahead, as a compiled model holds them.
    let width = c.packed_width(isa).filter(|_| std::env::var_os("KILN_BENCH_PACKED").is_some());
    let packed: Option<Vec<Vec<f32>>> = width.map(|width| {
        ws.iter()
            .map(|w| {
                let mut wp = vec![0.0; c.packed_len(width)];
                c.pack_weights(width, &w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut wp);
                wp
            })
            .collect()
    });
    // KILN_ROTATE: which operands go round the copies (default all: x, w, z, y); the others
    // stay in cache, to tell whose reads from memory cost the time.
    let rotate = std::env::var("KILN_ROTATE").unwrap_or_else(|_| "xwzy".into());
    // KILN_THREADS: the calls split over a pool of that many threads (default: one thread).
    let threads: usize = std::env::var("KILN_THREADS").ok().map_or(1, |s| s.parse().expect("KILN_THREADS"));
    let pool = Pool::new(threads).expect("thread pool");
    // KILN_NCHWC=1: the convolution on NCHW16c tensors (`nchwc::conv`), its operands laid
    // out blocked beforehand and its weights packed; the first copy's output is checked
    // against the NCHW routine's.
    if std::env::var_os("KILN_NCHWC").is_some() {
        assert!(nchwc::conv::supports(&c), "KILN_NCHWC takes convolutions of one group and depthwise ones");
        let pixels = o * o;
        let blocked = |v: &Vec<f32>, channels: usize, pixels: usize| {
            let mut b = vec![0.0; nchwc::blocked_len(channels, pixels)];
            nchwc::to_blocked(v, channels, pixels, &mut b);
            b
        };
        let xbs: Vec<_> = xs.iter().map(|x| blocked(x, ci, side * side)).collect();
        let zbs: Vec<_> = zs.iter().map(|z| if residual != 0 { blocked(z, co, pixels) } else { Vec::new() }).collect();
        let to_bytes = |w: &Vec<f32>| w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let wps: Vec<_> = ws.iter().map(|w| { let mut wp = vec![0.0; nchwc::conv::packed_len(&c)]; nchwc::conv::pack_weights(&c, &to_bytes(w), &mut wp); wp }).collect();
        let mut ybs: Vec<_> = (0..copies).map(|_| vec![0.0f32; nchwc::conv::y_len(&c)]).collect();
        // KILN_IN_PLACE=1: the addend is `y` itself (the output overwrites the residual, as the
        // memory plan lays them out when the addend dies there); `y` starts as a copy of it.
        let in_place = residual != 0 && std::env::var("KILN_IN_PLACE").is_ok_and(|v| v == "1");
        if in_place {
            for (y, z) in ybs.iter_mut().zip(zbs.iter().cycle()) {
                y.copy_from_slice(z);
            }
        }
        let mut times: Vec<f64> = pool.enter(|| (0..calls)
            .map(|call| {
                let at = |operand: char| if rotate.contains(operand) { call % copies } else { 0 };
                let (x, w, z) = (&xbs[at('x')], &wps[at('w')], &zbs[at('z')]);
                let y = &mut ybs[at('y')];
                let z = if in_place { y.as_ptr() } else { z.as_ptr() };
                let t = Instant::now();
                // SAFETY: the operands have the lengths the convolution reads and writes; `z`
                // may be `y`.
                unsafe { nchwc::conv::run(&c, x.as_ptr(), true, w.as_ptr(), true, b.as_ptr(), z, y.as_mut_ptr()) };
                t.elapsed().as_secs_f64()
            })
            .collect());
        if in_place {
            // The timed calls summed onto their own results: one more call from the addend.
            ybs[0].copy_from_slice(&zbs[0]);
            let y = &mut ybs[0];
            // SAFETY: as above.
            unsafe { nchwc::conv::run(&c, xbs[0].as_ptr(), true, wps[0].as_ptr(), true, b.as_ptr(), y.as_ptr(), y.as_mut_ptr()) };
        }
        c.run_with(isa, &xs[0], &ws[0], &b, &zs[0], &mut ys[0]);
        let mut got = vec![0.0; co * pixels];
        nchwc::from_blocked(&ybs[0], co, pixels, &mut got);
        let diff = got.iter().zip(&ys[0]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        times.sort_by(f64::total_cmp);
        let (best, median) = (times[0], times[calls / 2]);
        let flops = 2.0 * (co * (ci / groups) * k * k * o * o) as f64;
        println!("NCHW16c {spec:?}: best {:.1} µs ({:.1} GFLOP/s), median {:.1} µs ({:.1} GFLOP/s), largest difference from NCHW {diff:e}", best * 1e6, flops / best / 1e9, median * 1e6, flops / median / 1e9);
        return;
    }
    let mut times: Vec<f64> = pool.enter(|| (0..calls)
        .map(|call| {
            let at = |operand: char| if rotate.contains(operand) { call % copies } else { 0 };
            let (x, w, z, y) = (&xs[at('x')], at('w'), &zs[at('z')], &mut ys[at('y')]);
            let t = Instant::now();
            match (&packed, width) {
                (Some(wps), Some(width)) => c.run_packed_with(isa, x, &wps[w], width, &b, z, y),
                _ => c.run_with(isa, x, &ws[w], &b, z, y),
            }
            t.elapsed().as_secs_f64()
        })
        .collect());
    times.sort_by(f64::total_cmp);
    let (best, median) = (times[0], times[calls / 2]);
    let flops = 2.0 * (co * (ci / groups.max(1)) * k * k * o * o) as f64;
    let packed = if width.is_some() { " packed" } else { "" };
    println!("{isa:?}{packed} {spec:?}: best {:.1} µs ({:.1} GFLOP/s), median {:.1} µs ({:.1} GFLOP/s)", best * 1e6, flops / best / 1e9, median * 1e6, flops / median / 1e9);
}
