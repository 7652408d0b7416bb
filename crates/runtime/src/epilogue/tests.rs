use kiln_testkit::Rng;

use super::*;

/// This file's test data, drawn from the shared generator.
trait TestData {
    /// Multiples of 1/8 in [−8, 8] (sums of three are exact in `f32`), with a special value
    /// (NaN, ±inf, ±0, a huge or tiny value) one time in eight.
    fn data(&mut self, len: usize) -> Vec<f32>;
}

impl TestData for Rng {
    fn data(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                if self.below(8) == 0 {
                    SPECIAL[self.below(SPECIAL.len())]
                } else {
                    (self.below(129) as f32 - 64.0) / 8.0
                }
            })
            .collect()
    }
}

const SPECIAL: [f32; 14] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e30, -1e30, 1e-40, -1e-40, 3.0, -3.0, 0.75, -0.5, 100.0];

/// Every activation, Clip with its bounds in order, reversed and at zero.
fn activations() -> Vec<Activation> {
    vec![
        Activation::None,
        Activation::Relu,
        Activation::Clip { min: -0.5, max: 0.75 },
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::Clip { min: -0.0, max: 0.0 },
        Activation::Clip { min: 2.0, max: -1.0 },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::HardSwish,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::QuantDequantU8 { scale: 0.05, zero_point: 128.0 },
        Activation::QuantDequantU8 { scale: 0.025, zero_point: 0.0 },
        Activation::QuantDequantU16 { scale: 1e-3, zero_point: 32768.0 },
    ]
}

/// The activation from ONNX's definition, in `f64` (NaN propagating through the bounds).
fn reference_act(act: Activation, x: f64) -> f64 {
    // max then min, NaN propagating, +0 above −0.
    let clip = |x: f64, lo: f64, hi: f64| {
        let max = if x == lo { if x.is_sign_positive() { x } else { lo } } else if x > lo { x } else { lo };
        let min = if max == hi { if max.is_sign_negative() { max } else { hi } } else if max < hi { max } else { hi };
        if x.is_nan() || lo.is_nan() || hi.is_nan() { f64::NAN } else { min }
    };
    match act {
        Activation::None => x,
        Activation::Relu => clip(x, 0.0, f64::INFINITY),
        Activation::Clip { min, max } => clip(x, f64::from(min), f64::from(max)),
        Activation::LeakyRelu { alpha } => if x > 0.0 { x } else { x * f64::from(alpha) },
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
        Activation::HardSwish => x * clip(x / 6.0 + 0.5, 0.0, 1.0),
        // ½x·(1 + erf(x/√2)) without the cancellation of 1 + erf in the tail.
        Activation::Gelu => 0.5 * x * crate::erf::erfc(-x / std::f64::consts::SQRT_2),
        // ½x·(1 + tanh y) = x / (1 + e^{−2y}), y rounded as the routine (and the loop IR)
        // rounds it, which is not the activation's error.
        Activation::GeluTanh => {
            let x32 = x as f32;
            let y = f64::from(SQRT_2_OVER_PI * (x32 + GELU_CUBIC * ((x32 * x32) * x32)));
            x / (1.0 + (-2.0 * y).exp())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        // The quotient rounded to f32 (QuantizeLinear divides in f32), the level half to even,
        // NaN at level 0; the last product of an integer and an f32 is exact in f64.
        Activation::QuantDequantU8 { scale, zero_point } | Activation::QuantDequantU16 { scale, zero_point } => {
            let top = if matches!(act, Activation::QuantDequantU8 { .. }) { 255.0 } else { 65535.0 };
            let q = f64::from(((x as f32) / scale).round_ties_even()) + f64::from(zero_point);
            let level = if q.is_nan() { 0.0 } else { q.clamp(0.0, top) };
            (level - f64::from(zero_point)) * f64::from(scale)
        }
    }
}

/// Whether the activation is exact in `f32` (one rounding at most), so the reference must
/// match bit for bit, the sign of zero included.
fn exact(act: Activation) -> bool {
    matches!(act, Activation::None | Activation::Relu | Activation::Clip { .. } | Activation::LeakyRelu { .. } | Activation::QuantDequantU8 { .. } | Activation::QuantDequantU16 { .. })
}

/// `y` after the epilogue, from the definition: the sums in `f64` (exact for the test data
/// unless an operand is special), the activation in `f64`, rounded once.
fn reference(e: &Epilogue, y: &[f32], b: &[f32], z: &[f32]) -> Vec<f32> {
    (0..e.y_len())
        .map(|i| {
            let (r, c) = (i / e.cols, i % e.cols);
            let mut v = f64::from(y[i]);
            match e.bias {
                Bias::None => {}
                Bias::PerRow { period } => v += f64::from(b[r % period]),
                Bias::PerColumn => v += f64::from(b[c]),
            }
            if e.residual {
                v += f64::from(z[i]);
            }
            reference_act(e.act, v) as f32
        })
        .collect()
}

/// `got` against the definition's `want`: bit for bit (NaN for NaN) for the exact activations
/// and when the result is infinite, otherwise within 8 ulp (the vectorized functions' bound),
/// relative everywhere but below `2⁻¹²⁶`.
fn close(act: Activation, got: f32, want: f32) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if exact(act) || want.is_infinite() {
        return got.to_bits() == want.to_bits();
    }
    (got - want).abs() <= 8.0 * f32::EPSILON * want.abs() + 1e-40
}

/// Guard elements around each operand: NaN around the inputs (a read outside them would make
/// some output NaN), a sentinel around `y` (a write outside it would change one).
const GUARD: usize = 7;
const SENTINEL: f32 = 1234.5;

/// `v` with `GUARD` copies of `fill` on each side, as bytes starting `offset` bytes into an
/// `f32`-aligned allocation; returns the allocation (as words) and its byte pointer.
fn placed(v: &[f32], fill: f32, offset: usize) -> Vec<u32> {
    let floats: Vec<f32> = [vec![fill; GUARD], v.to_vec(), vec![fill; GUARD]].concat();
    let mut words = vec![0u32; floats.len() + 1];
    let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    // SAFETY: the words hold `4·(len + 1)` bytes, `offset < 4` plus `4·len` of them written.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>().add(offset), bytes.len()) };
    words
}

/// The floats `placed` put after the guard, `len` of them, and the guards around them.
fn read_back(words: &[u32], offset: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
    // SAFETY: the words hold `GUARD + len + GUARD` floats from byte `offset`.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>().add(offset), 4 * (len + 2 * GUARD)) };
    let all: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let guards = [&all[..GUARD], &all[GUARD + len..]].concat();
    (all[GUARD..GUARD + len].to_vec(), guards)
}

/// The first data element of a `placed` allocation.
fn data_ptr(words: &[u32], offset: usize) -> *const f32 {
    // SAFETY: inside the allocation (see `placed`).
    unsafe { words.as_ptr().cast::<u8>().add(offset + 4 * GUARD).cast() }
}

/// [`data_ptr`], writable.
fn data_ptr_mut(words: &mut [u32], offset: usize) -> *mut f32 {
    // SAFETY: inside the allocation (see `placed`).
    unsafe { words.as_mut_ptr().cast::<u8>().add(offset + 4 * GUARD).cast() }
}

/// Runs `e` with every instruction set, each operand at byte offset `offsets[i]`, on `y`,
/// `b`, `z`; checks the result against the definition, the scalar [`Activation::apply`] bit
/// for bit, and the guards.
fn check(e: &Epilogue, y: &[f32], b: &[f32], z: &[f32], offsets: [usize; 3]) {
    let want = reference(e, y, b, z);
    let (bw, zw) = (placed(b, f32::NAN, offsets[1]), placed(z, f32::NAN, offsets[2]));
    let mut first: Option<Vec<f32>> = None;
    for isa in Isa::runnable() {
        let mut yw = placed(y, SENTINEL, offsets[0]);
        let yp = data_ptr_mut(&mut yw, offsets[0]);
        // SAFETY: each pointer has its operand's elements after it, inside its allocation;
        // the three allocations are distinct.
        unsafe { e.run_raw(isa, yp, data_ptr(&bw, offsets[1]), data_ptr(&zw, offsets[2])) };
        let (got, guards) = read_back(&yw, offsets[0], y.len());
        assert!(guards.iter().all(|&g| g == SENTINEL), "{isa:?} wrote outside y: {e:?}");
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(close(e.act, g, w), "{isa:?}, element {i}: {g} instead of {w}: {e:?} at offsets {offsets:?}");
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert!(f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())), "{isa:?} differs from another instruction set: {e:?}"),
        }
    }
    // The rows compute what the scalar function does, element by element.
    let scalar: Vec<f32> = (0..e.y_len())
        .map(|i| {
            let (r, c) = (i / e.cols, i % e.cols);
            let mut v = y[i];
            match e.bias {
                Bias::None => {}
                Bias::PerRow { period } => v += b[r % period],
                Bias::PerColumn => v += b[c],
            }
            if e.residual {
                v += z[i];
            }
            e.act.apply(v)
        })
        .collect();
    let got = first.expect("the portable kernel runs everywhere");
    assert!(got.iter().zip(&scalar).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())), "{e:?}: {got:?} vs {scalar:?}");
}

fn biases(rows: usize) -> [Bias; 4] {
    [Bias::None, Bias::PerRow { period: rows.max(1) }, Bias::PerRow { period: 3 }, Bias::PerColumn]
}

#[test]
fn every_activation_bias_and_addend_matches_the_definition() {
    let mut rng = Rng::new(5);
    // Odd sizes, rows longer than a stack chunk, one-column matrices.
    for (rows, cols) in [(1, 1), (3, 7), (6, 33), (2, 300), (17, 1), (4, 16), (1, 517)] {
        for bias in biases(rows) {
            for residual in [false, true] {
                for act in activations() {
                    let e = Epilogue { rows, cols, bias, residual, act };
                    let (y, b, z) = (rng.data(e.y_len()), rng.data(e.bias_len()), rng.data(e.z_len()));
                    check(&e, &y, &b, &z, [0, 0, 0]);
                }
            }
        }
    }
}

#[test]
fn operands_at_odd_byte_offsets() {
    // Weights mapped from a model file sit at any byte offset; inputs and outputs come from
    // callers.
    let mut rng = Rng::new(9);
    for offsets in [[1, 0, 0], [0, 2, 0], [0, 0, 3], [3, 1, 2], [0, 1, 1]] {
        for bias in biases(5) {
            for act in [Activation::None, Activation::Relu, Activation::Clip { min: 0.0, max: 6.0 }, Activation::Gelu] {
                let e = Epilogue { rows: 5, cols: 261, bias, residual: true, act };
                let (y, b, z) = (rng.data(e.y_len()), rng.data(e.bias_len()), rng.data(e.z_len()));
                check(&e, &y, &b, &z, offsets);
            }
        }
    }
}

#[test]
fn special_values_through_every_activation() {
    // Every special value as y with every one as z, no bias: NaN and infinities come through
    // as the definition says; −0 stays −0 without an activation.
    let n = SPECIAL.len();
    let y: Vec<f32> = (0..n * n).map(|i| SPECIAL[i / n]).collect();
    let z: Vec<f32> = (0..n * n).map(|i| SPECIAL[i % n]).collect();
    let nan_bounds = [Activation::Clip { min: f32::NAN, max: 1.0 }, Activation::Clip { min: -1.0, max: f32::NAN }];
    for act in activations().into_iter().chain(nan_bounds) {
        for residual in [false, true] {
            let e = Epilogue { rows: n, cols: n, bias: Bias::None, residual, act };
            check(&e, &y, &[], &z, [0, 0, 0]);
        }
    }
    let mut y = [-0.0f32; 3];
    Epilogue { rows: 1, cols: 3, bias: Bias::None, residual: false, act: Activation::Clip { min: -1.0, max: 1.0 } }.run(&mut y, &[], &[]);
    assert!(y.iter().all(|v| v.to_bits() == (-0.0f32).to_bits()), "{y:?}");
    let mut y = [-0.0f32, f32::NAN, -2.0];
    Epilogue { rows: 1, cols: 3, bias: Bias::None, residual: false, act: Activation::Relu }.run(&mut y, &[], &[]);
    assert_eq!((y[0].to_bits(), y[1].is_nan(), y[2]), (0, true, 0.0));
}

#[test]
fn the_addend_may_be_y_itself() {
    let mut rng = Rng::new(3);
    for act in [Activation::None, Activation::Relu, Activation::Sigmoid] {
        let e = Epilogue { rows: 3, cols: 300, bias: Bias::PerColumn, residual: true, act };
        let (y, b) = (rng.data(e.y_len()), rng.data(e.bias_len()));
        let want = reference(&e, &y, &b, &y);
        for isa in Isa::runnable() {
            let mut got = y.clone();
            let p = got.as_mut_ptr();
            // SAFETY: `z` is `y` itself, which the contract allows.
            unsafe { e.run_raw(isa, p, b.as_ptr(), p) };
            assert!(got.iter().zip(&want).all(|(&g, &w)| close(act, g, w)), "{isa:?} {act:?}");
        }
    }
}

#[test]
fn lengths_cover_what_is_addressed() {
    let e = Epilogue { rows: 6, cols: 5, bias: Bias::PerRow { period: 4 }, residual: true, act: Activation::Relu };
    assert_eq!((e.y_len(), e.bias_len(), e.z_len()), (30, 4, 30));
    assert_eq!(Epilogue { rows: 2, ..e }.bias_len(), 2);
    assert_eq!(Epilogue { bias: Bias::PerColumn, residual: false, ..e }.bias_len(), 5);
    assert_eq!(Epilogue { cols: 0, ..e }.bias_len(), 0);
    assert!(e.is_valid());
    assert!(!Epilogue { bias: Bias::PerRow { period: 0 }, ..e }.is_valid());
    assert!(!Epilogue { rows: usize::MAX, ..e }.is_valid());
    assert_eq!(Epilogue { rows: usize::MAX, ..e }.y_len(), usize::MAX);
    assert!(Epilogue { bias: Bias::None, residual: false, act: Activation::None, ..e }.is_identity());
}

#[test]
fn codes_round_trip() {
    for act in activations() {
        let (code, alpha, beta) = act.code();
        assert_eq!(Activation::from_code(code, alpha, beta), Some(act));
    }
    assert_eq!(Activation::from_code(12, 0.0, 0.0), None);
    assert_eq!(Activation::from_code(-1, 0.0, 0.0), None);
}

#[test]
fn the_c_entry_point_matches_the_slice_api_and_refuses_nonsense() {
    let mut rng = Rng::new(13);
    let (y0, b, z) = (rng.data(12), rng.data(4), rng.data(12));
    // (bias mode, period, residual, act code, alpha, beta)
    for (mode, period, residual, code, alpha, beta) in [(0, 0, 0, 1, 0.0, 0.0), (1, 2, 1, 2, -1.0, 1.0), (2, 0, 1, 3, 0.25, 0.0), (1, 4, 0, 7, 0.0, 0.0), (2, 0, 0, 11, 0.0, 0.0)] {
        let bias = match mode {
            0 => Bias::None,
            1 => Bias::PerRow { period: period as usize },
            _ => Bias::PerColumn,
        };
        let e = Epilogue { rows: 3, cols: 4, bias, residual: residual != 0, act: Activation::from_code(code, alpha, beta).unwrap() };
        let mut want = y0.clone();
        e.run(&mut want, &b, &z);
        let mut got = y0.clone();
        let p = got.as_mut_ptr();
        // Absent operands get `y`'s own address, as generated code passes them.
        let (bp, zp) = (if mode == 0 { p.cast_const() } else { b.as_ptr() }, if residual == 0 { p.cast_const() } else { z.as_ptr() });
        // SAFETY: 3·4 elements of y and z, 4 of the bias.
        unsafe { kiln_rt_epilogue(p, bp, zp, 3, 4, mode, period, residual, code, alpha, beta) };
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())), "mode {mode}, act {code}");
    }
    // (rows, cols, bias mode, period, act code): each is refused and touches nothing.
    for (rows, cols, mode, period, code) in [(-1, 4, 0, 0, 1), (3, -4, 0, 0, 1), (3, 4, 3, 0, 1), (3, 4, -1, 0, 1), (3, 4, 1, 0, 1), (3, 4, 1, -2, 1), (3, 4, 0, 0, 12), (3, 4, 0, 0, -1), (i64::MAX, 4, 0, 0, 1)] {
        let mut y = [SENTINEL; 12];
        let p = y.as_mut_ptr();
        // SAFETY: every case is refused before addressing anything.
        unsafe { kiln_rt_epilogue(p, b.as_ptr(), z.as_ptr(), rows, cols, mode, period, 1, code, 0.0, 0.0) };
        assert!(y.iter().all(|&v| v == SENTINEL), "{rows} {cols} {mode} {period} {code}");
    }
}

#[test]
fn constants_are_the_loop_irs() {
    // The lowering's constants are `f64` values rounded to `f32`.
    assert_eq!(SQRT_2_OVER_PI, (2.0f64 / std::f64::consts::PI).sqrt() as f32);
    assert_eq!(SIXTH, (1.0f64 / 6.0) as f32);
}
