use kiln_testkit::Rng;

use super::*;
use crate::window::Window;

/// This file's test data, drawn from the shared generator.
trait TestData {
    /// Multiples of 1/8 in [-1, 1]: sums of up to a few hundred products of them are exact in
    /// `f32`, whatever the order and whether multiply-adds are fused.
    fn data(&mut self, len: usize) -> Vec<f32>;

    /// Multiples of 1/997 in [−1, 1.006]: unlike [`TestData::data`], sums of their products
    /// round, so two kernels give the same bits only if they round alike.
    fn rounding_data(&mut self, len: usize) -> Vec<f32>;
}

impl TestData for Rng {
    fn data(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| (self.below(17) as f32 - 8.0) / 8.0).collect()
    }

    fn rounding_data(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| (self.next_u64() % 2001) as f32 / 997.0 - 1.0).collect()
    }
}

/// `y` from the definition, in `f64`.
fn reference(d: &DwConv2d, x: &[f32], w: &[f32], y: &[f32]) -> Vec<f32> {
    let mut out = y.to_vec();
    for p in 0..d.planes {
        let c = p % d.channels;
        for oy in 0..d.win.oh {
            for ox in 0..d.win.ow {
                let at = (p * d.win.oh + oy) * d.win.ow + ox;
                let mut s = if d.accumulate { f64::from(y[at]) } else { 0.0 };
                for ky in 0..d.win.kh {
                    for kx in 0..d.win.kw {
                        let iy = (oy * d.win.sh + ky * d.win.dh) as isize - d.win.ph as isize;
                        let ix = (ox * d.win.sw + kx * d.win.dw) as isize - d.win.pw as isize;
                        if (0..d.win.h as isize).contains(&iy) && (0..d.win.w as isize).contains(&ix) {
                            let xv = x[(p * d.win.h + iy as usize) * d.win.w + ix as usize];
                            s += f64::from(xv) * f64::from(w[(c * d.win.kh + ky) * d.win.kw + kx]);
                        }
                    }
                }
                out[at] = s as f32;
            }
        }
    }
    out
}

/// Guard elements around each operand: NaN around the inputs (a read outside them would make
/// some output NaN), a sentinel around the output (a write outside it would change one).
const GUARD: usize = 19;
const SENTINEL: f32 = 1234.5;

/// Runs `d` with every instruction set on random data and compares with [`reference`] exactly.
fn check(d: &DwConv2d, rng: &mut Rng) {
    let w = rng.data(d.channels * d.win.kh * d.win.kw);
    check_with(d, &w, rng);
}

/// [`check`] with the kernels `w`.
fn check_with(d: &DwConv2d, w: &[f32], rng: &mut Rng) {
    let x = rng.data(d.planes * d.win.h * d.win.w);
    let y0 = if d.accumulate { rng.data(d.y_len()) } else { vec![f32::NAN; d.y_len()] };
    let want = reference(d, &x, w, &y0);
    let guarded = |v: &[f32], fill: f32| [vec![fill; GUARD], v.to_vec(), vec![fill; GUARD]].concat();
    let (xg, wg) = (guarded(&x, f32::NAN), guarded(w, f32::NAN));
    for isa in Isa::runnable() {
        let mut yg = guarded(&y0, SENTINEL);
        d.run_with(isa, &xg[GUARD..], &wg[GUARD..], &mut yg[GUARD..]);
        let (before, rest) = yg.split_at(GUARD);
        let (got, after) = rest.split_at(d.y_len());
        assert!(before.iter().chain(&after[..GUARD]).all(|&g| g == SENTINEL), "{isa:?} wrote outside y: {d:?}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{isa:?}, element {i}: {g} instead of {w}: {d:?}");
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn conv(planes: usize, channels: usize, (h, w): (usize, usize), (kh, kw): (usize, usize), (sh, sw): (usize, usize), (dh, dw): (usize, usize), [pt, pl, pb, pr]: [usize; 4], accumulate: bool) -> DwConv2d {
    DwConv2d { planes, channels, win: Window::padded((h, w), (kh, kw), (sh, sw), (dh, dw), [pt, pl, pb, pr]), accumulate }
}

#[test]
fn mobilenet_shapes_match_the_definition() {
    let mut rng = Rng::new(7);
    // 3×3, padding 1, stride 1 and 2, as in MobileNet-V2 (fewer channels), with and without
    // a bias accumulated.
    for (hw, s) in [(112, 1), (112, 2), (56, 2), (28, 1), (14, 1), (14, 2), (7, 1)] {
        for accumulate in [false, true] {
            check(&conv(6, 3, (hw, hw), (3, 3), (s, s), (1, 1), [1; 4], accumulate), &mut rng);
        }
    }
}

#[test]
fn stride_two_rows_read_in_place_match_the_definition() {
    // The 3×3 stride-2 layers that AVX-512 computes from the input rows (`direct.rs`): every
    // row width from 15 to 50 (output rows of 8 to 25 columns, so the masked vectors at a row's
    // end take every length), odd and even heights, the padding at the end present or not.
    let mut rng = Rng::new(11);
    for w in 15..=50 {
        for h in [1, 2, 5] {
            for pads in [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 1]] {
                check(&conv(2, 2, (h, w), (3, 3), (2, 2), (1, 1), pads, rng.below(2) == 1), &mut rng);
            }
        }
    }
}

#[test]
fn stride_one_planes_read_in_place_match_the_definition() {
    // The 3×3 stride-1 planes that AVX-512 reads in place (`direct.rs`): as one flat run (rows
    // of at most 8 columns, up to 64 vectors) or a row at a time, in blocks of up to four
    // vectors. Every shape up to 64 × 31, so the masks meet every row and column border inside
    // a vector, then rows of several blocks.
    let mut rng = Rng::new(13);
    for h in 1..=64 {
        for w in 1..32 {
            if h * w <= 1024 {
                check(&conv(2, 2, (h, w), (3, 3), (1, 1), (1, 1), [1; 4], rng.below(2) == 1), &mut rng);
            }
        }
    }
    for (h, w) in [(3, 64), (2, 65), (5, 112), (1, 129), (9, 200)] {
        check(&conv(2, 2, (h, w), (3, 3), (1, 1), (1, 1), [1; 4], rng.below(2) == 1), &mut rng);
    }
    // Too large for one run, or not padded by 1 all round: rows, and the padded planes.
    for (h, w, pads) in [(33, 32, [1; 4]), (2, 32, [1; 4]), (14, 14, [1, 1, 0, 0]), (14, 14, [0; 4])] {
        check(&conv(3, 3, (h, w), (3, 3), (1, 1), (1, 1), pads, true), &mut rng);
    }
}

/// The padded planes and the planes read in place (`direct.rs`), of stride 2, flat and of
/// stride 1 by rows, on data whose sums round: the same bits.
#[test]
#[cfg(target_arch = "x86_64")]
fn planes_read_in_place_round_as_the_padded_planes() {
    if !Isa::Avx512.available() {
        return;
    }
    let mut rng = Rng::new(5);
    let shapes = [((23, 37), 2, "stride 2"), ((13, 7), 1, "flat"), ((13, 15), 1, "stride 1"), ((9, 70), 1, "stride 1")];
    for ((h, w), s, kind) in shapes {
        let d = conv(4, 4, (h, w), (3, 3), (s, s), (1, 1), [1; 4], true);
        let (x, w, y0) = (rng.rounding_data(d.x_len()), rng.rounding_data(d.w_len()), rng.rounding_data(d.y_len()));
        let g = Plan::new(&d);
        let chosen = match direct::choose(&g) {
            Some(direct::Direct::Stride2) => "stride 2",
            Some(direct::Direct::Flat(_)) => "flat",
            Some(direct::Direct::Stride1) => "stride 1",
            None => "padded",
        };
        assert_eq!(chosen, kind, "{d:?}");
        let mut in_place = y0.clone();
        d.run_with(Isa::Avx512, &x, &w, &mut in_place);
        let mut padded = y0.clone();
        with_scratch(g.scratch_len(), |s| {
            s[..g.phases_len()].fill(0.0);
            // SAFETY: the plan's operands are the vectors above; AVX-512 runs here.
            unsafe { planes::<Avx512>(&g, x.as_ptr(), w.as_ptr(), padded.as_mut_ptr(), s.as_mut_ptr(), None) };
        });
        assert!(in_place.iter().zip(&padded).all(|(a, b)| a.to_bits() == b.to_bits()), "{d:?}");
    }
}

#[test]
fn kernels_strides_dilations_and_paddings_match_the_definition() {
    let mut rng = Rng::new(1);
    let kernels = [(1, 1), (3, 3), (2, 3), (3, 1), (1, 7), (5, 5), (4, 5)];
    let sizes = [(1, 1), (2, 3), (5, 7), (4, 17), (3, 33), (9, 40)];
    for &(kh, kw) in &kernels {
        for &(h, w) in &sizes {
            for s in 1..=3 {
                for d in 1..=2 {
                    for pads in [[0, 0, 0, 0], [1, 1, 1, 1], [2, 0, 1, 3], [0, 2, 3, 1]] {
                        let accumulate = rng.below(2) == 1;
                        check(&conv(3, 3, (h, w), (kh, kw), (s, s), (d, d), pads, accumulate), &mut rng);
                    }
                }
            }
        }
    }
}

#[test]
fn random_shapes_match_the_definition() {
    let mut rng = Rng::new(3);
    for _ in 0..400 {
        let channels = 1 + rng.below(3);
        let planes = channels * rng.below(3);
        let mut pick = |n: usize| 1 + rng.below(n);
        let (h, w, kh, kw) = (pick(12), pick(40), pick(4), pick(6));
        let (sh, sw, dh, dw) = (pick(3), pick(4), pick(3), pick(3));
        let pads = [rng.below(4), rng.below(4), rng.below(4), rng.below(4)];
        let accumulate = rng.below(2) == 1;
        check(&conv(planes, channels, (h, w), (kh, kw), (sh, sw), (dh, dw), pads, accumulate), &mut rng);
    }
}

#[test]
fn one_wide_and_empty_outputs() {
    let mut rng = Rng::new(5);
    // One output column or row, the window wider than the input, outputs only in the padding.
    check(&conv(2, 2, (5, 9), (3, 9), (1, 1), (1, 1), [1, 0, 1, 0], false), &mut rng);
    check(&conv(2, 1, (9, 5), (9, 3), (1, 1), (1, 1), [0, 1, 0, 1], true), &mut rng);
    check(&conv(1, 1, (3, 3), (5, 5), (1, 1), (1, 1), [2, 2, 2, 2], false), &mut rng);
    check(&conv(1, 1, (2, 2), (1, 1), (1, 1), (1, 1), [3, 3, 3, 3], true), &mut rng);
    let d = conv(2, 2, (5, 5), (3, 3), (1, 1), (1, 1), [1; 4], false);
    check(&DwConv2d { win: Window { oh: 0, ..d.win }, ..d }, &mut rng);
    check(&DwConv2d { win: Window { ow: 0, ..d.win }, ..d }, &mut rng);
    check(&conv(0, 2, (5, 5), (3, 3), (1, 1), (1, 1), [1; 4], false), &mut rng);
    // No taps, or no input: each output is its start.
    check(&DwConv2d { planes: 2, channels: 2, win: Window { h: 3, w: 3, oh: 2, ow: 2, kh: 0, kw: 3, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 }, accumulate: false }, &mut rng);
    check(&DwConv2d { planes: 2, channels: 2, win: Window { h: 0, w: 3, oh: 2, ow: 2, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 }, accumulate: true }, &mut rng);
}

#[test]
fn padding_out_of_proportion_takes_the_exact_loop() {
    let mut rng = Rng::new(9);
    // Padded planes of about 2000 × 2000 for a 3 × 4 input and a 3 × 3 output (the second
    // kernel row and column reach the input): more scratch than the operands justify.
    let d = conv(2, 2, (3, 4), (2, 2), (1, 1), (1999, 1999), [1999, 1998, 0, 0], false);
    assert_eq!((d.win.oh, d.win.ow), (3, 3));
    assert!(!Plan::new(&d).padded);
    check(&d, &mut rng);
    check(&DwConv2d { accumulate: true, win: Window { sh: 3, ..d.win }, ..d }, &mut rng);
    assert!(Plan::new(&conv(2, 2, (3, 4), (2, 2), (1, 1), (2, 2), [1, 1, 1, 1], false)).padded);
}

#[test]
fn taps_in_the_padding_add_nothing_even_with_infinite_weights() {
    let mut rng = Rng::new(11);
    // Plane 0's kernel holds an infinity, plane 1's a NaN, plane 2's is finite: taps in the
    // padding are skipped (not w·0, which would be NaN), whichever path computes the plane.
    for (hw, s) in [(5, 1), (40, 1), (9, 2)] {
        let d = conv(3, 3, (hw, hw), (3, 3), (s, s), (1, 1), [1; 4], false);
        let mut w = rng.data(27);
        w[4] = f32::INFINITY;
        w[9 + 8] = f32::NAN;
        check_with(&d, &w, &mut rng);
        check_with(&DwConv2d { accumulate: true, ..d }, &w, &mut rng);
    }
}

#[test]
fn lengths_cover_what_is_addressed() {
    let d = conv(4, 2, (5, 6), (3, 2), (1, 2), (1, 1), [1; 4], false);
    assert_eq!((d.x_len(), d.w_len(), d.y_len()), (4 * 30, 2 * 6, 4 * d.win.oh * d.win.ow));
    let empty = DwConv2d { win: Window { ow: 0, ..d.win }, ..d };
    assert_eq!((empty.x_len(), empty.w_len(), empty.y_len()), (0, 0, 0));
    let huge = DwConv2d { win: Window { h: usize::MAX, ..d.win }, ..d };
    assert_eq!(huge.x_len(), usize::MAX);
    assert!(d.is_valid() && !huge.is_valid());
}

#[test]
fn nonsense_sizes_touch_nothing() {
    let x = [1.0f32; 64];
    // The valid geometry reads 2 channels × 3×3 taps; AddressSanitizer caught this buffer at 16.
    let w = [1.0f32; 18];
    let good: [i64; 14] = [2, 2, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1];
    let mut cases = Vec::new();
    for i in 0..14 {
        let mut a = good;
        a[i] = -1;
        cases.push(a);
    }
    for i in [8, 9, 12, 13] {
        let mut a = good;
        a[i] = 0; // a zero stride or dilation
        cases.push(a);
    }
    let mut no_channels = good;
    no_channels[1] = 0;
    cases.push(no_channels);
    for i in [0, 2, 3, 4, 5, 6, 8, 10, 12] {
        let mut a = good;
        a[i] = i64::MAX;
        cases.push(a);
    }
    for a in cases {
        let mut y = [SENTINEL; 64];
        let [planes, channels, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = a;
        // SAFETY: every valid case addresses at most 2·4·4 elements of `x` and `y` and 2·3·3 of
        // `w`; the others return before touching memory.
        unsafe { kiln_rt_dwconv2d(x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), planes, channels, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, 0) };
        assert!(y.iter().all(|&v| v == SENTINEL), "{a:?}");
    }
    // The valid arguments do write.
    let mut y = [SENTINEL; 64];
    let [planes, channels, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = good;
    // SAFETY: as above.
    unsafe { kiln_rt_dwconv2d(x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), planes, channels, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, 0) };
    assert_eq!(y[0], 4.0);
    assert_eq!(y[5], 9.0);
    assert_eq!(y[32], SENTINEL);
}

#[test]
fn unaligned_operands_give_the_same_result() {
    // Weights mapped from a model file sit at any byte offset; inputs and outputs come from
    // callers. Every operand here starts one byte past an f32 boundary.
    let mut rng = Rng::new(11);
    let d = conv(2, 2, (7, 9), (3, 3), (2, 1), (1, 1), [1, 1, 1, 1], false);
    let (x, w) = (rng.data(d.x_len()), rng.data(d.w_len()));
    let want = reference(&d, &x, &w, &vec![0.0; d.y_len()]);
    let bytes = |v: &[f32]| -> Vec<u8> { std::iter::once(0u8).chain(v.iter().flat_map(|f| f.to_le_bytes())).collect() };
    let (xb, wb) = (bytes(&x), bytes(&w));
    for isa in Isa::runnable() {
        let mut yb = vec![0u8; 1 + 4 * d.y_len()];
        // SAFETY: each pointer is one byte into a buffer holding the operand's floats after it.
        unsafe { d.run_raw(isa, xb[1..].as_ptr().cast(), wb[1..].as_ptr().cast(), yb[1..].as_mut_ptr().cast(), None) };
        let got: Vec<f32> = yb[1..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(got, want, "{isa:?}");
    }
}

/// Small planes a vector of planes at a time (`lanes.rs`) against the padded planes, on data
/// whose sums round: the same bits, with planes left over past the last whole group, stride 2,
/// dilation, accumulation, and a channel whose kernel is infinite.
#[test]
fn planes_in_vector_lanes_round_as_the_padded_planes() {
    let mut rng = Rng::new(9);
    let shapes = [
        conv(19, 5, (7, 7), (3, 3), (1, 1), (1, 1), [1; 4], false),
        conv(40, 20, (14, 13), (3, 3), (2, 2), (1, 1), [1, 1, 0, 1], true),
        conv(9, 9, (11, 6), (5, 3), (1, 2), (2, 1), [2, 0, 3, 1], false),
        conv(33, 11, (28, 28), (3, 3), (2, 2), (1, 1), [1; 4], true),
    ];
    // With AVX-512 the path takes small outputs of windows `direct.rs` does not read in place.
    let avx512 = [
        conv(19, 5, (7, 7), (5, 5), (1, 1), (1, 1), [2; 4], false),
        conv(40, 20, (14, 13), (5, 5), (2, 2), (1, 1), [2, 2, 1, 2], true),
        conv(9, 9, (11, 6), (5, 3), (1, 2), (2, 1), [2, 0, 3, 1], false),
        conv(33, 11, (14, 14), (7, 7), (1, 1), (1, 1), [3; 4], true),
    ];
    for isa in Isa::runnable() {
        for d in if isa == Isa::Avx512 { &avx512 } else { &shapes } {
            let (x, mut w, y0) = (rng.rounding_data(d.x_len()), rng.rounding_data(d.w_len()), rng.rounding_data(d.y_len()));
            w[4] = f32::INFINITY;
            let g = Plan::new(d);
            assert!(lanes::applies(&g, isa), "{d:?}");
            let mut in_lanes = y0.clone();
            d.run_with(isa, &x, &w, &mut in_lanes);
            let mut padded = y0.clone();
            with_scratch(g.scratch_len(), |s| {
                s[..g.phases_len()].fill(0.0);
                // SAFETY: the plan's operands are the vectors above; `isa` runs here.
                unsafe {
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => planes::<crate::gemm::avx2::Avx2>(&g, x.as_ptr(), w.as_ptr(), padded.as_mut_ptr(), s.as_mut_ptr(), None),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => planes::<crate::gemm::avx512::Avx512>(&g, x.as_ptr(), w.as_ptr(), padded.as_mut_ptr(), s.as_mut_ptr(), None),
                        _ => planes::<crate::gemm::simd::Portable>(&g, x.as_ptr(), w.as_ptr(), padded.as_mut_ptr(), s.as_mut_ptr(), None),
                    }
                }
            });
            let differ = in_lanes.iter().zip(&padded).position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differ, None, "{isa:?} {d:?}");
        }
    }
}
