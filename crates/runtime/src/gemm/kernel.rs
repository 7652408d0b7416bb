//! The register-blocked micro-kernel: an `MR × NV·LANES` tile of `C` from packed panels.

use super::pack::View;
use super::simd::Simd;
use crate::epilogue::Activation;

/// The most floats a tile can have (the edge path spills a tile to the stack).
pub(crate) const MAX_TILE: usize = 512;

/// Where a tile's `B` comes from, step by step.
pub(crate) trait Steps: Copy {
    /// Vector `v` of step `p`: the tile's columns `v·LANES..`, zero in lanes past the last
    /// column when the source cannot read them.
    ///
    /// # Safety
    ///
    /// Step `p` exists; the caller enables the instruction set of `S`.
    unsafe fn load<S: Simd>(self, p: usize, v: usize) -> S::V;
}

/// A packed panel: step `p` is the `step` floats at `ptr + p·step`, zero-padded past the last
/// column, so every vector is read whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Panel {
    pub ptr: *const f32,
    pub step: usize,
}

impl Steps for Panel {
    #[inline(always)]
    unsafe fn load<S: Simd>(self, p: usize, v: usize) -> S::V {
        // SAFETY: by the caller's contract, the panel holds step `p` whole.
        unsafe { S::load(self.ptr.add(p * self.step + v * S::LANES)) }
    }
}

/// Two panels' columns as one tile's: vector 0 from `first`, the others from `rest` (a
/// tile across the boundary between two packed panels).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Straddle {
    pub first: Panel,
    pub rest: Panel,
}

impl Steps for Straddle {
    #[inline(always)]
    unsafe fn load<S: Simd>(self, p: usize, v: usize) -> S::V {
        // SAFETY: by the caller's contract, both panels hold step `p` whole.
        unsafe {
            match v {
                0 => self.first.load::<S>(p, 0),
                _ => self.rest.load::<S>(p, v - 1),
            }
        }
    }
}

/// Columns read where they lie: step `p` is the `lanes` floats at `base + offsets[p]` (a
/// convolution's input planes, `direct.rs`). A vector reaching past `lanes` is loaded masked,
/// and one wholly past them is zero, so nothing past the last column is touched.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gathered {
    pub base: *const f32,
    pub offsets: *const u32,
    pub lanes: usize,
}

impl Steps for Gathered {
    #[inline(always)]
    unsafe fn load<S: Simd>(self, p: usize, v: usize) -> S::V {
        // SAFETY: by the caller's contract, `offsets` holds step `p` and the `lanes` floats at
        // its offset are readable; a masked load touches only the lanes below `lanes`.
        unsafe {
            let at = self.base.add(*self.offsets.add(p) as usize + v * S::LANES);
            match self.lanes.checked_sub(v * S::LANES) {
                Some(n) if n >= S::LANES => S::load(at),
                Some(n) if n > 0 => S::load_first(at, n),
                // A vector wholly past the columns (the portable kernel's edge tiles are whole).
                _ => S::zero(),
            }
        }
    }
}

/// `Σ_p A[·, p]·B[p]` over `kc` steps. `A` is a view of `MR` rows (lanes) × `kc` steps: a
/// packed panel (`lane_stride` 1, `step_stride` the panel's width; the strides are then
/// constants after inlining) or rows of the caller's matrix read in place (`step_stride` 1).
/// `B` gives `NV` vectors per step. The sum runs over `p` in ascending order, one multiply-add
/// per step and element.
///
/// # Safety
///
/// `A` and `B` hold `kc` steps. The caller enables the instruction set of `S`.
#[inline(always)]
pub(crate) unsafe fn accumulate<S: Simd, B: Steps, const MR: usize, const NV: usize>(kc: usize, a: View, b: B) -> [[S::V; NV]; MR] {
    // SAFETY: the caller's contract covers every address below.
    unsafe {
        let mut acc = [[S::zero(); NV]; MR];
        let mut ap = a.ptr;
        for p in 0..kc {
            let mut bv = [S::zero(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = b.load::<S>(p, v);
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // Unaligned: rows read in place may be slices of a mapped file.
                let av = S::splat(ap.offset(r as isize * a.lane_stride).read_unaligned());
                for (s, &x) in row.iter_mut().zip(&bv) {
                    *s = S::mul_add(av, x, *s);
                }
            }
            ap = ap.offset(a.step_stride);
        }
        acc
    }
}

/// How a tile combines with the `C` it lands on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Update {
    /// The product's factor.
    pub alpha: f32,
    /// `C`'s factor; zero means `C` is not read.
    pub beta: f32,
    /// The epilogue applied to a full tile's values in registers before they are stored (the
    /// driver passes it with the last k block only; an edge tile ignores it).
    pub epi: Option<TileEpilogue>,
}

impl Update {
    /// `alpha` and `beta` alone.
    pub(crate) fn new(alpha: f32, beta: f32) -> Update {
        Update { alpha, beta, epi: None }
    }
}

/// A convolution's epilogue as register work on a tile: `v = (c + bias[r]) + z[r, j]`, then
/// the activation, exactly as [`Epilogue`](crate::epilogue::Epilogue) computes it on the
/// stored tile (the same `f32` additions in the same order, the same selects).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileEpilogue {
    /// One bias per row, from the tile's first row (null: none).
    pub bias: *const f32,
    /// The residual addend at the tile's first element, rows `ld` apart (null: none).
    pub z: *const f32,
    pub ld: usize,
    pub act: TileAct,
}

/// The activations a tile applies in registers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TileAct {
    None,
    Relu,
    /// Bounds that are not NaN, `lo` not `−0`, `hi` not `+0` ([`Simd::clip`]).
    Clip { lo: f32, hi: f32 },
}

impl TileAct {
    /// The activation in registers, if it is one of these (a clip only with bounds for which
    /// [`Simd::clip`] is exact).
    pub(crate) fn of(act: Activation) -> Option<TileAct> {
        match act {
            Activation::None => Some(TileAct::None),
            Activation::Relu => Some(TileAct::Relu),
            Activation::Clip { min, max } if !min.is_nan() && !max.is_nan() && min.to_bits() != (-0.0f32).to_bits() && max.to_bits() != 0 => Some(TileAct::Clip { lo: min, hi: max }),
            _ => None,
        }
    }
}

impl TileEpilogue {
    /// The epilogue of the tile at row `i`, column `j` of this one.
    ///
    /// # Safety
    ///
    /// That element exists in `z` (and row `i` in the bias) when they are present.
    #[inline(always)]
    pub(crate) unsafe fn at(self, i: usize, j: usize) -> TileEpilogue {
        // SAFETY: by the caller's contract.
        unsafe {
            TileEpilogue {
                bias: if self.bias.is_null() { self.bias } else { self.bias.add(i) },
                z: if self.z.is_null() { self.z } else { self.z.add(i * self.ld + j) },
                ..self
            }
        }
    }

    /// The epilogue of vector `v` (columns `v·LANES..`) of row `r`, given the row's bias.
    ///
    /// # Safety
    ///
    /// `z` holds that vector when present; the caller enables `S`'s instruction set.
    #[inline(always)]
    unsafe fn apply<S: Simd>(&self, x: S::V, bias: Option<S::V>, r: usize, v: usize) -> S::V {
        // SAFETY: by the caller's contract.
        unsafe {
            let x = match bias {
                Some(b) => S::add(x, b),
                None => x,
            };
            let x = if self.z.is_null() { x } else { S::add(x, S::load(self.z.add(r * self.ld + v * S::LANES))) };
            match self.act {
                TileAct::None => x,
                TileAct::Relu => S::relu(x),
                TileAct::Clip { lo, hi } => S::clip(x, lo, hi),
            }
        }
    }
}

/// Where a tile of `C` lands: element `(r, j)` is at `ptr + r·rs + j`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    /// Element `(0, 0)`.
    pub ptr: *mut f32,
    /// Row stride.
    pub rs: isize,
}

/// `C[0..mr, 0..nr] = alpha·acc + beta·C` (`C` is not read when `beta == 0`), then `up.epi` on
/// a full tile. A full tile goes through vectors; an edge tile through a stack copy and scalars
/// (without the epilogue, which the driver then runs on it).
///
/// # Safety
///
/// `C` rows `0..mr`, columns `0..nr` are writable (and readable); `mr ≤ MR`, `nr ≤ NV·LANES`,
/// `MR·NV·LANES ≤ MAX_TILE`.
#[inline(always)]
pub(crate) unsafe fn store<S: Simd, const MR: usize, const NV: usize>(acc: &[[S::V; NV]; MR], c: Out, up: Update, mr: usize, nr: usize) {
    // SAFETY: the caller's contract covers every address below.
    unsafe {
        let alpha = S::splat(up.alpha);
        if mr == MR && nr == NV * S::LANES {
            let beta = S::splat(up.beta);
            for (r, row) in acc.iter().enumerate() {
                let c_row = c.ptr.offset(r as isize * c.rs);
                let bias = up.epi.filter(|e| !e.bias.is_null()).map(|e| S::splat(e.bias.add(r).read_unaligned()));
                for (v, &x) in row.iter().enumerate() {
                    let p = c_row.add(v * S::LANES);
                    let out = if up.beta == 0.0 { S::mul(x, alpha) } else { S::mul_add(S::load(p), beta, S::mul(x, alpha)) };
                    let out = match &up.epi {
                        Some(e) => e.apply::<S>(out, bias, r, v),
                        None => out,
                    };
                    S::store(p, out);
                }
            }
            return;
        }
        let nr_full = NV * S::LANES;
        let mut tile = std::mem::MaybeUninit::<[f32; MAX_TILE]>::uninit();
        let t = tile.as_mut_ptr().cast::<f32>();
        for (r, row) in acc.iter().enumerate().take(mr) {
            for (v, &x) in row.iter().enumerate() {
                S::store(t.add(r * nr_full + v * S::LANES), S::mul(x, alpha));
            }
        }
        for r in 0..mr {
            let c_row = c.ptr.offset(r as isize * c.rs);
            for j in 0..nr {
                let (p, x) = (c_row.add(j), *t.add(r * nr_full + j));
                p.write_unaligned(if up.beta == 0.0 { x } else { p.read_unaligned() * up.beta + x });
            }
        }
    }
}

/// `C[0..mr, j] = alpha·Σ_p A[r, p]·Bt[j, p] + beta·C` for the `lanes` columns of a narrow edge
/// panel, by dot products along `k`: `A`'s rows in place (contiguous along `k`), the panel's
/// columns transposed into `bt` (`bt[j·kc + p]`). Each sum runs in vector lanes over `p` and
/// is then reduced ([`Simd::sum`]); a register tile would spend a whole vector of
/// multiply-adds per row and step on a column or two.
///
/// # Safety
///
/// Rows `0..mr` of `A` hold `kc` steps, `bt` holds `lanes·kc` floats, `C`'s columns
/// `0..lanes` of rows `0..mr` are writable (and readable unless `beta` is zero); the caller
/// enables the instruction set of `S`.
#[inline(always)]
pub(crate) unsafe fn edge_dot<S: Simd>(kc: usize, a: View, bt: *const f32, c: Out, up: Update, mr: usize, lanes: usize) {
    for j in 0..lanes {
        let mut r = 0;
        // SAFETY: by the caller's contract, for rows `r..r + 4` and `r`.
        unsafe {
            while r + 4 <= mr {
                dot_rows::<S, 4>(kc, a, r, bt.add(j * kc), c, j, up);
                r += 4;
            }
            while r < mr {
                dot_rows::<S, 1>(kc, a, r, bt.add(j * kc), c, j, up);
                r += 1;
            }
        }
    }
}

/// Rows `r0..r0 + R` of [`edge_dot`] for column `j`.
///
/// # Safety
///
/// As [`edge_dot`], for those rows; `b` is the column's `kc` transposed floats.
#[inline(always)]
unsafe fn dot_rows<S: Simd, const R: usize>(kc: usize, a: View, r0: usize, b: *const f32, c: Out, j: usize, up: Update) {
    // SAFETY: by the caller's contract; vector accesses stay inside `0..kc` (the last one
    // masked).
    unsafe {
        let rows: [*const f32; R] = std::array::from_fn(|q| a.ptr.offset((r0 + q) as isize * a.lane_stride));
        let mut acc = [S::zero(); R];
        let l = S::LANES;
        let mut p = 0;
        while p + l <= kc {
            let bv = S::load(b.add(p));
            for (s, &row) in acc.iter_mut().zip(&rows) {
                *s = S::mul_add(S::load(row.add(p)), bv, *s);
            }
            p += l;
        }
        if p < kc {
            let n = kc - p;
            let bv = S::load_first(b.add(p), n);
            for (s, &row) in acc.iter_mut().zip(&rows) {
                *s = S::mul_add(S::load_first(row.add(p), n), bv, *s);
            }
        }
        for (q, &s) in acc.iter().enumerate() {
            let x = up.alpha * S::sum(s);
            let out = c.ptr.offset((r0 + q) as isize * c.rs).add(j);
            out.write_unaligned(if up.beta == 0.0 { x } else { out.read_unaligned() * up.beta + x });
        }
    }
}
