use kiln_testkit::Rng;

use super::*;
use crate::window::Window;

/// This file's test data, drawn from the shared generator.
trait TestData {
    /// Small integers (many ties), with NaN, ±0 and ±inf now and then.
    fn data(&mut self, len: usize) -> Vec<f32>;
}

impl TestData for Rng {
    fn data(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| match self.below(24) {
                0 => f32::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => f32::INFINITY,
                4 => f32::NEG_INFINITY,
                _ => self.below(9) as f32 - 4.0,
            })
            .collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn pool(planes: usize, (h, w): (usize, usize), (kh, kw): (usize, usize), (sh, sw): (usize, usize), (dh, dw): (usize, usize), [pt, pl, pb, pr]: [usize; 4]) -> MaxPool2d {
    MaxPool2d { planes, win: Window::padded((h, w), (kh, kw), (sh, sw), (dh, dw), [pt, pl, pb, pr]) }
}

/// The pool as the loop IR lowering defines it: taps in `(ky, kx)` order, the first inside the
/// input or a strictly greater one replaces the maximum, 0 without any.
fn reference(m: &MaxPool2d, x: &[f32]) -> Vec<f32> {
    let mut y = Vec::with_capacity(m.y_len());
    for p in 0..m.planes {
        for oy in 0..m.win.oh {
            for ox in 0..m.win.ow {
                let mut best: Option<f32> = None;
                for ky in 0..m.win.kh {
                    for kx in 0..m.win.kw {
                        let iy = (oy * m.win.sh + ky * m.win.dh) as isize - m.win.ph as isize;
                        let ix = (ox * m.win.sw + kx * m.win.dw) as isize - m.win.pw as isize;
                        if (0..m.win.h as isize).contains(&iy) && (0..m.win.w as isize).contains(&ix) {
                            let v = x[(p * m.win.h + iy as usize) * m.win.w + ix as usize];
                            if best.is_none_or(|b| v > b) {
                                best = Some(v);
                            }
                        }
                    }
                }
                y.push(best.unwrap_or(0.0));
            }
        }
    }
    y
}

const GUARD: usize = 5;
const SENTINEL: f32 = 1234.5;

/// Bit-for-bit equality (results are copies of input elements or 0).
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Runs `m` with every instruction set, the operands at byte offsets `offsets`, against
/// [`reference`] and the guards (a large value around `x` would win some maximum if read).
fn check_at(m: &MaxPool2d, rng: &mut Rng, offsets: [usize; 2]) {
    let x = rng.data(m.planes * m.win.h * m.win.w);
    let want = reference(m, &x);
    let bytes = |v: &[f32], fill: f32, offset: usize| -> Vec<u8> {
        let floats = [vec![fill; GUARD], v.to_vec(), vec![fill; GUARD]].concat();
        [vec![0u8; offset], floats.iter().flat_map(|f| f.to_le_bytes()).collect()].concat()
    };
    let floats = |b: &[u8]| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let xb = bytes(&x, 1e30, offsets[0]);
    for isa in Isa::runnable() {
        let mut yb = bytes(&vec![f32::NAN; m.y_len()], SENTINEL, offsets[1]);
        // SAFETY: each pointer has its operand's elements after it, inside its own vector.
        unsafe { m.run_raw(isa, xb[offsets[0] + 4 * GUARD..].as_ptr().cast(), yb[offsets[1] + 4 * GUARD..].as_mut_ptr().cast()) };
        let all = floats(&yb[offsets[1]..]);
        let (before, rest) = all.split_at(GUARD);
        let (got, after) = rest.split_at(m.y_len());
        assert!(before.iter().chain(after).all(|&v| v == SENTINEL), "{isa:?} wrote outside y: {m:?}");
        assert!(same(got, &want), "{isa:?}, {m:?} at offsets {offsets:?}:\n{got:?}\n{want:?}");
    }
}

fn check(m: &MaxPool2d, rng: &mut Rng) {
    check_at(m, rng, [0, 0]);
}

#[test]
fn resnet_and_common_shapes_match_the_definition() {
    let mut rng = Rng::new(3);
    check(&pool(4, (112, 112), (3, 3), (2, 2), (1, 1), [1; 4]), &mut rng);
    check(&pool(3, (13, 13), (2, 2), (2, 2), (1, 1), [0; 4]), &mut rng);
    check(&pool(3, (14, 14), (3, 3), (1, 1), (1, 1), [1; 4]), &mut rng);
    // A global pool: one output per plane.
    check(&pool(5, (7, 9), (7, 9), (1, 1), (1, 1), [0; 4]), &mut rng);
}

#[test]
fn windows_strides_dilations_and_paddings_match_the_definition() {
    let mut rng = Rng::new(1);
    let windows = [(1, 1), (2, 2), (3, 3), (2, 3), (1, 5), (4, 1)];
    let sizes = [(1, 1), (2, 3), (5, 7), (4, 17), (9, 40)];
    for &(kh, kw) in &windows {
        for &(h, w) in &sizes {
            for (sh, sw) in [(1, 1), (2, 2), (1, 3), (3, 2)] {
                for d in 1..=2 {
                    for pads in [[0, 0, 0, 0], [1, 1, 1, 1], [2, 0, 1, 3], [0, 2, 3, 1], [0, 0, 2, 2]] {
                        check(&pool(2, (h, w), (kh, kw), (sh, sw), (d, 3 - d), pads), &mut rng);
                    }
                }
            }
        }
    }
}

#[test]
fn operands_at_odd_byte_offsets() {
    let mut rng = Rng::new(5);
    for offsets in [[1, 0], [0, 2], [3, 1]] {
        for s in 1..=3 {
            check_at(&pool(3, (11, 37), (3, 3), (s, s), (1, 1), [1; 4]), &mut rng, offsets);
        }
    }
}

#[test]
fn nan_wins_only_as_the_first_tap_and_empty_windows_give_zero() {
    let m = MaxPool2d { planes: 1, win: Window { h: 1, w: 4, oh: 1, ow: 3, kh: 1, kw: 2, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 } };
    let mut y = [0.0; 3];
    m.run(&[f32::NAN, 1.0, f32::NAN, -0.0], &mut y);
    assert!(y[0].is_nan() && y[1] == 1.0 && y[2].is_nan(), "{y:?}");
    // −0 then +0: the first stays.
    m.run(&[-0.0, 0.0, 0.0, -0.0], &mut y);
    assert_eq!(y.map(f32::to_bits), [(-0.0f32).to_bits(), 0, 0]);
    // Padding so large that some windows hold no input.
    let m = MaxPool2d { planes: 1, win: Window { h: 2, w: 2, oh: 3, ow: 3, kh: 1, kw: 1, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 } };
    let mut y = [f32::NAN; 9];
    m.run(&[1.0, 2.0, 3.0, 4.0], &mut y);
    assert_eq!(y, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 4.0]);
}

#[test]
fn the_c_entry_point_refuses_nonsense() {
    let x = [1.0f32; 64];
    let good: [i64; 13] = [2, 4, 4, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1];
    let mut cases = Vec::new();
    for i in 0..13 {
        let mut a = good;
        a[i] = -1;
        cases.push(a);
    }
    for i in [7, 8, 11, 12] {
        let mut a = good;
        a[i] = 0;
        cases.push(a);
    }
    for i in [0, 1, 3, 5, 7, 9, 11] {
        let mut a = good;
        a[i] = i64::MAX;
        cases.push(a);
    }
    for a in cases {
        let mut y = [SENTINEL; 8];
        let [planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = a;
        // SAFETY: every case is refused before addressing anything.
        unsafe { kiln_rt_maxpool2d(x.as_ptr(), y.as_mut_ptr(), planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) };
        assert!(y.iter().all(|&v| v == SENTINEL), "{a:?}");
    }
    let mut y = [SENTINEL; 8];
    let [planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = good;
    // SAFETY: 2·4·4 elements of x, 2·2·2 of y.
    unsafe { kiln_rt_maxpool2d(x.as_ptr(), y.as_mut_ptr(), planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) };
    assert_eq!(y, [1.0; 8]);
}
