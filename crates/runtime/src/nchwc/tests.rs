use super::pointwise::Pointwise;
use super::{LANES, blocked_len, from_blocked, to_blocked};
use crate::epilogue::Activation;
use crate::gemm::Isa;
use crate::test_data;

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

/// The convolution on NCHW planes, one chain of fused multiply-adds per output as the
/// blocked routine sums it.
fn reference(p: &Pointwise, x: &[f32], w: &[f32], bias: &[f32], z: &[f32]) -> Vec<f32> {
    let (oh, ow) = (p.oh(), p.ow());
    let mut y = vec![0.0; p.out_channels * oh * ow];
    for co in 0..p.out_channels {
        for oy in 0..oh {
            for ox in 0..ow {
                let q = oy * ow + ox;
                let mut s = 0.0f32;
                for c in 0..p.channels {
                    s = w[co * p.channels + c].mul_add(x[c * p.h * p.w + oy * p.stride * p.w + ox * p.stride], s);
                }
                if p.bias {
                    s += bias[co];
                }
                if p.residual {
                    s += z[co * oh * ow + q];
                }
                y[co * oh * ow + q] = match p.act {
                    Activation::Relu => if s > 0.0 { s } else { 0.0 },
                    Activation::Clip { min, max } => s.max(min).min(max),
                    _ => s,
                };
            }
        }
    }
    y
}

#[test]
fn pointwise_matches_the_definition_bit_for_bit() {
    let pool = crate::pool::Pool::new(2).unwrap();
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Portable].into_iter().filter(|i| i.available()).collect();
    let shapes = [
        // channels, out_channels, h, w, stride
        (3, 5, 2, 3, 1),
        (16, 64, 7, 7, 1),
        (24, 40, 5, 9, 1),
        (64, 200, 14, 14, 1),
        (33, 17, 6, 5, 2),
        (256, 130, 9, 9, 2),
        (520, 48, 4, 4, 1),
    ];
    for (i, &(channels, out_channels, h, w, stride)) in shapes.iter().enumerate() {
        for (bias, residual, act) in [(false, false, Activation::None), (true, true, Activation::Relu), (true, false, Activation::Clip { min: -0.1, max: 0.3 })] {
            let p = Pointwise { channels, out_channels, h, w, stride, bias, residual, act };
            let pixels = p.oh() * p.ow();
            let x = test_data(channels * h * w, 3 + i as u64);
            let wt = test_data(out_channels * channels, 5 + i as u64);
            let b = test_data(out_channels, 7);
            let z = test_data(out_channels * pixels, 11);
            let want = reference(&p, &x, &wt, &b, &z);
            let (mut xb, mut zb) = (vec![0.0; p.x_len()], vec![0.0; p.y_len()]);
            to_blocked(&x, channels, h * w, &mut xb);
            to_blocked(&z, out_channels, pixels, &mut zb);
            let mut wp = vec![0.0; p.packed_len()];
            p.pack_weights(&wt, &mut wp);
            for &isa in &isas {
                for threads in [false, true] {
                    let mut yb = vec![f32::NAN; p.y_len()];
                    if threads {
                        pool.enter(|| p.run_with(isa, &xb, &wp, &b, &zb, &mut yb));
                    } else {
                        p.run_with(isa, &xb, &wp, &b, &zb, &mut yb);
                    }
                    let mut got = vec![0.0; want.len()];
                    from_blocked(&yb, out_channels, pixels, &mut got);
                    for (e, (g, r)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), r.to_bits(), "{p:?} {isa:?} threads {threads}: element {e}: {g} against {r}");
                    }
                }
            }
        }
    }
}
