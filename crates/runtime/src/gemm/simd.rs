//! The few vector operations the kernels are written in, one implementation per instruction
//! set ([`Portable`] here; `Avx2` and `Avx512` in their modules).
//!
//! Kernels are generic over [`Simd`] and `#[inline(always)]`; each instruction set's entry point
//! is a `#[target_feature]` function that instantiates them, so the whole nest compiles with that
//! set enabled.

/// An `f32` vector type and its operations. Pointers need no alignment.
pub(crate) trait Simd {
    /// The vector.
    type V: Copy;
    /// `f32` lanes per vector.
    const LANES: usize;
    /// All lanes zero.
    unsafe fn zero() -> Self::V;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// `LANES` floats from `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `LANES` floats to `p`.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The first `n < LANES` lanes from `p` (no memory past them is touched), the rest zero.
    unsafe fn load_first(p: *const f32, n: usize) -> Self::V;
    /// The first `n < LANES` lanes of `v` to `p` (no memory past them is touched).
    unsafe fn store_first(p: *mut f32, v: Self::V, n: usize);
    /// Lanes `j < n ≤ LANES` from `p[2j]` (every other float), the rest zero; only
    /// `p[0..2n − 1]` is touched.
    unsafe fn load_even(p: *const f32, n: usize) -> Self::V;
    /// `a·b + c`, fused where the instruction set has it.
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a·b`.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// The sum of the lanes (in an order fixed by the implementation).
    unsafe fn sum(v: Self::V) -> f32;
    /// `a + b`.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// Each lane `x` as `!(x <= 0) ? x : +0`: Relu as the epilogue defines it (NaN stays, `−0`
    /// becomes `+0`).
    unsafe fn relu(v: Self::V) -> Self::V;
    /// Each lane `x` as `u = !(x <= lo) ? x : lo`, then `!(u >= hi) ? u : hi`: Clip in the
    /// epilogue's form for bounds that are not NaN, `lo` not `−0` and `hi` not `+0`.
    unsafe fn clip(v: Self::V, lo: f32, hi: f32) -> Self::V;
    /// The `LANES × LANES` block whose row `i` is the `LANES` floats at `src + i·ss`, written
    /// transposed: row `j` of the result (the block's column `j`) to `dst + j·ds`. The block and
    /// the result do not overlap.
    #[inline(always)]
    unsafe fn transpose(src: *const f32, ss: isize, dst: *mut f32, ds: isize) {
        let n = Self::LANES as isize;
        for i in 0..n {
            for j in 0..n {
                // SAFETY: by the caller's contract.
                unsafe { *dst.offset(j * ds + i) = *src.offset(i * ss + j) };
            }
        }
    }
}

/// Plain Rust on 8-lane arrays; the compiler vectorizes it for whatever the build targets.
#[derive(Clone, Copy)]
pub(crate) struct Portable;

impl Simd for Portable {
    type V = [f32; 8];
    const LANES: usize = 8;

    #[inline(always)]
    unsafe fn zero() -> [f32; 8] {
        [0.0; 8]
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; 8] {
        [x; 8]
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 8] {
        // SAFETY: the caller guarantees 8 readable floats at `p`.
        unsafe { p.cast::<[f32; 8]>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; 8]) {
        // SAFETY: the caller guarantees 8 writable floats at `p`.
        unsafe { p.cast::<[f32; 8]>().write_unaligned(v) }
    }

    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> [f32; 8] {
        let mut v = [0.0; 8];
        // SAFETY: the caller guarantees `n < 8` readable floats at `p`, which need no alignment
        // (bytes are copied).
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), 4 * n.min(8)) };
        v
    }

    #[inline(always)]
    unsafe fn store_first(p: *mut f32, v: [f32; 8], n: usize) {
        // SAFETY: the caller guarantees `n < 8` writable floats at `p`.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), p.cast::<u8>(), 4 * n.min(8)) }
    }

    #[inline(always)]
    unsafe fn load_even(p: *const f32, n: usize) -> [f32; 8] {
        // SAFETY: the caller guarantees `p[0..2n − 1]` readable; no other float is read.
        std::array::from_fn(|j| if j < n { unsafe { p.add(2 * j).read_unaligned() } } else { 0.0 })
    }

    #[inline(always)]
    unsafe fn mul_add(a: [f32; 8], b: [f32; 8], c: [f32; 8]) -> [f32; 8] {
        // Separate multiply and add: `f32::mul_add` is a library call without hardware FMA.
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }

    #[inline(always)]
    unsafe fn mul(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|i| a[i] * b[i])
    }

    #[inline(always)]
    unsafe fn sum(v: [f32; 8]) -> f32 {
        ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
    }

    #[inline(always)]
    unsafe fn add(a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|i| a[i] + b[i])
    }

    #[inline(always)]
    // The negated compares are the point: true for a NaN lane.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    unsafe fn relu(v: [f32; 8]) -> [f32; 8] {
        v.map(|x| if !(x <= 0.0) { x } else { 0.0 })
    }

    #[inline(always)]
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    unsafe fn clip(v: [f32; 8], lo: f32, hi: f32) -> [f32; 8] {
        v.map(|x| {
            let u = if !(x <= lo) { x } else { lo };
            if !(u >= hi) { u } else { hi }
        })
    }
}
