//! Convolutions as products of flat planes read in place: no column matrix and no packed
//! input panels, only one pass over the input to lay it out.
//!
//! Tap `(ky, kx)` of output pixel `(oy, ox)` reads the padded input at `(oy·sh + ky·dh, ox·sw +
//! kx·dw)`. Split the padded input into `sh·sw` phases, phase `(ry, rx)` holding the pixels at
//! `(i·sh + ry, j·sw + rx)`: the tap then reads phase `(ky·dh mod sh, kx·dw mod sw)` at `(oy +
//! ky·dh / sh, ox + kx·dw / sw)`, a stride-1 read. Each phase is laid out flat with rows of
//! `width = ow + (kw − 1)·dw / sw` floats and `height = oh + (kh − 1)·dh / sh` rows, so a tap is
//! one offset into the flat planes and a run of output pixels is a run of floats. Without
//! stride or padding, and with that width, the input itself is read; otherwise it is copied
//! into its phases with the padding as zeros (one pass over the input, against `kh·kw` copies
//! into a column matrix).
//!
//! Two kernels read the layout. With AVX2 or AVX-512, `channels.rs` puts output channels in
//! vector lanes and broadcasts one input float per pixel and step, for windows of more than one
//! tap and at least [`CHANNELS_MIN_PIXELS`] output pixels, with at least [`CHANNELS_MIN_STEPS`]
//! steps (AVX2) or 64 steps and at most a quarter of the 64-channel panels' lanes idle
//! (AVX-512: MobileNet-V2's 32-channel, 27-step stem is faster packed than there). Otherwise
//! [`gemm::Direct`] puts flat columns in vector lanes: columns past `ow` in each row are then
//! computed and dropped, so the layout is used only where the flat columns, in whole vectors,
//! are at most 1.2 times the output's pixels (`3×3` on `14 × 14` planes: 224 columns for 196
//! pixels; on `7 × 7`: 64 for 49, which the packed path computes), for windows of more than one
//! tap (a `1×1` product streams its packed panels faster), and for sums of at least 64 steps
//! (and at most 640 with the portable kernel, [`NARROW_MAX_STEPS`]). Both sum each output in one
//! chain of multiply-adds over all steps in order.

use std::cell::RefCell;

use crate::gemm::{self, Direct, Finish, Isa, Out, Planes, Update};
use crate::gemm::pack::View;
use crate::window::Window;

use super::channels;
use super::phases::{PhaseCopy, Phases};

thread_local! {
    /// Each step's offset into the flat planes.
    static OFFSETS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Fewer steps (`channels·kh·kw`) than this take the packed path.
const MIN_STEPS: usize = 64;

/// Fewer steps than this take the packed path with AVX2: a 3×3 window over 3 channels
/// (MobileNet-V2's stride-2 stem) still gains from the flat layout in `kiln bench`.
const CHANNELS_MIN_STEPS: usize = 27;

/// Fewer output pixels than this take the packed path with AVX2: packing the weights on every
/// call is then a large share of the work (ResNet-50's 512-channel 3×3 layers with 7 × 7
/// outputs lose against the three steps in `conv_bench`).
const CHANNELS_MIN_PIXELS: usize = 64;

/// More steps than this take the packed path with the portable kernel. One `k` block of a
/// `Direct` product then leaves a tile's `A` rows and gathered `B` columns out of L1: with
/// AVX2's 6 × 16 tile (before AVX2 had `channels.rs`), `conv_bench` showed 1152 and 2304 steps
/// losing to the packed path and 576 gaining. The portable 4 × 16 tile is taken to behave
/// alike.
const NARROW_MAX_STEPS: usize = 640;

/// How a group's input planes are laid out flat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Flat {
    /// Floats per flat row.
    width: usize,
    /// Flat rows per plane.
    height: usize,
    /// Whether the planes are a copy, split into `sh·sw` phases with the padding written out
    /// (otherwise the input itself).
    copied: bool,
    /// Whether `channels.rs` computes the product (otherwise `gemm::Direct`).
    channels: bool,
}

impl Flat {
    /// The layout for `win` over `channels` planes and `out_channels` kernels, or `None` where
    /// the convolution is not computed this way: one tap, few steps, too many flat columns
    /// dropped, or offsets past `u32`.
    pub(super) fn of(win: &Window, channels: usize, out_channels: usize, isa: Isa) -> Option<Flat> {
        let steps = channels.saturating_mul(win.kh * win.kw);
        if win.kh * win.kw <= 1 || win.oh == 0 || win.ow == 0 || win.sh == 0 || win.sw == 0 {
            return None;
        }
        let pixels = win.oh.saturating_mul(win.ow);
        let channels_kernel = match isa {
            Isa::Avx2 if steps < CHANNELS_MIN_STEPS || pixels < CHANNELS_MIN_PIXELS => return None,
            Isa::Avx2 => true,
            // Few steps per tile: the scratch tile's merge outweighs the packing saved
            // (MobileNet-V2's stem, 27 steps, loses; ResNet-50's, 147, gains).
            _ if steps < MIN_STEPS => return None,
            Isa::Portable if steps > NARROW_MAX_STEPS => return None,
            // AVX-512's panels are 64 channels wide: at most a quarter of their lanes idle.
            Isa::Avx512 => pixels >= CHANNELS_MIN_PIXELS && out_channels.next_multiple_of(64) * 4 <= out_channels.saturating_mul(5),
            Isa::Portable => false,
        };
        let width = win.ow.checked_add((win.kw - 1).checked_mul(win.dw)? / win.sw)?;
        let height = win.oh.checked_add((win.kh - 1).checked_mul(win.dh)? / win.sh)?;
        // Flat columns in whole vectors of 16 against the output's pixels: 20 % more at most
        // (`channels.rs` computes pixels, not flat columns).
        let cols = (win.oh - 1).checked_mul(width)?.checked_add(win.ow)?;
        if !channels_kernel && cols.div_ceil(16).saturating_mul(16 * 5) > pixels.saturating_mul(6) {
            return None;
        }
        let copied = !(win.sh == 1 && win.sw == 1 && win.ph == 0 && win.pw == 0 && width == win.w && height <= win.h);
        let flat = Flat { width, height, copied, channels: channels_kernel };
        (channels.checked_mul(flat.channel_stride(win)?)? <= u32::MAX as usize).then_some(flat)
    }

    /// The output channels per weight panel when `channels.rs` computes the product with `isa`
    /// (its `NV·LANES`), else `None`.
    pub(super) fn panel_width(&self, isa: Isa) -> Option<usize> {
        match isa {
            _ if !self.channels => None,
            Isa::Avx512 => Some(channels::AVX512_NV * 16),
            Isa::Avx2 => Some(channels::AVX2_NV * 8),
            Isa::Portable => None,
        }
    }

    /// Floats from one flat plane (a phase, when copied) to the next.
    fn plane(&self, win: &Window) -> usize {
        if self.copied { self.width * self.height } else { win.h * win.w }
    }

    /// Floats from one channel's planes to the next.
    fn channel_stride(&self, win: &Window) -> Option<usize> {
        if self.copied { (win.sh * win.sw).checked_mul(self.plane(win)) } else { Some(self.plane(win)) }
    }

    /// The offset of tap `(ky, kx)` of channel `c` into the flat planes.
    fn offset(&self, win: &Window, c: usize, ky: usize, kx: usize) -> usize {
        let (y, x) = (ky * win.dh, kx * win.dw);
        let phase = if self.copied { (y % win.sh) * win.sw + x % win.sw } else { 0 };
        let channel = if self.copied { win.sh * win.sw * self.plane(win) } else { self.plane(win) };
        c * channel + phase * self.plane(win) + (y / win.sh) * self.width + x / win.sw
    }

    /// `y[mg × oh·ow] = w[mg × k] · col(x)` for one group's `channels` planes at `x`, with `fin`
    /// on each finished block of rows (none when `fin` is `None`). Values are those of the
    /// product summed in `isa`'s k blocks (see `gemm/direct.rs`), on any thread count. With
    /// `packed`, `w` holds the weights as [`Flat::panel_width`]'s panels.
    ///
    /// # Safety
    ///
    /// `x` holds the group's planes, `w` its `mg` kernels of `k = channels·kh·kw` floats (or,
    /// `packed`, their panels, and then `self` takes `channels.rs`), `y`
    /// its `mg` output planes, not overlapping them; `fin` touches only the block it is given;
    /// the CPU runs `isa`.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn product<F: Finish>(&self, isa: Isa, win: &Window, channels: usize, x: *const f32, w: *const f32, packed: bool, mg: usize, y: *mut f32, fin: Option<&F>) {
        debug_assert!(!packed || self.channels);
        let k = channels * win.kh * win.kw;
        let taps = win.kh * win.kw;
        let run = |base: *const f32| {
            crate::scratch::with(&OFFSETS, k, |offsets| {
                for (p, o) in offsets.iter_mut().enumerate() {
                    let t = p % taps;
                    // Inside the planes, whose size `of` checked fits.
                    *o = self.offset(win, p / taps, t / win.kw, t % win.kw) as u32;
                }
                #[cfg(target_arch = "x86_64")]
                if self.channels {
                    let pr = channels::Product { x: base, offsets: offsets.as_ptr(), w, packed, m: mg, k, width: self.width, ow: win.ow, pixels: win.oh * win.ow, y };
                    use crate::gemm::{avx2::Avx2, avx512::Avx512};
                    use channels::{AVX2_NP, AVX2_NV, AVX512_NP, AVX512_NV, Kernels};
                    // SAFETY: as for the direct product below; the kernels are those of `isa`,
                    // which the CPU runs.
                    unsafe {
                        match (isa, fin) {
                            (Isa::Avx512, Some(fin)) => pr.run::<Avx512, F, AVX512_NP, AVX512_NV>(fin, Kernels { pack: channels::pack_avx512, part: channels::part_avx512::<F> }),
                            (Isa::Avx512, None) => pr.run::<Avx512, gemm::Done, AVX512_NP, AVX512_NV>(&gemm::Done, Kernels { pack: channels::pack_avx512, part: channels::part_avx512::<gemm::Done> }),
                            (_, Some(fin)) => pr.run::<Avx2, F, AVX2_NP, AVX2_NV>(fin, Kernels { pack: channels::pack_avx2, part: channels::part_avx2::<F> }),
                            (_, None) => pr.run::<Avx2, gemm::Done, AVX2_NP, AVX2_NV>(&gemm::Done, Kernels { pack: channels::pack_avx2, part: channels::part_avx2::<gemm::Done> }),
                        }
                    }
                    return;
                }
                let d = Direct {
                    m: mg,
                    k,
                    a: View { ptr: w, lane_stride: k as isize, step_stride: 1 },
                    b: Planes { base, offsets: offsets.as_ptr(), width: self.width, ow: win.ow, cols: (win.oh - 1) * self.width + win.ow },
                    c: Out { ptr: y, rs: (win.oh * win.ow) as isize },
                    up: Update::new(1.0, 0.0),
                };
                // One k block: each element is one chain of multiply-adds over `k`. Column
                // blocks of 480 read their planes from L2 when all of them fit in 768 KiB;
                // larger ones go in blocks of 192 (faster on a stride-2 128-channel layer on
                // 56 × 56 in `conv_bench`).
                let fits = channels * self.channel_stride(win).unwrap_or(usize::MAX) <= 192 * 1024;
                let bl = gemm::Blocking { kc: k, nc: if fits { 480 } else { 192 } };
                // SAFETY: by the caller's contract and `of`'s layout, every column of every
                // step is inside the planes at `base` (the last one read is the last float of
                // the last plane), and `C` is the group's output.
                unsafe {
                    match fin {
                        Some(fin) => gemm::product_direct(isa, bl, &d, fin),
                        None => gemm::product_direct(isa, bl, &d, &gemm::Done),
                    }
                }
            })
        };
        if !self.copied {
            return run(x);
        }
        let copy = PhaseCopy { win: *win, width: self.width, height: self.height, phases: Phases::All };
        // SAFETY: by the caller's contract, `x` holds the `channels` planes.
        unsafe { copy.with(isa, channels, x, run) }
    }
}
