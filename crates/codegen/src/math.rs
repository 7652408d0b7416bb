//! Calls into the runtime library: math functions, float remainder, micro-kernels (sgemm,
//! depthwise convolution, max pooling), im2col and the fused ops' epilogue. Each callee is an imported symbol (`Linkage::Import`) named as
//! `kiln_runtime` exports it.

use cranelift_codegen::ir::{types, AbiParam, FuncRef, InstBuilder, Type, Value};
use cranelift_module::Linkage;
use kiln_loops::{Arg, ElemType, Expr, MathFn, RuntimeFn, ScalarType};

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

impl Cx<'_, '_> {
    /// The runtime function `name` with the given signature, imported into this function once.
    fn runtime(&mut self, name: &'static str, params: &[Type], returns: &[Type]) -> Result<FuncRef, CodegenError> {
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
        let name = if t == ScalarType::F32 { "kiln_rt_fmodf" } else { "kiln_rt_fmod" };
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
        let (f32_name, f64_name) = math_symbols(f);
        let name = if t == ScalarType::F32 { f32_name } else { f64_name };
        Ok((self.call_value(name, cl_type(t), &vals)?, t))
    }

    /// The runtime's encoding of `f32` value `x` into float8 or float4 storage type `elem`:
    /// the code in the low bits of an `i32`.
    pub fn encode_minifloat(&mut self, elem: ElemType, x: Value) -> Result<Value, CodegenError> {
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

    /// A runtime routine called for its effect on buffers.
    pub fn call(&mut self, f: RuntimeFn, args: &[Arg]) -> Result<(), CodegenError> {
        match f {
            RuntimeFn::Sgemm => self.sgemm(args),
            RuntimeFn::DwConv2d => self.dwconv2d(args),
            RuntimeFn::Epilogue => self.epilogue(args),
            RuntimeFn::Im2col => self.sized("im2col", "kiln_rt_im2col", args, 2, 13),
            RuntimeFn::MaxPool2d => self.sized("maxpool2d", "kiln_rt_maxpool2d", args, 2, 13),
            RuntimeFn::Softmax => self.sized("softmax", "kiln_rt_softmax", args, 1, 2),
            RuntimeFn::Copy => self.copy(args),
        }
    }

    /// `kiln_rt_sgemm(a, b, c, m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta)`. As in
    /// the interpreter, the integer arguments may have any integer type (extended to `i64`) and
    /// are told apart from the two `f32` ones by type.
    fn sgemm(&mut self, args: &[Arg]) -> Result<(), CodegenError> {
        let [Arg::Addr(a, ai), Arg::Addr(b, bi), Arg::Addr(c, ci), rest @ ..] = args else {
            return Err(self.invalid("sgemm takes three buffer addresses first"));
        };
        let mut values = Vec::with_capacity(13);
        for (buf, index) in [(a, ai), (b, bi), (c, ci)] {
            if self.program.buffers.get(buf.0 as usize).map(|x| x.elem) != Some(ElemType::Scalar(ScalarType::F32)) {
                return Err(self.unsupported(format!("sgemm on {buf:?}, which is not an f32 buffer")));
            }
            values.push(self.address(*buf, index)?);
        }
        let (mut ints, mut floats) = (Vec::new(), Vec::new());
        for arg in rest {
            let Arg::Value(e) = arg else { return Err(self.invalid("sgemm takes scalars after the three addresses")) };
            let (v, t) = self.expr(e)?;
            match t {
                ScalarType::F32 => floats.push(v),
                t if t.is_float() || t == ScalarType::Bool => return Err(self.invalid(format!("sgemm argument of type {}", t.name()))),
                t => ints.push(self.resize(v, t, types::I64)),
            }
        }
        if ints.len() != 8 || floats.len() != 2 {
            return Err(self.invalid("sgemm takes m, n, k, lda, ldb, ldc, trans_a, trans_b (integers) and alpha, beta (f32)"));
        }
        values.extend(ints);
        values.extend(floats);
        let ptr = self.module.target_config().pointer_type();
        let mut params = vec![ptr; 3];
        params.extend([types::I64; 8]);
        params.extend([types::F32; 2]);
        let f = self.runtime("kiln_rt_sgemm", &params, &[])?;
        self.b.ins().call(f, &values);
        Ok(())
    }

    /// `kiln_rt_dwconv2d(x, w, y, planes, channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh,
    /// dw, accumulate)`; the sizes may have any integer type (extended to `i64`), as in the
    /// interpreter.
    fn dwconv2d(&mut self, args: &[Arg]) -> Result<(), CodegenError> {
        let [Arg::Addr(x, xi), Arg::Addr(w, wi), Arg::Addr(y, yi), rest @ ..] = args else {
            return Err(self.invalid("dwconv2d takes three buffer addresses first"));
        };
        if rest.len() != 15 {
            return Err(self.invalid(format!("dwconv2d takes 15 sizes after the addresses, not {}", rest.len())));
        }
        let mut values = Vec::with_capacity(18);
        for (buf, index) in [(x, xi), (w, wi), (y, yi)] {
            if self.program.buffers.get(buf.0 as usize).map(|b| b.elem) != Some(ElemType::Scalar(ScalarType::F32)) {
                return Err(self.unsupported(format!("dwconv2d on {buf:?}, which is not an f32 buffer")));
            }
            values.push(self.address(*buf, index)?);
        }
        for arg in rest {
            let Arg::Value(e) = arg else { return Err(self.invalid("dwconv2d takes integer sizes after the three addresses")) };
            let (v, t) = self.expr(e)?;
            if t.is_float() || t == ScalarType::Bool {
                return Err(self.invalid(format!("dwconv2d size of type {}", t.name())));
            }
            values.push(self.resize(v, t, types::I64));
        }
        let ptr = self.module.target_config().pointer_type();
        let mut params = vec![ptr; 3];
        params.extend([types::I64; 15]);
        let f = self.runtime("kiln_rt_dwconv2d", &params, &[])?;
        self.b.ins().call(f, &values);
        Ok(())
    }

    /// `kiln_rt_epilogue(y, b, z, rows, cols, bias, period, residual, act, alpha, beta)`; the
    /// integers may have any integer type (extended to `i64`) and are told apart from the two
    /// `f32` ones by type, as for `sgemm`.
    fn epilogue(&mut self, args: &[Arg]) -> Result<(), CodegenError> {
        let [Arg::Addr(y, yi), Arg::Addr(b, bi), Arg::Addr(z, zi), rest @ ..] = args else {
            return Err(self.invalid("epilogue takes three buffer addresses first"));
        };
        let mut values = Vec::with_capacity(11);
        for (buf, index) in [(y, yi), (b, bi), (z, zi)] {
            if self.program.buffers.get(buf.0 as usize).map(|x| x.elem) != Some(ElemType::Scalar(ScalarType::F32)) {
                return Err(self.unsupported(format!("epilogue on {buf:?}, which is not an f32 buffer")));
            }
            values.push(self.address(*buf, index)?);
        }
        let (mut ints, mut floats) = (Vec::new(), Vec::new());
        for arg in rest {
            let Arg::Value(e) = arg else { return Err(self.invalid("epilogue takes scalars after the three addresses")) };
            let (v, t) = self.expr(e)?;
            match t {
                ScalarType::F32 => floats.push(v),
                t if t.is_float() || t == ScalarType::Bool => return Err(self.invalid(format!("epilogue argument of type {}", t.name()))),
                t => ints.push(self.resize(v, t, types::I64)),
            }
        }
        if ints.len() != 6 || floats.len() != 2 {
            return Err(self.invalid("epilogue takes rows, cols, bias, period, residual, act (integers) and alpha, beta (f32)"));
        }
        values.extend(ints);
        values.extend(floats);
        let ptr = self.module.target_config().pointer_type();
        let mut params = vec![ptr; 3];
        params.extend([types::I64; 6]);
        params.extend([types::F32; 2]);
        let f = self.runtime("kiln_rt_epilogue", &params, &[])?;
        self.b.ins().call(f, &values);
        Ok(())
    }

    /// `kiln_rt_copy(dst, src, bytes)` for `n` elements of the two buffers' one type.
    fn copy(&mut self, args: &[Arg]) -> Result<(), CodegenError> {
        let [Arg::Addr(dst, di), Arg::Addr(src, si), Arg::Value(n)] = args else {
            return Err(self.invalid("copy takes two buffer addresses and a count"));
        };
        let elem = self.program.buffers.get(dst.0 as usize).map(|b| b.elem);
        let Some(elem) = elem.filter(|&e| !e.is_packed() && self.program.buffers.get(src.0 as usize).map(|b| b.elem) == Some(e)) else {
            return Err(self.invalid(format!("copy between {dst:?} and {src:?}, which do not hold one whole-byte element type")));
        };
        let d = self.address(*dst, di)?;
        let s = self.address(*src, si)?;
        let n = self.typed(n, ScalarType::I64).map_err(|e| self.invalid(format!("copy count: {e}")))?;
        let bytes = self.b.ins().imul_imm_s(n, i64::from(elem.bits() / 8));
        let ptr = self.module.target_config().pointer_type();
        let f = self.runtime("kiln_rt_copy", &[ptr, ptr, types::I64], &[])?;
        self.b.ins().call(f, &[d, s, bytes]);
        Ok(())
    }

    /// `symbol(addresses…, sizes…)`: `addresses` `f32` buffer addresses, then `sizes` integers
    /// (of any integer type, extended to `i64`, as in the interpreter).
    fn sized(&mut self, name: &str, symbol: &'static str, args: &[Arg], addresses: usize, sizes: usize) -> Result<(), CodegenError> {
        if args.len() != addresses + sizes {
            return Err(self.invalid(format!("{name} takes {addresses} buffer addresses and {sizes} sizes, not {} arguments", args.len())));
        }
        let mut values = Vec::with_capacity(addresses + sizes);
        for arg in &args[..addresses] {
            let Arg::Addr(buf, index) = arg else { return Err(self.invalid(format!("{name} takes {addresses} buffer addresses first"))) };
            if self.program.buffers.get(buf.0 as usize).map(|b| b.elem) != Some(ElemType::Scalar(ScalarType::F32)) {
                return Err(self.unsupported(format!("{name} on {buf:?}, which is not an f32 buffer")));
            }
            values.push(self.address(*buf, index)?);
        }
        for arg in &args[addresses..] {
            let Arg::Value(e) = arg else { return Err(self.invalid(format!("{name} takes integer sizes after the addresses"))) };
            let (v, t) = self.expr(e)?;
            if t.is_float() || t == ScalarType::Bool {
                return Err(self.invalid(format!("{name} size of type {}", t.name())));
            }
            values.push(self.resize(v, t, types::I64));
        }
        let ptr = self.module.target_config().pointer_type();
        let mut params = vec![ptr; addresses];
        params.extend(std::iter::repeat_n(types::I64, sizes));
        let f = self.runtime(symbol, &params, &[])?;
        self.b.ins().call(f, &values);
        Ok(())
    }
}
