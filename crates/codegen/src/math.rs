//! Calls into the runtime library: math functions, float remainder, micro-kernels (sgemm,
//! fused and depthwise convolution, max pooling, softmax, layer normalization), im2col, the fused ops' epilogue and
//! copies. Each callee is an imported symbol (`Linkage::Import`) named as `kiln_runtime`
//! exports it.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_module::Linkage;
use kiln_loops::call::{self, Elems, Operand, OperandKind};
use kiln_loops::{Call, ElemType, Expr, MathFn, RuntimeFn, ScalarType};

use crate::expr::cl_type;
use crate::kernel::Cx;
use crate::CodegenError;

/// The runtime symbols of `f` for `f32` and for `f64` arguments.
fn math_symbols(f: MathFn) -> (&'static str, &'static str) {
    match f {
        MathFn::Exp => ("kiln_rt_expf", "kiln_rt_exp"),
        MathFn::Log => ("kiln_rt_logf", "kiln_rt_log"),
        MathFn::Pow => ("kiln_rt_powf", "kiln_rt_pow"),
        MathFn::Tanh => ("kiln_rt_tanhf", "kiln_rt_tanh"),
        MathFn::Erf => ("kiln_rt_erff", "kiln_rt_erf"),
        MathFn::Sin => ("kiln_rt_sinf", "kiln_rt_sin"),
        MathFn::Cos => ("kiln_rt_cosf", "kiln_rt_cos"),
        MathFn::Tan => ("kiln_rt_tanf", "kiln_rt_tan"),
        MathFn::Asin => ("kiln_rt_asinf", "kiln_rt_asin"),
        MathFn::Acos => ("kiln_rt_acosf", "kiln_rt_acos"),
        MathFn::Atan => ("kiln_rt_atanf", "kiln_rt_atan"),
        MathFn::Sinh => ("kiln_rt_sinhf", "kiln_rt_sinh"),
        MathFn::Cosh => ("kiln_rt_coshf", "kiln_rt_cosh"),
        MathFn::Asinh => ("kiln_rt_asinhf", "kiln_rt_asinh"),
        MathFn::Acosh => ("kiln_rt_acoshf", "kiln_rt_acosh"),
        MathFn::Atanh => ("kiln_rt_atanhf", "kiln_rt_atanh"),
        MathFn::Softplus => ("kiln_rt_softplusf", "kiln_rt_softplus"),
        MathFn::Rint => ("kiln_rt_rintf", "kiln_rt_rint"),
    }
}

/// libm's names of `f` for `f32` and `f64` arguments (`None`: libm has no such function).
fn libm_symbols(f: MathFn) -> Option<(&'static str, &'static str)> {
    Some(match f {
        MathFn::Exp => ("expf", "exp"),
        MathFn::Log => ("logf", "log"),
        MathFn::Pow => ("powf", "pow"),
        MathFn::Tanh => ("tanhf", "tanh"),
        MathFn::Erf => ("erff", "erf"),
        MathFn::Sin => ("sinf", "sin"),
        MathFn::Cos => ("cosf", "cos"),
        MathFn::Tan => ("tanf", "tan"),
        MathFn::Asin => ("asinf", "asin"),
        MathFn::Acos => ("acosf", "acos"),
        MathFn::Atan => ("atanf", "atan"),
        MathFn::Sinh => ("sinhf", "sinh"),
        MathFn::Cosh => ("coshf", "cosh"),
        MathFn::Asinh => ("asinhf", "asinh"),
        MathFn::Acosh => ("acoshf", "acosh"),
        MathFn::Atanh => ("atanhf", "atanh"),
        MathFn::Rint => ("rintf", "rint"),
        MathFn::Softplus => return None,
    })
}

impl Cx<'_, '_> {
    /// The runtime function `name` with the given signature, imported into this function once.
    pub(crate) fn runtime(&mut self, name: &'static str, params: &[Type], returns: &[Type]) -> Result<FuncRef, CodegenError> {
        if let Some(&f) = self.funcs.get(name) {
            return Ok(f);
        }
        let mut sig = self.module.make_signature();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns.extend(returns.iter().map(|&t| AbiParam::new(t)));
        let id = self
            .module
            .declare_function(name, Linkage::Import, &sig)
            .map_err(|e| CodegenError::Cranelift { kernel: self.kernel.name.clone(), message: format!("importing {name}: {e}") })?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        self.funcs.insert(name, f);
        Ok(f)
    }

    /// Calls a runtime function returning one value.
    fn call_value(&mut self, name: &'static str, ty: Type, args: &[Value]) -> Result<Value, CodegenError> {
        let params = vec![ty; args.len()];
        let f = self.runtime(name, &params, &[ty])?;
        let call = self.b.ins().call(f, args);
        Ok(self.b.inst_results(call)[0])
    }

    /// `fmod(x, y)`: float `Rem` has no Cranelift instruction.
    pub fn fmod(&mut self, t: ScalarType, x: Value, y: Value) -> Result<Value, CodegenError> {
        let name = match (self.libc, t == ScalarType::F32) {
            (false, true) => "kiln_rt_fmodf",
            (false, false) => "kiln_rt_fmod",
            (true, true) => "fmodf",
            (true, false) => "fmod",
        };
        self.call_value(name, cl_type(t), &[x, y])
    }

    /// A math function of `f32` or `f64` arguments (all of one type).
    pub fn math(&mut self, f: MathFn, args: &[Expr]) -> Result<(Value, ScalarType), CodegenError> {
        let arity = if f == MathFn::Pow { 2 } else { 1 };
        if args.len() != arity {
            return Err(self.invalid(format!("{f:?} takes {arity} argument(s), not {}", args.len())));
        }
        let (first, t) = self.expr(&args[0])?;
        if !t.is_float() {
            return Err(self.unsupported(format!("{f:?} of {}", t.name())));
        }
        let mut vals = vec![first];
        for a in &args[1..] {
            vals.push(self.typed(a, t).map_err(|e| self.invalid(format!("{f:?}: {e}")))?);
        }
        if t == ScalarType::F32 && matches!(f, MathFn::Exp | MathFn::Tanh | MathFn::Erf) {
            // Inline, as the vector loops compute them (`crate::approx`).
            return Ok((self.approx(f, vals[0], types::F32), t));
        }
        if self.libc && f == MathFn::Softplus {
            return Ok((self.softplus(t, vals[0])?, t));
        }
        let (f32_name, f64_name) = if self.libc { libm_symbols(f).unwrap_or(("", "")) } else { math_symbols(f) };
        let name = if t == ScalarType::F32 { f32_name } else { f64_name };
        Ok((self.call_value(name, cl_type(t), &vals)?, t))
    }

    /// `ln(1 + e^x)` as `max(x, 0) + log1p(e^−|x|)` through libm, which has no softplus: no
    /// overflow for large `x`, full precision for very negative `x`.
    fn softplus(&mut self, t: ScalarType, x: Value) -> Result<Value, CodegenError> {
        let (exp, log1p) = if t == ScalarType::F32 { ("expf", "log1pf") } else { ("exp", "log1p") };
        let ty = cl_type(t);
        let a = self.b.ins().fabs(x);
        let neg = self.b.ins().fneg(a);
        let e = self.call_value(exp, ty, &[neg])?;
        let l = self.call_value(log1p, ty, &[e])?;
        let zero = if t == ScalarType::F32 { self.b.ins().f32const(0.0) } else { self.b.ins().f64const(0.0) };
        let m = self.b.ins().fmax(x, zero);
        Ok(self.b.ins().fadd(m, l))
    }

    /// The runtime's encoding of `f32` value `x` into float8 or float4 storage type `elem`:
    /// the code in the low bits of an `i32`.
    pub fn encode_minifloat(&mut self, elem: ElemType, x: Value) -> Result<Value, CodegenError> {
        if self.libc {
            use kiln_runtime::minifloat::{E2M1, E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ};
            let format = match elem {
                ElemType::F8E4M3FN => E4M3FN,
                ElemType::F8E4M3FNUZ => E4M3FNUZ,
                ElemType::F8E5M2 => E5M2,
                ElemType::F8E5M2FNUZ => E5M2FNUZ,
                ElemType::F4E2M1 => E2M1,
                other => return Err(self.unsupported(format!("stores of {}", other.name()))),
            };
            return Ok(self.encode_inline(format, x));
        }
        let name = match elem {
            ElemType::F8E4M3FN => "kiln_rt_f32_to_f8e4m3fn",
            ElemType::F8E4M3FNUZ => "kiln_rt_f32_to_f8e4m3fnuz",
            ElemType::F8E5M2 => "kiln_rt_f32_to_f8e5m2",
            ElemType::F8E5M2FNUZ => "kiln_rt_f32_to_f8e5m2fnuz",
            ElemType::F4E2M1 => "kiln_rt_f32_to_f4e2m1",
            other => return Err(self.unsupported(format!("stores of {}", other.name()))),
        };
        let f = self.runtime(name, &[types::F32], &[types::I32])?;
        let call = self.b.ins().call(f, &[x]);
        Ok(self.b.inst_results(call)[0])
    }

    /// [`Format::encode`](kiln_runtime::minifloat::Format::encode) as generated code, for targets
    /// without the runtime: with `e = max(⌊log2 |x|⌋, emin)`, `|x| / 2^(e − m)` is exact and in
    /// `[0, 2^(m+1)]`, rounded to an integer `r` (nearest, ties to even) it gives the code
    /// `((e + bias) << m) + r − 2^m` (at `e = emin`, `e + bias` is 1, so subnormals and a
    /// carry into the next exponent come out right); codes past the largest finite one, the
    /// infinities and NaN take the format's special codes, read off the runtime's encoder.
    fn encode_inline(&mut self, f: kiln_runtime::minifloat::Format, x: Value) -> Value {
        use kiln_runtime::minifloat::Specials;
        let (m, emin) = (f.man_bits as i64, 1 - i64::from(f.bias));
        let max_bits = i64::from(f.encode(f.max_finite()));
        let (nan_pos, nan_neg) = (i64::from(f.encode(f32::NAN)), i64::from(f.encode(-f32::NAN)));
        let (over_pos, over_neg) = (i64::from(f.encode(f32::INFINITY)), i64::from(f.encode(f32::NEG_INFINITY)));
        let sign_bit = i64::from(f.sign_bit());
        let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
        let abs = self.b.ins().band_imm_s(bits, 0x7fff_ffff);
        let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, bits, 0);
        let field = self.b.ins().ushr_imm_u(abs, 23);
        let unbiased = self.b.ins().iadd_imm_s(field, -127);
        let emin_v = self.b.ins().iconst(types::I32, emin);
        let e = self.b.ins().smax(unbiased, emin_v);
        // 2^(e − m) as f32 bits: e − m ≥ emin − m > −126, a normal number.
        let qexp = self.b.ins().iadd_imm_s(e, 127 - m);
        let qbits = self.b.ins().ishl_imm_u(qexp, 23);
        let quantum = self.b.ins().bitcast(types::F32, MemFlagsData::new(), qbits);
        let a = self.b.ins().bitcast(types::F32, MemFlagsData::new(), abs);
        let scaled = self.b.ins().fdiv(a, quantum);
        let rounded = self.b.ins().nearest(scaled);
        let r = self.b.ins().fcvt_to_uint_sat(types::I32, rounded);
        let biased = self.b.ins().iadd_imm_s(e, i64::from(f.bias));
        let high = self.b.ins().ishl_imm_u(biased, m);
        let code = self.b.ins().iadd(high, r);
        let code = self.b.ins().iadd_imm_s(code, -(1 << m));
        let sign = self.b.ins().iconst(types::I32, sign_bit);
        let zero = self.b.ins().iconst(types::I32, 0);
        let sign = self.b.ins().select(negative, sign, zero);
        let signed = self.b.ins().bor(sign, code);
        let value = if f.specials == Specials::FiniteNanUnsignedZero {
            // No negative zero.
            let is_zero = self.b.ins().icmp_imm_s(IntCC::Equal, code, 0);
            self.b.ins().select(is_zero, zero, signed)
        } else {
            signed
        };
        let pick = |cx: &mut Self, pos: i64, neg: i64| {
            let p = cx.b.ins().iconst(types::I32, pos);
            let n = cx.b.ins().iconst(types::I32, neg);
            cx.b.ins().select(negative, n, p)
        };
        let over = pick(self, over_pos, over_neg);
        let nan = pick(self, nan_pos, nan_neg);
        let too_big = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, code, max_bits);
        let is_inf = self.b.ins().icmp_imm_s(IntCC::Equal, abs, 0x7f80_0000);
        let overflow = self.b.ins().bor(too_big, is_inf);
        let value = self.b.ins().select(overflow, over, value);
        let is_nan = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThan, abs, 0x7f80_0000);
        self.b.ins().select(is_nan, nan, value)
    }

    /// A runtime routine called for its effect on buffers: `symbol(operands…)` in signature
    /// order, each address a pointer, each `i64` operand of any integer type (extended to
    /// `i64`, as in the interpreter) and each `f32` one an `f32`.
    pub fn call(&mut self, call: &Call) -> Result<(), CodegenError> {
        if let Call::Copy(c) = call {
            return self.copy(c);
        }
        let f = call.kind();
        let name = f.name();
        if self.libc {
            return Err(self.unsupported(format!("runtime call `{name}` without kiln's runtime (`kiln_lower::plain` expands it)")));
        }
        let ptr = self.module.target_config().pointer_type();
        let mut params = Vec::with_capacity(f.signature().len());
        let mut values = Vec::with_capacity(f.signature().len());
        for (spec, operand) in f.signature().iter().zip(call.operands()) {
            let (param, value) = match (operand, spec.kind) {
                (Operand::Addr(a), OperandKind::Addr(_, elems)) => {
                    let elem = self.program.buffers.get(a.buf.0 as usize).map(|b| b.elem);
                    if elems == Elems::F32 && elem != Some(ElemType::Scalar(ScalarType::F32)) {
                        return Err(self.unsupported(format!("{name} on {:?}, which is not an f32 buffer", a.buf)));
                    }
                    (ptr, self.address(a.buf, &a.index)?)
                }
                (Operand::Value(e), OperandKind::I64) => {
                    let (v, t) = self.expr(e)?;
                    if t.is_float() || t == ScalarType::Bool {
                        return Err(self.invalid(format!("{name} operand `{}` of type {}", spec.name, t.name())));
                    }
                    (types::I64, self.resize(v, t, types::I64))
                }
                (Operand::Value(e), OperandKind::F32) => {
                    let (v, t) = self.expr(e)?;
                    if t != ScalarType::F32 {
                        return Err(self.invalid(format!("{name} operand `{}` of type {}", spec.name, t.name())));
                    }
                    (types::F32, v)
                }
                // The table gives each operand the field type of its kind.
                _ => return Err(self.invalid(format!("{name} operand `{}` does not have its kind", spec.name))),
            };
            params.push(param);
            values.push(value);
        }
        let callee = self.runtime(f.symbol(), &params, &[])?;
        self.b.ins().call(callee, &values);
        Ok(())
    }

    /// `kiln_rt_copy(dst, src, bytes)` for `n` elements of the two buffers' one type: the
    /// routine takes a count of bytes.
    fn copy(&mut self, c: &call::Copy) -> Result<(), CodegenError> {
        let (dst, src) = (c.dst.buf, c.src.buf);
        let elem = self.program.buffers.get(dst.0 as usize).map(|b| b.elem);
        let Some(elem) = elem.filter(|&e| !e.is_packed() && self.program.buffers.get(src.0 as usize).map(|b| b.elem) == Some(e)) else {
            return Err(self.invalid(format!("copy between {dst:?} and {src:?}, which do not hold one whole-byte element type")));
        };
        let d = self.address(dst, &c.dst.index)?;
        let s = self.address(src, &c.src.index)?;
        let n = self.typed(&c.n, ScalarType::I64).map_err(|e| self.invalid(format!("copy count: {e}")))?;
        let bytes = self.b.ins().imul_imm_s(n, i64::from(elem.bits() / 8));
        let ptr = self.module.target_config().pointer_type();
        if self.libc {
            // memmove, as the runtime's copy allows overlap; it returns its destination, which
            // nothing reads.
            let f = self.runtime("memmove", &[ptr, ptr, ptr], &[ptr])?;
            self.b.ins().call(f, &[d, s, bytes]);
            return Ok(());
        }
        let f = self.runtime(RuntimeFn::Copy.symbol(), &[ptr, ptr, types::I64], &[])?;
        self.b.ins().call(f, &[d, s, bytes]);
        Ok(())
    }
}
