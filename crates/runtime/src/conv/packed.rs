//! Convolution weights packed when the model is compiled: `conv2d_packed`.
//!
//! `channels.rs` reads the weights as panels of `NV·LANES` output channels, step-major, and
//! packs them on every call otherwise: a pass over the weights that reads them from memory (a
//! model's weights do not stay in cache between runs) and writes them again, 9 % of the time of
//! a 256-channel 3×3 layer on 14 × 14 planes. [`Conv2d::pack_weights`] lays them out that way
//! once, per group, and [`kiln_rt_conv2d_packed`] computes the convolution from them.
//!
//! The layout is the one the running CPU's kernel reads ([`Conv2d::packed_width`]); under any
//! other (an object file run elsewhere, a width that no longer matches) the call unpacks the
//! weights into scratch space and computes the same values the plain call would, slowly.

use std::cell::RefCell;

use super::Conv2d;
use super::flat::Flat;
use crate::gemm::Isa;

thread_local! {
    /// Weights unpacked from a layout this CPU's kernel does not read.
    static UNPACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Floats of one group's packed weights: `mg` kernels of `k` steps in panels of `width`.
pub(super) fn group_len(mg: usize, k: usize, width: usize) -> usize {
    mg.div_ceil(width).saturating_mul(width).saturating_mul(k)
}

impl Conv2d {
    /// Output channels per panel of the weights as `isa`'s kernel reads them when every group
    /// is computed by `conv/channels.rs`; `None` when the convolution is computed otherwise
    /// (its weights are then read in place).
    pub fn packed_width(&self, isa: Isa) -> Option<usize> {
        if !self.is_valid() || self.y_len() == 0 {
            return None;
        }
        let (cg, mg) = (self.channels / self.groups, self.out_channels / self.groups);
        let win = self.win;
        if cg * win.kh * win.kw == 0 || mg == 1 || win.oh * win.ow == 1 {
            return None;
        }
        Flat::of(&win, cg, mg, isa)?.panel_width(isa)
    }

    /// The steps of one kernel (`channels / groups · kh · kw`) and output channels per group.
    fn group_shape(&self) -> (usize, usize) {
        (self.channels / self.groups.max(1) * self.win.kh * self.win.kw, self.out_channels / self.groups.max(1))
    }

    /// Floats of the weights packed in panels of `width` output channels (saturating).
    pub fn packed_len(&self, width: usize) -> usize {
        let (k, mg) = self.group_shape();
        group_len(mg, k, width.max(1)).saturating_mul(self.groups)
    }

    /// Packs the weights `w` (`out_channels × channels/groups × kh × kw` little-endian floats,
    /// any alignment) into `dst`, [`packed_len(width)`](Self::packed_len) floats: per group,
    /// panels of `width` output channels, each `k` steps of `width` lanes (zero past the
    /// group's last channel).
    ///
    /// # Panics
    ///
    /// If `width` is zero, the sizes are not valid, or `w` or `dst` is too short.
    pub fn pack_weights(&self, width: usize, w: &[u8], dst: &mut [f32]) {
        assert!(width > 0 && self.is_valid(), "cannot pack {self:?} in panels of {width}");
        let (k, mg) = self.group_shape();
        assert!(w.len() >= 4 * mg * self.groups * k && dst.len() >= self.packed_len(width), "conv2d weights too short to pack");
        let group = group_len(mg, k, width);
        for g in 0..self.groups {
            let dst = &mut dst[g * group..(g + 1) * group];
            let src = &w[4 * g * mg * k..4 * (g + 1) * mg * k];
            #[cfg(target_arch = "x86_64")]
            {
                use super::channels;
                let panels = 0..mg.div_ceil(width);
                // The kernels' own packing (transposes in registers) where it writes this width;
                // x86-64 is little-endian, so the bytes are the floats.
                // SAFETY: `src` holds the group's `mg·k` floats (read unaligned) and `dst` its
                // panels, by the assertion above; the CPU runs the instruction set.
                unsafe {
                    let (from, to) = (src.as_ptr().cast::<f32>(), dst.as_mut_ptr());
                    if width == channels::AVX512_NV * 16 && Isa::Avx512.available() {
                        channels::pack_avx512(from, mg, k, to, panels);
                        continue;
                    }
                    if width == channels::AVX2_NV * 8 && Isa::Avx2.available() {
                        channels::pack_avx2(from, mg, k, to, panels);
                        continue;
                    }
                }
            }
            let weight = |m: usize, p: usize| {
                let at = 4 * (m * k + p);
                f32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]])
            };
            for (i, panel) in dst.chunks_exact_mut(width * k).enumerate() {
                // Runs of 16 steps of each channel: the source is read in 64-byte runs and the
                // run's `16·width` floats of the panel stay in cache.
                for p0 in (0..k).step_by(16) {
                    for j in 0..width {
                        let m = i * width + j;
                        for p in p0..(p0 + 16).min(k) {
                            panel[p * width + j] = if m < mg { weight(m, p) } else { 0.0 };
                        }
                    }
                }
            }
        }
    }

    /// Computes the convolution from weights packed by [`pack_weights`](Self::pack_weights) in
    /// panels of `width`, with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run_with`](Self::run_with), with `wp` at least [`packed_len`](Self::packed_len)
    /// floats; also if `width` is zero.
    #[allow(clippy::too_many_arguments)]
    pub fn run_packed_with(&self, isa: Isa, x: &[f32], wp: &[f32], width: usize, bias: &[f32], z: &[f32], y: &mut [f32]) {
        assert!(
            width > 0 && x.len() >= self.x_len() && (self.w_len() == 0 || wp.len() >= self.packed_len(width)) && bias.len() >= self.bias_len() && z.len() >= self.z_len() && y.len() >= self.y_len(),
            "conv2d operand slices are too short for {self:?}"
        );
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element the convolution addresses; `y` is exclusively
        // borrowed, so it overlaps none of the others.
        unsafe { self.run_packed_raw(isa, x.as_ptr(), wp.as_ptr(), width, bias.as_ptr(), z.as_ptr(), y.as_mut_ptr()) }
    }

    /// [`run_packed_with`](Self::run_packed_with) on raw pointers; nothing when the sizes are
    /// not valid or `width` is zero.
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw), with `wp` readable for
    /// [`packed_len(width)`](Self::packed_len) floats.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_packed_raw(&self, isa: Isa, x: *const f32, wp: *const f32, width: usize, bias: *const f32, z: *const f32, y: *mut f32) {
        if width == 0 || !self.is_valid() || self.y_len() == 0 {
            return;
        }
        if self.packed_width(isa) == Some(width) {
            // SAFETY: by the caller's contract, and every group takes the flat product whose
            // panels these are.
            return unsafe { self.run_weights(isa, x, wp, true, bias, z, y) };
        }
        let (k, mg) = self.group_shape();
        let group = group_len(mg, k, width);
        crate::scratch::with(&UNPACKED, self.w_len(), |w| {
            for g in 0..self.groups {
                for m in 0..mg {
                    let (i, j) = (m / width, m % width);
                    for p in 0..k {
                        // SAFETY: inside group `g`'s packed weights, by the caller's contract.
                        w[(g * mg + m) * k + p] = unsafe { wp.add(g * group + (i * k + p) * width + j).read_unaligned() };
                    }
                }
            }
            // SAFETY: by the caller's contract, with the weights as they were.
            unsafe { self.run_weights(isa, x, w.as_ptr(), false, bias, z, y) }
        })
    }
}

/// `kiln_rt_conv2d` with the weights packed by [`Conv2d::pack_weights`] in panels of `width`
/// output channels (the argument after `act`).
///
/// # Safety
///
/// As `kiln_rt_conv2d`, with `wp` readable for [`Conv2d::packed_len`] floats.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_conv2d_packed(
    x: *const f32,
    wp: *const f32,
    b: *const f32,
    z: *const f32,
    y: *mut f32,
    batch: i64,
    channels: i64,
    out_channels: i64,
    groups: i64,
    h: i64,
    w_: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    bias: i64,
    residual: i64,
    act: i64,
    width: i64,
    alpha: f32,
    beta: f32,
) {
    let ints = [batch, channels, out_channels, groups, h, w_, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act];
    let (Some(c), Ok(width)) = (Conv2d::from_args(ints, alpha, beta), usize::try_from(width)) else { return };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { c.run_packed_raw(Isa::detected(), x, wp, width, b, z, y) }
}
