//! Depthwise 2-D convolution of `f32` NCHW planes: each of `planes` (`N·C`) input planes is
//! convolved with the kernel of its channel (`plane mod C`), `y = (y if accumulating) + x ⊛ w`.
//!
//! **Design.** Each input plane is copied into the thread-local scratch (shared with `sgemm`)
//! as its padded plane, zeros around the input as far as the taps reach, split into phases by
//! the stride: phase `(qr, qc)` holds the padded rows `qr, qr + sh, ...` and columns
//! `qc, qc + sw, ...` (one phase for stride 1). Every tap then reads its phase at a constant
//! offset from the output position, with nothing to check, so an output row is one segment: the
//! sum of `kh·kw` shifted slices scaled by their weights, computed `BLOCK` vectors at a time
//! with independent accumulators and the weight broadcast, the last vector masked
//! (`Simd::load_first`). Outputs narrower than `FLAT_BELOW` columns make the whole plane one
//! segment instead, laid out with the phases' row stride in the scratch (its few columns past
//! `ow` computed and dropped) and copied out. Rows are copied by vectors, de-interleaved for
//! stride 2 by a loop the compiler vectorizes, element by element for larger strides. The
//! padding is zeroed once per call; each plane rewrites only the interior. A bounds-checked
//! scalar loop (`exact`) computes a plane whose kernel holds an infinity or NaN (a tap in the
//! padding would add `w·0 = NaN` where the definition skips it), and every plane when the
//! padding or dilation is so large that the padded planes would be out of proportion to the
//! operands. The instruction set is [`Isa::detected`]'s, the vector operations `sgemm`'s
//! (`gemm::simd`); a warm call allocates nothing. Called from the fused [`conv`](crate::conv)
//! routine, it hands finished planes to the epilogue in runs of at least 4096 elements, while
//! they are in cache; planes that `dwconv/direct.rs` reads in place take the epilogue (bias,
//! addend, no activation, Relu or Clip) in registers before they are stored instead, which
//! `conv_one` shows on MobileNet-V2's 384 × 14², 960 × 7² and 144 × 56² stride-2 layers.
//!
//! With AVX-512, 3×3 planes of padding 1 and stride 1 or 2 skip the padded plane:
//! `dwconv/direct.rs` reads them in place with masked loads (faster on MobileNet-V2's layers:
//! no copy into the padded plane, no de-interleaving for stride 2).
//!
//! Without AVX-512, outputs of at most 32 × 32 are computed a vector of planes at a time, one
//! plane per lane (`dwconv/lanes.rs`): faster on MobileNet-V2's layers of that size with
//! AVX2, where this path's per-plane work dominates. With AVX-512 the same holds for outputs
//! of at most 16 × 16 whose window `direct.rs` does not take (5×5 and 7×7 ones).
//!
//! An earlier version split each output row into border columns (a bounds-checked scalar sum)
//! and an interior read from the input in place; its per-row work dominated the 14×14 and 7×7
//! planes.
//!
//! **Numerics.** Each output is its start (zero, or the old `y` when accumulating) plus the
//! taps in ascending `(ky, kx)` order, one rounding per tap: fused multiply-adds where the
//! instruction set has them, a multiply and an add in the portable kernel and the scalar loop.
//! A tap in the padding adds `w·0`, which changes nothing but the sign of a zero sum. Results
//! are deterministic for a given shape, kernel and instruction set; the loop-IR interpreter
//! calls this same code, so compiled code and the interpreter agree exactly. Without
//! accumulation the old `y` is never read.
//!
//! **Performance.** `cargo run --release -p kiln-runtime --example dwconv_bench` times the
//! depthwise convolutions of MobileNet-V2 (3×3, padding 1, accumulating onto a bias) per
//! instruction set. Per-plane work (filling the padded plane, the masked last vector)
//! dominates small planes: the 7×7 ones run at a fraction of the large planes' rate. Recorded
//! results: `docs/performance.md`.

use crate::conv::Post;
use crate::gemm::simd::{Portable, Simd};
use crate::gemm::{Isa, with_scratch};
use crate::pool::{self, SharedPtr};
use crate::window::{Window, elements};
#[cfg(target_arch = "x86_64")]
use crate::gemm::{avx2::Avx2, avx512::Avx512};

/// Taps summed in one pass over a segment; a larger kernel takes several passes, each adding
/// onto the last.
const GROUP: usize = 16;

/// The sizes of one depthwise convolution: `y[p, oy, ox] = (y[p, oy, ox] if accumulate) +
/// Σ_{ky, kx} x[p, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw] · w[p mod channels, ky, kx]`, over
/// `planes` input planes and the window over each, taps outside the input skipped (zero
/// padding).
///
/// ```
/// use kiln_runtime::dwconv::DwConv2d;
/// use kiln_runtime::window::Window;
/// // One 3×3 plane, a 2×2 box kernel, stride 1, padding 1 before: a 3×3 output.
/// let d = DwConv2d { planes: 1, channels: 1, win: Window { h: 3, w: 3, oh: 3, ow: 3, kh: 2, kw: 2, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1 }, accumulate: false };
/// let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
/// let mut y = [f32::NAN; 9]; // not read: no accumulation
/// d.run(&x, &[1.0; 4], &mut y);
/// assert_eq!(y, [1.0, 3.0, 5.0, 5.0, 12.0, 16.0, 11.0, 24.0, 28.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DwConv2d {
    /// Input and output planes (`N·C`).
    pub planes: usize,
    /// Kernels (`C`): plane `p` uses kernel `p mod channels`.
    pub channels: usize,
    /// The planes, kernel, strides, padding and dilations.
    pub win: Window,
    /// Add to `y`'s old contents instead of overwriting them.
    pub accumulate: bool,
}

impl DwConv2d {
    /// Whether the sizes make sense: positive strides and dilations, a kernel for the planes to
    /// use, and every element count and index representable. [`run`](Self::run) does nothing
    /// otherwise.
    pub fn is_valid(&self) -> bool {
        let (d, win) = (self, &self.win);
        win.is_valid()
            && (d.planes == 0 || d.channels > 0)
            && elements(&[d.planes, win.h, win.w]).is_some()
            && elements(&[d.channels, win.kh, win.kw]).is_some()
            && elements(&[d.planes, win.oh, win.ow]).is_some()
    }

    /// Elements of `x` the convolution may read, counted from `x[0]` (0 if it computes nothing;
    /// saturating, so an absurd shape reads as too long for any slice).
    pub fn x_len(&self) -> usize {
        if self.y_len() == 0 { 0 } else { self.planes.saturating_mul(self.win.h).saturating_mul(self.win.w) }
    }

    /// Elements of the kernels the convolution may read (0 if it computes nothing).
    pub fn w_len(&self) -> usize {
        if self.y_len() == 0 { 0 } else { self.channels.saturating_mul(self.win.kh).saturating_mul(self.win.kw) }
    }

    /// Elements of `y` the convolution writes.
    pub fn y_len(&self) -> usize {
        self.planes.saturating_mul(self.win.oh).saturating_mul(self.win.ow)
    }

    /// Computes the convolution with the detected instruction set; nothing when the sizes are
    /// not [valid](Self::is_valid).
    ///
    /// # Panics
    ///
    /// If a slice is shorter than [`x_len`](Self::x_len), [`w_len`](Self::w_len) or
    /// [`y_len`](Self::y_len).
    pub fn run(&self, x: &[f32], w: &[f32], y: &mut [f32]) {
        self.run_with(Isa::detected(), x, w, y);
    }

    /// Computes the convolution with a given instruction set (for tests).
    ///
    /// # Panics
    ///
    /// As [`run`](Self::run); also if this CPU lacks `isa`.
    pub fn run_with(&self, isa: Isa, x: &[f32], w: &[f32], y: &mut [f32]) {
        assert!(x.len() >= self.x_len() && w.len() >= self.w_len() && y.len() >= self.y_len(), "dwconv2d operand slices are too short for {self:?}");
        assert!(isa.available(), "this CPU cannot run the {isa:?} kernel");
        // SAFETY: the slices hold every element the convolution addresses; `y` is exclusively
        // borrowed.
        unsafe { self.run_raw(isa, x.as_ptr(), w.as_ptr(), y.as_mut_ptr(), None) }
    }

    /// The convolution with `post` applied to the output planes as soon as they are computed
    /// (the fused [`conv`](crate::conv) routine's depthwise case).
    ///
    /// # Safety
    ///
    /// As [`run_raw`](Self::run_raw), and `post`'s operands hold every plane's bias element
    /// and `z` plane, `z` not overlapping `y`.
    pub(crate) unsafe fn run_fused(&self, isa: Isa, x: *const f32, w: *const f32, y: *mut f32, post: Post) {
        // SAFETY: by the caller's contract.
        unsafe { self.run_raw(isa, x, w, y, Some(post)) }
    }

    /// The convolution on raw pointers.
    ///
    /// # Safety
    ///
    /// `x` and `w` readable for [`x_len`](Self::x_len) and [`w_len`](Self::w_len) elements, `y`
    /// readable and writable for [`y_len`](Self::y_len) and not overlapping them; the CPU runs
    /// `isa`.
    unsafe fn run_raw(&self, isa: Isa, x: *const f32, w: *const f32, y: *mut f32, post: Option<Post>) {
        if !self.is_valid() || self.y_len() == 0 {
            return;
        }
        if self.win.kh == 0 || self.win.kw == 0 || self.win.h == 0 || self.win.w == 0 {
            // No tap reads the input: each output is its start.
            if !self.accumulate {
                // SAFETY: `y` is writable for `y_len` elements.
                unsafe { std::ptr::write_bytes(y.cast::<u8>(), 0, self.y_len() * std::mem::size_of::<f32>()) };
            }
            if let Some(post) = post {
                let mut pending = 0;
                for p in 0..self.planes as isize {
                    // SAFETY: the planes are inside `y`; `post` by the caller's contract.
                    unsafe { post.after(p, self.planes as isize, self.channels as isize, &mut pending, y) };
                }
            }
            return;
        }
        let g = Plan { post, ..Plan::new(self) };
        // Inputs and outputs come from callers; the fast path forms `f32` slices of them, so it
        // needs `f32` alignment, and copies each plane's kernel, so it takes at most MAX_TAPS.
        // The exact path reads and writes unaligned.
        let aligned = [x as usize, y as usize].iter().all(|a| a % std::mem::align_of::<f32>() == 0);
        let fast = g.padded && aligned && g.kh * g.kw <= MAX_TAPS as isize;
        // Planes are independent: large convolutions split them over the thread pool.
        let work = self.y_len().saturating_mul(self.win.kh * self.win.kw);
        let parts = if work >= SPLIT_MIN_TAPS { pool::threads().min(self.planes) } else { 1 };
        let lanes = (fast && lanes::applies(&g, isa)).then(|| lanes::Lanes::new(&g));
        let ptrs = SharedPtr((x, w, y, g));
        pool::for_each(parts, &|i| {
            let (x, w, y, g) = ptrs.get();
            let r = pool::part(self.planes, parts, if lanes.is_some() { isa.lanes() } else { 1 }, i);
            let g = Plan { from: r.start as isize, to: r.end as isize, ..g };
            if !fast {
                // SAFETY: by the caller's contract; parts write disjoint planes.
                return unsafe { exact(&g, x, w, y) };
            }
            if let Some(shape) = lanes {
                return with_scratch(shape.scratch_len(&g, isa.lanes()), |s| {
                    s[..shape.input_len(isa.lanes())].fill(0.0);
                    let s = s.as_mut_ptr();
                    // SAFETY: as below, with the scratch `lanes::planes` needs, zero in the
                    // interleaved plane's padding.
                    unsafe { lanes::run(isa, &g, shape, x, w, y, s) }
                });
            }
            with_scratch(g.scratch_len(), |s| {
                // The padding stays zero: every plane writes the same interior positions.
                s[..g.phases_len()].fill(0.0);
                let s = s.as_mut_ptr();
                // SAFETY: by the caller's contract (the plan came from valid sizes), the scratch
                // is as long as the plan needs and zero in the padding, and `isa` runs here;
                // parts write disjoint planes.
                unsafe {
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => planes_avx512(&g, x, w, y, s),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => planes_avx2(&g, x, w, y, s),
                        _ => planes::<Portable>(&g, x, w, y, s, None),
                    }
                }
            });
        });
    }
}

/// Convolutions with fewer multiply-adds than this run on one thread (a split costs a few
/// microseconds).
const SPLIT_MIN_TAPS: usize = 1 << 17;

/// Kernels with more taps than this take the exact path (the fast one copies each plane's
/// kernel to the stack).
const MAX_TAPS: usize = 64;

/// Output rows narrower than this are computed as one flat segment per plane (see the module
/// doc); wider ones a row at a time.
const FLAT_BELOW: usize = 32;

/// A valid convolution's sizes as `isize`, with the layout of the padded planes.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// The planes this plan computes: `from..to` of `0..planes` (a part of a split).
    from: isize,
    to: isize,
    channels: isize,
    h: isize,
    w: isize,
    oh: isize,
    ow: isize,
    kh: isize,
    kw: isize,
    sh: isize,
    sw: isize,
    ph: isize,
    pw: isize,
    dh: isize,
    dw: isize,
    accumulate: bool,
    /// Row and column phases of the padded plane that taps read: `min(sh, (kh − 1)·dh + 1)`,
    /// likewise for columns.
    pr: isize,
    pc: isize,
    /// Rows and columns of each phase: `oh + ⌊(kh − 1)·dh / sh⌋`, likewise for columns (the
    /// row stride of the flat output too).
    rq: isize,
    wq: isize,
    /// Whether each plane is one flat segment (narrow outputs) or one segment per row.
    flat: bool,
    /// Whether the padded planes are worth building: false only for paddings or dilations out
    /// of proportion to the operands, which the scalar [`exact`] loop computes.
    padded: bool,
    /// The epilogue of finished planes, if any.
    post: Option<Post>,
}

impl Plan {
    /// The plan of `d`, which is valid, with at least one tap and one input element.
    fn new(d: &DwConv2d) -> Plan {
        let i = |v: usize| v as isize;
        let (pr, pc) = (d.win.sh.min((d.win.kh - 1) * d.win.dh + 1), d.win.sw.min((d.win.kw - 1) * d.win.dw + 1));
        let (rq, wq) = (d.win.oh + (d.win.kh - 1) * d.win.dh / d.win.sh, d.win.ow + (d.win.kw - 1) * d.win.dw / d.win.sw);
        let flat = d.win.ow < FLAT_BELOW;
        // In `u128`, saturating, as the sizes may be absurd: the scratch, against what the
        // operands hold.
        let wide = |v: usize| v as u128;
        let scratch = wide(pr).saturating_mul(wide(pc)).saturating_mul(wide(rq)).saturating_mul(wide(wq)).saturating_add(if flat { wide(d.win.oh) * wide(wq) } else { 0 });
        let padded = scratch <= 4 * (wide(d.win.h) * wide(d.win.w) + wide(d.win.oh) * wide(d.win.ow)) + (1 << 16);
        Plan {
            from: 0,
            to: i(d.planes),
            channels: i(d.channels),
            h: i(d.win.h),
            w: i(d.win.w),
            oh: i(d.win.oh),
            ow: i(d.win.ow),
            kh: i(d.win.kh),
            kw: i(d.win.kw),
            sh: i(d.win.sh),
            sw: i(d.win.sw),
            ph: i(d.win.ph),
            pw: i(d.win.pw),
            dh: i(d.win.dh),
            dw: i(d.win.dw),
            accumulate: d.accumulate,
            pr: i(pr),
            pc: i(pc),
            rq: if padded { i(rq) } else { 0 },
            wq: if padded { i(wq) } else { 0 },
            flat,
            padded,
            post: None,
        }
    }

    /// Scratch floats of the phases of one padded plane.
    fn phases_len(&self) -> usize {
        (self.pr * self.pc * self.rq * self.wq) as usize
    }

    /// Scratch floats: the phases, then the flat output.
    fn scratch_len(&self) -> usize {
        self.phases_len() + if self.flat { (self.oh * self.wq) as usize } else { 0 }
    }
}

/// The taps `t` in `0..count` whose position `start + t·step` lies in `0..len`, as a range
/// (empty, and then not necessarily within `0..count`, when there are none).
#[inline(always)]
fn inside(start: isize, step: isize, len: isize, count: isize) -> (isize, isize) {
    // The usual strides without divisions (the halved values are not negative).
    if step == 1 {
        return ((-start).max(0), (len - start).min(count));
    }
    if step == 2 {
        let lo = if start >= 0 { 0 } else { (1 - start) >> 1 };
        let hi = if start >= len { 0 } else { (((len - 1 - start) >> 1) + 1).min(count) };
        return (lo, hi);
    }
    let lo = if start >= 0 { 0 } else { (-start + step - 1) / step };
    let hi = if start >= len { 0 } else { ((len - 1 - start) / step + 1).min(count) };
    (lo, hi)
}

/// Offset `off` of the padded plane as (phase, position within the phase) for stride `s`:
/// `off = s·position + phase`.
#[inline(always)]
fn phase(off: isize, s: isize) -> (isize, isize) {
    match s {
        1 => (0, off),
        2 => (off & 1, off >> 1),
        _ => (off % s, off / s),
    }
}

/// Every plane, by the definition: bounds-checked scalar loops.
///
/// # Safety
///
/// `g` is the plan of valid sizes; `x`, `w`, `y` hold their planes as in
/// [`DwConv2d::run_raw`].
unsafe fn exact(g: &Plan, x: *const f32, w: *const f32, y: *mut f32) {
    let mut pending = g.from;
    for p in g.from..g.to {
        // SAFETY: plane `p` of each operand is inside it; `channels > 0` for valid sizes.
        unsafe {
            plane_exact(g, x.offset(p * g.h * g.w), w.offset(p % g.channels * g.kh * g.kw), y.offset(p * g.oh * g.ow));
            if let Some(post) = g.post {
                post.after(p, g.to, g.channels, &mut pending, y);
            }
        }
    }
}

/// One plane by the definition: `x` (`h × w`), its kernel `k` (`kh × kw`), the output `y`
/// (`oh × ow`).
///
/// # Safety
///
/// As [`exact`], for one plane of each operand.
unsafe fn plane_exact(g: &Plan, x: *const f32, k: *const f32, y: *mut f32) {
    for oy in 0..g.oh {
        let iy0 = oy * g.sh - g.ph;
        let (ky_lo, ky_hi) = inside(iy0, g.dh, g.h, g.kh);
        for ox in 0..g.ow {
            let ix0 = ox * g.sw - g.pw;
            let (kx_lo, kx_hi) = inside(ix0, g.dw, g.w, g.kw);
            // SAFETY: rows `ky_lo..ky_hi` and columns `kx_lo..kx_hi` are inside the input by
            // `inside`; (oy, ox) is inside the output.
            unsafe {
                let at = y.offset(oy * g.ow + ox);
                let mut acc = if g.accumulate { at.read_unaligned() } else { 0.0 };
                for ky in ky_lo..ky_hi {
                    let row = (iy0 + ky * g.dh) * g.w + ix0;
                    for kx in kx_lo..kx_hi {
                        acc += x.offset(row + kx * g.dw).read_unaligned() * k.offset(ky * g.kw + kx).read_unaligned();
                    }
                }
                at.write_unaligned(acc);
            }
        }
    }
}

/// Every plane with the AVX-512 vector operations.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn planes_avx512(g: &Plan, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes::<Avx512>(g, x, w, y, scratch, direct::choose(g).as_ref()) }
}

/// Every plane with the AVX2 vector operations.
///
/// # Safety
///
/// As [`planes`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn planes_avx2(g: &Plan, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { planes::<Avx2>(g, x, w, y, scratch, None) }
}

/// Every plane through the padded planes, or read in place as `direct` says ([`direct::planes`]);
/// a plane whose kernel is not finite by the definition ([`plane_exact`]), where a tap in the
/// padding must add nothing rather than `w·0`.
///
/// # Safety
///
/// `g` is the plan of valid sizes with `padded` set; `x`, `w`, `y` hold their planes as in
/// [`DwConv2d::run_raw`]; `scratch` is writable for [`Plan::scratch_len`] floats, zero in its
/// first [`Plan::phases_len`] floats, and overlaps none of them; the CPU runs `S`, and when
/// `direct` is given, [`direct::choose`] gave it for `g` and the CPU has AVX-512F.
#[inline(always)]
unsafe fn planes<S: Simd>(g: &Plan, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32, direct: Option<&direct::Direct>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(d) = direct {
        // SAFETY: by the caller's contract, with `choose`'s layout.
        return unsafe { direct::planes(d, g, x, w, y) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = direct;
    let (xs, ks, ys) = (g.h * g.w, g.kh * g.kw, g.oh * g.ow);
    // Each plane's kernel is read into an aligned copy first: weights are often slices of a
    // memory-mapped model at any byte offset.
    let mut kernel = [0.0f32; MAX_TAPS];
    let mut pending = g.from;
    for p in g.from..g.to {
        // SAFETY: plane `p` of each operand is inside it; `channels > 0` for valid sizes; the
        // kernel has `ks` taps (at most MAX_TAPS, which `run_raw` checked).
        unsafe {
            let (xp, k, yp) = (x.offset(p * xs), w.offset(p % g.channels * ks), y.offset(p * ys));
            for (t, slot) in kernel[..ks as usize].iter_mut().enumerate() {
                *slot = k.add(t).read_unaligned();
            }
            if kernel[..ks as usize].iter().all(|v| v.is_finite()) {
                plane::<S>(g, xp, kernel.as_ptr(), yp, scratch);
            } else {
                plane_exact(g, xp, k, yp);
            }
            if let Some(post) = g.post {
                post.after(p, g.to, g.channels, &mut pending, y);
            }
        }
    }
}

/// One plane: `x` (`h × w`), its kernel `k` (`kh × kw`), the output `y` (`oh × ow`).
///
/// The input goes into the padded plane's phases in the scratch: phase `(qr, qc)` holds row
/// `R`, column `C` of the padded plane at `((qr·pc + qc)·rq + R)·wq + C`, which is input row
/// `R·sh + qr − ph`, column `C·sw + qc − pw`, or zero in the padding. Tap `(ky, kx)` of output
/// `(oy, ox)` then reads position `(oy + ⌊ky·dh / sh⌋)·wq + ox + ⌊kx·dw / sw⌋` of phase
/// `(ky·dh mod sh, kx·dw mod sw)`: a constant offset from `oy·wq + ox`, so a row, or a whole
/// plane laid out with row stride `wq` (the flat output after the phases, its last
/// `wq − ow` columns unused), is one [`segment`].
///
/// # Safety
///
/// As [`planes`], for one plane of each operand, with a finite kernel.
#[inline(always)]
unsafe fn plane<S: Simd>(g: &Plan, x: *const f32, k: *const f32, y: *mut f32, scratch: *mut f32) {
    // SAFETY (the function): the phases and the flat output are inside the scratch by
    // `Plan::scratch_len`; copies and segments stay inside their rows and planes, as the
    // comments say.
    unsafe {
        fill::<S>(g, x, scratch);
        let flat_out = scratch.add(g.phases_len());
        let (ow, wq) = (g.ow as usize, g.wq as usize);
        if g.flat && g.accumulate {
            for oy in 0..g.oh as usize {
                copy::<S>(flat_out.add(oy * wq), y.add(oy * ow), ow);
            }
        }
        // Taps a group at a time: the first group starts from zero unless accumulating, the
        // others from the sum so far.
        let mut taps = [(std::ptr::null::<f32>(), 0.0f32); GROUP];
        let (mut n, mut keep) = (0, g.accumulate);
        for ky in 0..g.kh {
            let (qr, ry) = phase(ky * g.dh, g.sh);
            for kx in 0..g.kw {
                let (qc, cx) = phase(kx * g.dw, g.sw);
                // The tap's position for output (0, 0); it reads up to
                // `(oh − 1 + ry)·wq + ow − 1 + cx < rq·wq` further within its phase.
                taps[n] = (scratch.offset(((qr * g.pc + qc) * g.rq + ry) * g.wq + cx), *k.offset(ky * g.kw + kx));
                n += 1;
                if n == GROUP || (ky == g.kh - 1 && kx == g.kw - 1) {
                    if g.flat {
                        segment::<S>(&taps[..n], 0, flat_out, (g.oh as usize - 1) * wq + ow, keep);
                    } else {
                        for oy in 0..g.oh as usize {
                            segment::<S>(&taps[..n], oy * wq, y.add(oy * ow), ow, keep);
                        }
                    }
                    (n, keep) = (0, true);
                }
            }
        }
        if g.flat {
            for oy in 0..g.oh as usize {
                copy::<S>(y.add(oy * ow), flat_out.add(oy * wq), ow);
            }
        }
    }
}

/// Copies the input plane `x` into the interior of the padded plane's phases (see [`plane`]);
/// the padding is already zero.
///
/// # Safety
///
/// `x` readable for `h·w` floats; `dst` writable for [`Plan::phases_len`] floats and not
/// overlapping it; the CPU runs `S`.
#[inline(always)]
unsafe fn fill<S: Simd>(g: &Plan, x: *const f32, dst: *mut f32) {
    // The columns of each phase whose input column `C·sw + qc − pw` exists.
    let cols = |qc: isize| inside(qc - g.pw, g.sw, g.w, g.wq);
    let ((even_lo, even_hi), (odd_lo, odd_hi)) = (cols(0), cols(1));
    for qr in 0..g.pr {
        // Phase rows whose input row `R·sh + qr − ph` exists.
        let (r_lo, r_hi) = inside(qr - g.ph, g.sh, g.h, g.rq);
        let at = |qc: isize, r: isize, c: isize| ((qr * g.pc + qc) * g.rq + r) * g.wq + c;
        let input = |r: isize, c: isize| (r * g.sh + qr - g.ph) * g.w + c;
        if g.sw == 2 && g.pc == 2 {
            // Both column phases in one pass over each row: the columns `lo..hi` where both
            // exist, as pairs, then the one or two at the ends that only one phase has.
            let (lo, hi) = (even_lo.max(odd_lo), even_hi.min(odd_hi));
            let hi = hi.max(lo);
            for r in r_lo..r_hi {
                // SAFETY: phase rows hold `wq` floats and the input row `w`; the columns copied
                // are those `cols` found inside both.
                unsafe {
                    if lo < hi {
                        split2(dst.offset(at(0, r, lo)), dst.offset(at(1, r, lo)), x.offset(input(r, 2 * lo - g.pw)), (hi - lo) as usize);
                    }
                    for c in (even_lo..even_hi.min(lo)).chain(hi.max(even_lo)..even_hi) {
                        *dst.offset(at(0, r, c)) = *x.offset(input(r, 2 * c - g.pw));
                    }
                    for c in (odd_lo..odd_hi.min(lo)).chain(hi.max(odd_lo)..odd_hi) {
                        *dst.offset(at(1, r, c)) = *x.offset(input(r, 2 * c + 1 - g.pw));
                    }
                }
            }
            continue;
        }
        for qc in 0..g.pc {
            let (c_lo, c_hi) = cols(qc);
            if c_lo >= c_hi {
                continue;
            }
            let n = (c_hi - c_lo) as usize;
            for r in r_lo..r_hi {
                // SAFETY: row `r` of phase (qr, qc) from column `c_lo` holds `n` floats; the
                // input row holds the `n` columns `c·sw + qc − pw` for `c` in `c_lo..c_hi`.
                unsafe {
                    let (to, from) = (dst.offset(at(qc, r, c_lo)), x.offset(input(r, c_lo * g.sw + qc - g.pw)));
                    if g.sw == 1 {
                        copy::<S>(to, from, n);
                    } else {
                        for j in 0..n {
                            *to.add(j) = *from.add(j * g.sw as usize);
                        }
                    }
                }
            }
        }
    }
}

/// `n` floats from `from` to `to`, a vector at a time.
///
/// # Safety
///
/// `from` readable and `to` writable for `n` floats, not overlapping; the CPU runs `S`.
#[inline(always)]
unsafe fn copy<S: Simd>(to: *mut f32, from: *const f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    // SAFETY: every access is at `i..i + l` with `i + l <= n`, or masked to `i..n`.
    unsafe {
        while i + l <= n {
            S::store(to.add(i), S::load(from.add(i)));
            i += l;
        }
        if i < n {
            S::store_first(to.add(i), S::load_first(from.add(i), n - i), n - i);
        }
    }
}

/// `even[j], odd[j] = from[2·j], from[2·j + 1]` for `j` in `0..n`, as a loop over slices the
/// compiler vectorizes (an iterator with `step_by` is not vectorized).
///
/// # Safety
///
/// `from` readable for `2·n` floats, `even` and `odd` writable for `n`, none overlapping.
#[inline(always)]
unsafe fn split2(even: *mut f32, odd: *mut f32, from: *const f32, n: usize) {
    // SAFETY: by the caller's contract.
    let (even, odd, from) = unsafe { (std::slice::from_raw_parts_mut(even, n), std::slice::from_raw_parts_mut(odd, n), std::slice::from_raw_parts(from, 2 * n)) };
    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(from.chunks_exact(2)) {
        (*e, *o) = (pair[0], pair[1]);
    }
}

/// Vectors computed together: independent accumulators, so the multiply-adds of one tap
/// do not wait for each other, and each tap's weight is broadcast once per block.
const BLOCK: usize = 4;

/// `y[i] = (y[i] if keep else 0) + Σ_t taps[t].1 · taps[t].0[shift + i]` for `i` in `0..len`:
/// blocks of [`BLOCK`] vectors, then one block of the rest, its last vector masked when
/// partial.
///
/// # Safety
///
/// Each tap pointer readable for `shift + len` floats, `y` writable for `len`, not
/// overlapping; the CPU runs `S`.
#[inline(always)]
unsafe fn segment<S: Simd>(taps: &[(*const f32, f32)], shift: usize, y: *mut f32, len: usize, keep: bool) {
    let l = S::LANES;
    let mut i = 0;
    // SAFETY: each block covers `i..i + BLOCK·l` with that end at most `len`, and the last one
    // ends at `len` exactly.
    unsafe {
        while i + BLOCK * l <= len {
            block::<S, BLOCK, false>(taps, shift, y, i, l, keep);
            i += BLOCK * l;
        }
        let rest = len - i;
        let last = rest - (rest.max(1) - 1) / l * l;
        match (rest.div_ceil(l), last == l) {
            (0, _) => {}
            (1, true) => block::<S, 1, false>(taps, shift, y, i, l, keep),
            (2, true) => block::<S, 2, false>(taps, shift, y, i, l, keep),
            (3, true) => block::<S, 3, false>(taps, shift, y, i, l, keep),
            (1, false) => block::<S, 1, true>(taps, shift, y, i, last, keep),
            (2, false) => block::<S, 2, true>(taps, shift, y, i, last, keep),
            (3, false) => block::<S, 3, true>(taps, shift, y, i, last, keep),
            (_, _) => block::<S, BLOCK, true>(taps, shift, y, i, last, keep),
        }
    }
}

/// [`segment`] over `V` vectors from `i`; the last vector has `last` lanes, masked when
/// `MASKED`.
///
/// # Safety
///
/// As [`segment`], for `i .. i + (V − 1)·LANES + last`.
#[inline(always)]
unsafe fn block<S: Simd, const V: usize, const MASKED: bool>(taps: &[(*const f32, f32)], shift: usize, y: *mut f32, i: usize, last: usize, keep: bool) {
    let l = S::LANES;
    // SAFETY: by the caller's contract; only the last vector may be partial.
    unsafe {
        let load = |p: *const f32, v: usize| if MASKED && v == V - 1 { S::load_first(p.add(i + v * l), last) } else { S::load(p.add(i + v * l)) };
        let mut acc = [S::zero(); V];
        if keep {
            for (v, a) in acc.iter_mut().enumerate() {
                *a = load(y, v);
            }
        }
        for &(p, w) in taps {
            let (p, w) = (p.add(shift), S::splat(w));
            for (v, a) in acc.iter_mut().enumerate() {
                *a = S::mul_add(w, load(p, v), *a);
            }
        }
        for (v, a) in acc.into_iter().enumerate() {
            if MASKED && v == V - 1 {
                S::store_first(y.add(i + v * l), a, last);
            } else {
                S::store(y.add(i + v * l), a);
            }
        }
    }
}

/// `y = (y if accumulate != 0) + x ⊛ w` over `planes` `f32` planes, plane `p` with kernel
/// `p mod channels`: [`DwConv2d`] for generated code, with its argument names. Nothing happens
/// when a size is negative or the sizes are not [valid](DwConv2d::is_valid) (a zero stride or
/// dilation, no channels for the planes, counts or indices beyond `isize`).
///
/// # Safety
///
/// Every element the operation addresses must be inside live allocations: `planes·h·w` of `x`
/// and `channels·kh·kw` of `w` readable, `planes·oh·ow` of `y` readable and writable, `y` not
/// overlapping `x` or `w`. Alignment is not required.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_dwconv2d(
    x: *const f32,
    w: *const f32,
    y: *mut f32,
    planes: i64,
    channels: i64,
    h: i64,
    width: i64,
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
    accumulate: i64,
) {
    let (Ok(planes), Ok(channels), Some(win)) = (usize::try_from(planes), usize::try_from(channels), Window::from_args([h, width, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw])) else {
        return;
    };
    let d = DwConv2d { planes, channels, win, accumulate: accumulate != 0 };
    // SAFETY: by the caller's contract; the detected instruction set is what this CPU runs.
    unsafe { d.run_raw(Isa::detected(), x, w, y, None) }
}

#[cfg(target_arch = "x86_64")]
mod direct;
#[cfg(not(target_arch = "x86_64"))]
mod direct {
    /// Planes are read in place only with AVX-512.
    pub(super) enum Direct {}
}
mod lanes;
#[cfg(test)]
mod tests;
