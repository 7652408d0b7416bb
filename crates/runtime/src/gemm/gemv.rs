//! Matrix–vector products: `sgemm` with `m == 1` or `n == 1`.
//!
//! Packing would copy the whole matrix to use each element once, and a register tile would be
//! mostly padding, so these stream the matrix instead. `y = alpha·M·x + beta·y` with `M` of
//! `rows × k`, in one of two forms by `M`'s layout:
//!
//! - **dot** (`M`'s rows contiguous along `k`): four rows at a time against `x` (copied to be
//!   contiguous when it is strided), two vectors of partial sums per row;
//! - **axpy** (`M`'s columns contiguous along the rows): blocks of 24 (AVX-512) or 8 vectors of
//!   `y` kept in registers while `k` is swept.
//!
//! A row vector times a weight matrix packed ahead (`m == 1`, `op(B)` in a [`PackedLayout`])
//! takes a third form, **panels**: each panel of `nr` columns is summed in `nr / LANES`
//! registers while its k blocks are read in order, one contiguous run of `depth · nr` floats
//! each. Read in place, the dot form streams four rows of 4 KiB at once and the hardware
//! prefetchers start over on every row; the panels are a single stream, faster on a matrix
//! from L3 such as the MLP's 1024×1024 layer.

use std::ops::Range;

use super::kernel::Update;
use super::pack::View;
use super::prepacked::{Packed, PackedLayout};
use super::simd::Simd;

/// One matrix–vector product.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemv {
    /// Length of `y` (rows of `M`).
    pub rows: usize,
    /// Length of `x` (columns of `M`).
    pub k: usize,
    /// `M`: lanes are rows, steps are columns.
    pub m: View,
    /// `x[0]`.
    pub x: *const f32,
    /// `x`'s stride.
    pub x_stride: isize,
    /// `y[0]`.
    pub y: *mut f32,
    /// `y`'s stride.
    pub y_stride: isize,
    /// `alpha` and `beta`.
    pub up: Update,
}

/// Floats of scratch [`run`] needs.
pub(crate) fn scratch_len(g: &Gemv) -> usize {
    if g.m.step_stride == 1 && g.x_stride != 1 { g.k } else { 0 }
}

/// Computes `g`, using `scratch` (at least [`scratch_len`] floats) for a strided `x`.
///
/// # Safety
///
/// `g` addresses only live memory (`rows, k > 0`); the caller enables `S`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd>(g: &Gemv, scratch: &mut [f32]) {
    // SAFETY: by the caller's contract.
    unsafe {
        if g.m.step_stride == 1 {
            let mut g = *g;
            if g.x_stride != 1 {
                for (p, s) in scratch[..g.k].iter_mut().enumerate() {
                    *s = g.x.offset(p as isize * g.x_stride).read_unaligned();
                }
                (g.x, g.x_stride) = (scratch.as_ptr(), 1);
            }
            let mut i = 0;
            while i + 4 <= g.rows {
                dot::<S, 4, 2>(&g, i);
                i += 4;
            }
            for i in i..g.rows {
                dot::<S, 1, 2>(&g, i);
            }
        } else if g.m.lane_stride == 1 {
            // As many vectors of y as registers allow (32 with AVX-512, 16 otherwise): each step
            // of k then reads one long run of a row of M.
            let mut i = 0;
            if S::LANES == 16 {
                while i + 24 * S::LANES <= g.rows {
                    axpy::<S, 24>(g, i);
                    i += 24 * S::LANES;
                }
            }
            while i + 8 * S::LANES <= g.rows {
                axpy::<S, 8>(g, i);
                i += 8 * S::LANES;
            }
            while i + S::LANES <= g.rows {
                axpy::<S, 1>(g, i);
                i += S::LANES;
            }
            for i in i..g.rows {
                scalar(g, i);
            }
        } else {
            for i in 0..g.rows {
                scalar(g, i);
            }
        }
    }
}

/// Writes `alpha·s + beta·y[i]`.
#[inline(always)]
unsafe fn put(g: &Gemv, i: usize, s: f32) {
    // SAFETY: `y[i]` is in bounds by the caller's contract.
    unsafe { update(g.y.offset(i as isize * g.y_stride), g.up, s) }
}

/// Writes `alpha·s + beta·*p` (`*p` not read when `beta == 0`).
///
/// # Safety
///
/// `p` is readable and writable.
#[inline(always)]
unsafe fn update(p: *mut f32, up: Update, s: f32) {
    let s = up.alpha * s;
    // SAFETY: by the caller's contract.
    unsafe { p.write_unaligned(if up.beta == 0.0 { s } else { p.read_unaligned() * up.beta + s }) }
}

/// Rows `i..i+R` in the dot form (`x` contiguous), `U` vectors of partial sums per row.
#[inline(always)]
unsafe fn dot<S: Simd, const R: usize, const U: usize>(g: &Gemv, i: usize) {
    // SAFETY: rows `i..i+R` and `x[0..k]` are in bounds by the caller's contract.
    unsafe {
        let rows: [*const f32; R] = std::array::from_fn(|q| g.m.ptr.offset((i + q) as isize * g.m.lane_stride));
        let step = U * S::LANES;
        let kv = g.k / step * step;
        let mut acc = [[S::zero(); U]; R];
        let mut p = 0;
        while p < kv {
            let x: [S::V; U] = std::array::from_fn(|u| S::load(g.x.add(p + u * S::LANES)));
            for (a, &row) in acc.iter_mut().zip(&rows) {
                for (u, (s, &xu)) in a.iter_mut().zip(&x).enumerate() {
                    *s = S::mul_add(S::load(row.add(p + u * S::LANES)), xu, *s);
                }
            }
            p += step;
        }
        // Whole vectors left over (784 = 24·32 + 16), then single elements.
        let k1 = g.k / S::LANES * S::LANES;
        while p < k1 {
            let x = S::load(g.x.add(p));
            for (a, &row) in acc.iter_mut().zip(&rows) {
                a[0] = S::mul_add(S::load(row.add(p)), x, a[0]);
            }
            p += S::LANES;
        }
        for (q, (a, &row)) in acc.iter().zip(&rows).enumerate() {
            let mut s = 0.0;
            for &v in a {
                s += S::sum(v);
            }
            for p in k1..g.k {
                s += row.add(p).read_unaligned() * g.x.add(p).read_unaligned();
            }
            put(g, i + q, s);
        }
    }
}

/// Rows `i..i+V·LANES` in the axpy form (`M`'s columns contiguous).
#[inline(always)]
unsafe fn axpy<S: Simd, const V: usize>(g: &Gemv, i: usize) {
    // SAFETY: rows `i..i+V·LANES` and `x[0..k]` are in bounds by the caller's contract.
    unsafe {
        let mut acc = [S::zero(); V];
        let mut col = g.m.ptr.add(i);
        for p in 0..g.k {
            let x = S::splat(g.x.offset(p as isize * g.x_stride).read_unaligned());
            for (v, a) in acc.iter_mut().enumerate() {
                *a = S::mul_add(S::load(col.add(v * S::LANES)), x, *a);
            }
            col = col.offset(g.m.step_stride);
        }
        let mut out = [0f32; 24 * 16];
        for (v, &a) in acc.iter().enumerate() {
            S::store(out.as_mut_ptr().add(v * S::LANES), a);
        }
        for (q, &s) in out[..V * S::LANES].iter().enumerate() {
            put(g, i + q, s);
        }
    }
}

/// Row `i`, one element at a time.
#[inline(always)]
unsafe fn scalar(g: &Gemv, i: usize) {
    // SAFETY: row `i` and `x[0..k]` are in bounds by the caller's contract.
    unsafe {
        let row = g.m.at(i, 0);
        let mut s = 0f32;
        for p in 0..g.k {
            s += row.ptr.offset(p as isize * row.step_stride).read_unaligned() * g.x.offset(p as isize * g.x_stride).read_unaligned();
        }
        put(g, i, s);
    }
}


/// A row vector times a packed matrix: `y = alpha·x·op(B) + beta·y`, `op(B)` of `k × n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedGemv {
    /// `x[0]` (`k` floats).
    pub x: *const f32,
    /// `x`'s stride.
    pub x_stride: isize,
    /// `op(B)`, from column 0.
    pub b: Packed,
    /// `y[0]` (`n` contiguous floats).
    pub y: *mut f32,
    /// `alpha` and `beta`.
    pub up: Update,
}

impl PackedGemv {
    /// Panels of the layout (the last one may be partly past `n`).
    pub(crate) fn panels(&self) -> usize {
        self.b.n.div_ceil(self.b.layout.nr)
    }
}

/// Computes the columns of `g`'s panels `panels`.
///
/// # Safety
///
/// `g` addresses only live memory (`k, n > 0`, the layout's sizes positive), `panels` are
/// panels of the layout; the caller enables `S`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn packed<S: Simd>(g: &PackedGemv, panels: Range<usize>) {
    let nr = g.b.layout.nr;
    // SAFETY: by the caller's contract.
    unsafe {
        match (nr % S::LANES, nr / S::LANES) {
            (0, 1) => panels_v::<S, 1>(g, panels),
            (0, 2) => panels_v::<S, 2>(g, panels),
            (0, 3) => panels_v::<S, 3>(g, panels),
            (0, 4) => panels_v::<S, 4>(g, panels),
            // Another CPU's layout: element by element.
            _ => {
                for j in panels.start * nr..(panels.end * nr).min(g.b.n) {
                    let mut s = 0f32;
                    for p in 0..g.b.k {
                        s += g.x.offset(p as isize * g.x_stride).read_unaligned() * g.b.get(p, j);
                    }
                    put_packed(g, j, s);
                }
            }
        }
    }
}

/// [`packed`] with panels of `V` vectors.
#[inline(always)]
unsafe fn panels_v<S: Simd, const V: usize>(g: &PackedGemv, panels: Range<usize>) {
    let PackedLayout { nr, kc } = g.b.layout;
    let (k, n, count) = (g.b.k, g.b.n, g.panels());
    // SAFETY: every address is inside the layout or `x`, `y` by the caller's contract.
    unsafe {
        for t in panels {
            // Two sets of sums, even and odd steps, so that the adds of one step do not wait for
            // the previous step's.
            let mut acc = [[S::zero(); V]; 2];
            let mut p0 = 0;
            while p0 < k {
                let depth = kc.min(k - p0);
                let mut w = g.b.ptr.add(p0 * count * nr + t * depth * nr);
                let mut x = g.x.offset(p0 as isize * g.x_stride);
                let step = |w: *const f32, x: *const f32, acc: &mut [S::V; V]| {
                    let xb = S::splat(x.read_unaligned());
                    for (v, a) in acc.iter_mut().enumerate() {
                        *a = S::mul_add(S::load(w.add(v * S::LANES)), xb, *a);
                    }
                };
                for _ in 0..depth / 2 {
                    step(w, x, &mut acc[0]);
                    step(w.add(nr), x.offset(g.x_stride), &mut acc[1]);
                    w = w.add(2 * nr);
                    x = x.offset(2 * g.x_stride);
                }
                if depth % 2 == 1 {
                    step(w, x, &mut acc[0]);
                }
                p0 += depth;
            }
            let mut out = [0f32; 4 * 16];
            for v in 0..V {
                S::store(out.as_mut_ptr().add(v * S::LANES), S::add(acc[0][v], acc[1][v]));
            }
            let j0 = t * nr;
            for (l, &s) in out[..nr.min(n - j0)].iter().enumerate() {
                put_packed(g, j0 + l, s);
            }
        }
    }
}

/// Writes `alpha·s + beta·y[j]`.
#[inline(always)]
unsafe fn put_packed(g: &PackedGemv, j: usize, s: f32) {
    // SAFETY: `y[j]` is in bounds by the caller's contract.
    unsafe { update(g.y.add(j), g.up, s) }
}
