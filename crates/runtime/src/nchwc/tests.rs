use super::conv::{PANEL, run_with, supports, x_len, y_len};
use crate::gemm::Isa;
use super::{LANES, blocked_len, from_blocked, to_blocked};
use crate::conv::Conv2d;
use crate::epilogue::Activation;
use crate::test_data;
use crate::window::Window;

#[test]
fn blocked_layout_round_trips_and_pads_with_zeros() {
    for (channels, pixels) in [(1, 1), (3, 5), (16, 4), (24, 7), (40, 3)] {
        let x = test_data(channels * pixels, 7);
        let mut b = vec![f32::NAN; blocked_len(channels, pixels)];
        to_blocked(&x, channels, pixels, &mut b);
        for c in 0..channels.next_multiple_of(LANES) {
            for p in 0..pixels {
                let want = if c < channels { x[c * pixels + p] } else { 0.0 };
                assert_eq!(b[c / LANES * LANES * pixels + p * LANES + c % LANES].to_bits(), want.to_bits(), "channel {c} pixel {p}");
            }
        }
        let mut back = vec![0.0; channels * pixels];
        from_blocked(&b, channels, pixels, &mut back);
        assert_eq!(back, x);
    }
}

/// The convolution on NCHW planes, one chain of fused multiply-adds per output over `(c, ky,
/// kx)` as the blocked routine sums it (a tap in the padding multiplies a zero).
fn reference(c: &Conv2d, x: &[f32], w: &[f32], bias: &[f32], z: &[f32]) -> Vec<f32> {
    let win = c.win;
    let (oh, ow) = (win.oh, win.ow);
    let mut y = vec![0.0; c.batch * c.out_channels * oh * ow];
    for n in 0..c.batch {
        for co in 0..c.out_channels {
            for q in 0..oh * ow {
                let (oy, ox) = (q / ow, q % ow);
                let mut s = 0.0f32;
                for ch in 0..c.channels {
                    for ky in 0..win.kh {
                        for kx in 0..win.kw {
                            let (iy, ix) = ((oy * win.sh + ky * win.dh) as isize - win.ph as isize, (ox * win.sw + kx * win.dw) as isize - win.pw as isize);
                            let inside = iy >= 0 && ix >= 0 && (iy as usize) < win.h && (ix as usize) < win.w;
                            let v = if inside { x[((n * c.channels + ch) * win.h + iy as usize) * win.w + ix as usize] } else { 0.0 };
                            s = w[((co * c.channels + ch) * win.kh + ky) * win.kw + kx].mul_add(v, s);
                        }
                    }
                }
                if c.bias {
                    s += bias[co];
                }
                let at = (n * c.out_channels + co) * oh * ow + q;
                if c.residual {
                    s += z[at];
                }
                y[at] = match c.act {
                    Activation::Relu => if s > 0.0 { s } else { 0.0 },
                    Activation::Clip { min, max } => s.max(min).min(max),
                    _ => c.act.apply(s),
                };
            }
        }
    }
    y
}

/// `batch` images of `channels` NCHW planes laid out blocked, image by image.
fn blocked(x: &[f32], batch: usize, channels: usize, pixels: usize) -> Vec<f32> {
    let len = blocked_len(channels, pixels);
    let mut b = vec![0.0; batch * len];
    for n in 0..batch {
        to_blocked(&x[n * channels * pixels..], channels, pixels, &mut b[n * len..]);
    }
    b
}

#[test]
fn convolutions_match_the_definition_bit_for_bit() {
    let pool = crate::pool::Pool::new(2).unwrap();
    let shapes = [
        // batch, channels, out_channels, h, w, kernel, stride, pad, dilation
        (1, 3, 5, 2, 3, 1, 1, 0, 1),
        (1, 16, 64, 7, 7, 1, 1, 0, 1),
        (2, 24, 40, 5, 9, 1, 1, 0, 1),
        (1, 64, 200, 14, 14, 1, 1, 0, 1),
        // A panel's last vector of at most 8 channels: summed in 256-bit halves.
        (1, 16, 24, 6, 6, 1, 1, 0, 1),
        (2, 20, 88, 5, 5, 1, 1, 0, 1),
        (1, 33, 17, 6, 5, 1, 2, 0, 1),
        (1, 256, 130, 9, 9, 1, 2, 0, 1),
        (2, 24, 40, 7, 6, 1, 2, 0, 1),
        (1, 520, 48, 4, 4, 1, 1, 0, 1),
        (1, 20, 70, 9, 8, 3, 1, 1, 1),
        (2, 32, 64, 10, 10, 3, 2, 1, 1),
        (1, 3, 64, 23, 23, 7, 2, 3, 1),
        (1, 17, 33, 9, 9, 3, 1, 2, 2),
        (1, 16, 16, 5, 5, 3, 1, 0, 1),
        // Last tiles of 1 to 5 pixels (49, 20, 9, 45 pixels above and here), which sum only
        // their own.
        (1, 40, 64, 4, 5, 3, 1, 1, 1),
        (1, 48, 80, 4, 4, 3, 1, 1, 1),
    ];
    for (i, &(batch, channels, out_channels, h, w, k, stride, pad, dil)) in shapes.iter().enumerate() {
        let (oh, ow) = ((h + 2 * pad - dil * (k - 1) - 1) / stride + 1, (w + 2 * pad - dil * (k - 1) - 1) / stride + 1);
        let win = Window { h, w, oh, ow, kh: k, kw: k, sh: stride, sw: stride, ph: pad, pw: pad, dh: dil, dw: dil };
        for (bias, residual, act) in [(false, false, Activation::None), (true, true, Activation::Relu), (true, false, Activation::Clip { min: -0.1, max: 0.3 }), (false, true, Activation::QuantDequantU8 { scale: 0.02, zero_point: 120.0 }), (true, true, Activation::HardSwish)] {
            let c = Conv2d { batch, channels, out_channels, groups: 1, win, bias, residual, act };
            assert!(supports(&c));
            let x = test_data(c.x_len(), 3 + i as u64);
            let wt = test_data(c.w_len(), 5 + i as u64);
            let b = test_data(out_channels, 7);
            let z = test_data(c.y_len(), 11);
            let want = reference(&c, &x, &wt, &b, &z);
            let (xb, zb) = (blocked(&x, batch, channels, h * w), blocked(&z, batch, out_channels, oh * ow));
            assert_eq!((xb.len(), zb.len()), (x_len(&c, true), y_len(&c)));
            let mut wp = vec![0.0; c.packed_len(PANEL)];
            c.pack_weights(PANEL, &wt.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut wp);
            let isas = Isa::runnable().into_iter();
            let runs = isas.flat_map(|isa| [(isa, true, false, true), (isa, true, true, true), (isa, false, false, true), (isa, true, true, false), (isa, true, false, false)]);
            // With a residual, also summed in place: the output over its own addend.
            let runs = runs.flat_map(|r| [false, true].into_iter().filter(|&in_place| !in_place || residual).map(move |in_place| (r, in_place)));
            for ((isa, packed, threads, x_blocked), in_place) in runs {
                {
                    let mut yb = if in_place { zb.clone() } else { vec![f32::NAN; y_len(&c)] };
                    let (w, yp) = (if packed { wp.as_ptr() } else { wt.as_ptr() }, yb.as_mut_ptr());
                    let zp = if in_place { yp.cast_const() } else { zb.as_ptr() };
                    // The input blocked, or the NCHW planes themselves.
                    let xp = if x_blocked { xb.as_ptr() } else { x.as_ptr() };
                    // SAFETY: the operands have the lengths `run` reads and writes.
                    let go = || unsafe { run_with(isa, &c, xp, x_blocked, w, packed, b.as_ptr(), zp, yp) };
                    if threads { pool.enter(go) } else { go() }
                    let pixels = oh * ow;
                    let mut got = vec![0.0; want.len()];
                    for n in 0..batch {
                        from_blocked(&yb[n * blocked_len(out_channels, pixels)..], out_channels, pixels, &mut got[n * out_channels * pixels..]);
                    }
                    for (e, (g, r)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), r.to_bits(), "{c:?} {isa:?} packed {packed} threads {threads} blocked input {x_blocked} in place {in_place}: element {e}: {g} against {r}");
                    }
                }
            }
        }
    }
}

#[test]
fn winograd_convolutions_match_the_definition_within_rounding() {
    // 3x3 stride-1 windows with padding 1 on even outputs and at least 64 channels, whose
    // packed weights are the Winograd transforms: the transforms reorder the sums, so each
    // output is checked against the definition within 1e-5 of its terms' magnitudes (the same
    // sums over |w|·|x|). 144 and 80 output channels leave a last panel of one vector; 6×8 and
    // 2×2 outputs are 12 tiles and 1; batch 2 runs the images one after the other.
    let pool = crate::pool::Pool::new(2).unwrap();
    for (i, &(batch, channels, out_channels, h, w)) in [(1, 128, 144, 6, 8), (2, 64, 64, 2, 2), (1, 256, 80, 4, 6)].iter().enumerate() {
        let win = Window { h, w, oh: h, ow: w, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 };
        for (bias, residual, act) in [(false, false, Activation::None), (true, true, Activation::Relu), (true, false, Activation::Clip { min: -0.1, max: 0.3 }), (true, false, Activation::HardSwish)] {
            let c = Conv2d { batch, channels, out_channels, groups: 1, win, bias, residual, act };
            assert!(supports(&c) && super::winograd::applies(&c));
            let x = test_data(c.x_len(), 13 + i as u64);
            let wt = test_data(c.w_len(), 17 + i as u64);
            let b = test_data(out_channels, 19);
            let z = test_data(c.y_len(), 23);
            let want = reference(&c, &x, &wt, &b, &z);
            let plain = Conv2d { bias: false, residual: false, act: Activation::None, ..c };
            let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
            let magnitude = reference(&plain, &abs(&x), &abs(&wt), &[], &[]);
            let (xb, zb) = (blocked(&x, batch, channels, h * w), blocked(&z, batch, out_channels, h * w));
            let mut wp = vec![0.0; super::conv::packed_len(&c)];
            super::conv::pack_weights(&c, &wt.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut wp);
            let isas = Isa::runnable().into_iter();
            let runs = isas.flat_map(|isa| [(isa, false, false), (isa, true, false), (isa, false, true)]).filter(|&(_, _, in_place)| !in_place || residual);
            for (isa, threads, in_place) in runs {
                let mut yb = if in_place { zb.clone() } else { vec![f32::NAN; y_len(&c)] };
                let yp = yb.as_mut_ptr();
                let zp = if in_place { yp.cast_const() } else { zb.as_ptr() };
                // SAFETY: the operands have the lengths `run` reads and writes.
                let go = || unsafe { run_with(isa, &c, xb.as_ptr(), true, wp.as_ptr(), true, b.as_ptr(), zp, yp) };
                if threads { pool.enter(go) } else { go() }
                let pixels = h * w;
                let mut got = vec![0.0; want.len()];
                for n in 0..batch {
                    from_blocked(&yb[n * blocked_len(out_channels, pixels)..], out_channels, pixels, &mut got[n * out_channels * pixels..]);
                }
                for (e, ((g, r), m)) in got.iter().zip(&want).zip(&magnitude).enumerate() {
                    assert!((g - r).abs() <= 1e-5 * m + 1e-6, "{c:?} {isa:?} threads {threads} in place {in_place}: element {e}: {g} against {r} (terms {m})");
                }
            }
        }
    }
}

#[test]
fn max_pools_match_the_planar_routine_bit_for_bit() {
    use crate::maxpool::MaxPool2d;
    for (channels, h, w, k, s, p) in [(64, 12, 12, 3, 2, 1), (20, 7, 9, 3, 1, 1), (16, 5, 5, 2, 2, 0), (3, 6, 6, 3, 3, 2)] {
        let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
        let win = Window { h, w, oh, ow, kh: k, kw: k, sh: s, sw: s, ph: p, pw: p, dh: 1, dw: 1 };
        let mut x = test_data(channels * h * w, 13);
        // NaNs and signed zeros, whose order the semantics fix.
        for (i, v) in x.iter_mut().enumerate().step_by(37) {
            *v = [f32::NAN, -0.0, 0.0][i % 3];
        }
        let mut want = vec![0.0; channels * oh * ow];
        MaxPool2d { planes: channels, win }.run(&x, &mut want);
        let xb = blocked(&x, 1, channels, h * w);
        for isa in Isa::runnable().into_iter() {
            let mut yb = vec![f32::NAN; blocked_len(channels, oh * ow)];
            // SAFETY: the blocked operands hold every block.
            unsafe { super::maxpool::run(isa, channels.div_ceil(LANES), &win, xb.as_ptr(), yb.as_mut_ptr()) };
            let mut got = vec![0.0; want.len()];
            from_blocked(&yb, channels, oh * ow, &mut got);
            for (e, (g, r)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), r.to_bits(), "{channels} × {win:?} {isa:?}: element {e}: {g} against {r}");
            }
        }
    }
}

/// The depthwise convolution on NCHW planes, one chain of fused multiply-adds per output over
/// the taps inside the input in `(ky, kx)` order.
fn depthwise_reference(c: &Conv2d, x: &[f32], w: &[f32], bias: &[f32], z: &[f32]) -> Vec<f32> {
    let win = c.win;
    let mut y = vec![0.0; c.y_len()];
    for n in 0..c.batch {
        for ch in 0..c.channels {
            for q in 0..win.oh * win.ow {
                let (oy, ox) = (q / win.ow, q % win.ow);
                let mut s = 0.0f32;
                for ky in 0..win.kh {
                    for kx in 0..win.kw {
                        let (iy, ix) = ((oy * win.sh + ky * win.dh) as isize - win.ph as isize, (ox * win.sw + kx * win.dw) as isize - win.pw as isize);
                        if iy >= 0 && ix >= 0 && (iy as usize) < win.h && (ix as usize) < win.w {
                            let v = x[((n * c.channels + ch) * win.h + iy as usize) * win.w + ix as usize];
                            s = w[(ch * win.kh + ky) * win.kw + kx].mul_add(v, s);
                        }
                    }
                }
                if c.bias {
                    s += bias[ch];
                }
                let at = (n * c.channels + ch) * win.oh * win.ow + q;
                if c.residual {
                    s += z[at];
                }
                y[at] = match c.act {
                    Activation::Relu => if s > 0.0 { s } else { 0.0 },
                    Activation::Clip { min, max } => s.max(min).min(max),
                    _ => c.act.apply(s),
                };
            }
        }
    }
    y
}

#[test]
fn depthwise_convolutions_match_the_definition_bit_for_bit() {
    let pool = crate::pool::Pool::new(2).unwrap();
    let shapes = [
        // batch, channels, h, w, kernel, stride, pad, dilation
        (1, 24, 7, 7, 3, 1, 1, 1),
        (2, 40, 9, 11, 3, 2, 1, 1),
        (1, 16, 5, 5, 5, 1, 2, 1),
        (1, 17, 8, 8, 3, 1, 2, 2),
        (1, 64, 30, 30, 3, 1, 1, 1),
        // Inside columns in runs of eight, four and one; without padding.
        (1, 20, 6, 15, 3, 1, 1, 1),
        (1, 16, 5, 12, 3, 1, 0, 1),
        (1, 3, 4, 3, 3, 2, 0, 1),
        (1, 32, 2, 2, 3, 1, 1, 1),
        // Other windows: border columns in groups, inside columns in runs of eight and fewer,
        // whole rows of at most eight.
        (1, 24, 12, 28, 5, 1, 2, 1),
        (1, 20, 15, 30, 5, 2, 2, 1),
        (1, 16, 10, 21, 7, 1, 3, 2),
        (2, 33, 7, 7, 5, 1, 2, 1),
        (1, 16, 9, 40, 3, 1, 2, 3),
    ];
    for (i, &(batch, channels, h, w, k, stride, pad, dil)) in shapes.iter().enumerate() {
        let (oh, ow) = ((h + 2 * pad - dil * (k - 1) - 1) / stride + 1, (w + 2 * pad - dil * (k - 1) - 1) / stride + 1);
        let win = Window { h, w, oh, ow, kh: k, kw: k, sh: stride, sw: stride, ph: pad, pw: pad, dh: dil, dw: dil };
        for (bias, residual, act) in [(false, false, Activation::None), (true, true, Activation::Relu), (true, false, Activation::Clip { min: 0.0, max: 0.4 }), (true, true, Activation::QuantDequantU8 { scale: 0.01, zero_point: 7.0 }), (false, true, Activation::HardSwish)] {
            let c = Conv2d { batch, channels, out_channels: channels, groups: channels, win, bias, residual, act };
            assert!(supports(&c) && super::dwconv::supports(&c));
            let x = test_data(c.x_len(), 3 + i as u64);
            let wt = test_data(c.w_len(), 5 + i as u64);
            let b = test_data(channels, 7);
            let z = test_data(c.y_len(), 11);
            let want = depthwise_reference(&c, &x, &wt, &b, &z);
            let (xb, zb) = (blocked(&x, batch, channels, h * w), blocked(&z, batch, channels, oh * ow));
            let mut wp = vec![0.0; super::conv::packed_len(&c)];
            super::conv::pack_weights(&c, &wt.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut wp);
            let isas = Isa::runnable().into_iter();
            let runs = isas.flat_map(|isa| [(isa, true, false, false), (isa, true, true, false), (isa, false, false, false), (isa, true, true, true)]);
            // The last run sums in place (the output over its own addend) when there is one.
            for (isa, packed, threads, in_place) in runs.filter(|r| !r.3 || residual) {
                let mut yb = if in_place { zb.clone() } else { vec![f32::NAN; y_len(&c)] };
                let (w, yp) = (if packed { wp.as_ptr() } else { wt.as_ptr() }, yb.as_mut_ptr());
                let zp = if in_place { yp.cast_const() } else { zb.as_ptr() };
                // SAFETY: the operands have the lengths `run` reads and writes.
                let go = || unsafe { run_with(isa, &c, xb.as_ptr(), true, w, packed, b.as_ptr(), zp, yp) };
                if threads { pool.enter(go) } else { go() }
                let pixels = oh * ow;
                let mut got = vec![0.0; want.len()];
                for n in 0..batch {
                    from_blocked(&yb[n * blocked_len(channels, pixels)..], channels, pixels, &mut got[n * channels * pixels..]);
                }
                for (e, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), r.to_bits(), "{c:?} {isa:?} packed {packed} threads {threads} in place {in_place}: element {e}: {g} against {r}");
                }
            }
        }
    }
}
