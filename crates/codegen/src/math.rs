//! Calls into the runtime library: math functions, float remainder, micro-kernels (sgemm,
//! fused and depthwise convolution, max pooling, softmax, layer normalization), im2col, the fused ops' epilogue and
//! copies. Each callee is an imported symbol (`Linkage::Import`) named as `kiln_runtime`
//! exports it.

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
            // The integer arguments may have any integer type (extended to `i64`), as in the
            // interpreter.
            RuntimeFn::Sgemm => self.scalars("sgemm", "kiln_rt_sgemm", args, 3, 8, 2),
            RuntimeFn::SgemmPacked => self.scalars("sgemm_packed", "kiln_rt_sgemm_packed", args, 3, 8, 2),
            RuntimeFn::SgemmFused => self.scalars("sgemm_fused", "kiln_rt_sgemm_fused", args, 5, 14, 4),
            RuntimeFn::DwConv2d => self.scalars("dwconv2d", "kiln_rt_dwconv2d", args, 3, 15, 0),
            RuntimeFn::Conv2d => self.scalars("conv2d", "kiln_rt_conv2d", args, 5, 19, 2),
            RuntimeFn::Conv2dPacked => self.scalars("conv2d_packed", "kiln_rt_conv2d_packed", args, 5, 20, 2),
            RuntimeFn::Epilogue => self.scalars("epilogue", "kiln_rt_epilogue", args, 3, 6, 2),
            RuntimeFn::Im2col => self.scalars("im2col", "kiln_rt_im2col", args, 2, 13, 0),
            RuntimeFn::MaxPool2d => self.scalars("maxpool2d", "kiln_rt_maxpool2d", args, 2, 13, 0),
            RuntimeFn::Softmax => self.scalars("softmax", "kiln_rt_softmax", args, 1, 2, 0),
            RuntimeFn::LayerNorm => self.scalars("layernorm", "kiln_rt_layernorm", args, 4, 4, 1),
            RuntimeFn::Copy => self.copy(args),
            RuntimeFn::Conv2dNchwc => self.scalars("conv2d_nchwc", "kiln_rt_conv2d_nchwc", args, 5, 21, 2),
            RuntimeFn::MaxPool2dNchwc => self.scalars("maxpool2d_nchwc", "kiln_rt_maxpool2d_nchwc", args, 2, 13, 0),
            RuntimeFn::ToNchwc => self.scalars("to_nchwc", "kiln_rt_to_nchwc", args, 2, 3, 0),
            RuntimeFn::FromNchwc => self.scalars("from_nchwc", "kiln_rt_from_nchwc", args, 2, 3, 0),
        }
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

    /// `symbol(addresses…, integers…, floats…)`: `addresses` `f32` buffer addresses, then
    /// `ints` integers (of any integer type, extended to `i64`, as in the interpreter) and
    /// `floats` `f32` values, told apart by type.
    fn scalars(&mut self, name: &str, symbol: &'static str, args: &[Arg], addresses: usize, ints: usize, floats: usize) -> Result<(), CodegenError> {
        if args.len() != addresses + ints + floats {
            return Err(self.invalid(format!("{name} takes {addresses} buffer addresses, {ints} integers and {floats} f32 values, not {} arguments", args.len())));
        }
        let mut values = Vec::with_capacity(args.len());
        for arg in &args[..addresses] {
            let Arg::Addr(buf, index) = arg else { return Err(self.invalid(format!("{name} takes {addresses} buffer addresses first"))) };
            if self.program.buffers.get(buf.0 as usize).map(|b| b.elem) != Some(ElemType::Scalar(ScalarType::F32)) {
                return Err(self.unsupported(format!("{name} on {buf:?}, which is not an f32 buffer")));
            }
            values.push(self.address(*buf, index)?);
        }
        let (mut int_values, mut float_values) = (Vec::new(), Vec::new());
        for arg in &args[addresses..] {
            let Arg::Value(e) = arg else { return Err(self.invalid(format!("{name} takes scalars after the addresses"))) };
            let (v, t) = self.expr(e)?;
            match t {
                ScalarType::F32 if floats > 0 => float_values.push(v),
                t if t.is_float() || t == ScalarType::Bool => return Err(self.invalid(format!("{name} argument of type {}", t.name()))),
                t => int_values.push(self.resize(v, t, types::I64)),
            }
        }
        if int_values.len() != ints || float_values.len() != floats {
            return Err(self.invalid(format!("{name} takes {ints} integers and {floats} f32 values after the addresses")));
        }
        values.extend(int_values);
        values.extend(float_values);
        let ptr = self.module.target_config().pointer_type();
        let mut params = vec![ptr; addresses];
        params.extend(std::iter::repeat_n(types::I64, ints));
        params.extend(std::iter::repeat_n(types::F32, floats));
        let f = self.runtime(symbol, &params, &[])?;
        self.b.ins().call(f, &values);
        Ok(())
    }
}
