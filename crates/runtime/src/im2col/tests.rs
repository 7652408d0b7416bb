use kiln_testkit::Rng;

use super::*;
use crate::window::Window;

/// This file's test data, drawn from the shared generator.
trait TestData {
    /// Distinct-looking values, with a NaN and a −0 now and then (copied, never computed).
    fn data(&mut self, len: usize) -> Vec<f32>;
}

impl TestData for Rng {
    fn data(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| match self.below(16) {
                0 => f32::NAN,
                1 => -0.0,
                _ => i as f32 + 0.5,
            })
            .collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn shape(channels: usize, (h, w): (usize, usize), (kh, kw): (usize, usize), (sh, sw): (usize, usize), (dh, dw): (usize, usize), [pt, pl, pb, pr]: [usize; 4]) -> Im2col {
    Im2col { channels, win: Window::padded((h, w), (kh, kw), (sh, sw), (dh, dw), [pt, pl, pb, pr]) }
}

/// The column matrix from the definition, one element at a time.
fn reference(g: &Im2col, x: &[f32]) -> Vec<f32> {
    let mut col = Vec::with_capacity(g.col_len());
    for c in 0..g.channels {
        for ky in 0..g.win.kh {
            for kx in 0..g.win.kw {
                for oy in 0..g.win.oh {
                    for ox in 0..g.win.ow {
                        let iy = (oy * g.win.sh + ky * g.win.dh) as isize - g.win.ph as isize;
                        let ix = (ox * g.win.sw + kx * g.win.dw) as isize - g.win.pw as isize;
                        let inside = (0..g.win.h as isize).contains(&iy) && (0..g.win.w as isize).contains(&ix);
                        col.push(if inside { x[(c * g.win.h + iy as usize) * g.win.w + ix as usize] } else { 0.0 });
                    }
                }
            }
        }
    }
    col
}

/// Guard elements: NaN-like markers around `x` would show up in the result if read, a
/// sentinel around `col` would change if written.
const GUARD: usize = 5;
const SENTINEL: f32 = 1234.5;
const X_GUARD: f32 = -7777.0;

/// Bit-for-bit equality (the values are copies), NaN included.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Runs `g` with `x` and `col` at byte offsets `offsets` into their allocations and checks
/// the result against [`reference`] and the guards.
fn check_at(g: &Im2col, rng: &mut Rng, offsets: [usize; 2]) {
    let x = rng.data(g.channels * g.win.h * g.win.w);
    let want = reference(g, &x);
    assert!(!want.contains(&X_GUARD));
    let bytes = |v: &[f32], fill: f32, offset: usize| -> Vec<u8> {
        let floats = [vec![fill; GUARD], v.to_vec(), vec![fill; GUARD]].concat();
        [vec![0u8; offset], floats.iter().flat_map(|f| f.to_le_bytes()).collect()].concat()
    };
    let floats = |b: &[u8]| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let xb = bytes(&x, X_GUARD, offsets[0]);
    let mut cb = bytes(&vec![f32::NAN; g.col_len()], SENTINEL, offsets[1]);
    // SAFETY: each pointer has its operand's elements after it, inside its own vector.
    unsafe { g.run_raw(xb[offsets[0] + 4 * GUARD..].as_ptr().cast(), cb[offsets[1] + 4 * GUARD..].as_mut_ptr().cast()) };
    let all = floats(&cb[offsets[1]..]);
    let (before, rest) = all.split_at(GUARD);
    let (got, after) = rest.split_at(g.col_len());
    assert!(before.iter().chain(after).all(|&v| v == SENTINEL), "wrote outside col: {g:?}");
    assert!(same(got, &want), "{g:?} at offsets {offsets:?}:\n{got:?}\n{want:?}");
}

fn check(g: &Im2col, rng: &mut Rng) {
    check_at(g, rng, [0, 0]);
}

#[test]
fn resnet_shapes_match_the_definition() {
    let mut rng = Rng::new(3);
    // The stem (7×7, stride 2, padding 3), 3×3 with padding 1 at strides 1 and 2, the
    // strided 1×1 projection, fewer channels and smaller planes than ResNet-50's.
    check(&shape(3, (32, 32), (7, 7), (2, 2), (1, 1), [3; 4]), &mut rng);
    check(&shape(4, (14, 14), (3, 3), (1, 1), (1, 1), [1; 4]), &mut rng);
    check(&shape(4, (14, 14), (3, 3), (2, 2), (1, 1), [1; 4]), &mut rng);
    check(&shape(5, (7, 7), (3, 3), (1, 1), (1, 1), [1; 4]), &mut rng);
    check(&shape(6, (14, 14), (1, 1), (2, 2), (1, 1), [0; 4]), &mut rng);
}

#[test]
fn kernels_strides_dilations_and_paddings_match_the_definition() {
    let mut rng = Rng::new(1);
    let kernels = [(1, 1), (3, 3), (2, 3), (3, 1), (1, 7), (5, 5)];
    let sizes = [(1, 1), (2, 3), (5, 7), (4, 17), (9, 40)];
    for &(kh, kw) in &kernels {
        for &(h, w) in &sizes {
            for (sh, sw) in [(1, 1), (2, 2), (1, 3), (3, 2)] {
                for d in 1..=2 {
                    for pads in [[0, 0, 0, 0], [1, 1, 1, 1], [2, 0, 1, 3], [0, 2, 3, 1], [6, 5, 4, 7]] {
                        let g = shape(2, (h, w), (kh, kw), (sh, sw), (d, 3 - d), pads);
                        check(&g, &mut rng);
                    }
                }
            }
        }
    }
}

#[test]
fn operands_at_odd_byte_offsets() {
    let mut rng = Rng::new(5);
    for offsets in [[1, 0], [0, 2], [3, 1], [2, 3]] {
        for (s, k) in [(1, 3), (2, 3), (3, 1), (2, 7)] {
            check_at(&shape(3, (11, 13), (k, k), (s, s), (1, 1), [k / 2; 4]), &mut rng, offsets);
        }
    }
}

#[test]
fn empty_and_degenerate_shapes() {
    let mut rng = Rng::new(9);
    // No channels, an empty output, a kernel wider than the padded input, all padding.
    check(&shape(0, (4, 4), (3, 3), (1, 1), (1, 1), [1; 4]), &mut rng);
    check(&Im2col { channels: 2, win: Window { h: 3, w: 3, oh: 0, ow: 3, kh: 2, kw: 2, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 } }, &mut rng);
    check(&Im2col { channels: 2, win: Window { h: 3, w: 3, oh: 2, ow: 2, kh: 2, kw: 2, sh: 1, sw: 1, ph: 9, pw: 9, dh: 1, dw: 1 } }, &mut rng);
    check(&Im2col { channels: 1, win: Window { h: 0, w: 0, oh: 2, ow: 2, kh: 1, kw: 1, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 } }, &mut rng);
    let g = shape(2, (5, 6), (3, 2), (1, 2), (1, 1), [1; 4]);
    assert_eq!((g.x_len(), g.col_len()), (60, 2 * 6 * g.win.oh * g.win.ow));
    assert_eq!(Im2col { win: Window { ow: 0, ..g.win }, ..g }.x_len(), 0);
    assert!(g.is_valid() && !Im2col { win: Window { sh: 0, ..g.win }, ..g }.is_valid() && !Im2col { win: Window { h: usize::MAX, ..g.win }, ..g }.is_valid());
}

#[test]
fn the_c_entry_point_refuses_nonsense() {
    let x = [1.0f32; 64];
    let good: [i64; 13] = [2, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1];
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
        let mut col = [SENTINEL; 2 * 9 * 16];
        let [c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = a;
        // SAFETY: every case is refused before addressing anything.
        unsafe { kiln_rt_im2col(x.as_ptr(), col.as_mut_ptr(), c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) };
        assert!(col.iter().all(|&v| v == SENTINEL), "{a:?}");
    }
    let mut col = [SENTINEL; 2 * 9 * 16];
    let [c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = good;
    // SAFETY: 2·4·4 elements of x, 2·9·16 of col.
    unsafe { kiln_rt_im2col(x.as_ptr(), col.as_mut_ptr(), c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) };
    let g = Im2col { channels: 2, win: Window { h: 4, w: 4, oh: 4, ow: 4, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 } };
    assert!(same(&col, &reference(&g, &x[..32])));
}
