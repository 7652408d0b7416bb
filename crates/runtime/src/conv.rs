//! The fused 2-D convolution of `f32` NCHW tensors: `y = act(W ⊛ x + bias + z)` in one call, for
//! any groups, strides, padding and dilations.
//!
//! **Design.** A depthwise convolution (one input and one output channel per group) is the
//! [`dwconv`](crate::dwconv) routine with the epilogue applied to each output plane as soon as
//! it is computed. Otherwise, per image and group, the convolution is the product `Y_g[Mg, P] = W_g[Mg, K] ·
//! col[K, P]` of the weights (`K = Cg·kh·kw`, rows read in place) and the im2col matrix of the
//! group's input channels (`P = oh·ow`), computed by `sgemm`'s blocked driver and kernels. The
//! column matrix is never written out: the driver asks its `B` source for one `KC × NC` block at
//! a time, and [`Image`] builds those packed panels straight from the input planes (each panel
//! row is a run of zeros, a copy and zeros per output row it spans, as `im2col` builds its
//! rows). A 1×1 convolution without stride or padding multiplies the planes themselves. A
//! window of several taps over planes wide enough reads its columns where they lie instead
//! (`conv/flat.rs`): the planes laid out flat, split into stride phases and padded into a copy
//! when needed, with one offset per step and no input packed; with AVX2 or AVX-512 output channels go in
//! vector lanes (`conv/channels.rs`), otherwise flat columns (`gemm/direct.rs`). A strided 1×1 convolution multiplies
//! its planes subsampled into one copy (`conv/phases.rs`). When the
//! last k block of a block of rows is summed, the epilogue (bias per output channel, residual
//! addend, activation) runs on those rows while they are in cache, rather than as a pass over
//! the whole output afterwards; on `sgemm`'s full tiles it runs in registers before the tile is
//! stored (`Rows::tile_epilogue`, for no activation, Relu and Clip: the same additions and
//! selects), which pays most on the 1×1 layers of large planes (MobileNet-V2's; `kiln bench
//! --kernels`). Large products split over the thread pool as `sgemm`'s do.
//!
//! **Numerics.** The panels hold exactly the values `im2col` writes, the kernel and blocking are
//! `sgemm`'s, and the epilogue is [`Epilogue`]'s row code: the result is bit for bit that of
//! `im2col`, `sgemm` (`beta = 0`) and `epilogue` run one after another (for a depthwise
//! convolution, `dwconv2d` and `epilogue`; for flat planes read in place, `im2col`, one chain
//! of multiply-adds over all of `k` per element, and `epilogue`), on any thread count (`conv/tests.rs` checks
//! exactly that).
//!
//! **Performance.** `cargo run --release -p kiln-runtime --example conv_bench` runs ResNet-50's
//! 53 convolutions in network order on their own buffers, fused and as the three calls;
//! `conv_one` times one layer and `kiln bench --kernels` each kernel of a model. Fusing pays
//! where the column matrix is large (the 7×7 stem, 3×3 layers on large planes) and, on several
//! threads, in one split call per convolution instead of three; reading flat planes in place
//! (`conv/flat.rs`) took it ahead of the three calls on every 3×3 layer, and subsampling the
//! strided 1×1 projections (`conv/phases.rs`) sped those up. Without column matrices, the
//! arena no longer holds them. Recorded results: `docs/performance.md`.
//!
//! A residual addend is read by the epilogue in short runs a row apart, which the hardware
//! prefetchers do not follow: the finisher asks for each tile's part of it while the tile's
//! last k block is summed ([`Finish::prefetch`](crate::gemm::Finish)); `conv_one` with
//! `RESIDUAL` 1 (e.g. `64,256,56,1,1,0,1`) measures it.

use crate::dwconv::DwConv2d;
use flat::Flat;
use phases::{PhaseCopy, Phases};
use crate::epilogue::{Activation, Bias, Epilogue};
use crate::gemm::pack::View;
use crate::gemm::{self, Finish, Isa, Kernel, Problem, Sgemm, Source, TileAct, TileEpilogue, Transpose};
use std::cell::RefCell;
use crate::im2col::{self, Im2col};
use crate::window::{Window, elements};

/// One fused convolution: `batch` images of `channels` planes convolved with `out_channels`
/// kernels of `channels / groups` planes over the window `win` into output planes, then
/// `y = act(conv + bias[m] + z)`, the bias and `z` (laid out as `y`) optional.
///
/// ```
/// use kiln_runtime::conv::Conv2d;
/// use kiln_runtime::epilogue::Activation;
/// use kiln_runtime::window::Window;
/// // One 3×3 plane, one 2×2 kernel of ones, stride 1, no padding: sums of 2×2 windows.
/// let c = Conv2d { batch: 1, channels: 1, out_channels: 1, groups: 1, win: Window { h: 3, w: 3, oh: 2, ow: 2, kh: 2, kw: 2, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 }, bias: true, residual: false, act: Activation::Relu };
/// let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
/// let mut y = [f32::NAN; 4];
/// c.run(&x, &[1.0; 4], &[-13.0], &[], &mut y);
/// assert_eq!(y, [0.0, 3.0, 11.0, 15.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conv2d {
    /// Images.
    pub batch: usize,
    /// Input channels of an image (all groups).
    pub channels: usize,
    /// Output channels of an image (all groups).
    pub out_channels: usize,
    /// Groups: output channel `m` sees input channels `g·Cg..(g + 1)·Cg` of its group `g`.
    pub groups: usize,
    /// The planes, kernel, strides, padding and dilations.
    pub win: Window,
    /// Whether `bias[m]` is added to output channel `m`.
    pub bias: bool,
    /// Whether `z` is added.
    pub residual: bool,
    /// The activation applied last.
    pub act: Activation,
}

impl Conv2d {
    /// The convolution of `kiln_rt_conv2d`'s integer arguments in their order (`batch, channels,
    /// out_channels, groups`, the [`Window`]'s twelve, `bias, residual, act`) and the
    /// activation's parameters, or `None` when a size is negative or the activation code
    /// unknown. Validity of the sizes together is [`Conv2d::is_valid`]'s to check.
    pub fn from_args(ints: [i64; 19], alpha: f32, beta: f32) -> Option<Conv2d> {
        let [batch, channels, out_channels, groups, window @ .., bias, residual, act] = ints;
        let counts = [batch, channels, out_channels, groups].map(usize::try_from);
        let [Ok(batch), Ok(channels), Ok(out_channels), Ok(groups)] = counts else { return None };
        let win = Window::from_args(window)?;
        let act = Activation::from_code(act, alpha, beta)?;
        Some(Conv2d { batch, channels, out_channels, groups, win, bias: bias != 0, residual: residual != 0, act })
    }

    /// The im2col of one group of one image.
    fn im2col(&self) -> Im2col {
        let c = self;
        Im2col { channels: c.channels / c.groups.max(1), win: c.win }
    }

    /// Whether the sizes make sense: groups dividing both channel counts, the im2col of a group
    /// [valid](Im2col::is_valid), and every tensor's size representable.
    /// [`run`](Self::run) does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        let c = self;
        c.groups > 0
            && c.channels.is_multiple_of(c.groups)
            && c.out_channels.is_multiple_of(c.groups)
            && self.im2col().is_valid()
            && elements(&[c.batch, c.channels, c.win.h, c.win.w]).is_some()
            && elements(&[c.out_channels, c.channels / c.groups, c.win.kh, c.win.kw]).is_some()
            && elements(&[c.batch, c.out_channels, c.win.oh, c.win.ow]).is_some()
    }

    /// Elements of `y` written (and of `z` read): `batch·out_channels·oh·ow`, saturating.
    pub fn y_len(&self) -> usize {
        [self.out_channels, self.win.oh, self.win.ow].into_iter().fold(self.batch, usize::saturating_mul)
    }

    /// Elements of `x` read (0 when `y` is empty).
    pub fn x_len(&self) -> usize {
        if self.y_len() == 0 { 0 } else { [self.channels, self.win.h, self.win.w].into_iter().fold(self.batch, usize::saturating_mul) }
    }

    /// Elements of the weights read (0 when `y` is empty).
    pub fn w_len(&self) -> usize {
        if self.y_len() == 0 { 0 } else { [self.channels / self.groups.max(1), self.win.kh, self.win.kw].into_iter().fold(self.out_channels, usize::saturating_mul) }
    }

    /// Elements of the bias read (0 without one or when `y` is empty).
    pub fn bias_len(&self) -> usize {
        if self.bias && self.y_len() > 0 { self.out_channels } else { 0 }
    }

    /// Elements of `z` read (0 without the residual addend).
    pub fn z_len(&self) -> usize {
        if self.residual { self.y_len() } else { 0 }
    }

    /// Computes the convolution with the detected instruction set.
    ///
    /// # Panics
    ///
    /// If a slice is shorter than its `*_len`.
    pub fn run(&self, x: &[f32], w: &[f32], bias: &[f32], z: &[f32], y: &mut [f32]) {
        self.run_with(Isa::detected(), x, w, bias, z, y);
    }

    /// Computes the convolution with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, x: &[f32], w: &[f32], bias: &[f32], z: &[f32], y: &mut [f32]) {
        assert!(
            x.len() >= self.x_len() && w.len() >= self.w_len() && bias.len() >= self.bias_len() && z.len() >= self.z_len() && y.len() >= self.y_len(),
            "conv2d operand slices are too short for {self:?}"
        );
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element the convolution addresses; `y` is exclusively
        // borrowed, so it overlaps none of the others.
        unsafe { self.run_raw(isa, x.as_ptr(), w.as_ptr(), bias.as_ptr(), z.as_ptr(), y.as_mut_ptr()) }
    }

    /// The convolution on raw pointers; nothing when the sizes are not valid.
    ///
    /// # Safety
    ///
    /// `x`, `w`, `bias`, `z` readable for their `*_len` elements (an unused operand is not
    /// touched), `y` writable for [`y_len`](Self::y_len) and overlapping none of them; the CPU
    /// runs `isa`. No alignment is required.
    unsafe fn run_raw(&self, isa: Isa, x: *const f32, w: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
        // SAFETY: by the caller's contract.
        unsafe { self.run_weights(isa, x, w, false, bias, z, y) }
    }

    /// [`run_raw`](Self::run_raw) with the weights as they are (`packed` false) or in the
    /// panels of [`packed_width(isa)`](Self::packed_width), which then is `Some`.
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw); packed, `w` holds [`packed_len`](Self::packed_len) floats.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_weights(&self, isa: Isa, x: *const f32, w: *const f32, packed: bool, bias: *const f32, z: *const f32, y: *mut f32) {
        if !self.is_valid() || self.y_len() == 0 {
            return;
        }
        let g = self.im2col();
        let (cg, mg) = (g.channels, self.out_channels / self.groups);
        let (k, p) = (cg * g.win.kh * g.win.kw, g.win.oh * g.win.ow);
        let epilogue = Epilogue { rows: 1, cols: 0, bias: if self.bias { Bias::PerRow { period: 1 } } else { Bias::None }, residual: self.residual, act: self.act };
        let pointwise = g.win.kh == 1 && g.win.kw == 1 && g.win.sh == 1 && g.win.sw == 1 && g.win.ph == 0 && g.win.pw == 0 && g.win.oh == g.win.h && g.win.ow == g.win.w;
        // A 1×1 window without padding that skips inputs: its column matrix is the planes
        // subsampled by the strides.
        let subsampled = g.win.kh == 1 && g.win.kw == 1 && g.win.ph == 0 && g.win.pw == 0 && !pointwise;
        if cg == 1 && mg == 1 {
            // Depthwise: every plane with its own kernel, the epilogue on each finished plane.
            let d = DwConv2d { planes: self.batch * self.channels, channels: self.channels, win: g.win, accumulate: false };
            let post = Post { isa, e: Epilogue { cols: p, ..epilogue }, bias, z };
            // SAFETY: by the caller's contract: the planes, kernels, bias and `z` are those
            // `d` and `post` address.
            return unsafe { d.run_fused(isa, x, w, y, post) };
        }
        for n in 0..self.batch {
            for gi in 0..self.groups {
                // SAFETY: by the caller's contract and valid sizes, image `n`'s group `gi` is
                // inside `x`, its kernels inside `w`, its output channels inside `y` (and `z`,
                // the bias).
                unsafe {
                    let x = x.add((n * self.channels + gi * cg) * g.win.h * g.win.w);
                    let m0 = n * self.out_channels + gi * mg;
                    let (y, z) = (y.add(m0 * p), if self.residual { z.add(m0 * p) } else { z });
                    let bias = if self.bias { bias.add(gi * mg) } else { bias };
                    if k == 0 {
                        // An empty sum: the epilogue of zeros.
                        std::ptr::write_bytes(y, 0, mg * p);
                        let fin = Rows { isa, e: epilogue, y, z, bias, ld: p };
                        fin.rows(0, mg, 0, p);
                        continue;
                    }
                    let fin = Rows { isa, e: epilogue, y, z, bias, ld: p };
                    if packed {
                        // `packed_width` chose the layout for this group's flat product.
                        let Some(flat) = Flat::of(&g.win, cg, mg, isa) else { return };
                        let Some(width) = flat.panel_width(isa) else { return };
                        let w = w.add(gi * packed::group_len(mg, k, width));
                        flat.product(isa, &g.win, cg, x, w, true, mg, y, (!epilogue.is_identity()).then_some(&fin));
                        continue;
                    }
                    let w = w.add(gi * mg * k);
                    if mg == 1 || p == 1 {
                        // A matrix–vector product, which `sgemm` computes without packing (and
                        // in its own order): its column matrix, the product, then the epilogue.
                        let s = Sgemm { m: mg, n: p, k, lda: k, ldb: p, ldc: p, trans_a: Transpose::No, trans_b: Transpose::No, alpha: 1.0, beta: 0.0 };
                        if pointwise {
                            s.run_raw(isa, isa.blocking(), w, x, y);
                        } else {
                            with_col(g.col_len(), |col| {
                                g.run_raw(x, col.as_mut_ptr());
                                s.run_raw(isa, isa.blocking(), w, col.as_ptr(), y);
                            });
                        }
                        fin.rows(0, mg, 0, p);
                        continue;
                    }
                    if let Some(flat) = Flat::of(&g.win, cg, mg, isa) {
                        flat.product(isa, &g.win, cg, x, w, false, mg, y, (!epilogue.is_identity()).then_some(&fin));
                        continue;
                    }
                    let blocked = |b: Panels| {
                        let a = View { ptr: w, lane_stride: k as isize, step_stride: 1 };
                        let pr = Problem { m: mg, n: p, k, a, b, c: gemm::Out { ptr: y, rs: p as isize }, up: gemm::Update::new(1.0, 0.0) };
                        // `sgemm`'s blocking: each element is summed in the same k blocks as there.
                        if epilogue.is_identity() {
                            gemm::product(isa, isa.blocking(), &pr, &gemm::Done);
                        } else {
                            gemm::product(isa, isa.blocking(), &pr, &fin);
                        }
                    };
                    let matrix = |x: *const f32| Panels::Matrix(View { ptr: x, lane_stride: 1, step_stride: p as isize });
                    if pointwise {
                        blocked(matrix(x));
                    } else if subsampled {
                        // The planes subsampled once (the column matrix itself), instead of
                        // panels packed in runs of one output row.
                        let copy = PhaseCopy { win: g.win, width: g.win.ow, height: g.win.oh, phases: Phases::First };
                        copy.with(isa, cg, x, |planes| blocked(matrix(planes)));
                    } else {
                        blocked(Panels::Image(Image { g, x, col: 0 }));
                    }
                }
            }
        }
    }
}

thread_local! {
    /// Column matrices of the convolutions that are matrix–vector products, grown to the
    /// largest asked for and kept for the thread's life.
    static COL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of this thread's column scratch.
fn with_col(len: usize, f: impl FnOnce(&mut [f32])) {
    crate::scratch::with(&COL, len, f)
}

/// The convolution's `B`: the planes themselves (1×1, unstrided, unpadded), or their implicit
/// column matrix.
#[derive(Clone, Copy, Debug)]
enum Panels {
    Matrix(View),
    Image(Image),
}

impl Source for Panels {
    #[inline(always)]
    unsafe fn pack<K: Kernel>(&self, dst: *mut f32, j: usize, p: usize, lanes: usize, kc: usize) {
        // SAFETY: by the caller's contract.
        unsafe {
            match self {
                Panels::Matrix(v) => v.pack::<K>(dst, j, p, lanes, kc),
                Panels::Image(i) => i.pack::<K>(dst, j, p, lanes, kc),
            }
        }
    }

    #[inline(always)]
    unsafe fn at_col(self, j: usize) -> Panels {
        // SAFETY: by the caller's contract.
        unsafe {
            match self {
                Panels::Matrix(v) => Panels::Matrix(v.at_col(j)),
                Panels::Image(i) => Panels::Image(i.at_col(j)),
            }
        }
    }
}

/// The im2col matrix of one group's input planes (`x`), from column `col` on, packed a block at
/// a time.
#[derive(Clone, Copy, Debug)]
struct Image {
    g: Im2col,
    x: *const f32,
    col: usize,
}

/// The most input floats [`Image::prefetch_next`] asks for: a block's rows of a few channels.
const IMAGE_AHEAD_MAX: usize = 16 * 1024;

impl Image {
    /// Asks for the input rows that the next block of `lanes` columns from column `first`
    /// reads in steps `p0..p0 + kc` to be loaded into L2, while this block is multiplied: the
    /// rows of a strided window are read a few at a time, too little for the hardware
    /// prefetcher to get ahead of, as in MobileNet-V2's stem (`conv_one -- 3,32,224,3,2,1,0`,
    /// input from memory). Nothing when there is no next block or its rows are more than
    /// [`IMAGE_AHEAD_MAX`] floats.
    #[inline(always)]
    fn prefetch_next(&self, first: usize, lanes: usize, p0: usize, kc: usize) {
        let g = &self.g;
        let pixels = g.win.oh * g.win.ow;
        if first >= pixels || g.win.h == 0 || kc == 0 {
            return;
        }
        let taps = g.win.kh * g.win.kw;
        let (c0, c1) = (p0 / taps, (p0 + kc - 1) / taps);
        let (oy_a, oy_b) = (first / g.win.ow, ((first + lanes).min(pixels) - 1) / g.win.ow);
        let r0 = (oy_a * g.win.sh).saturating_sub(g.win.ph);
        let r1 = (oy_b * g.win.sh + (g.win.kh - 1) * g.win.dh).saturating_sub(g.win.ph).min(g.win.h - 1);
        if r1 < r0 || (c1 - c0 + 1) * (r1 - r0 + 1) * g.win.w > IMAGE_AHEAD_MAX {
            return;
        }
        // Each channel's rows are one run: the planes are contiguous.
        let plane = g.win.h * g.win.w;
        for c in c0..=c1 {
            crate::prefetch::rows_to_l2(self.x.wrapping_add(c * plane + r0 * g.win.w), 1, (r1 - r0 + 1) * g.win.w, 0);
        }
    }
}

impl Source for Image {
    /// Panel row `p` of columns `j..`: per output row it spans, zeros where the input row is
    /// padding, else zeros, a copy of the input row's inside part and zeros.
    #[inline(always)]
    unsafe fn pack<K: Kernel>(&self, dst: *mut f32, j: usize, p0: usize, lanes: usize, kc: usize) {
        let i = |v: usize| v as isize;
        let g = &self.g;
        let width = K::NR;
        let (h, w, oh, ow) = (i(g.win.h), i(g.win.w), i(g.win.oh), i(g.win.ow));
        let (taps, plane) = (g.win.kh * g.win.kw, g.win.h * g.win.w);
        let first = self.col + j;
        let (oy0, ox0) = (i(first / g.win.ow), i(first % g.win.ow));
        for pp in 0..kc {
            let p = p0 + pp;
            let (c, t) = (p / taps, p % taps);
            let (ky, kx) = (i(t / g.win.kw), i(t % g.win.kw));
            let (y0, x0) = (ky * i(g.win.dh) - i(g.win.ph), kx * i(g.win.dw) - i(g.win.pw));
            let (oy_lo, oy_hi) = im2col::inside(y0, i(g.win.sh), h, oh);
            let (ox_lo, ox_hi) = im2col::inside(x0, i(g.win.sw), w, ow);
            // SAFETY: channel `c` of the group is inside `x`; every write below is inside panel
            // row `pp` of a panel of this block, and every read inside the channel's plane (the
            // copied columns lie in `ox_lo..ox_hi` of a row in `oy_lo..oy_hi`, by `inside`).
            unsafe {
                let xc = self.x.add(c * plane);
                let (mut oy, mut ox) = (oy0, ox0);
                let mut at = 0;
                while at < lanes {
                    // Up to the end of the panel, of the block and of the output row.
                    let len = (width - at % width).min(lanes - at).min((ow - ox) as usize);
                    let d = dst.add(((at / width) * kc + pp) * width + at % width);
                    if oy < oy_lo || oy >= oy_hi {
                        im2col::zero::<K::S>(d, len);
                    } else {
                        let end = ox + len as isize;
                        let lo = ox.max(ox_lo).min(end);
                        let hi = end.min(ox_hi).max(lo);
                        im2col::zero::<K::S>(d, (lo - ox) as usize);
                        let src = xc.offset((oy * i(g.win.sh) + y0) * w + lo * i(g.win.sw) + x0);
                        im2col::copy::<K::S>(d.offset(lo - ox), src, (hi - lo) as usize, i(g.win.sw));
                        im2col::zero::<K::S>(d.offset(hi - ox), (end - hi) as usize);
                    }
                    at += len;
                    ox += len as isize;
                    if ox == ow {
                        ox = 0;
                        oy += 1;
                    }
                }
                let tail = lanes % width;
                if tail != 0 {
                    im2col::zero::<K::S>(dst.add(((lanes / width) * kc + pp) * width + tail), width - tail);
                }
            }
        }
        self.prefetch_next(first + lanes, lanes, p0, kc);
    }

    #[inline(always)]
    unsafe fn at_col(self, j: usize) -> Image {
        Image { col: self.col + j, ..self }
    }
}

/// The epilogue on finished rows of one group's output: row `r` adds `bias[r]` and `z`'s row.
struct Rows {
    isa: Isa,
    /// The activation and which operands are added (its sizes and bias period are set per
    /// block).
    e: Epilogue,
    y: *mut f32,
    z: *const f32,
    bias: *const f32,
    /// Row stride of `y` and `z`.
    ld: usize,
}

impl Finish for Rows {
    unsafe fn rows(&self, i: usize, mr: usize, j: usize, nc: usize) {
        let bias = if self.e.bias == Bias::None { Bias::None } else { Bias::PerRow { period: mr } };
        let e = Epilogue { rows: mr, cols: nc, bias, ..self.e };
        // SAFETY: the block is inside the output (the caller's contract), so are its rows of
        // `z` and their bias elements; `z` does not overlap `y`.
        unsafe {
            let at = i * self.ld + j;
            let z = if e.residual { self.z.add(at) } else { self.z };
            let bias = if e.bias == Bias::None { self.bias } else { self.bias.add(i) };
            e.run_strided(self.isa, self.y.add(at), bias, z, self.ld);
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, i: usize, mr: usize, j: usize, nc: usize) {
        if self.e.residual {
            // SAFETY: the tile is inside the output, so its rows of `z` are inside `z`.
            unsafe { crate::prefetch::rows(self.z.add(i * self.ld + j), mr, nc, self.ld) };
        }
    }

    fn tile_epilogue(&self) -> Option<TileEpilogue> {
        let act = TileAct::of(self.e.act)?;
        let bias = if self.e.bias == Bias::None { std::ptr::null() } else { self.bias };
        let z = if self.e.residual { self.z } else { std::ptr::null() };
        Some(TileEpilogue { bias, z, ld: self.ld, act })
    }
}

/// The epilogue of a fused depthwise convolution on finished output planes (while they are in
/// cache): plane `p` adds `bias[p mod channels]` (when the epilogue has a bias) and `z`'s plane
/// `p`, then the activation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Post {
    pub isa: Isa,
    /// One plane's epilogue: one row of `oh·ow`, the bias per row or none.
    pub e: Epilogue,
    pub bias: *const f32,
    pub z: *const f32,
}

/// Finished planes are handed to the epilogue in runs of at least this many elements (or at
/// the end of a part or of a channel period): a call per 7×7 plane cost more than the pass it
/// saves.
const POST_MIN: isize = 4096;

impl Post {
    /// Planes `from..to` of the output `y`, which do not wrap past a multiple of `channels`.
    ///
    /// # Safety
    ///
    /// The planes are inside `y` (`e.cols` elements each); the bias holds their elements and
    /// `z` their planes, apart from `y`; the CPU runs `isa`.
    pub(crate) unsafe fn planes(&self, from: isize, to: isize, channels: isize, y: *mut f32) {
        let ys = self.e.cols;
        let rows = (to - from) as usize;
        let bias = if self.e.bias == Bias::None { Bias::None } else { Bias::PerRow { period: rows } };
        let e = Epilogue { rows, bias, ..self.e };
        // SAFETY: by the caller's contract.
        unsafe {
            let at = from * ys as isize;
            let z = if e.residual { self.z.offset(at) } else { self.z };
            let b = if e.bias == Bias::None { self.bias } else { self.bias.offset(from % channels) };
            e.run_strided(self.isa, y.offset(at), b, z, ys);
        }
    }

    /// Called after plane `p` of `from..to` is computed; `pending` is the first plane not yet
    /// handed to the epilogue.
    ///
    /// # Safety
    ///
    /// As [`planes`](Self::planes), for the planes computed so far.
    #[inline(always)]
    pub(crate) unsafe fn after(&self, p: isize, to: isize, channels: isize, pending: &mut isize, y: *mut f32) {
        let next = p + 1;
        if next == to || next % channels == 0 || (next - *pending) * self.e.cols as isize >= POST_MIN {
            // SAFETY: by the caller's contract.
            unsafe { self.planes(*pending, next, channels, y) };
            *pending = next;
        }
    }
}

/// The fused convolution for generated code: [`Conv2d`] with its argument names. `x`, `w`, `y`
/// point at the first image, kernel and output element; `b` at the bias when `bias != 0` and
/// `z` at the residual addend when `residual != 0` (otherwise they are not read); `act`,
/// `alpha`, `beta` as for [`kiln_rt_epilogue`](crate::epilogue::kiln_rt_epilogue). Nothing
/// happens when a size is negative, the activation code unknown or the sizes not
/// [valid](Conv2d::is_valid).
///
/// # Safety
///
/// Every element the convolution addresses must be inside live allocations: `x`, `w`, `b`, `z`
/// readable for [`Conv2d`]'s lengths, `y` writable for `batch·out_channels·oh·ow` and
/// overlapping none of them. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_conv2d(
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
    alpha: f32,
    beta: f32,
) {
    let ints = [batch, channels, out_channels, groups, h, w_, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act];
    let Some(c) = Conv2d::from_args(ints, alpha, beta) else { return };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { c.run_raw(Isa::detected(), x, w, b, z, y) }
}

mod channels;
mod flat;
mod packed;
pub use packed::kiln_rt_conv2d_packed;
mod phases;
#[cfg(test)]
mod tests;
