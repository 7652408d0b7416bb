//! A product with its epilogue: `C = act(alpha·op(A)·op(B) + beta·C + bias + Z)`, the bias,
//! residual addend and activation applied to each block of `C` as soon as the driver has
//! summed it, while the block is still in cache — a fused MatMul's one pass over its output
//! instead of the product's and then the epilogue's.
//!
//! The epilogue is the runtime's [`Epilogue`] routine run on each block, so every element gets
//! exactly the value that running the product and then the whole epilogue would give.

use super::{Done, Finish, Isa, PackedLayout, Sgemm, Transpose};
use crate::epilogue::{Activation, Bias, Epilogue};

/// A product followed by an epilogue on its `m × n` result.
///
/// ```
/// use kiln_runtime::epilogue::{Activation, Bias};
/// use kiln_runtime::gemm::{Sgemm, SgemmFused, Transpose};
/// let gemm = Sgemm { m: 1, n: 2, k: 2, lda: 2, ldb: 2, ldc: 2, trans_a: Transpose::No, trans_b: Transpose::No, alpha: 1.0, beta: 0.0 };
/// let f = SgemmFused { gemm, packed: None, bias: Bias::PerColumn, residual: false, act: Activation::Relu };
/// let mut c = [0.0; 2];
/// // [1 2]·I + [−5 1], then Relu.
/// f.run(&[1.0, 2.0], &[1.0, 0.0, 0.0, 1.0], &mut c, &[-5.0, 1.0], &[]);
/// assert_eq!(c, [0.0, 3.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgemmFused {
    /// The product.
    pub gemm: Sgemm,
    /// `Some` when `op(B)` was packed ahead in this layout (`gemm.ldb` and `gemm.trans_b` are
    /// then not used), as for [`Sgemm::run_packed`].
    pub packed: Option<PackedLayout>,
    /// The bias, over `C`'s rows or columns.
    pub bias: Bias,
    /// Whether `Z` is added; it has `C`'s layout (row stride `ldc`).
    pub residual: bool,
    /// The activation applied last.
    pub act: Activation,
}

impl SgemmFused {
    /// The epilogue over the whole of `C`.
    fn epilogue(&self) -> Epilogue {
        Epilogue { rows: self.gemm.m, cols: self.gemm.n, bias: self.bias, residual: self.residual, act: self.act }
    }

    /// Whether the sizes make sense: as [`Epilogue::is_valid`] for `C`, and a packed layout has
    /// positive sizes. [`run`](Self::run) does nothing otherwise.
    pub fn is_valid(&self) -> bool {
        self.epilogue().is_valid() && self.packed.is_none_or(|l| l.nr > 0 && l.kc > 0)
    }

    /// Elements of `B` read: [`Sgemm::b_len`], or the packed layout's length.
    pub fn b_len(&self) -> usize {
        match self.packed {
            _ if self.gemm.m == 0 || self.gemm.n == 0 => 0,
            Some(layout) => layout.len(self.gemm.k, self.gemm.n),
            None => self.gemm.b_len(),
        }
    }

    /// Elements of the bias read.
    pub fn bias_len(&self) -> usize {
        self.epilogue().bias_len()
    }

    /// Elements of `Z` read, counted from `Z[0,0]`: `C`'s extent when it is added.
    pub fn z_len(&self) -> usize {
        if self.residual { self.gemm.c_len() } else { 0 }
    }

    /// Computes the product and the epilogue with the detected kernel; nothing when the sizes
    /// are not [valid](Self::is_valid).
    ///
    /// # Panics
    ///
    /// If a slice is shorter than its `*_len`.
    pub fn run(&self, a: &[f32], b: &[f32], c: &mut [f32], bias: &[f32], z: &[f32]) {
        let lens_ok = a.len() >= self.gemm.a_len() && b.len() >= self.b_len() && c.len() >= self.gemm.c_len();
        assert!(lens_ok && bias.len() >= self.bias_len() && z.len() >= self.z_len(), "fused sgemm operand slices are too short for {self:?}");
        // SAFETY: the slices hold every element the operation addresses; `c` is exclusively
        // borrowed, so it overlaps none of the others.
        unsafe { self.run_raw(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), bias.as_ptr(), z.as_ptr()) }
    }

    /// [`run`](Self::run) on raw pointers.
    ///
    /// # Safety
    ///
    /// Each operand readable for its `*_len` elements (`c` also writable), `c` overlapping none
    /// of the others (`z` included: `C` is written before `Z` is read).
    pub(crate) unsafe fn run_raw(&self, a: *const f32, b: *const f32, c: *mut f32, bias: *const f32, z: *const f32) {
        if !self.is_valid() {
            return;
        }
        let isa = Isa::detected();
        let e = self.epilogue();
        let apply = Apply { isa, e, c, ldc: self.gemm.ldc, bias, z };
        // SAFETY: by the caller's contract; `Apply` touches the block it is given, its bias
        // elements and its rows of `Z`.
        unsafe {
            match (self.packed, e.is_identity()) {
                (Some(layout), true) => self.gemm.run_packed_raw_then(a, b, layout, c, &Done),
                (Some(layout), false) => self.gemm.run_packed_raw_then(a, b, layout, c, &apply),
                (None, true) => self.gemm.run_raw_then(isa, isa.blocking(), a, b, c, &Done),
                (None, false) => self.gemm.run_raw_then(isa, isa.blocking(), a, b, c, &apply),
            }
        }
    }
}

/// The epilogue on finished blocks of `C`.
struct Apply {
    isa: Isa,
    /// The whole product's epilogue (its sizes are set per block).
    e: Epilogue,
    c: *mut f32,
    ldc: usize,
    bias: *const f32,
    z: *const f32,
}

impl Finish for Apply {
    unsafe fn rows(&self, i: usize, mr: usize, j: usize, nc: usize) {
        let e = Epilogue { rows: mr, cols: nc, ..self.e };
        // SAFETY: the block is inside `C` (the driver's contract), so are its rows of `Z` (laid
        // out as `C`) and its bias elements; `Z` and the bias do not overlap `C`.
        unsafe {
            let at = i * self.ldc + j;
            let z = |r: usize| if e.residual { self.z.add(at + r * self.ldc) } else { self.z };
            match e.bias {
                Bias::None => e.run_strided(self.isa, self.c.add(at), self.bias, z(0), self.ldc),
                Bias::PerColumn => e.run_strided(self.isa, self.c.add(at), self.bias.add(j), z(0), self.ldc),
                // Row `i + r` adds `bias[(i + r) mod period]`: one row at a time.
                Bias::PerRow { period } => {
                    for r in 0..mr {
                        let row = Epilogue { rows: 1, bias: Bias::PerRow { period: 1 }, ..e };
                        row.run_strided(self.isa, self.c.add(at + r * self.ldc), self.bias.add((i + r) % period), z(r), self.ldc);
                    }
                }
            }
        }
    }
}

/// `C = act(alpha·op(A)·op(B) + beta·C + bias + Z)`: [`SgemmFused`] for generated code. The
/// product's arguments are [`kiln_rt_sgemm`](super::kiln_rt_sgemm)'s, with `op(B)` packed ahead
/// in the layout `(nr, kc)` when `nr > 0` (as for
/// [`kiln_rt_sgemm_packed`](super::kiln_rt_sgemm_packed); `ldb` and `trans_b` are then not
/// used); the epilogue's are [`kiln_rt_epilogue`](crate::epilogue::kiln_rt_epilogue)'s over
/// the `m × n` result, with `Z` laid out as `C` (row stride `ldc`). Nothing happens when a size
/// is negative, `nr > 0` with `kc ≤ 0`, the bias mode or activation code is unknown, or the
/// sizes are not [valid](SgemmFused::is_valid).
///
/// # Safety
///
/// As `kiln_rt_sgemm` (or `kiln_rt_sgemm_packed`) and `kiln_rt_epilogue`, except that `Z`
/// must not overlap `C`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kiln_rt_sgemm_fused(
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    bias: *const f32,
    z: *const f32,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    trans_a: i64,
    trans_b: i64,
    nr: i64,
    kc: i64,
    bias_mode: i64,
    period: i64,
    residual: i64,
    act: i64,
    alpha: f32,
    beta: f32,
    act_alpha: f32,
    act_beta: f32,
) {
    let Some(f) = SgemmFused::from_args([m, n, k, lda, ldb, ldc, trans_a, trans_b, nr, kc, bias_mode, period, residual, act], [alpha, beta, act_alpha, act_beta]) else { return };
    // SAFETY: by the caller's contract.
    unsafe { f.run_raw(a, b, c, bias, z) }
}

impl SgemmFused {
    /// The operation from [`kiln_rt_sgemm_fused`]'s integers (`m, n, k, lda, ldb, ldc, trans_a,
    /// trans_b, nr, kc, bias_mode, period, residual, act`) and floats (`alpha, beta, act_alpha,
    /// act_beta`); `None` for a negative size, an unknown bias mode or activation code, or a
    /// packed layout (`nr > 0`) with `kc ≤ 0`. Validity is [`is_valid`](Self::is_valid)'s.
    pub fn from_args(ints: [i64; 14], floats: [f32; 4]) -> Option<SgemmFused> {
        let [m, n, k, lda, ldb, ldc, trans_a, trans_b, nr, kc, bias_mode, period, residual, act] = ints;
        let [alpha, beta, act_alpha, act_beta] = floats;
        let dim = |x: i64| usize::try_from(x).ok();
        let transpose = |t: i64| if t != 0 { Transpose::Yes } else { Transpose::No };
        let gemm = Sgemm { m: dim(m)?, n: dim(n)?, k: dim(k)?, lda: dim(lda)?, ldb: dim(ldb)?, ldc: dim(ldc)?, trans_a: transpose(trans_a), trans_b: transpose(trans_b), alpha, beta };
        let packed = match nr {
            ..=0 => None,
            _ if kc <= 0 => return None,
            _ => Some(PackedLayout { nr: dim(nr)?, kc: dim(kc)? }),
        };
        let bias = match bias_mode {
            0 => Bias::None,
            1 => Bias::PerRow { period: dim(period)? },
            2 => Bias::PerColumn,
            _ => return None,
        };
        let act = Activation::from_code(act, act_alpha, act_beta)?;
        Some(SgemmFused { gemm, packed, bias, residual: residual != 0, act })
    }
}
