//! The epilogue of fused products and convolutions, in place over an `f32` output viewed as a
//! row-major `rows × cols` matrix: `y[r, c] = act(y[r, c] + bias + z[r, c])`, the bias optional
//! and indexed by row (`b[r mod period]`: a convolution's `[N·M, P]` output, channel `r mod M`)
//! or by column (`b[c]`: a product's bias over its last axis), the residual addend `z` optional
//! with `y`'s layout, and one of the fused ops' activations.
//!
//! **Design.** One pass over `y`, a row at a time, in a loop the compiler vectorizes: the loop
//! body is an `#[inline(always)]` generic over the activation, instantiated in functions
//! compiled for AVX-512 and AVX2 (`#[target_feature]`, chosen at run time by
//! [`Isa::detected`], as `sgemm` does) and for the build target. Without a bias the matrix is
//! one long row. The piecewise activations (none, Relu, Clip, LeakyRelu, HardSwish) are
//! compares and selects, and Sigmoid, Tanh, Gelu, GeluTanh and Silu branch-free `f32` arithmetic
//! (the crate's `vmath`), so every activation vectorizes. The row loops are index loops:
//! iterator adaptors in a function this large are not inlined, and their outlined copies lack
//! the `#[target_feature]`s (Gelu then ran scalar, 4× slower). Rows are read and written as
//! slices when every operand is `f32`-aligned and `y` overlaps neither `z` nor the bias;
//! otherwise (operands at odd byte offsets: weights mapped from a model file, caller buffers;
//! or `z` at `y`'s own address) each row goes through stack copies of 256 elements, so any
//! alignment works and `z == y` reads the old `y`.
//!
//! **Numerics.** `v = (y + bias) + z` in `f32` (without a bias nothing is added: `−0` stays
//! `−0`), then
//!
//! | activation | value |
//! | --- | --- |
//! | relu | `max(v, 0)` |
//! | clip | `min(max(v, alpha), beta)` (`beta` wins when `alpha > beta`) |
//! | leaky_relu | `v > 0 ? v : v·alpha` |
//! | hard_swish | `v · max(min(v·(1/6) + 0.5, 1), 0)` |
//! | sigmoid | `1 / (1 + e^−v)` |
//! | tanh | `tanh v` |
//! | gelu | `½v·(1 + erf(v/√2))` |
//! | gelu_tanh | `½v·(1 + tanh(√(2/π)·(v + 0.044715·(v·v)·v)))` |
//! | quant_dequant_u8 | `(clamp(round(v / α) + β, 0, 255) − β) · α`, rounding half to even, NaN to level 0; `_u16` to 65535 |
//!
//! The first four are the loop IR's expressions of them
//! (`kiln_lower::elementwise::activation_expr`) operation for operation, constants
//! rounded to `f32`, `min` and `max` propagating NaN and ordering `−0` below `+0`: bit for bit
//! what the scalar loop of generated code computed before this routine (up to NaN payloads).
//! The transcendental four are the crate's vectorizable `f32` functions (`vmath`), within 8
//! ulp of the exact values (the loop IR computes `exp`, `tanh`, `erf` in `f64` and rounds, then
//! `1 + erf` and `1 + tanh` in `f32`, which loses every digit where they are tiny; these keep
//! full relative precision there). The quantize-dequantize pair is QuantizeLinear's and
//! DequantizeLinear's lowering exactly (an `f32` quotient, then integers until the last
//! product). NaN in `y`, the bias or `z` comes out as NaN through every activation but that
//! pair, where it is level 0 as QuantizeLinear makes it. No fused multiply-adds: results are
//! the same on every instruction set, and the loop-IR interpreter calls this same code.
//!
//! **Performance.** `cargo run --release -p kiln-runtime --example epilogue_bench` times each
//! activation per instruction set. The piecewise activations stream about ten times faster
//! than the transcendental ones, and those are vectorized only because `vmath` computes them in
//! `f32`: with `f64` scalar math per element (the loop IR's formulas, which no compiler
//! vectorizes) Gelu is several times slower. One pass here replaces the two scalar loops of
//! generated code the fused ops' epilogue used to be (`kiln bench --kernels`). Recorded
//! results: `docs/performance.md`.

use crate::gemm::Isa;
use crate::vmath;
use crate::pool::{self, SharedPtr};

/// An activation applied last (the fused ops' `activation` attribute).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// The identity.
    None,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, min), max)`.
    Clip {
        /// The lower bound.
        min: f32,
        /// The upper bound (wins over `min`).
        max: f32,
    },
    /// `x > 0 ? x : alpha·x`.
    LeakyRelu {
        /// The slope below zero.
        alpha: f32,
    },
    /// `1 / (1 + e^−x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `x · max(0, min(1, x/6 + ½))`.
    HardSwish,
    /// `½x·(1 + erf(x/√2))`.
    Gelu,
    /// `½x·(1 + tanh(√(2/π)·(x + 0.044715x³)))`.
    GeluTanh,
    /// `x · sigmoid(x)` (SiLU, Swish).
    Silu,
    /// QuantizeLinear to `u8` then DequantizeLinear back, with one scale and zero point:
    /// `(clamp(round(x / scale) + zero_point, 0, 255) − zero_point) · scale`, rounding half to
    /// even and NaN taken to 0 (as QuantizeLinear's lowering does). An `i8` pair with zero point
    /// `z` is this with zero point `z + 128`.
    QuantDequantU8 {
        /// The quantization step.
        scale: f32,
        /// The zero point, an integer in `0..=255`.
        zero_point: f32,
    },
    /// [`QuantDequantU8`](Self::QuantDequantU8) through `u16`: levels `0..=65535`.
    QuantDequantU16 {
        /// The quantization step.
        scale: f32,
        /// The zero point, an integer in `0..=65535`.
        zero_point: f32,
    },
}

impl Activation {
    /// The activation with code `code` in [`kiln_rt_epilogue`]'s numbering (0 none, 1 relu,
    /// 2 clip to `[alpha, beta]`, 3 leaky_relu with slope `alpha`, 4 sigmoid, 5 tanh,
    /// 6 hard_swish, 7 gelu, 8 gelu_tanh, 9 quant_dequant_u8 and 10 quant_dequant_u16 with scale
    /// `alpha` and zero point `beta`, 11 silu); `None` for any other code.
    pub fn from_code(code: i64, alpha: f32, beta: f32) -> Option<Activation> {
        Some(match code {
            0 => Activation::None,
            1 => Activation::Relu,
            2 => Activation::Clip { min: alpha, max: beta },
            3 => Activation::LeakyRelu { alpha },
            4 => Activation::Sigmoid,
            5 => Activation::Tanh,
            6 => Activation::HardSwish,
            7 => Activation::Gelu,
            8 => Activation::GeluTanh,
            9 => Activation::QuantDequantU8 { scale: alpha, zero_point: beta },
            10 => Activation::QuantDequantU16 { scale: alpha, zero_point: beta },
            11 => Activation::Silu,
            _ => return None,
        })
    }

    /// The code and the two parameters (`alpha`, `beta`; zero when unused) of
    /// [`from_code`](Self::from_code).
    pub fn code(self) -> (i64, f32, f32) {
        match self {
            Activation::None => (0, 0.0, 0.0),
            Activation::Relu => (1, 0.0, 0.0),
            Activation::Clip { min, max } => (2, min, max),
            Activation::LeakyRelu { alpha } => (3, alpha, 0.0),
            Activation::Sigmoid => (4, 0.0, 0.0),
            Activation::Tanh => (5, 0.0, 0.0),
            Activation::HardSwish => (6, 0.0, 0.0),
            Activation::Gelu => (7, 0.0, 0.0),
            Activation::GeluTanh => (8, 0.0, 0.0),
            Activation::QuantDequantU8 { scale, zero_point } => (9, scale, zero_point),
            Activation::QuantDequantU16 { scale, zero_point } => (10, scale, zero_point),
            Activation::Silu => (11, 0.0, 0.0),
        }
    }

    /// The activation of one value, exactly as the routine computes it.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => Identity.f(x),
            Activation::Relu => Relu.f(x),
            Activation::Clip { min, max } => clip(min, max, x),
            Activation::LeakyRelu { alpha } => Leaky(alpha).f(x),
            Activation::Sigmoid => Sigmoid.f(x),
            Activation::Tanh => Tanh.f(x),
            Activation::HardSwish => HardSwish.f(x),
            Activation::Gelu => Gelu.f(x),
            Activation::GeluTanh => GeluTanh.f(x),
            Activation::Silu => Silu.f(x),
            Activation::QuantDequantU8 { scale, zero_point } => QuantDequant { scale, zero_point, top: 255.0 }.f(x),
            Activation::QuantDequantU16 { scale, zero_point } => QuantDequant { scale, zero_point, top: 65535.0 }.f(x),
        }
    }
}

/// Where the bias comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bias {
    /// No bias: nothing is added.
    None,
    /// Row `r` adds `b[r mod period]` (a convolution: `period` output channels, `rows` = images
    /// × channels).
    PerRow {
        /// Bias elements; positive.
        period: usize,
    },
    /// Column `c` adds `b[c]` (a product's bias over its last axis).
    PerColumn,
}

/// One epilogue: `y[r, c] = act(y[r, c] + bias + z[r, c])` over a row-major `rows × cols`
/// matrix (row stride `cols`), `z` (when `residual`) laid out as `y`.
///
/// ```
/// use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
/// // Two images of two channels of three pixels: a bias per channel, then Relu.
/// let e = Epilogue { rows: 4, cols: 3, bias: Bias::PerRow { period: 2 }, residual: false, act: Activation::Relu };
/// let mut y = [1.0, -2.0, 3.0, 0.5, 0.5, -9.0, 1.0, -2.0, 3.0, 0.5, 0.5, -9.0];
/// e.run(&mut y, &[1.0, -1.0], &[]);
/// assert_eq!(y, [2.0, 0.0, 4.0, 0.0, 0.0, 0.0, 2.0, 0.0, 4.0, 0.0, 0.0, 0.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    /// Rows of `y`.
    pub rows: usize,
    /// Columns of `y` (its row stride).
    pub cols: usize,
    /// The bias and how it is indexed.
    pub bias: Bias,
    /// Whether `z` is added.
    pub residual: bool,
    /// The activation applied last.
    pub act: Activation,
}

impl Epilogue {
    /// Whether the sizes make sense: a positive period for a bias per row, and `rows·cols`
    /// elements representable as bytes in `isize`. [`run`](Self::run) does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        let bytes = self.rows.checked_mul(self.cols).and_then(|n| n.checked_mul(4));
        bytes.is_some_and(|b| b <= isize::MAX as usize) && self.bias != Bias::PerRow { period: 0 }
    }

    /// Elements of `y` read and written (saturating, so an absurd shape reads as too long for
    /// any slice).
    pub fn y_len(&self) -> usize {
        self.rows.saturating_mul(self.cols)
    }

    /// Elements of the bias read (0 when there is none or `y` is empty).
    pub fn bias_len(&self) -> usize {
        if self.y_len() == 0 {
            return 0;
        }
        match self.bias {
            Bias::None => 0,
            Bias::PerRow { period } => period.min(self.rows),
            Bias::PerColumn => self.cols,
        }
    }

    /// Elements of `z` read (0 without the residual addend).
    pub fn z_len(&self) -> usize {
        if self.residual { self.y_len() } else { 0 }
    }

    /// True if the epilogue changes nothing (no bias, no addend, no activation).
    pub fn is_identity(&self) -> bool {
        self.bias == Bias::None && !self.residual && self.act == Activation::None
    }

    /// Applies the epilogue with the detected instruction set; nothing when the sizes are not
    /// [valid](Self::is_valid).
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`y_len`](Self::y_len), [`bias_len`](Self::bias_len) or
    /// [`z_len`](Self::z_len).
    pub fn run(&self, y: &mut [f32], bias: &[f32], z: &[f32]) {
        self.run_with(Isa::detected(), y, bias, z);
    }

    /// Applies the epilogue with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, y: &mut [f32], bias: &[f32], z: &[f32]) {
        assert!(y.len() >= self.y_len() && bias.len() >= self.bias_len() && z.len() >= self.z_len(), "epilogue operand slices are too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element the epilogue addresses; `y` is exclusively
        // borrowed, so it overlaps neither of the others.
        unsafe { self.run_raw(isa, y.as_mut_ptr(), bias.as_ptr(), z.as_ptr()) }
    }

    /// The epilogue on raw pointers.
    ///
    /// # Safety
    ///
    /// `y` readable and writable for [`y_len`](Self::y_len) elements, `bias` readable for
    /// [`bias_len`](Self::bias_len) and `z` for [`z_len`](Self::z_len) (an unused operand is
    /// not touched); `z` is `y` itself or does not overlap it, the bias does not overlap `y`;
    /// the CPU runs `isa`. No alignment is required.
    unsafe fn run_raw(&self, isa: Isa, y: *mut f32, bias: *const f32, z: *const f32) {
        if !self.is_valid() || self.y_len() == 0 || self.is_identity() {
            return;
        }
        let parts = if self.y_len() >= SPLIT_MIN { pool::threads() } else { 1 };
        if parts <= 1 {
            // SAFETY: by the caller's contract.
            return unsafe { self.run_part(isa, y, bias, z) };
        }
        let ptrs = SharedPtr((y, bias, z));
        pool::for_each(parts, &|i| {
            let (y, b, z) = ptrs.get();
            // SAFETY: each part is a block of `y` (with its rows of `z` and its bias) apart
            // from every other part's.
            unsafe {
                let (e, at, b) = match self.bias {
                    // One long row, cut at whole stack chunks: each element takes the path it
                    // takes unsplit.
                    Bias::None => {
                        let r = pool::part(self.y_len(), parts, CHUNK, i);
                        (Epilogue { rows: 1, cols: r.len(), ..*self }, r.start, b)
                    }
                    Bias::PerColumn => {
                        let r = pool::part(self.rows, parts, 1, i);
                        (Epilogue { rows: r.len(), ..*self }, r.start * self.cols, b)
                    }
                    // Rows `r` read biases `r mod period`: a part inside the first period reads
                    // its own run of them; otherwise parts are whole periods.
                    Bias::PerRow { period } if self.rows <= period => {
                        let r = pool::part(self.rows, parts, 1, i);
                        (Epilogue { rows: r.len(), bias: Bias::PerRow { period: r.len().max(1) }, ..*self }, r.start * self.cols, b.add(r.start))
                    }
                    Bias::PerRow { period } => {
                        let r = pool::part(self.rows, parts, period, i);
                        (Epilogue { rows: r.len(), ..*self }, r.start * self.cols, b)
                    }
                };
                if e.y_len() > 0 {
                    let z = if self.residual { z.add(at) } else { z };
                    e.run_part(isa, y.add(at), b, z);
                }
            }
        });
    }

    /// The epilogue on this thread.
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw), with valid sizes.
    unsafe fn run_part(&self, isa: Isa, y: *mut f32, bias: *const f32, z: *const f32) {
        // SAFETY: by the caller's contract.
        unsafe { self.run_strided(isa, y, bias, z, self.cols) }
    }

    /// The epilogue on this thread, with `y` and `z` rows `ld ≥ cols` elements apart (a block
    /// of a larger matrix: a convolution's finished rows).
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw) for the `(rows − 1)·ld + cols` elements of `y` and `z`
    /// the rows span, with valid sizes; `z` does not overlap `y` unless `ld == cols`.
    pub(crate) unsafe fn run_strided(&self, isa: Isa, y: *mut f32, bias: *const f32, z: *const f32, ld: usize) {
        // SAFETY: by the caller's contract.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run_avx512(self, y, bias, z, ld),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run_avx2(self, y, bias, z, ld),
                _ => by_activation(self, y, bias, z, ld),
            }
        }
    }
}

/// [`by_activation`] compiled for AVX-512.
///
/// # Safety
///
/// As [`Epilogue::run_raw`]; the CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn run_avx512(e: &Epilogue, y: *mut f32, bias: *const f32, z: *const f32, ld: usize) {
    // SAFETY: by the caller's contract.
    unsafe { by_activation(e, y, bias, z, ld) }
}

/// [`by_activation`] compiled for AVX2.
///
/// # Safety
///
/// As [`Epilogue::run_raw`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(e: &Epilogue, y: *mut f32, bias: *const f32, z: *const f32, ld: usize) {
    // SAFETY: by the caller's contract.
    unsafe { by_activation(e, y, bias, z, ld) }
}

/// [`rows`] instantiated for the epilogue's activation.
///
/// # Safety
///
/// As [`Epilogue::run_raw`], with valid sizes.
#[inline(always)]
unsafe fn by_activation(e: &Epilogue, y: *mut f32, bias: *const f32, z: *const f32, ld: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        match e.act {
            Activation::None => rows(e, Identity, y, bias, z, ld),
            Activation::Relu => rows(e, Relu, y, bias, z, ld),
            Activation::Clip { min, max } if min.is_nan() || max.is_nan() => rows(e, Nan, y, bias, z, ld),
            Activation::Clip { min: lo, max: hi } if lo.to_bits() == (-0.0f32).to_bits() || hi.to_bits() == 0 => rows(e, Clip::<true> { lo, hi }, y, bias, z, ld),
            Activation::Clip { min: lo, max: hi } => rows(e, Clip::<false> { lo, hi }, y, bias, z, ld),
            Activation::LeakyRelu { alpha } => rows(e, Leaky(alpha), y, bias, z, ld),
            Activation::Sigmoid => rows(e, Sigmoid, y, bias, z, ld),
            Activation::Tanh => rows(e, Tanh, y, bias, z, ld),
            Activation::HardSwish => rows(e, HardSwish, y, bias, z, ld),
            Activation::Gelu => rows(e, Gelu, y, bias, z, ld),
            Activation::GeluTanh => rows(e, GeluTanh, y, bias, z, ld),
            Activation::Silu => rows(e, Silu, y, bias, z, ld),
            Activation::QuantDequantU8 { scale, zero_point } => rows(e, QuantDequant { scale, zero_point, top: 255.0 }, y, bias, z, ld),
            Activation::QuantDequantU16 { scale, zero_point } => rows(e, QuantDequant { scale, zero_point, top: 65535.0 }, y, bias, z, ld),
        }
    }
}

/// Epilogues of fewer elements than this run on one thread (a split costs a few microseconds).
const SPLIT_MIN: usize = 1 << 14;

/// Elements of a row copied to the stack at a time when the operands cannot be sliced.
const CHUNK: usize = 256;

/// The bias of one row.
#[derive(Clone, Copy)]
enum RowBias<'a> {
    None,
    /// One value for the whole row.
    Scalar(f32),
    /// One value per column.
    Cols(&'a [f32]),
}

/// Every row of the epilogue with activation `a`.
///
/// # Safety
///
/// As [`Epilogue::run_raw`], with valid sizes and a non-empty `y`.
#[inline(always)]
unsafe fn rows<A: Act>(e: &Epilogue, a: A, y: *mut f32, b: *const f32, z: *const f32, ld: usize) {
    // Without a bias, a contiguous matrix is one row.
    let (rows, cols, ld) = if e.bias == Bias::None && ld == e.cols { (1, e.y_len(), e.y_len()) } else { (e.rows, e.cols, ld) };
    // The elements the rows span.
    let n = (rows - 1) * ld + cols;
    let aligned = |p: *const f32| (p as usize).is_multiple_of(std::mem::align_of::<f32>());
    // Whether `[p, p + len)` lies apart from `y`.
    let apart = |p: *const f32, len: usize| {
        let (p, y) = (p as usize, y as usize);
        p.saturating_add(4 * len) <= y || p >= y.saturating_add(4 * n)
    };
    let z = e.residual.then_some(z);
    let cols_bias = e.bias == Bias::PerColumn;
    let sliced = aligned(y)
        && z.is_none_or(|z| aligned(z) && apart(z, n))
        && (!cols_bias || (aligned(b) && apart(b, e.cols)));
    for r in 0..rows {
        // SAFETY: row `r` of `y` and `z` is inside them; the bias element or row too; slices
        // are formed only of aligned operands apart from `y`.
        unsafe {
            let (yr, zr) = (y.add(r * ld), z.map(|z| z.add(r * ld)));
            let bias = match e.bias {
                Bias::None => RowBias::None,
                Bias::PerRow { period } => RowBias::Scalar(b.add(r % period).read_unaligned()),
                Bias::PerColumn if sliced => RowBias::Cols(std::slice::from_raw_parts(b, cols)),
                // The stack copies read the bias's columns themselves.
                Bias::PerColumn => RowBias::None,
            };
            if sliced {
                let zr = zr.map(|z| std::slice::from_raw_parts(z, cols));
                row(a, std::slice::from_raw_parts_mut(yr, cols), bias, zr);
            } else {
                row_copied(a, yr, cols, bias, cols_bias.then_some(b), zr);
            }
        }
    }
}

/// One row through stack copies: any alignment, and `z` may be `y` itself.
///
/// # Safety
///
/// `y` readable and writable for `cols` elements; `b` (per-column bias, used instead of
/// `bias` when present) and `z` readable for `cols`; neither overlaps `y` unless equal to it.
#[inline(always)]
unsafe fn row_copied<A: Act>(a: A, y: *mut f32, cols: usize, bias: RowBias<'_>, b: Option<*const f32>, z: Option<*const f32>) {
    let (mut yc, mut bc, mut zc) = ([0.0f32; CHUNK], [0.0f32; CHUNK], [0.0f32; CHUNK]);
    let mut at = 0;
    while at < cols {
        let len = CHUNK.min(cols - at);
        // SAFETY: elements `at..at + len` are inside each operand; byte copies need no
        // alignment, and the stack arrays overlap nothing else. `z` is read before `y` is
        // written, so `z == y` adds the old `y`.
        unsafe {
            let copy_in = |from: *const f32, to: &mut [f32; CHUNK]| std::ptr::copy_nonoverlapping(from.add(at).cast::<u8>(), to.as_mut_ptr().cast::<u8>(), 4 * len);
            copy_in(y, &mut yc);
            let bias = match b {
                Some(b) => {
                    copy_in(b, &mut bc);
                    RowBias::Cols(&bc[..len])
                }
                None => bias,
            };
            let zs = match z {
                Some(z) => {
                    copy_in(z, &mut zc);
                    Some(&zc[..len])
                }
                None => None,
            };
            row(a, &mut yc[..len], bias, zs);
            std::ptr::copy_nonoverlapping(yc.as_ptr().cast::<u8>(), y.add(at).cast::<u8>(), 4 * len);
        }
        at += len;
    }
}

/// One row: `y = a(y + bias + z)`, a loop per combination of operands so each vectorizes.
/// Index loops, not iterator adaptors: in a function this large the compiler does not inline
/// `for_each` or `zip`'s `fold`, and an outlined copy is compiled without the caller's
/// `#[target_feature]`s (and then, for the longer activations, not vectorized at all).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn row<A: Act>(a: A, y: &mut [f32], bias: RowBias<'_>, z: Option<&[f32]>) {
    let n = y.len();
    match (bias, z) {
        (RowBias::None, None) => {
            for i in 0..n {
                y[i] = a.f(y[i]);
            }
        }
        (RowBias::Scalar(b), None) => {
            for i in 0..n {
                y[i] = a.f(y[i] + b);
            }
        }
        (RowBias::Cols(b), None) => {
            let b = &b[..n];
            for i in 0..n {
                y[i] = a.f(y[i] + b[i]);
            }
        }
        (RowBias::None, Some(z)) => {
            let z = &z[..n];
            for i in 0..n {
                y[i] = a.f(y[i] + z[i]);
            }
        }
        (RowBias::Scalar(b), Some(z)) => {
            let z = &z[..n];
            for i in 0..n {
                y[i] = a.f((y[i] + b) + z[i]);
            }
        }
        (RowBias::Cols(b), Some(z)) => {
            let (b, z) = (&b[..n], &z[..n]);
            for i in 0..n {
                y[i] = a.f((y[i] + b[i]) + z[i]);
            }
        }
    }
}

/// An activation as an element function the row loops inline.
trait Act: Copy {
    fn f(self, x: f32) -> f32;
}

/// `max(x, bound)` as the loop IR defines it (NaN if either is NaN, `+0` above `−0`) for a
/// bound that is not NaN, with `neg_zero` telling whether it is `−0` (then `x == bound` keeps
/// `x`: `+0` stays `+0`). Compares and one select, so loops of it vectorize.
#[inline(always)]
fn max(x: f32, bound: f32, neg_zero: bool) -> f32 {
    if x > bound || x.is_nan() || (neg_zero && x == bound) { x } else { bound }
}

/// `min(x, bound)` as the loop IR defines it (NaN if either is NaN, `−0` below `+0`) for a
/// bound that is not NaN, with `pos_zero` telling whether it is `+0`.
#[inline(always)]
fn min(x: f32, bound: f32, pos_zero: bool) -> f32 {
    if x < bound || x.is_nan() || (pos_zero && x == bound) { x } else { bound }
}

#[derive(Clone, Copy)]
struct Identity;
impl Act for Identity {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        x
    }
}

/// Every result NaN (Clip with a NaN bound).
#[derive(Clone, Copy)]
struct Nan;
impl Act for Nan {
    #[inline(always)]
    fn f(self, _: f32) -> f32 {
        f32::NAN
    }
}

#[derive(Clone, Copy)]
struct Relu;
impl Act for Relu {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        max(x, 0.0, false)
    }
}

/// Clip to `[lo, hi]` (not NaN). `ZERO` when the bounds hold a zero whose sign [`max`] and
/// [`min`] must check (`lo = −0` or `hi = +0`); otherwise a cheaper form is exact: `x ≤ lo ? lo :
/// x` then `v ≥ hi ? hi : v` order `±0` correctly against a `+0` lower or `−0` upper bound, and
/// a NaN `x` fails both compares, so it comes out unchanged.
#[derive(Clone, Copy)]
struct Clip<const ZERO: bool> {
    lo: f32,
    hi: f32,
}

impl<const ZERO: bool> Act for Clip<ZERO> {
    #[inline(always)]
    // The negated compares are the point: true for a NaN operand (see below).
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn f(self, x: f32) -> f32 {
        if ZERO {
            let neg_zero = self.lo.to_bits() == (-0.0f32).to_bits();
            min(max(x, self.lo, neg_zero), self.hi, self.hi.to_bits() == 0)
        } else {
            // Unordered compares: a NaN `x` passes both selects, so no select keeps `x` by
            // itself, which the compiler turned into masked stores (tens of cycles each on
            // AMD's Zen 1) in rows without a bias.
            let v = if !(x <= self.lo) { x } else { self.lo };
            if !(v >= self.hi) { v } else { self.hi }
        }
    }
}

/// Clip as its [`Act`]: NaN bounds give NaN (what `min`/`max` give), a bound with a zero the
/// exact form, others the cheap one.
#[inline(always)]
fn clip(lo: f32, hi: f32, x: f32) -> f32 {
    if lo.is_nan() || hi.is_nan() {
        f32::NAN
    } else if lo.to_bits() == (-0.0f32).to_bits() || hi.to_bits() == 0 {
        Clip::<true> { lo, hi }.f(x)
    } else {
        Clip::<false> { lo, hi }.f(x)
    }
}

#[derive(Clone, Copy)]
struct Leaky(f32);
impl Act for Leaky {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        if x > 0.0 { x } else { x * self.0 }
    }
}

#[derive(Clone, Copy)]
struct Sigmoid;
impl Act for Sigmoid {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        vmath::sigmoid(x)
    }
}

#[derive(Clone, Copy)]
struct Tanh;
impl Act for Tanh {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        vmath::tanh(x)
    }
}

/// 1/6 rounded to `f32`.
pub(crate) const SIXTH: f32 = (1.0f64 / 6.0) as f32;
/// GeluTanh's cubic coefficient, rounded to `f32`.
const GELU_CUBIC: f32 = 0.044715f64 as f32;
/// √(2/π) rounded to `f32` (the test `constants_are_the_loop_irs` checks the digits).
const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4_f64 as f32;

#[derive(Clone, Copy)]
struct HardSwish;
impl Act for HardSwish {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        // `max(min(t, 1), 0)` is the clip of `t` to `[0, 1]`, and those bounds take the cheap form.
        x * Clip::<false> { lo: 0.0, hi: 1.0 }.f(x * SIXTH + 0.5)
    }
}

#[derive(Clone, Copy)]
struct Gelu;
impl Act for Gelu {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        vmath::gelu(x)
    }
}

#[derive(Clone, Copy)]
struct GeluTanh;
impl Act for GeluTanh {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        vmath::gelu_tanh(x, SQRT_2_OVER_PI, GELU_CUBIC)
    }
}

/// `x · sigmoid(x)`: the product the loop IR writes for SiLU, with the sigmoid it computes.
#[derive(Clone, Copy)]
struct Silu;
impl Act for Silu {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        x * vmath::sigmoid(x)
    }
}

/// Quantization to levels `0..=top` and back, as QuantizeLinear and DequantizeLinear lower it:
/// `q = round(x / scale) + zero_point` clamped to `[0, top]` (NaN fails `q ≥ 0`, so it is level
/// 0), then `(q − zero_point) · scale`. Integers up to 2^24 are exact in `f32`, so this is the
/// pair's value through the integer type.
#[derive(Clone, Copy)]
pub(crate) struct QuantDequant {
    pub scale: f32,
    pub zero_point: f32,
    pub top: f32,
}

impl QuantDequant {
    /// The parameters of `act` when it is a quantize-dequantize pair.
    pub(crate) fn of(act: Activation) -> Option<QuantDequant> {
        match act {
            Activation::QuantDequantU8 { scale, zero_point } => Some(QuantDequant { scale, zero_point, top: 255.0 }),
            Activation::QuantDequantU16 { scale, zero_point } => Some(QuantDequant { scale, zero_point, top: 65535.0 }),
            _ => None,
        }
    }
}

impl Act for QuantDequant {
    #[inline(always)]
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn f(self, x: f32) -> f32 {
        let q = (x / self.scale).round_ties_even() + self.zero_point;
        let v = if q >= 0.0 { q } else { 0.0 };
        let v = if v > self.top { self.top } else { v };
        (v - self.zero_point) * self.scale
    }
}

/// `y[r, c] = act(y[r, c] + bias + z[r, c])` in place over a row-major `rows × cols` `f32`
/// matrix: [`Epilogue`] for generated code. `bias_mode` 0 adds no bias, 1 `b[r mod period]`
/// (per row), 2 `b[c]` (per column); `residual != 0` adds `z`; `act` is an
/// [`Activation::from_code`] code with its parameters `alpha`, `beta`. Operands not used
/// (the bias with mode 0, `z` without `residual`) are never touched: generated code passes `y`
/// itself there. Nothing happens when a size is negative, the mode or code is unknown, or the
/// sizes are not [valid](Epilogue::is_valid) (a per-row bias with `period ≤ 0`, more than
/// `isize` bytes).
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations: `rows·cols` of `y`
/// readable and writable, the bias's `min(period, rows)` (per row) or `cols` (per column)
/// elements and `rows·cols` of `z` readable when used; `z` is `y` itself or does not overlap
/// it, and the bias does not overlap `y`. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_epilogue(y: *mut f32, b: *const f32, z: *const f32, rows: i64, cols: i64, bias_mode: i64, period: i64, residual: i64, act: i64, alpha: f32, beta: f32) {
    let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else { return };
    let bias = match (bias_mode, usize::try_from(period)) {
        (0, _) => Bias::None,
        (1, Ok(period)) => Bias::PerRow { period },
        (2, _) => Bias::PerColumn,
        _ => return,
    };
    let Some(act) = Activation::from_code(act, alpha, beta) else { return };
    let e = Epilogue { rows, cols, bias, residual: residual != 0, act };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { e.run_raw(Isa::detected(), y, b, z) }
}

#[cfg(test)]
mod tests;
