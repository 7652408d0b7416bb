//! 1×1 convolutions of NCHW16c tensors ([`super`]), any stride: `y = act(W·x + bias + z)`.
//!
//! A tile is [`NP`] output pixels × [`NV`] vectors of 16 output channels, summed in registers
//! over every input channel in order: each step loads the `NV` vectors of the step's weights
//! (packed ahead, step-major panels of 64 output channels) and broadcasts the step's channel
//! of each of the `NP` pixels, which for 16 consecutive steps lies in the same line of each
//! pixel. The bias, the addend (a vector per pixel and block, laid out as `y`) and the
//! activation are applied in registers and each vector is stored whole: no tile writes part
//! of a line, and no pass over `y` follows.
//!
//! **Numerics.** Each output is one chain of fused multiply-adds over the input channels in
//! ascending order from zero, then `+ bias`, `+ z` and the activation: the values of the NCHW
//! routine's flat-plane paths (`conv/flat.rs`) and of any `k` block size that covers all
//! steps, on any thread count.

use std::ops::Range;

use super::{LANES, blocked_len};
use crate::epilogue::Activation;
use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};

/// Pixels per tile.
const NP: usize = 6;
/// Vectors of 16 output channels per tile (24 of the 32 registers accumulate).
const NV: usize = 4;
/// Output channels per weight panel.
pub const PANEL: usize = NV * LANES;

/// Fewer multiply-adds than this run on one thread.
const SPLIT_MIN_FMAS: usize = 1 << 18;

/// One blocked 1×1 convolution of one image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pointwise {
    /// Input channels.
    pub channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Input rows.
    pub h: usize,
    /// Input columns.
    pub w: usize,
    /// The stride along both axes.
    pub stride: usize,
    /// Whether a bias per output channel is added.
    pub bias: bool,
    /// Whether an addend laid out as `y` is added.
    pub residual: bool,
    /// The activation: [`Activation::None`], `Relu` or `Clip` ([`Pointwise::is_valid`]).
    pub act: Activation,
}

impl Pointwise {
    /// Whether the shape is one this routine computes: nonzero sizes and stride, and an
    /// activation it applies in registers.
    pub fn is_valid(&self) -> bool {
        let act = matches!(self.act, Activation::None | Activation::Relu | Activation::Clip { .. });
        act && self.channels > 0 && self.out_channels > 0 && self.h > 0 && self.w > 0 && self.stride > 0
    }

    /// Output rows.
    pub fn oh(&self) -> usize {
        (self.h - 1) / self.stride + 1
    }

    /// Output columns.
    pub fn ow(&self) -> usize {
        (self.w - 1) / self.stride + 1
    }

    /// Floats of the blocked input.
    pub fn x_len(&self) -> usize {
        blocked_len(self.channels, self.h * self.w)
    }

    /// Floats of the blocked output (and of the addend, when there is one).
    pub fn y_len(&self) -> usize {
        blocked_len(self.out_channels, self.oh() * self.ow())
    }

    /// Floats of the packed weights.
    pub fn packed_len(&self) -> usize {
        self.out_channels.next_multiple_of(PANEL) * self.channels
    }

    /// Packs `w` (`out_channels` rows of `channels` floats) into the panels [`run`](Self::run)
    /// reads: panel `i`'s step `c` holds `w[64i + j][c]` in lane `j`, zero past the last
    /// output channel.
    ///
    /// # Panics
    ///
    /// If `w` or `dst` is shorter than that.
    pub fn pack_weights(&self, w: &[f32], dst: &mut [f32]) {
        let (m, k) = (self.out_channels, self.channels);
        let w = &w[..m * k];
        for (i, panel) in dst[..self.packed_len()].chunks_exact_mut(PANEL * k).enumerate() {
            for (c, step) in panel.chunks_exact_mut(PANEL).enumerate() {
                for (j, v) in step.iter_mut().enumerate() {
                    let r = i * PANEL + j;
                    *v = if r < m { w[r * k + c] } else { 0.0 };
                }
            }
        }
    }

    /// `y = act(W·x + bias + z)` with the weights packed by [`pack_weights`](Self::pack_weights),
    /// over the current thread pool; `bias` is read when `self.bias`, `z` when `self.residual`.
    ///
    /// # Panics
    ///
    /// If the shape is not [valid](Self::is_valid) or a slice is shorter than its layout.
    pub fn run(&self, x: &[f32], wp: &[f32], bias: &[f32], z: &[f32], y: &mut [f32]) {
        self.run_with(Isa::detected(), x, wp, bias, z, y)
    }

    /// [`run`](Self::run) with the kernel of `isa`: AVX-512 if it is that and the CPU has it,
    /// else the portable loop (the same values).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run).
    pub fn run_with(&self, isa: Isa, x: &[f32], wp: &[f32], bias: &[f32], z: &[f32], y: &mut [f32]) {
        assert!(self.is_valid(), "unsupported pointwise convolution {self:?}");
        assert!(x.len() >= self.x_len() && wp.len() >= self.packed_len() && y.len() >= self.y_len());
        assert!(!self.bias || bias.len() >= self.out_channels);
        assert!(!self.residual || z.len() >= self.y_len());
        let wide = isa == Isa::Avx512 && isa.available();
        let pixels = self.oh() * self.ow();
        let fmas = self.out_channels.saturating_mul(self.channels).saturating_mul(pixels);
        let ways = if fmas < SPLIT_MIN_FMAS { 1 } else { pool::threads() };
        let args = SharedPtr((x.as_ptr(), wp.as_ptr(), if self.bias { bias.as_ptr() } else { std::ptr::null() }, if self.residual { z.as_ptr() } else { std::ptr::null() }, y.as_mut_ptr()));
        let task = |i: usize| {
            let (x, wp, bias, z, y) = args.get();
            let part = pool::part(pixels, ways, NP, i);
            // SAFETY: the lengths are checked above; each task writes its own pixels of `y`.
            unsafe {
                #[cfg(target_arch = "x86_64")]
                if wide {
                    return avx512(self, x, wp, bias, z, y, part);
                }
                portable(self, x, wp, bias, z, y, part)
            }
        };
        if ways <= 1 {
            task(0);
        } else {
            pool::for_each(ways, &task);
        }
    }

    /// The input float of output pixel `q`'s step-0 channel, from the input's start.
    fn input_at(&self, q: usize) -> usize {
        let (oy, ox) = (q / self.ow(), q % self.ow());
        (oy * self.stride * self.w + ox * self.stride) * LANES
    }
}

/// Pixels per block: the panels of a block run over the same input pixels, which stay in L2
/// (at most 256 KiB of them).
fn block_pixels(channels: usize) -> usize {
    (64 * 1024 / channels.max(1)).next_multiple_of(NP).max(NP)
}

/// [`Pointwise::run`]'s pixels `part` with AVX-512.
///
/// # Safety
///
/// The operands hold their layouts (`bias`, `z` null when absent); the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512(p: &Pointwise, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, part: Range<usize>) {
    let panels = p.out_channels.div_ceil(PANEL);
    let bp = block_pixels(p.channels);
    for t0 in part.clone().step_by(bp) {
        let t1 = (t0 + bp).min(part.end);
        // The first panel's tiles ask for the next block's input into L2 (see `X_AHEAD`).
        let next = (t0 + bp..(t0 + 2 * bp).min(part.end), p.channels.div_ceil(LANES), p.h * p.w * LANES);
        for i in 0..panels {
            let ahead = if i == 0 { Some(next.clone()) } else { None };
            // SAFETY: by the caller's contract.
            unsafe {
                match (p.out_channels - i * PANEL).div_ceil(LANES).min(NV) {
                    1 => panel::<1>(p, x, wp, bias, z, y, i, t0..t1, ahead),
                    2 => panel::<2>(p, x, wp, bias, z, y, i, t0..t1, ahead),
                    3 => panel::<3>(p, x, wp, bias, z, y, i, t0..t1, ahead),
                    _ => panel::<NV>(p, x, wp, bias, z, y, i, t0..t1, ahead),
                }
            }
        }
    }
}

/// Panel `i`'s `V` vectors of output channels for the tiles of `pixels`.
///
/// # Safety
///
/// As [`avx512`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn panel<const V: usize>(p: &Pointwise, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, i: usize, pixels: Range<usize>, ahead: Option<(Range<usize>, usize, usize)>) {
    use std::arch::x86_64::*;
    let k = p.channels;
    let (plane_in, plane_out) = (p.h * p.w * LANES, p.oh() * p.ow() * LANES);
    // SAFETY: by the caller's contract; every address below is inside its operand's layout.
    unsafe {
        let w = wp.add(i * PANEL * k);
        for t in pixels.clone().step_by(NP) {
            let n = NP.min(pixels.end - t);
            if let Some((next, blocks, plane)) = &ahead {
                let q = next.start + (t - pixels.start);
                for q in q..(q + NP).min(next.end) {
                    crate::prefetch::rows_to_l2(x.wrapping_add(p.input_at(q)), *blocks, LANES, *plane);
                }
            }
            // A short last tile repeats its last pixel: computed, not stored.
            let xs: [*const f32; NP] = std::array::from_fn(|j| x.add(p.input_at(t + j.min(n - 1))));
            let mut acc = [[_mm512_setzero_ps(); V]; NP];
            let mut ws = w;
            let mut c = 0;
            while c < k {
                let block = c / LANES * plane_in;
                for s in c % LANES..LANES.min(c % LANES + k - c) {
                    let wv: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(ws.add(v * LANES)));
                    for j in 0..NP {
                        let b = _mm512_set1_ps(*xs[j].add(block + s));
                        for v in 0..V {
                            acc[j][v] = _mm512_fmadd_ps(wv[v], b, acc[j][v]);
                        }
                    }
                    ws = ws.add(PANEL);
                }
                c = (c / LANES + 1) * LANES;
            }
            for v in 0..V {
                let co = i * PANEL + v * LANES;
                let lanes = LANES.min(p.out_channels - co);
                let mask = ((1u32 << lanes) - 1) as __mmask16;
                let b = if bias.is_null() { _mm512_setzero_ps() } else { _mm512_maskz_loadu_ps(mask, bias.add(co)) };
                let out = co / LANES * plane_out;
                for j in 0..n {
                    let at = out + (t + j) * LANES;
                    let mut s = _mm512_add_ps(acc[j][v], b);
                    if !z.is_null() {
                        s = _mm512_add_ps(s, _mm512_loadu_ps(z.add(at)));
                    }
                    s = match p.act {
                        Activation::Relu => _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(s, _mm512_setzero_ps()), s),
                        Activation::Clip { min, max } => {
                            let (lo, hi) = (_mm512_set1_ps(min), _mm512_set1_ps(max));
                            let u = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(s, lo), lo, s);
                            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_NGE_UQ>(u, hi), hi, u)
                        }
                        _ => s,
                    };
                    _mm512_mask_storeu_ps(y.add(at), mask, s);
                }
            }
        }
    }
}

/// [`Pointwise::run`]'s pixels `part`, one float at a time (the same chains of fused
/// multiply-adds).
///
/// # Safety
///
/// The operands hold their layouts (`bias`, `z` null when absent).
unsafe fn portable(p: &Pointwise, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, part: Range<usize>) {
    let (k, plane_in, plane_out) = (p.channels, p.h * p.w * LANES, p.oh() * p.ow() * LANES);
    for q in part {
        let xq = p.input_at(q);
        for co in 0..p.out_channels {
            let (panel, lane) = (co / PANEL, co % PANEL);
            // SAFETY: by the caller's contract.
            unsafe {
                let mut s = 0.0f32;
                for c in 0..k {
                    let wv = *wp.add((panel * k + c) * PANEL + lane);
                    s = wv.mul_add(*x.add(c / LANES * plane_in + xq + c % LANES), s);
                }
                if !bias.is_null() {
                    s += *bias.add(co);
                }
                let at = co / LANES * plane_out + q * LANES + co % LANES;
                if !z.is_null() {
                    s += *z.add(at);
                }
                *y.add(at) = match p.act {
                    Activation::Relu => if s > 0.0 || s.is_nan() { s } else { 0.0 },
                    Activation::Clip { min, max } => {
                        let u = if s > min || s.is_nan() { s } else { min };
                        if u < max || u.is_nan() { u } else { max }
                    }
                    _ => s,
                };
            }
        }
    }
}
