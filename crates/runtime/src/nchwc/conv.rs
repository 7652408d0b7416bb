//! Convolutions of NCHW16c tensors ([`super`]) with one group: `y = act(W ⊛ x + bias + z)`,
//! any window, stride, padding and dilation.
//!
//! A tile is [`NP`] output pixels × [`NV`] vectors of 16 output channels, summed in registers
//! over every step `(c, ky, kx)` in order: each step loads the `NV` vectors of its weights
//! (panels of 64 output channels, step-major, as [`Conv2d::pack_weights`] lays them out for
//! `conv/channels.rs`) and broadcasts channel `c` of each pixel's tap `(ky, kx)`, which for 16
//! consecutive channels lies in the same line. The bias, the addend (laid out as `y`) and the
//! activation are applied in registers and each vector is stored whole: no tile writes part of
//! a line, and no pass over `y` follows. With padding the input is first copied into a padded
//! blocked image (zeros around it), so no tap is tested against the borders.
//!
//! **Numerics.** Each output is one chain of fused multiply-adds over the steps in ascending
//! order from zero, then `+ bias`, `+ z` and the activation: the values of the NCHW routine's
//! flat-plane paths (`conv/flat.rs`), on any thread count.

use std::cell::RefCell;
use std::ops::Range;

use super::{LANES, blocked_len};
use crate::conv::Conv2d;
use crate::gemm::Isa;
use crate::pool::{self, SharedPtr};
#[cfg(target_arch = "x86_64")]
use super::line::{Line, Pair, Wide};

/// Pixels per tile.
const NP: usize = 6;
// `Kernel::tiles` spells out the short tiles of 1 to NP − 1 pixels.
const _: () = assert!(NP == 6);
/// Vectors of 16 output channels per tile (24 of the 32 registers accumulate).
const NV: usize = 4;
/// Output channels per weight panel: the `width` of [`Conv2d::pack_weights`] this routine
/// reads.
pub const PANEL: usize = NV * LANES;

/// Fewer multiply-adds than this run on one thread.
const SPLIT_MIN_FMAS: usize = 1 << 18;

thread_local! {
    /// The padded input image, and weights packed on the call when they come plain.
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether this routine computes `c`: a depthwise convolution ([`dwconv`](super::dwconv)),
/// or one of a single group with valid sizes, an activation it applies in registers (none,
/// Relu, Clip), and an image (padded) whose offsets fit `u32`.
pub fn supports(c: &Conv2d) -> bool {
    super::dwconv::supports(c) || dense(c)
}

/// The `width` of `kiln_rt_conv2d_nchwc` for `c`'s packed weights: [`PANEL`], or
/// [`dwconv::PACKED`](super::dwconv::PACKED) for a depthwise convolution.
pub fn packed_width(c: &Conv2d) -> usize {
    if super::dwconv::supports(c) { super::dwconv::PACKED } else { PANEL }
}

/// Floats of `c`'s packed weights (saturating).
pub fn packed_len(c: &Conv2d) -> usize {
    if super::dwconv::supports(c) {
        super::dwconv::packed_len(c)
    } else if super::winograd::applies(c) {
        super::winograd::packed_len(c)
    } else {
        c.packed_len(PANEL)
    }
}

/// Packs `c`'s weights `w` (little-endian floats, any alignment) into `dst`, [`packed_len`]
/// floats, as [`run`] reads them.
///
/// # Panics
///
/// If `c` is not [supported](supports) or a slice is too short.
pub fn pack_weights(c: &Conv2d, w: &[u8], dst: &mut [f32]) {
    if super::dwconv::supports(c) {
        super::dwconv::pack_weights(c, w, dst)
    } else if super::winograd::applies(c) {
        super::winograd::pack_weights(c, w, dst)
    } else {
        c.pack_weights(PANEL, w, dst)
    }
}

/// [`supports`] for convolutions of one group.
fn dense(c: &Conv2d) -> bool {
    let act = super::applies(c.act);
    if !(act && c.groups == 1 && c.is_valid() && c.y_len() > 0 && c.channels > 0 && c.win.kh * c.win.kw > 0) {
        return false;
    }
    let w = &c.win;
    let rows = w.h.checked_add(w.ph).zip((w.oh - 1).checked_mul(w.sh).zip((w.kh - 1).checked_mul(w.dh)));
    let cols = w.w.checked_add(w.pw).zip((w.ow - 1).checked_mul(w.sw).zip((w.kw - 1).checked_mul(w.dw)));
    let (Some((r0, (r1, r2))), Some((c0, (c1, c2)))) = (rows, cols) else { return false };
    let (rows, cols) = (r0.max(r1.saturating_add(r2).saturating_add(1)), c0.max(c1.saturating_add(c2).saturating_add(1)));
    crate::window::elements(&[c.channels.div_ceil(LANES), LANES, rows, cols]).is_some_and(|n| n <= u32::MAX as usize)
}

/// Floats of `c`'s input (`batch` images), blocked or NCHW planes.
pub fn x_len(c: &Conv2d, x_blocked: bool) -> usize {
    let pixels = c.win.h * c.win.w;
    if x_blocked { blocked_len(c.channels, pixels).saturating_mul(c.batch) } else { [c.channels, pixels].into_iter().fold(c.batch, usize::saturating_mul) }
}

/// Floats of `c`'s blocked output, and of its addend when it has one.
pub fn y_len(c: &Conv2d) -> usize {
    blocked_len(c.out_channels, c.win.oh * c.win.ow).saturating_mul(c.batch)
}

/// The padded image a convolution reads: `rows × cols` pixels, the input at `(top, left)`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Padded {
    pub rows: usize,
    pub cols: usize,
    pub top: usize,
    pub left: usize,
}

impl Padded {
    /// The image `c` reads, `None` when that is the input itself.
    fn of(c: &Conv2d) -> Option<Padded> {
        let w = &c.win;
        let rows = (w.h + w.ph).max((w.oh - 1) * w.sh + (w.kh - 1) * w.dh + 1);
        let cols = (w.w + w.pw).max((w.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1);
        let p = Padded { rows, cols, top: w.ph, left: w.pw };
        (rows != w.h || cols != w.w || w.ph != 0 || w.pw != 0).then_some(p)
    }
}

/// `c` on blocked tensors with weights `w`: `c`'s plain `out_channels × channels / groups × kh
/// × kw` floats (`packed` false) or as [`pack_weights`] packs them. The input is blocked, or
/// with `x_blocked` false NCHW planes (one group only: a network's first convolution reads
/// its few-channel image so, without a reorder into 16-lane pixels). Over the current thread
/// pool; nothing when `c` is not [supported](supports) (or is depthwise on NCHW planes).
///
/// # Safety
///
/// `x` readable for [`x_len`], `y` writable for [`y_len`] and overlapping no other operand
/// but `z`, `z` readable for [`y_len`] when `c.residual` (it may be `y` itself: each addend
/// element is read only for the output element at its position, before that is stored),
/// `bias` for `out_channels` when `c.bias`, `w` for the weights; no alignment is required.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(c: &Conv2d, x: *const f32, x_blocked: bool, w: *const f32, packed: bool, bias: *const f32, z: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { run_with(Isa::detected(), c, x, x_blocked, w, packed, bias, z, y) }
}

/// [`run`] with the kernel of `isa`: AVX-512 when it is that and the CPU has it, else the
/// portable loop (the same values).
///
/// # Safety
///
/// As [`run`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn run_with(isa: Isa, c: &Conv2d, x: *const f32, x_blocked: bool, w: *const f32, packed: bool, bias: *const f32, z: *const f32, y: *mut f32) {
    if super::dwconv::supports(c) {
        if !x_blocked {
            return;
        }
        // SAFETY: by the caller's contract.
        return unsafe { super::dwconv::run(isa, c, x, w, packed, bias, z, y) };
    }
    let lanes = if x_blocked { LANES } else { 1 };
    let wide = super::usable(isa);
    if !dense(c) {
        return;
    }
    let bias = if c.bias { bias } else { std::ptr::null() };
    let z = if c.residual { z } else { std::ptr::null() };
    if packed {
        // SAFETY: by the caller's contract.
        return unsafe {
            if super::winograd::applies(c) {
                // Weights transformed for products of blocked tiles (an image of planes has
                // fewer channels than that pays for).
                if x_blocked {
                    super::winograd::run(wide, c, x, w, bias, z, y)
                }
            } else {
                run_packed(wide, c, lanes, x, w, bias, z, y)
            }
        };
    }
    let len = c.packed_len(PANEL);
    crate::scratch::with(&PANELS, len, |wp| {
        // SAFETY: `w` holds the plain weights, whose bytes `pack_weights` reads.
        let bytes = unsafe { std::slice::from_raw_parts(w.cast::<u8>(), 4 * c.w_len()) };
        c.pack_weights(PANEL, bytes, wp);
        // SAFETY: by the caller's contract, with the panels just packed.
        unsafe { run_packed(wide, c, lanes, x, wp.as_ptr(), bias, z, y) }
    })
}

/// [`run`] with packed weights and absent operands null, with the kernel of `wide` (an
/// instruction set the CPU has).
///
/// # Safety
///
/// As [`run`].
#[allow(clippy::too_many_arguments)]
unsafe fn run_packed(wide: Isa, c: &Conv2d, lanes: usize, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
    let pixels = c.win.h * c.win.w;
    let xl = if lanes == LANES { blocked_len(c.channels, pixels) } else { c.channels * pixels };
    let yl = blocked_len(c.out_channels, c.win.oh * c.win.ow);
    let image = |x: *const f32, n: usize| {
        // SAFETY: image `n`'s operands are inside the caller's.
        unsafe {
            let z = if z.is_null() { z } else { z.add(n * yl) };
            one_image(wide, c, lanes, x, wp, bias, z, y.add(n * yl))
        }
    };
    let Some(pad) = Padded::of(c) else {
        let w = &c.win;
        if lanes == LANES && w.kh == 1 && w.kw == 1 && (w.sh, w.sw) != (1, 1) {
            // SAFETY: by the caller's contract.
            return unsafe { strided_1x1(wide, c, x, wp, bias, z, y) };
        }
        for n in 0..c.batch {
            // SAFETY: as above.
            image(unsafe { x.add(n * xl) }, n);
        }
        return;
    };
    // Blocks of 16 channels, or single planes.
    let blocks = if lanes == LANES { c.channels.div_ceil(LANES) } else { c.channels };
    let plane = pad.rows * pad.cols * lanes;
    crate::scratch::with(&PADDED, blocks * plane, |buf| {
        for n in 0..c.batch {
            let src = SharedPtr((x.wrapping_add(n * xl), buf.as_mut_ptr()));
            let ways = if blocks * plane >= 1 << 16 { pool::threads().min(blocks) } else { 1 };
            pool::for_each(ways, &|i| {
                let (src, dst) = src.get();
                for b in pool::part(blocks, ways, 1, i) {
                    // SAFETY: block `b` of the image and of the padded copy, one task each.
                    unsafe { pad_block(c, pad, lanes, src.add(b * pixels * lanes), dst.add(b * plane)) };
                }
            });
            let win = crate::window::Window { h: pad.rows, w: pad.cols, ph: 0, pw: 0, ..c.win };
            let padded = Conv2d { win, ..*c };
            // SAFETY: the padded copy holds the image `padded` reads.
            unsafe {
                let z = if z.is_null() { z } else { z.add(n * yl) };
                one_image(wide, &padded, lanes, buf.as_ptr(), wp, bias, z, y.add(n * yl));
            }
        }
    });
}

/// A strided 1×1 convolution without padding on blocked tensors: each image's pixels that
/// the window reads, one in `sh·sw`, gathered into a dense copy, on which the tiles of stride 1
/// take consecutive lines from one pointer (faster in `conv_one` on 256 → 512 from 56² of
/// stride 2). The same sums: only where the inputs are read from changes.
///
/// # Safety
///
/// As [`run`], with a blocked input; the window reads only pixels inside it.
#[allow(clippy::too_many_arguments)]
unsafe fn strided_1x1(wide: Isa, c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
    let w = &c.win;
    let blocks = c.channels.div_ceil(LANES);
    let (plane_in, plane) = (w.h * w.w * LANES, w.oh * w.ow * LANES);
    let yl = blocked_len(c.out_channels, w.oh * w.ow);
    let dense = Conv2d { win: crate::window::Window { h: w.oh, w: w.ow, sh: 1, sw: 1, ..*w }, ..*c };
    crate::scratch::with(&PADDED, blocks * plane, |buf| {
        for n in 0..c.batch {
            let ptrs = SharedPtr((x.wrapping_add(n * blocks * plane_in), buf.as_mut_ptr()));
            let ways = if blocks * plane >= 1 << 16 { pool::threads().min(blocks) } else { 1 };
            pool::for_each(ways, &|i| {
                let (src, dst) = ptrs.get();
                for b in pool::part(blocks, ways, 1, i) {
                    for oy in 0..w.oh {
                        for ox in 0..w.ow {
                            // SAFETY: pixel `(oy·sh, ox·sw)` of block `b` is inside the image
                            // (the window needs no padding), and `(oy, ox)` inside the copy;
                            // one task per block.
                            unsafe { std::ptr::copy_nonoverlapping(src.add(b * plane_in + (oy * w.sh * w.w + ox * w.sw) * LANES), dst.add(b * plane + (oy * w.ow + ox) * LANES), LANES) };
                        }
                    }
                }
            });
            // SAFETY: the copy holds the image `dense` reads.
            unsafe {
                let z = if z.is_null() { z } else { z.add(n * yl) };
                one_image(wide, &dense, LANES, buf.as_ptr(), wp, bias, z, y.add(n * yl));
            }
        }
    });
}

/// Copies one block of `h × w` pixels of `lanes` floats into its padded `pad.rows × pad.cols`
/// image, zeros around it.
///
/// # Safety
///
/// `src` holds the block, `dst` the padded one.
pub(super) unsafe fn pad_block(c: &Conv2d, pad: Padded, lanes: usize, src: *const f32, dst: *mut f32) {
    let (h, w) = (c.win.h, c.win.w);
    // SAFETY: by the caller's contract, every row written is inside the padded block.
    unsafe {
        for r in 0..pad.rows {
            let row = dst.add(r * pad.cols * lanes);
            if r < pad.top || r >= pad.top + h {
                std::ptr::write_bytes(row, 0, pad.cols * lanes);
                continue;
            }
            std::ptr::write_bytes(row, 0, pad.left * lanes);
            std::ptr::copy_nonoverlapping(src.add((r - pad.top) * w * lanes), row.add(pad.left * lanes), w * lanes);
            std::ptr::write_bytes(row.add((pad.left + w) * lanes), 0, (pad.cols - pad.left - w) * lanes);
        }
    }
}

/// One image of `c`, whose input (`lanes` floats per pixel) needs no padding (it has been
/// copied padded when it did), with the kernel of `wide` (an instruction set the CPU has).
///
/// # Safety
///
/// As [`run`], for one image; `c.win` has no padding.
pub(super) unsafe fn one_image(wide: Isa, c: &Conv2d, lanes: usize, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
    let pixels = c.win.oh * c.win.ow;
    let fmas = [c.channels, c.win.kh * c.win.kw, pixels].into_iter().fold(c.out_channels, usize::saturating_mul);
    let ways = if fmas < SPLIT_MIN_FMAS { 1 } else { pool::threads() };
    // Each task takes a share of the pixels, or of the panels when those split more evenly
    // (few pixels: 49 of them make tiles of 4 and 5 on two threads).
    let panels = c.out_channels.div_ceil(PANEL);
    let by_panels = pool::balance(panels, ways, 1) > pool::balance(pixels, ways, NP) + 0.02;
    let args = SharedPtr((x, wp, bias, z, y));
    let task = |i: usize| {
        let (x, wp, bias, z, y) = args.get();
        let (panels, part) = if by_panels { (pool::part(panels, ways, 1, i), 0..pixels) } else { (0..panels, pool::part(pixels, ways, NP, i)) };
        // SAFETY: by the caller's contract; each task writes its own pixels or channels of `y`.
        unsafe {
            match wide {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => avx512(c, lanes, x, wp, bias, z, y, panels, part),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => avx2(c, lanes, x, wp, bias, z, y, panels, part),
                _ => portable(c, lanes, x, wp, bias, z, y, panels, part),
            }
        }
    };
    if ways <= 1 {
        task(0);
    } else {
        pool::for_each(ways, &task);
    }
}

/// The input float of output pixel `q`'s tap `(0, 0)`, channel 0, from the start of an image
/// of `lanes` floats per pixel.
fn input_at(c: &Conv2d, lanes: usize, q: usize) -> usize {
    Cursor::at(c, q).input(c, lanes)
}

/// An output pixel, walked in order.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    oy: usize,
    ox: usize,
}

impl Cursor {
    /// Output pixel `q`.
    fn at(c: &Conv2d, q: usize) -> Cursor {
        Cursor { oy: q / c.win.ow.max(1), ox: q % c.win.ow.max(1) }
    }

    /// Its tap `(0, 0)`, channel 0, from the start of an image of `lanes` floats per pixel.
    fn input(&self, c: &Conv2d, lanes: usize) -> usize {
        (self.oy * c.win.sh * c.win.w + self.ox * c.win.sw) * lanes
    }

    /// On to the next pixel.
    fn advance(&mut self, c: &Conv2d) {
        self.ox += 1;
        if self.ox == c.win.ow {
            (self.oy, self.ox) = (self.oy + 1, 0);
        }
    }
}

/// Each tap's offset from tap `(0, 0)`, in floats, in `(ky, kx)` order, with `lanes` floats
/// per pixel.
fn taps(c: &Conv2d, lanes: usize) -> Vec<usize> {
    let w = &c.win;
    (0..w.kh).flat_map(|ky| (0..w.kw).map(move |kx| (ky * w.dh * w.w + kx * w.dw) * lanes)).collect()
}

/// Where channel `ch` starts in an image of `lanes` floats per pixel (16: blocked; 1: NCHW).
fn channel_at(c: &Conv2d, lanes: usize, ch: usize) -> usize {
    let plane = c.win.h * c.win.w;
    if lanes == LANES { ch / LANES * plane * LANES + ch % LANES } else { ch * plane }
}

/// Each step's offset from a pixel's tap `(0, 0)`, channel 0, in floats, in an image of
/// `lanes` floats per pixel: steps `(c, ky, kx)` in order, as the weights are.
fn steps(c: &Conv2d, lanes: usize) -> Vec<u32> {
    let taps = taps(c, lanes);
    (0..c.channels).flat_map(|ch| taps.iter().map(move |&t| (channel_at(c, lanes, ch) + t) as u32)).collect()
}

/// The sums of one tile: `V` lines of output channels for each of the `N` pixels whose
/// tap `(0, 0)`, channel 0 is at `xs`, over the `steps` with the weights at `w` (the tile's
/// first line of each step's [`PANEL`]).
///
/// # Safety
///
/// `w` holds `steps.len()` steps of [`PANEL`] floats; every step's offset from every `xs` is
/// readable; the CPU has `L`'s instruction set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sums<L: Line, const V: usize, const N: usize>(steps: &[u32], w: *const f32, xs: [*const f32; N]) -> [[L; V]; N] {
    // SAFETY: by the caller's contract.
    unsafe {
        let mut acc = [[L::zero(); V]; N];
        let mut ws = w;
        for &o in steps {
            let o = o as usize;
            let mut wv = [L::zero(); V];
            for (v, wv) in wv.iter_mut().enumerate() {
                *wv = L::load(ws.add(v * LANES));
            }
            for (j, acc) in acc.iter_mut().enumerate() {
                let b = L::splat(*xs[j].add(o));
                for v in 0..V {
                    acc[v] = L::mul_add(wv[v], b, acc[v]);
                }
            }
            ws = ws.add(PANEL);
        }
        acc
    }
}

/// The sums of a tile of `P` consecutive pixels whose inputs are 16 floats apart from `x`:
/// [`sums`] with one pointer; with `HALF`, only the low 8 lanes of the last line.
///
/// # Safety
///
/// As [`sums`], for the pixels at `x + 16j`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run_sums<L: Line, const V: usize, const P: usize, const HALF: bool>(steps: &[u32], w: *const f32, x: *const f32) -> [[L; V]; P] {
    // SAFETY: by the caller's contract.
    unsafe {
        let mut acc = [[L::zero(); V]; P];
        let mut ws = w;
        for &o in steps {
            let xo = x.add(o as usize);
            let mut wv = [L::zero(); V];
            for (v, wv) in wv.iter_mut().enumerate() {
                *wv = if HALF && v == V - 1 { L::load_first(ws.add(v * LANES), LANES / 2) } else { L::load(ws.add(v * LANES)) };
            }
            for (j, acc) in acc.iter_mut().enumerate() {
                let b = L::splat(*xo.add(j * LANES));
                for v in 0..V {
                    // The low 8 lanes of a half line; the others are past the last channel and
                    // masked off when stored.
                    acc[v] = if HALF && v == V - 1 { L::mul_add_low(wv[v], b, acc[v]) } else { L::mul_add(wv[v], b, acc[v]) };
                }
            }
            ws = ws.add(PANEL);
        }
        acc
    }
}

/// Pixels per block: the panels of a block run over the same input pixels, which stay in L2
/// (at most 256 KiB of them).
fn block_pixels(c: &Conv2d) -> usize {
    (64 * 1024 / (c.channels * c.win.kh).max(1)).next_multiple_of(NP).max(NP)
}

// X_AHEAD: while the first panel of a block of pixels runs, each tile asks for the lines of
// the next block's pixels (tap (0, 0), every channel block) to be loaded into L2. The blocks'
// pixels are short runs a channel block apart, which the hardware prefetchers miss (`conv_one`
// with operands from memory, on ResNet-50's 1×1 layers). With few blocks the prefetchers
// follow the streams, and the prefetches cost more than they save: under `AHEAD_MIN_BLOCKS`
// none is made (MobileNet-V2's 32 → 16 on 112² is two blocks).
const AHEAD_MIN_BLOCKS: usize = 8;

/// [`one_image`]'s panels `panels` of pixels `part` with AVX-512.
///
/// # Safety
///
/// As [`one_image`]; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512(c: &Conv2d, lanes: usize, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, panels: Range<usize>, part: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe {
        let steps = steps(c, lanes);
        let k = Kernel { c, x, steps: &steps, lanes, wp, bias, z, y, panel: 0, line0: 0 };
        blocks(&k, panels, part, &|k, pixels, ahead, run| {
            // A last vector of at most 8 channels (24 of a panel) is summed in 256-bit halves,
            // at half the cost of a whole vector on this core's two 256-bit FMA pipes.
            let rest = c.out_channels - k.panel * PANEL;
            match (rest.div_ceil(LANES).min(NV), run) {
                (1, true) => k.tiles::<Wide, 1, 24, true, false>(pixels, ahead),
                (2, true) if rest <= LANES + LANES / 2 => k.tiles::<Wide, 2, 12, true, true>(pixels, ahead),
                (2, true) => k.tiles::<Wide, 2, 12, true, false>(pixels, ahead),
                (3, true) => k.tiles::<Wide, 3, 8, true, false>(pixels, ahead),
                (1, false) => k.tiles::<Wide, 1, NP, false, false>(pixels, ahead),
                (2, false) => k.tiles::<Wide, 2, NP, false, false>(pixels, ahead),
                (3, false) => k.tiles::<Wide, 3, NP, false, false>(pixels, ahead),
                _ => k.tiles::<Wide, NV, NP, false, false>(pixels, ahead),
            }
        })
    }
}

/// [`one_image`]'s panels `panels` of pixels `part` with AVX2: 16 registers of half a line
/// hold tiles of 6 pixels × 1 line (12 accumulators, 2 for the weights, 1 broadcast), each
/// panel a line at a time.
///
/// # Safety
///
/// As [`one_image`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx2(c: &Conv2d, lanes: usize, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, panels: Range<usize>, part: Range<usize>) {
    // SAFETY: by the caller's contract.
    unsafe {
        let steps = steps(c, lanes);
        let k = Kernel { c, x, steps: &steps, lanes, wp, bias, z, y, panel: 0, line0: 0 };
        blocks(&k, panels, part, &|k, pixels, ahead, run| {
            let lines = (c.out_channels - k.panel * PANEL).div_ceil(LANES).min(NV);
            for line0 in 0..lines {
                let k = Kernel { line0, ..k };
                // Only the first pass asks for the next block's pixels.
                let ahead = if line0 == 0 { ahead.clone() } else { 0..0 };
                if run {
                    k.tiles::<Pair, 1, NP, true, false>(pixels.clone(), ahead)
                } else {
                    k.tiles::<Pair, 1, NP, false, false>(pixels.clone(), ahead)
                }
            }
        })
    }
}

/// The walk the vector kernels share: blocks of pixels that stay in L2, and in each every
/// panel of `panels`, handed to `panel` as `k` for that panel with its pixels, the pixels its
/// tiles ask to be prefetched, and whether consecutive pixels read consecutive lines (a 1×1
/// window of stride 1 on a blocked input: see [`Kernel::tiles`]).
///
/// # Safety
///
/// As [`one_image`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn blocks(k: &Kernel<'_>, panels: Range<usize>, part: Range<usize>, panel: &dyn Fn(Kernel<'_>, Range<usize>, Range<usize>, bool)) {
    let c = k.c;
    let bp = block_pixels(c);
    let w = &c.win;
    let run = k.lanes == LANES && w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.ow == w.w;
    for t0 in part.clone().step_by(bp) {
        let t1 = (t0 + bp).min(part.end);
        let next = t0 + bp..(t0 + 2 * bp).min(part.end);
        for i in panels.clone() {
            // NCHW planes are read in runs the hardware prefetchers follow.
            let ahead = if i == panels.start && k.lanes == LANES && c.channels >= AHEAD_MIN_BLOCKS * LANES { next.clone() } else { 0..0 };
            panel(Kernel { panel: i, ..*k }, t0..t1, ahead, run);
        }
    }
}

/// One panel's work on one image: its operands.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Kernel<'a> {
    c: &'a Conv2d,
    x: *const f32,
    /// Each step's offset from a pixel's tap `(0, 0)`, channel 0: [`steps`].
    steps: &'a [u32],
    /// Floats per input pixel: 16 (blocked) or 1 (NCHW planes).
    lanes: usize,
    wp: *const f32,
    bias: *const f32,
    z: *const f32,
    y: *mut f32,
    panel: usize,
    /// The panel's first line this pass computes (AVX2 takes a panel's lines one at a time).
    line0: usize,
}

#[cfg(target_arch = "x86_64")]
impl Kernel<'_> {
    /// The panel's `V` lines of output channels from [`Kernel::line0`] for the tiles of `P`
    /// pixels of `pixels`; the tiles ask for the input of the pixels `ahead` (as many as there
    /// are tiles' pixels) into L2. With `RUN`, pixels whose inputs are consecutive (a 1×1
    /// convolution of stride 1 on blocked pixels) are read from one pointer: on AVX-512 a tile
    /// of few lines then takes more pixels (`V·P ≤ 24` sums in registers), so that it still has
    /// about 24 multiply-adds per step for its broadcasts.
    ///
    /// # Safety
    ///
    /// As [`one_image`], the CPU having `L`'s instruction set; with `RUN`, pixel `q`'s input
    /// is at `q·16`.
    #[inline(always)]
    unsafe fn tiles<L: Line, const V: usize, const P: usize, const RUN: bool, const HALF: bool>(&self, pixels: Range<usize>, ahead: Range<usize>) {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        let c = self.c;
        let plane_in = c.win.h * c.win.w * LANES;
        let blocks = c.channels.div_ceil(LANES);
        // SAFETY: by the caller's contract; every address below is inside its operand.
        unsafe {
            let w = self.wp.add(self.panel * PANEL * self.steps.len() + self.line0 * LANES);
            // The pixels walked in order (a division per pixel was a large share of a tile of
            // few steps: MobileNet-V2's 16-channel layers).
            let (mut at, mut next) = (Cursor::at(c, pixels.start), Cursor::at(c, ahead.start));
            let mut ahead_left = ahead.len();
            let mut t = pixels.start;
            while t < pixels.end {
                let run = RUN && pixels.end - t >= P;
                let n = if run { P } else { P.min(NP).min(pixels.end - t) };
                for _ in 0..n.min(ahead_left) {
                    // One line per pixel and block (the blocked images start at 64 bytes).
                    let px = self.x.wrapping_add(next.input(c, self.lanes));
                    for b in 0..blocks {
                        _mm_prefetch::<_MM_HINT_T1>(px.wrapping_add(b * plane_in).cast::<i8>());
                    }
                    next.advance(c);
                }
                ahead_left = ahead_left.saturating_sub(n);
                if run {
                    let acc = run_sums::<L, V, P, HALF>(self.steps, w, self.x.add(t * LANES));
                    self.finish::<L, V, P>(&acc, t, P);
                    at = Cursor::at(c, t + P);
                } else {
                    // A short last tile sums only its pixels: 7 × 7 pixels are 8 tiles of 6 and
                    // one of 1, which took as long as the others when it summed 6 (`conv_one`
                    // on ResNet-50's layers over 7² shows the difference).
                    match n {
                        1 => self.tile::<L, V, 1>(&mut at, w, t),
                        2 => self.tile::<L, V, 2>(&mut at, w, t),
                        3 => self.tile::<L, V, 3>(&mut at, w, t),
                        4 => self.tile::<L, V, 4>(&mut at, w, t),
                        5 => self.tile::<L, V, 5>(&mut at, w, t),
                        _ => self.tile::<L, V, NP>(&mut at, w, t),
                    }
                }
                t += n;
            }
        }
    }

    /// The tile of the `N` pixels from `t`, whose first pixel is at `at` (advanced past them),
    /// with the panel's weights at `w`.
    ///
    /// # Safety
    ///
    /// As [`Kernel::tiles`]; pixels `t..t + N` are the panel's.
    #[inline(always)]
    unsafe fn tile<L: Line, const V: usize, const N: usize>(&self, at: &mut Cursor, w: *const f32, t: usize) {
        let xs: [*const f32; N] = std::array::from_fn(|_| {
            let x = self.x.wrapping_add(at.input(self.c, self.lanes));
            at.advance(self.c);
            x
        });
        // SAFETY: by the caller's contract.
        unsafe {
            let acc = sums::<L, V, N>(self.steps, w, xs);
            self.finish::<L, V, N>(&acc, t, N);
        }
    }

    /// The bias, addend and activation on the first `n` pixels of a tile's sums (pixels `t..`),
    /// and the stores.
    ///
    /// # Safety
    ///
    /// As [`Kernel::tiles`].
    #[inline(always)]
    unsafe fn finish<L: Line, const V: usize, const P: usize>(&self, acc: &[[L; V]; P], t: usize, n: usize) {
        let c = self.c;
        let plane_out = c.win.oh * c.win.ow * LANES;
        // SAFETY: by the caller's contract; every address below is inside its operand.
        unsafe {
            for v in 0..V {
                let co = self.panel * PANEL + (self.line0 + v) * LANES;
                let lanes = LANES.min(c.out_channels - co);
                let b = if self.bias.is_null() { L::zero() } else { L::load_first(self.bias.add(co), lanes) };
                let out = co / LANES * plane_out;
                for (j, acc) in acc.iter().enumerate().take(n) {
                    let at = out + (t + j) * LANES;
                    let mut s = L::add(acc[v], b);
                    if !self.z.is_null() {
                        s = L::add(s, L::load(self.z.add(at)));
                    }
                    s = L::activate(s, c.act);
                    L::store_first(self.y.add(at), s, lanes);
                }
            }
        }
    }
}

/// [`one_image`]'s panels `panels` of pixels `part`, one float at a time (the same chains of
/// fused multiply-adds).
///
/// # Safety
///
/// As [`one_image`].
#[allow(clippy::too_many_arguments)]
unsafe fn portable(c: &Conv2d, lanes: usize, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32, panels: Range<usize>, part: Range<usize>) {
    let (k, plane_out) = (c.channels, c.win.oh * c.win.ow * LANES);
    let taps = taps(c, lanes);
    let steps = k * taps.len();
    for q in part {
        let xq = input_at(c, lanes, q);
        for co in panels.start * PANEL..(panels.end * PANEL).min(c.out_channels) {
            let (panel, lane) = (co / PANEL, co % PANEL);
            // SAFETY: by the caller's contract.
            unsafe {
                let mut s = 0.0f32;
                for ch in 0..k {
                    for (t, &tap) in taps.iter().enumerate() {
                        let wv = *wp.add((panel * steps + ch * taps.len() + t) * PANEL + lane);
                        s = wv.mul_add(*x.add(channel_at(c, lanes, ch) + xq + tap), s);
                    }
                }
                if !bias.is_null() {
                    s += *bias.add(co);
                }
                let at = co / LANES * plane_out + q * LANES + co % LANES;
                if !z.is_null() {
                    s += *z.add(at);
                }
                *y.add(at) = super::activate_one(s, c.act);
            }
        }
    }
}

/// [`run`] for generated code, with `kiln_rt_conv2d_packed`'s arguments and `x_blocked` after
/// `width`: `width` 0 when `w` holds the plain weights, [`packed_width`] when it holds them as
/// [`pack_weights`] packs them; `x_blocked` 0 when `x` is NCHW planes. `x`, `z` and `y` are NCHW16c tensors. Nothing happens when a size is negative, the
/// activation code is unknown, `width` is another value or the convolution is not
/// [supported](supports).
///
/// # Safety
///
/// As [`run`]: `x` readable for [`x_len`] floats (blocked or not), `y` writable for [`y_len`]
/// and overlapping no other operand but `z`, `z` readable for [`y_len`] when `residual != 0`
/// (it may be `y`), `b` for `out_channels` when `bias != 0`, `w` for the weights. Alignment is
/// not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_conv2d_nchwc(
    x: *const f32,
    w: *const f32,
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
    x_blocked: i64,
    alpha: f32,
    beta: f32,
) {
    let ints = [batch, channels, out_channels, groups, h, w_, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act];
    let Some(c) = Conv2d::from_args(ints, alpha, beta) else { return };
    if width != 0 && width != packed_width(&c) as i64 {
        return;
    }
    // SAFETY: by the caller's contract.
    unsafe { run(&c, x, x_blocked != 0, w, width != 0, b, z, y) }
}
