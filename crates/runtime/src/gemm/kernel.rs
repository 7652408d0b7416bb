//! The register-blocked micro-kernel: an `MR × NV·LANES` tile of `C` from packed panels.

use super::pack::View;
use super::simd::Simd;

/// The most floats a tile can have (the edge path spills a tile to the stack).
pub(crate) const MAX_TILE: usize = 512;

/// `Σ_p A[·, p]·Bp[p]` over `kc` steps. `A` is a view of `MR` rows (lanes) × `kc` steps: a
/// packed panel (`lane_stride` 1, `step_stride` the panel's width; the strides are then
/// constants after inlining) or rows of the caller's matrix read in place (`step_stride` 1).
/// `Bp` holds `b_step` floats per step (the first `NV·LANES` are used). The sum runs over `p` in
/// ascending order, one multiply-add per step and element.
///
/// # Safety
///
/// `A` and the panel hold `kc` steps. The caller enables the instruction set of `S`.
#[inline(always)]
pub(crate) unsafe fn accumulate<S: Simd, const MR: usize, const NV: usize>(kc: usize, a: View, b: *const f32, b_step: usize) -> [[S::V; NV]; MR] {
    // SAFETY: the caller's contract covers every address below.
    unsafe {
        let mut acc = [[S::zero(); NV]; MR];
        let (mut ap, mut b) = (a.ptr, b);
        for _ in 0..kc {
            let mut bv = [S::zero(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = S::load(b.add(v * S::LANES));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // Unaligned: rows read in place may be slices of a mapped file.
                let av = S::splat(ap.offset(r as isize * a.lane_stride).read_unaligned());
                for (s, &x) in row.iter_mut().zip(&bv) {
                    *s = S::mul_add(av, x, *s);
                }
            }
            ap = ap.offset(a.step_stride);
            b = b.add(b_step);
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
}

/// Where a tile of `C` lands: element `(r, j)` is at `ptr + r·rs + j`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    /// Element `(0, 0)`.
    pub ptr: *mut f32,
    /// Row stride.
    pub rs: isize,
}

/// `C[0..mr, 0..nr] = alpha·acc + beta·C` (`C` is not read when `beta == 0`). A full tile goes
/// through vectors; an edge tile through a stack copy and scalars.
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
                for (v, &x) in row.iter().enumerate() {
                    let p = c_row.add(v * S::LANES);
                    let out = if up.beta == 0.0 { S::mul(x, alpha) } else { S::mul_add(S::load(p), beta, S::mul(x, alpha)) };
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
