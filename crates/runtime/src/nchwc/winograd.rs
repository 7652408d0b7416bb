//! 3×3 convolutions of stride 1 as Winograd F(2×2, 3×3) on NCHW16c tensors: 16 products of
//! `out_channels × channels` matrices instead of 36 multiply-adds per output pair.
//!
//! Each 2×2 block of output pixels (a tile) reads a 4×4 block of the padded input. With `d` that
//! block (per channel), `g` a filter and
//!
//! ```text
//! Bᵀ = [1  0 -1  0]    G = [1    0    0 ]    Aᵀ = [1  1  1  0]
//!      [0  1  1  0]        [1/2  1/2  1/2]         [0  1 -1 -1]
//!      [0 -1  1  0]        [1/2 -1/2  1/2]
//!      [0  1  0 -1]        [0    0    1 ]
//! ```
//!
//! the tile is `Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A`. The weights are transformed when packed
//! (`U = G g Gᵀ`, one `out_channels × channels` matrix per position ξν of the 4×4), each input
//! tile on the call (`V = Bᵀ d B`); then position by position the sums over channels are a 1×1
//! convolution of `V`'s tiles as pixels, which the blocked routine's tiles compute
//! ([`super::conv`]), and the output transform adds the bias and the addend and applies the
//! activation on the way out. 16 products of `k = channels` against 36 multiply-adds per
//! input channel and output pair direct: 2.25 times fewer multiply-adds, at the cost of the
//! two transforms (memory-bound passes over 16/4 times the input and 16/4 times the output).
//!
//! **Numerics.** Not the direct sums' values: the transforms add and subtract inputs and
//! weights before multiplying, so results differ from the definition by a few units in the
//! last place of the terms' magnitudes (within `1e-5` relative to `Σ|w·x|` for the shapes
//! here); deterministic for a shape on any thread count.

use std::cell::RefCell;

use super::LANES;
use super::conv::PANEL;
use crate::conv::Conv2d;
use crate::gemm::Isa;
#[cfg(target_arch = "x86_64")]
use super::line::{Line, Pair, Wide};
use crate::pool::{self, SharedPtr};
use crate::window::Window;

thread_local! {
    /// The padded input, its transformed tiles, and their products with the weights.
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static TILES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PRODUCTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Positions of the 4×4 transformed tile.
const POSITIONS: usize = 16;

/// Whether `c` (one group, already [supported](super::conv::supports) by the blocked routine)
/// runs as Winograd products: a 3×3 window of stride 1 and dilation 1 with padding 1 on an
/// even-sized output (whole 2×2 tiles), at least 64 input and output channels in whole blocks
/// (ResNet-50's from its first stage on), where it takes about half the direct blocked
/// routine's time, most of it in the products (`KILN_NCHWC=1 cargo run --release -p
/// kiln-runtime --example conv_one -- 64,64,56,3,1,1,0`).
pub fn applies(c: &Conv2d) -> bool {
    let w = &c.win;
    c.groups == 1
        && (w.kh, w.kw, w.sh, w.sw, w.dh, w.dw, w.ph, w.pw) == (3, 3, 1, 1, 1, 1, 1, 1)
        && (w.oh, w.ow) == (w.h, w.w)
        && w.oh % 2 == 0
        && w.ow % 2 == 0
        && w.oh > 0
        && w.ow > 0
        && c.channels >= 64
        && c.out_channels >= 64
        && c.channels % LANES == 0
        && c.out_channels % LANES == 0
}

/// The 1×1 convolution of one position: `channels → out_channels` over the tiles as pixels.
fn product(c: &Conv2d) -> Conv2d {
    let tiles = c.win.oh / 2 * (c.win.ow / 2);
    let win = Window { h: 1, w: tiles, oh: 1, ow: tiles, kh: 1, kw: 1, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1 };
    Conv2d { batch: 1, win, bias: false, residual: false, act: crate::epilogue::Activation::None, ..*c }
}

/// Floats of `c`'s packed weights: 16 packed 1×1 weight matrices.
pub fn packed_len(c: &Conv2d) -> usize {
    product(c).packed_len(PANEL).saturating_mul(POSITIONS)
}

/// Transforms and packs `c`'s plain weights `w` (`out_channels × channels × 3 × 3`
/// little-endian floats) into `dst` ([`packed_len`] floats): position ξν's matrix
/// `U[ξν][co][ci]`, packed as the blocked routine packs a 1×1 convolution's.
///
/// # Panics
///
/// If a slice is too short.
pub fn pack_weights(c: &Conv2d, w: &[u8], dst: &mut [f32]) {
    let (co_n, ci_n) = (c.out_channels, c.channels);
    assert!(w.len() >= 4 * co_n * ci_n * 9, "3x3 weights are {} floats", co_n * ci_n * 9);
    let mut u = vec![0f32; POSITIONS * co_n * ci_n];
    for co in 0..co_n {
        for ci in 0..ci_n {
            let at = 4 * (co * ci_n + ci) * 9;
            let g: [f32; 9] = std::array::from_fn(|i| f32::from_le_bytes(w[at + 4 * i..at + 4 * i + 4].try_into().unwrap()));
            // G g: 4 rows of 3.
            let gg: [[f32; 3]; 4] = std::array::from_fn(|r| {
                std::array::from_fn(|k| {
                    let (a, b, d) = (g[k], g[3 + k], g[6 + k]);
                    match r {
                        0 => a,
                        1 => 0.5 * (a + b + d),
                        2 => 0.5 * (a - b + d),
                        _ => d,
                    }
                })
            });
            for (xi, row) in gg.iter().enumerate() {
                let [a, b, d] = *row;
                let out = [a, 0.5 * (a + b + d), 0.5 * (a - b + d), d];
                for (nu, &v) in out.iter().enumerate() {
                    u[((xi * 4 + nu) * co_n + co) * ci_n + ci] = v;
                }
            }
        }
    }
    let p = product(c);
    let len = p.packed_len(PANEL);
    assert!(dst.len() >= POSITIONS * len, "packed Winograd weights need {} floats", POSITIONS * len);
    for (pos, dst) in dst.chunks_exact_mut(len).take(POSITIONS).enumerate() {
        let bytes: Vec<u8> = u[pos * co_n * ci_n..(pos + 1) * co_n * ci_n].iter().flat_map(|v| v.to_le_bytes()).collect();
        p.pack_weights(PANEL, &bytes, dst);
    }
}

/// `c` ([`applies`]) on a blocked input `x` with weights packed by [`pack_weights`], over the
/// current thread pool, with the kernels of `wide` (an instruction set the CPU has).
///
/// # Safety
///
/// As [`super::conv::run`] with a blocked input and packed weights.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run(wide: Isa, c: &Conv2d, x: *const f32, wp: *const f32, bias: *const f32, z: *const f32, y: *mut f32) {
    let w = &c.win;
    let (h, wd) = (w.h, w.w);
    let (rows, cols) = (h + 2, wd + 2);
    let (tiles_y, tiles_x) = (h / 2, wd / 2);
    let tiles = tiles_y * tiles_x;
    let (blocks_in, blocks_out) = (c.channels / LANES, c.out_channels / LANES);
    let p = product(c);
    let packed = p.packed_len(PANEL);
    let plane_in = h * wd * LANES;
    let plane_out = plane_in;
    // Each position's tiles 4 lines past a multiple of 4 KiB from the previous one's: a tile's
    // 16 positions are written (and read) together, and at strides of whole pages they would
    // all fall into the same few L1 sets.
    let stride = |len: usize| len.next_multiple_of(1024) + 4 * LANES;
    let (v_len, m_len) = (stride(blocks_in * tiles * LANES), stride(blocks_out * tiles * LANES));
    crate::scratch::with(&PADDED, blocks_in * rows * cols * LANES, |pad| {
        crate::scratch::with(&TILES, POSITIONS * v_len, |v| {
            crate::scratch::with(&PRODUCTS, POSITIONS * m_len, |m| {
                for n in 0..c.batch {
                    let ptrs = SharedPtr((x.wrapping_add(n * blocks_in * plane_in), pad.as_mut_ptr(), v.as_mut_ptr()));
                    let ways = pool::threads().min(blocks_in);
                    pool::for_each(ways, &|i| {
                        let (src, pad, v) = ptrs.get();
                        for b in pool::part(blocks_in, ways, 1, i) {
                            // SAFETY: block `b` of the image, of the padded copy and of every
                            // position's tiles, one task each.
                            unsafe {
                                let padded = pad.add(b * rows * cols * LANES);
                                super::conv::pad_block(c, super::conv::Padded { rows, cols, top: 1, left: 1 }, LANES, src.add(b * plane_in), padded);
                                transform_input(wide, padded, cols, tiles_y, tiles_x, v.add(b * tiles * LANES), v_len);
                            }
                        }
                    });
                    for pos in 0..POSITIONS {
                        // SAFETY: position `pos`'s tiles and products, and its packed weights.
                        unsafe { super::conv::one_image(wide, &p, LANES, v.as_ptr().add(pos * v_len), wp.add(pos * packed), std::ptr::null(), std::ptr::null(), m.as_mut_ptr().add(pos * m_len)) };
                    }
                    let zn = if z.is_null() { z } else { z.wrapping_add(n * blocks_out * plane_out) };
                    let ptrs = SharedPtr((m.as_ptr(), bias, zn, y.wrapping_add(n * blocks_out * plane_out)));
                    let ways = pool::threads().min(blocks_out);
                    pool::for_each(ways, &|i| {
                        let (m, bias, z, y) = ptrs.get();
                        for b in pool::part(blocks_out, ways, 1, i) {
                            // SAFETY: block `b` of every position's products and of the output,
                            // one task each; the addend is read only where the output is then
                            // stored.
                            unsafe {
                                let bias = if bias.is_null() { [0f32; LANES] } else { std::array::from_fn(|l| *bias.add(b * LANES + l)) };
                                let z = if z.is_null() { z } else { z.add(b * plane_out) };
                                transform_output(wide, c, m.add(b * tiles * LANES), m_len, tiles_y, tiles_x, &bias, z, y.add(b * plane_out));
                            }
                        }
                    });
                }
            })
        })
    })
}

/// One block's input tiles `V = Bᵀ d B` from its padded image (`cols` pixels a row) to
/// position ξν's tiles at `v + ξν·stride`, tile by tile.
///
/// # Safety
///
/// The padded image covers every tile; `v` is writable for the 16 positions.
unsafe fn transform_input(wide: Isa, padded: *const f32, cols: usize, tiles_y: usize, tiles_x: usize, v: *mut f32, stride: usize) {
    // SAFETY: by the caller's contract; `wide` is an instruction set the CPU has.
    unsafe {
        match wide {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => transform_input_avx512(padded, cols, tiles_y, tiles_x, v, stride),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => transform_input_avx2(padded, cols, tiles_y, tiles_x, v, stride),
            _ => transform_input_any(padded, cols, tiles_y, tiles_x, v, stride),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn transform_input_avx512(padded: *const f32, cols: usize, tiles_y: usize, tiles_x: usize, v: *mut f32, stride: usize) {
    // SAFETY: by the caller's contract.
    unsafe { transform_input_lines::<Wide>(padded, cols, tiles_y, tiles_x, v, stride) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transform_input_avx2(padded: *const f32, cols: usize, tiles_y: usize, tiles_x: usize, v: *mut f32, stride: usize) {
    // SAFETY: by the caller's contract.
    unsafe { transform_input_lines::<Pair>(padded, cols, tiles_y, tiles_x, v, stride) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transform_input_lines<L: Line>(padded: *const f32, cols: usize, tiles_y: usize, tiles_x: usize, v: *mut f32, stride: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        for ty in 0..tiles_y {
            for tx in 0..tiles_x {
                let first = padded.add((2 * ty * cols + 2 * tx) * LANES);
                let tile = (ty * tiles_x + tx) * LANES;
                // Column j of Bᵀ d, then its row ξ times B.
                let mut cols4 = [[L::zero(); 4]; 4];
                for (j, c) in cols4.iter_mut().enumerate() {
                    let at = first.add(j * LANES);
                    let (d0, d1, d2, d3) = (L::load(at), L::load(at.add(cols * LANES)), L::load(at.add(2 * cols * LANES)), L::load(at.add(3 * cols * LANES)));
                    *c = [L::sub(d0, d2), L::add(d1, d2), L::sub(d2, d1), L::sub(d1, d3)];
                }
                for xi in 0..4 {
                    let (r0, r1, r2, r3) = (cols4[0][xi], cols4[1][xi], cols4[2][xi], cols4[3][xi]);
                    let out = [L::sub(r0, r2), L::add(r1, r2), L::sub(r2, r1), L::sub(r1, r3)];
                    for (nu, &o) in out.iter().enumerate() {
                        L::store(v.add((xi * 4 + nu) * stride + tile), o);
                    }
                }
            }
        }
    }
}

type Vector = [f32; LANES];

#[inline(always)]
fn add(a: Vector, b: Vector) -> Vector {
    std::array::from_fn(|l| a[l] + b[l])
}

#[inline(always)]
fn sub(a: Vector, b: Vector) -> Vector {
    std::array::from_fn(|l| a[l] - b[l])
}

#[inline(always)]
unsafe fn transform_input_any(padded: *const f32, cols: usize, tiles_y: usize, tiles_x: usize, v: *mut f32, stride: usize) {
    // SAFETY: by the caller's contract.
    unsafe {
        for ty in 0..tiles_y {
            for tx in 0..tiles_x {
                let d: [[Vector; 4]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| padded.add(((2 * ty + i) * cols + 2 * tx + j) * LANES).cast::<Vector>().read_unaligned()));
                // Bᵀ d, then (Bᵀ d) B.
                let rows: [[Vector; 4]; 4] = [
                    std::array::from_fn(|j| sub(d[0][j], d[2][j])),
                    std::array::from_fn(|j| add(d[1][j], d[2][j])),
                    std::array::from_fn(|j| sub(d[2][j], d[1][j])),
                    std::array::from_fn(|j| sub(d[1][j], d[3][j])),
                ];
                let tile = (ty * tiles_x + tx) * LANES;
                for (xi, r) in rows.iter().enumerate() {
                    let out = [sub(r[0], r[2]), add(r[1], r[2]), sub(r[2], r[1]), sub(r[1], r[3])];
                    for (nu, o) in out.iter().enumerate() {
                        v.add((xi * 4 + nu) * stride + tile).cast::<Vector>().write_unaligned(*o);
                    }
                }
            }
        }
    }
}

/// One output block: `Aᵀ M A` of each tile from the 16 positions' products at
/// `m + ξν·stride`, plus the bias, the addend and the activation, into the block's pixels.
///
/// # Safety
///
/// `m` holds the block's products at every position, `y` (and `z` unless null) the block's
/// `2·tiles_y × 2·tiles_x` pixels.
#[allow(clippy::too_many_arguments)]
unsafe fn transform_output(wide: Isa, c: &Conv2d, m: *const f32, stride: usize, tiles_y: usize, tiles_x: usize, bias: &Vector, z: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract; `wide` is an instruction set the CPU has.
    unsafe {
        match wide {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => transform_output_avx512(c, m, stride, tiles_y, tiles_x, bias, z, y),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => transform_output_avx2(c, m, stride, tiles_y, tiles_x, bias, z, y),
            _ => transform_output_any(c, m, stride, tiles_y, tiles_x, bias, z, y),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn transform_output_avx512(c: &Conv2d, m: *const f32, stride: usize, tiles_y: usize, tiles_x: usize, bias: &Vector, z: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { transform_output_lines::<Wide>(c, m, stride, tiles_y, tiles_x, bias, z, y) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn transform_output_avx2(c: &Conv2d, m: *const f32, stride: usize, tiles_y: usize, tiles_x: usize, bias: &Vector, z: *const f32, y: *mut f32) {
    // SAFETY: by the caller's contract.
    unsafe { transform_output_lines::<Pair>(c, m, stride, tiles_y, tiles_x, bias, z, y) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn transform_output_lines<L: Line>(c: &Conv2d, m: *const f32, stride: usize, tiles_y: usize, tiles_x: usize, bias: &Vector, z: *const f32, y: *mut f32) {
    let ow = 2 * tiles_x;
    // SAFETY: by the caller's contract.
    unsafe {
        let b = L::load(bias.as_ptr());
        for ty in 0..tiles_y {
            for tx in 0..tiles_x {
                let tile = (ty * tiles_x + tx) * LANES;
                let first = m.add(tile);
                // Column ν of Aᵀ M, then its row i times A.
                let mut cols2 = [[L::zero(); 2]; 4];
                for (nu, c) in cols2.iter_mut().enumerate() {
                    let at = first.add(nu * stride);
                    let (m0, m1, m2, m3) = (L::load(at), L::load(at.add(4 * stride)), L::load(at.add(8 * stride)), L::load(at.add(12 * stride)));
                    *c = [L::add(L::add(m0, m1), m2), L::sub(L::sub(m1, m2), m3)];
                }
                for i in 0..2 {
                    let (r0, r1, r2, r3) = (cols2[0][i], cols2[1][i], cols2[2][i], cols2[3][i]);
                    let out = [L::add(L::add(r0, r1), r2), L::sub(L::sub(r1, r2), r3)];
                    for (j, &o) in out.iter().enumerate() {
                        let at = ((2 * ty + i) * ow + 2 * tx + j) * LANES;
                        let mut s = L::add(o, b);
                        if !z.is_null() {
                            s = L::add(s, L::load(z.add(at)));
                        }
                        L::store(y.add(at), L::activate(s, c.act));
                    }
                }
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn transform_output_any(c: &Conv2d, m: *const f32, stride: usize, tiles_y: usize, tiles_x: usize, bias: &Vector, z: *const f32, y: *mut f32) {
    let ow = 2 * tiles_x;
    // SAFETY: by the caller's contract.
    unsafe {
        for ty in 0..tiles_y {
            for tx in 0..tiles_x {
                let tile = (ty * tiles_x + tx) * LANES;
                let p: [[Vector; 4]; 4] = std::array::from_fn(|xi| std::array::from_fn(|nu| m.add((xi * 4 + nu) * stride + tile).cast::<Vector>().read_unaligned()));
                // Aᵀ M, then (Aᵀ M) A.
                let rows: [[Vector; 4]; 2] = [std::array::from_fn(|j| add(add(p[0][j], p[1][j]), p[2][j])), std::array::from_fn(|j| sub(sub(p[1][j], p[2][j]), p[3][j]))];
                for (i, r) in rows.iter().enumerate() {
                    let out = [add(add(r[0], r[1]), r[2]), sub(sub(r[1], r[2]), r[3])];
                    for (j, o) in out.iter().enumerate() {
                        let at = ((2 * ty + i) * ow + 2 * tx + j) * LANES;
                        let mut s = add(*o, *bias);
                        if !z.is_null() {
                            s = add(s, z.add(at).cast::<Vector>().read_unaligned());
                        }
                        let s: Vector = std::array::from_fn(|l| super::activate_one(s[l], c.act));
                        y.add(at).cast::<Vector>().write_unaligned(s);
                    }
                }
            }
        }
    }
}
