//! `f32` exp, tanh and erf as inline arithmetic, for one value or four lanes alike.
//!
//! These are the loop IR's `f32` exp, tanh and erf: `kiln_runtime::vmath::exp`, `tanh` and
//! `erf` (0.96, 1.3 and 1.06 ulp from `f64`, measured there), which the interpreter calls, emitted as CLIF
//! instruction for instruction, so generated code computes them bit for bit (but for the
//! payload of a NaN result, as elsewhere in generated code). A runtime call per
//! element cost about 7 ns, most of a sigmoid or SiLU chain. The same instructions serve a
//! scalar and an `f32x4`, so a vector loop's lanes and its scalar tail agree too. Multiply-adds
//! are fused, as Rust's `mul_add` is (Cranelift calls libm's `fmaf` on a CPU without FMA).

use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use kiln_loops::MathFn;

use crate::kernel::Cx;

/// `ln 2` in two parts; `n·LN2_HI` is exact for the `n` here.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding `1.5·2²³` rounds an `f32` below `2²²` to an integer held in its low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// Cephes' `e^r` coefficients, highest first, for `|r| ≤ ln 2 / 2`.
const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];
/// Cephes' `tanh` odd polynomial in `z = x²`, highest first, for `|x| < 0.625`.
const TANH_POLY: [f32; 5] = [-5.704_988_7e-3, 2.063_909e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328e-1];

impl Cx<'_, '_> {
    /// An `f32` constant of type `ty` (`f32` or `f32x4`).
    fn fconst(&mut self, ty: Type, v: f32) -> Value {
        let c = self.b.ins().f32const(v);
        if ty == types::F32 { c } else { self.b.ins().splat(ty, c) }
    }

    /// An `i32` constant as wide as `ty`.
    fn iconst_like(&mut self, ty: Type, v: i32) -> Value {
        let c = self.b.ins().iconst(types::I32, i64::from(v as u32));
        if ty == types::F32 { c } else { self.b.ins().splat(types::I32X4, c) }
    }

    /// The bits of `x` (`f32` or `f32x4`) as integers, and back.
    fn bits_of(&mut self, x: Value, ty: Type) -> Value {
        let to = if ty == types::F32 { types::I32 } else { types::I32X4 };
        self.b.ins().bitcast(to, MemFlagsData::new().with_endianness(Endianness::Little), x)
    }

    fn floats_of(&mut self, x: Value, ty: Type) -> Value {
        self.b.ins().bitcast(ty, MemFlagsData::new().with_endianness(Endianness::Little), x)
    }

    /// `a·b + c`, rounded once.
    fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }

    /// Horner's rule: `coeffs[0]·xⁿ⁻¹ + ... + coeffs[n−1]`.
    fn horner(&mut self, ty: Type, x: Value, coeffs: &[f32]) -> Value {
        let mut p = self.fconst(ty, coeffs[0]);
        for &c in &coeffs[1..] {
            let c = self.fconst(ty, c);
            p = self.mul_add(p, x, c);
        }
        p
    }

    /// `e^x` for `x` of type `ty` (`f32` or `f32x4`): `2ⁿ·e^r` with `n = round(x / ln 2)`,
    /// `2ⁿ` in two normal factors so a subnormal result rounds once; NaN stays NaN.
    pub(crate) fn approx_exp(&mut self, x: Value, ty: Type) -> Value {
        let (lo, hi) = (self.fconst(ty, -104.0), self.fconst(ty, 89.0));
        let c = self.b.ins().fmin(x, hi);
        let c = self.b.ins().fmax(c, lo);
        let (log2e, round) = (self.fconst(ty, std::f32::consts::LOG2_E), self.fconst(ty, ROUND));
        let t = self.b.ins().fmul(c, log2e);
        let t = self.b.ins().fadd(t, round);
        let n = self.b.ins().fsub(t, round);
        let tb = self.bits_of(t, ty);
        let round_bits = self.iconst_like(ty, ROUND.to_bits() as i32);
        let ni = self.b.ins().isub(tb, round_bits);
        let (ln2_hi, ln2_lo) = (self.fconst(ty, LN2_HI), self.fconst(ty, LN2_LO));
        let nh = self.b.ins().fmul(n, ln2_hi);
        let r = self.b.ins().fsub(c, nh);
        let nl = self.b.ins().fmul(n, ln2_lo);
        let r = self.b.ins().fsub(r, nl);
        let p = self.horner(ty, r, &EXP_POLY);
        let r2 = self.b.ins().fmul(r, r);
        let e = self.mul_add(p, r2, r);
        let one = self.fconst(ty, 1.0);
        let e = self.b.ins().fadd(e, one);
        // At or below −104 the result rounds to 0: selected, with n = 0 so that no product
        // underflows (an underflowing product can take a slow path).
        let under = self.b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::LessThanOrEqual, x, lo);
        let ni = if ty == types::F32 {
            let zero = self.b.ins().iconst(types::I32, 0);
            self.b.ins().select(under, zero, ni)
        } else {
            self.b.ins().band_not(ni, under)
        };
        let one_bit = self.b.ins().iconst(types::I32, 1);
        let n1 = self.b.ins().sshr(ni, one_bit);
        let n2 = self.b.ins().isub(ni, n1);
        let bias = self.iconst_like(ty, 127);
        let shift = self.b.ins().iconst(types::I32, 23);
        let mut y = e;
        for k in [n1, n2] {
            let biased = self.b.ins().iadd(k, bias);
            let bits = self.b.ins().ishl(biased, shift);
            let pow2 = self.floats_of(bits, ty);
            y = self.b.ins().fmul(y, pow2);
        }
        if ty == types::F32 {
            let zero = self.fconst(ty, 0.0);
            self.b.ins().select(under, zero, y)
        } else {
            let yb = self.bits_of(y, ty);
            let kept = self.b.ins().band_not(yb, under);
            self.floats_of(kept, ty)
        }
    }

    /// The inline form of `f32` math function `f` (exp, tanh or erf) of `x` of type `ty`.
    pub(crate) fn approx(&mut self, f: MathFn, x: Value, ty: Type) -> Value {
        match f {
            MathFn::Exp => self.approx_exp(x, ty),
            MathFn::Tanh => self.approx_tanh(x, ty),
            MathFn::Erf => self.approx_erf(x, ty),
            other => unreachable!("no inline form for {other:?}: callers ask for exp, tanh and erf only"),
        }
    }

    /// `erf x`: `a + a·P(a²)` below `a = |x| = 1`, `1 − e^{−a²}·Q(1/a)` above (NaN too), with
    /// `x`'s sign.
    pub(crate) fn approx_erf(&mut self, x: Value, ty: Type) -> Value {
        let (small_poly, large_poly) = kiln_runtime::vmath::ERF_POLYNOMIALS;
        let a = self.b.ins().fabs(x);
        let z = self.b.ins().fmul(a, a);
        let p = self.horner(ty, z, small_poly);
        let small = self.mul_add(a, p, a);
        let one = self.fconst(ty, 1.0);
        let t = self.b.ins().fdiv(one, a);
        let q = self.horner(ty, t, large_poly);
        let minus_z = self.b.ins().fneg(z);
        let e = self.approx_exp(minus_z, ty);
        let eq = self.b.ins().fmul(e, q);
        let large = self.b.ins().fsub(one, eq);
        self.select_below(a, 1.0, small, large, ty, x)
    }

    /// `small` where `a < limit`, else `large` (NaN `a` too), given `x`'s sign.
    fn select_below(&mut self, a: Value, limit: f32, small: Value, large: Value, ty: Type, x: Value) -> Value {
        let limit = self.fconst(ty, limit);
        let is_small = self.b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::LessThan, a, limit);
        let v = if ty == types::F32 {
            self.b.ins().select(is_small, small, large)
        } else {
            let m = self.floats_of(is_small, ty);
            self.b.ins().bitselect(m, small, large)
        };
        // |v| with x's sign (−0 included), in integer bits (Cranelift has no vector copysign
        // on x86-64).
        let (vb, xb) = (self.bits_of(v, ty), self.bits_of(x, ty));
        let (magnitude, sign) = (self.iconst_like(ty, i32::MAX), self.iconst_like(ty, i32::MIN));
        let vb = self.b.ins().band(vb, magnitude);
        let xb = self.b.ins().band(xb, sign);
        let bits = self.b.ins().bor(vb, xb);
        self.floats_of(bits, ty)
    }

    /// `tanh x`: Cephes' odd polynomial below `|x| = 0.625`, `1 − 2/(e^{2|x|} + 1)` above (NaN
    /// too), with `x`'s sign.
    pub(crate) fn approx_tanh(&mut self, x: Value, ty: Type) -> Value {
        let ax = self.b.ins().fabs(x);
        let z = self.b.ins().fmul(x, x);
        let p = self.horner(ty, z, &TANH_POLY);
        let xz = self.b.ins().fmul(x, z);
        let small = self.mul_add(xz, p, x);
        let two_ax = self.b.ins().fadd(ax, ax);
        let e = self.approx_exp(two_ax, ty);
        let (one, two) = (self.fconst(ty, 1.0), self.fconst(ty, 2.0));
        let d = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, d);
        let large = self.b.ins().fsub(one, q);
        // tanh is odd.
        self.select_below(ax, 0.625, small, large, ty, x)
    }
}
