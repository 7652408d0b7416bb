//! Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, with
//! per-tensor, per-axis and blocked scales and zero points, into and out of the 2-, 4-, 8- and
//! 16-bit integers, the float8 formats and float4 e2m1.
//!
//! One kernel per node, a loop nest over the input; the scale and zero point of each element
//! are loaded at the index its [`Layout`] gives. With one scale for the whole tensor (and an
//! integer target), the op is an element-wise map like Add's, so a `fused_elementwise` chain
//! can hold it: QuantizeLinear → DequantizeLinear then never stores the integers. The arithmetic mirrors the ONNX reference
//! (and kiln's evaluator):
//!
//! - **DequantizeLinear**: `(x − zero_point) · scale`, computed in `f64` (exact for every
//!   integer input up to 16 bits and every scale up to `f32`) and rounded once to the output
//!   type.
//! - **QuantizeLinear**: `x / scale`, rounded to the working precision (the input's type, or
//!   `precision`); then for integer targets rounded half to even, plus the zero point,
//!   clamped to the target's range; for float8 targets converted as Cast does, with
//!   `saturate` (the zero point is zero); for float4 e2m1, plus the zero point and converted.
//!   The quotient is one `f32` division when everything is `f32`-sized (the correctly rounded
//!   `f32` quotient, as the reference's `f64` division rounded to `f32` is); otherwise it is an
//!   `f64` division rounded to the working type.
//! - **DynamicQuantizeLinear**: the reference's `f32` algorithm: `scale = (max(0, max x) −
//!   min(0, min x)) / 255` (`1 / 255` when the range is empty), `zero_point =
//!   round(clamp(−min / scale, 0, 255))`, `y = clamp(round(x / scale) + zero_point, 0, 255)`.

use kiln_tir::{DType, NodeId, Op};

use super::elementwise::{convert, map_n, round_to_odd_f32, CastOpts, Scope};
use super::{LowerError, Lowerer, Operand};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;

/// Lowers `n` if it is one of this module's ops.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::QuantizeLinear(o) => {
            let attrs = QuantAttrs { axis: o.axis, block: o.block_size, precision: o.precision, saturate: o.saturate != 0 };
            quantize(cx, n, attrs)
        }
        Op::DequantizeLinear(o) => dequantize(cx, n, o.axis, o.block_size),
        Op::DynamicQuantizeLinear(_) => dynamic_quantize(cx, n),
        _ => Ok(false),
    }
}

/// QuantizeLinear's attributes.
#[derive(Clone, Copy, Debug)]
struct QuantAttrs {
    axis: i64,
    block: i64,
    /// The ONNX type code of the working precision, or 0 for the input's type.
    precision: i64,
    saturate: bool,
}

/// Which scale (or zero point) applies to an element of the input.
#[derive(Clone, Debug, PartialEq)]
enum Layout {
    /// One for the whole tensor.
    PerTensor,
    /// One per index along the axis.
    PerAxis(usize),
    /// One per block of `block` indices along `axis`, the parameter having the input's rank
    /// and shape elsewhere (`dims`).
    Blocked { axis: usize, block: u64, dims: Vec<u64> },
}

impl Layout {
    /// The layout of a parameter of shape `param` for an input of shape `x`.
    fn of(x: &[u64], param: &[u64], axis: i64, block: i64) -> Result<Layout, String> {
        if param.is_empty() || (param == [1] && block <= 0) {
            return Ok(Layout::PerTensor);
        }
        let rank = x.len() as i64;
        let ax = if axis < 0 { axis + rank } else { axis };
        let Some(ax) = usize::try_from(ax).ok().filter(|&a| a < x.len()) else {
            return Err(format!("axis {axis} of a rank-{rank} input"));
        };
        if block <= 0 {
            return if param == [x[ax]] { Ok(Layout::PerAxis(ax)) } else { Err(format!("a scale of shape {param:?} for axis {ax} of an input of shape {x:?}")) };
        }
        let block = block as u64;
        let fits = param.len() == x.len() && x.iter().zip(param).enumerate().all(|(d, (&xd, &pd))| if d == ax { pd == xd.div_ceil(block) } else { pd == xd });
        if !fits {
            return Err(format!("blocked scale of shape {param:?} for an input of shape {x:?} with blocks of {block}"));
        }
        Ok(Layout::Blocked { axis: ax, block, dims: param.to_vec() })
    }

    /// The parameter's element index for the input element at `idx`.
    fn index(&self, idx: &[Expr]) -> Expr {
        match self {
            Layout::PerTensor => Expr::idx(0),
            Layout::PerAxis(a) => idx[*a].clone(),
            Layout::Blocked { axis, block, dims } => {
                let st = strides(dims);
                idx.iter().enumerate().fold(Expr::idx(0), |acc, (d, i)| {
                    let i = if d == *axis { i.clone() / *block as i64 } else { i.clone() };
                    acc + i * st[d]
                })
            }
        }
    }
}

/// The scale (input 1) and zero point (input 2, optional) of node `n` and their layout.
fn params(cx: &mut Lowerer<'_>, n: NodeId, x: &Operand, axis: i64, block: i64) -> Result<(Operand, Option<Operand>, Layout), LowerError> {
    let scale = cx.required(n, 1)?;
    let zero = cx.input(n, 2)?;
    let layout = Layout::of(&x.dims, &scale.dims, axis, block).map_err(|why| cx.unsupported(n, why))?;
    if let Some(z) = &zero
        && z.numel() != scale.numel()
    {
        return Err(cx.unsupported(n, format!("a zero point of shape {:?} for a scale of shape {:?}", z.dims, scale.dims)));
    }
    Ok((scale, zero, layout))
}

/// One kernel over the elements of `x`: `f` gets the element's scope, its input index
/// variables and the flat index, and returns the value stored at that index of `out`.
fn elementwise_kernel(cx: &mut Lowerer<'_>, n: NodeId, x: &Operand, out: &Operand, f: impl Fn(&mut Scope<'_>, &[Expr]) -> Result<Expr, String>) -> Result<bool, LowerError> {
    let mut k = cx.kernel(n);
    let st = x.strides();
    let mut failure = None;
    let body = k.nest(&x.dims, |k, idx| {
        let mut s = Scope { k, stmts: Vec::new() };
        match f(&mut s, idx) {
            Ok(value) => s.stmts.push(Stmt::Store { buf: out.buf, index: linear(idx, &st), value }),
            Err(why) => failure = Some(why),
        }
        s.stmts
    });
    if let Some(why) = failure {
        return Err(cx.unsupported(n, why));
    }
    k.body = body;
    cx.push(k);
    Ok(true)
}

/// Element `index` of `buf`, whose values are of type `ty`, bound to a fresh variable (so the
/// expressions built on it have known types and can be bound in turn).
fn load(s: &mut Scope<'_>, buf: BufId, ty: ScalarType, index: Expr) -> Expr {
    let v = s.k.var(ty);
    s.stmts.push(Stmt::Let(v, Expr::load(buf, index)));
    Expr::Var(v)
}

/// `e`, of type `from`, as an `f64`.
fn to_f64(e: Expr, from: ScalarType) -> Expr {
    if from == ScalarType::F64 { e } else { e.cast(ScalarType::F64) }
}

fn dequantize(cx: &mut Lowerer<'_>, n: NodeId, axis: i64, block: i64) -> Result<bool, LowerError> {
    let x = cx.required(n, 0)?;
    let (scale, zero, layout) = params(cx, n, &x, axis, block)?;
    let Some(to) = cx.output_elem(n, 0)? else {
        return Ok(true);
    };
    // `x − zero` of integers up to 16 bits is exact in f32, and the product with an f32 scale
    // then rounds once either way: f32 arithmetic gives the f64 result, in vector lanes.
    let narrow = |t: ScalarType| matches!(t, ScalarType::I8 | ScalarType::U8 | ScalarType::I16 | ScalarType::U16);
    let work = if narrow(x.ty()) && zero.as_ref().is_none_or(|z| narrow(z.ty())) && scale.ty() == ScalarType::F32 && to == ElemType::Scalar(ScalarType::F32) {
        ScalarType::F32
    } else {
        ScalarType::F64
    };
    let (xt, st, zt) = (x.ty(), scale.ty(), zero.as_ref().map(|z| z.ty()));
    let widen = move |e: Expr, from: ScalarType| if from == work { e } else { e.cast(work) };
    let element = move |s: &mut Scope<'_>, xv: Expr, sv: Expr, zv: Option<Expr>| {
        let centered = match (zv, zt) {
            (Some(z), Some(zt)) => widen(xv, xt).bin(BinOp::Sub, widen(z, zt)),
            _ => widen(xv, xt),
        };
        let y = centered.bin(BinOp::Mul, widen(sv, st));
        convert(s, y, ElemType::Scalar(work), to, CastOpts::default())
    };
    if layout == Layout::PerTensor {
        // One expression per element of x: it can also join a fused element-wise chain.
        let operands: Vec<Operand> = [Some(x), Some(scale), zero].into_iter().flatten().collect();
        return map_n(cx, n, &operands, |s, a| element(s, a[0].clone(), a[1].clone(), a.get(2).cloned()));
    }
    let out = cx.required_output(n, 0)?;
    elementwise_kernel(cx, n, &x, &out, |s, idx| {
        let p = s.bind(layout.index(idx));
        let xv = load(s, x.buf, xt, linear(idx, &x.strides()));
        let zv = zero.as_ref().map(|z| load(s, z.buf, z.ty(), p.clone()));
        let sv = load(s, scale.buf, st, p);
        element(s, xv, sv, zv)
    })
}

/// The storage type of QuantizeLinear's working precision.
fn work_type(cx: &Lowerer<'_>, n: NodeId, x: &Operand, precision: i64) -> Result<ElemType, LowerError> {
    let work = if precision == 0 {
        x.elem
    } else {
        match i32::try_from(precision).ok().and_then(DType::from_onnx) {
            Some(DType::F32) => ElemType::Scalar(ScalarType::F32),
            Some(DType::F64) => ElemType::Scalar(ScalarType::F64),
            Some(DType::F16) => ElemType::F16,
            Some(DType::BF16) => ElemType::BF16,
            _ => return Err(cx.unsupported(n, format!("precision {precision}"))),
        }
    };
    match work {
        ElemType::Scalar(ScalarType::F32 | ScalarType::F64) | ElemType::F16 | ElemType::BF16 => Ok(work),
        other => Err(cx.unsupported(n, format!("quantizing {} values", other.name()))),
    }
}

/// The range of an integer quantization target, or `None` for other types.
fn int_range(to: ElemType) -> Option<(f64, f64)> {
    let (bits, signed) = match to {
        ElemType::I4 => (4, true),
        ElemType::U4 => (4, false),
        ElemType::I2 => (2, true),
        ElemType::U2 => (2, false),
        ElemType::Scalar(t) if matches!(t, ScalarType::I8 | ScalarType::I16 | ScalarType::I32) => (8 * t.bytes(), true),
        ElemType::Scalar(t) if matches!(t, ScalarType::U8 | ScalarType::U16 | ScalarType::U32) => (8 * t.bytes(), false),
        _ => return None,
    };
    Some(if signed { (-(2f64.powi(bits as i32 - 1)), 2f64.powi(bits as i32 - 1) - 1.0) } else { (0.0, 2f64.powi(bits as i32) - 1.0) })
}

/// `v` clamped to `[lo, hi]`; NaN becomes `lo`, as in the reference evaluator. Written as
/// `lo < v ? v : lo`, then `v < hi ? v : hi`: the forms of x86-64's `maxps` and `minps`, which
/// Cranelift emits for them, and that vector code knows to be in range (`−0` may come out as
/// `+0`: every caller converts the result to an integer).
fn clamp(s: &mut Scope<'_>, v: Expr, ty: ScalarType, lo: f64, hi: f64) -> Expr {
    let v = s.bind(v);
    let (lo, hi) = (Expr::float(ty, lo), Expr::float(ty, hi));
    let above = s.bind(lo.clone().cmp(CmpOp::Lt, v.clone()).select(v, lo));
    above.clone().cmp(CmpOp::Lt, hi.clone()).select(above, hi)
}

fn quantize(cx: &mut Lowerer<'_>, n: NodeId, a: QuantAttrs) -> Result<bool, LowerError> {
    let x = cx.required(n, 0)?;
    let (scale, zero, layout) = params(cx, n, &x, a.axis, a.block)?;
    let work = work_type(cx, n, &x, a.precision)?;
    let Some(to) = cx.output_elem(n, 0)? else {
        return Ok(true);
    };
    let target = if let Some((lo, hi)) = int_range(to) {
        Target::Int { lo, hi }
    } else if to == ElemType::F4E2M1 {
        Target::Float4
    } else if to.bits() == 8 && to.value_type() == ScalarType::F32 {
        Target::Float8
    } else {
        return Err(cx.unsupported(n, format!("quantizing to {}", to.name())));
    };
    // Half-precision working types round through a one-element scratch buffer.
    let scratch = match work {
        ElemType::F16 | ElemType::BF16 => {
            let name = format!("{}_quotient", cx.node(n).name);
            Some(cx.program.add_buffer(Buffer { name, elem: work, len: 1, kind: BufferKind::Temp }))
        }
        _ => None,
    };
    let f32_sized = |t: ScalarType| t == ScalarType::F32;
    let single = work == ElemType::Scalar(ScalarType::F32) && f32_sized(x.ty()) && f32_sized(scale.ty());
    let (xt, st, zt, saturate) = (x.ty(), scale.ty(), zero.as_ref().map(|z| z.ty()), a.saturate);
    let element = move |s: &mut Scope<'_>, xv: Expr, sv: Expr, zv: Option<Expr>| {
        // The quotient in the working precision, as a value of type `qt`.
        let (q, qt) = if single {
            (xv.bin(BinOp::Div, sv), ScalarType::F32)
        } else {
            let d = to_f64(xv, xt).bin(BinOp::Div, to_f64(sv, st));
            match (work, scratch) {
                (ElemType::Scalar(ScalarType::F64), _) => (d, ScalarType::F64),
                (_, Some(buf)) => {
                    let q = round_to_odd_f32(s, d);
                    s.stmts.push(Stmt::Store { buf, index: Expr::idx(0), value: q });
                    (load(s, buf, ScalarType::F32, Expr::idx(0)), ScalarType::F32)
                }
                _ => (d.cast(ScalarType::F32), ScalarType::F32),
            }
        };
        let q = s.bind(q);
        let zp = zv.zip(zt);
        match target {
            Target::Int { lo, hi } => {
                let mut v = q.un(UnOp::Round);
                if let Some((z, zt)) = zp {
                    v = v.bin(BinOp::Add, if zt == qt { z } else { z.cast(qt) });
                }
                Ok(clamp(s, v, qt, lo, hi).cast(to.value_type()))
            }
            Target::Float8 => convert(s, q, ElemType::Scalar(qt), to, CastOpts { saturate, ..CastOpts::default() }),
            Target::Float4 => {
                let v = match zp {
                    Some((z, zt)) => to_f64(q, qt).bin(BinOp::Add, to_f64(z, zt)),
                    None => to_f64(q, qt),
                };
                convert(s, v, ElemType::Scalar(ScalarType::F64), to, CastOpts::default())
            }
        }
    };
    if layout == Layout::PerTensor && scratch.is_none() && matches!(target, Target::Int { .. }) {
        // One expression per element of x: it can also join a fused element-wise chain.
        let operands: Vec<Operand> = [Some(x), Some(scale), zero].into_iter().flatten().collect();
        return map_n(cx, n, &operands, |s, a| element(s, a[0].clone(), a[1].clone(), a.get(2).cloned()));
    }
    let out = cx.required_output(n, 0)?;
    elementwise_kernel(cx, n, &x, &out, |s, idx| {
        let p = s.bind(layout.index(idx));
        let xv = load(s, x.buf, xt, linear(idx, &x.strides()));
        let sv = load(s, scale.buf, st, p.clone());
        let zv = zero.as_ref().map(|z| load(s, z.buf, z.ty(), p));
        element(s, xv, sv, zv)
    })
}

/// What QuantizeLinear produces.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// An integer in `[lo, hi]`.
    Int { lo: f64, hi: f64 },
    /// A float8 value (zero point ignored: it is zero).
    Float8,
    /// A float4 e2m1 value.
    Float4,
}

/// Output `i` of `n`, or a scratch buffer of `elem` when the output is omitted.
fn output_or_temp(cx: &mut Lowerer<'_>, n: NodeId, i: usize, elem: ElemType) -> Result<BufId, LowerError> {
    Ok(match cx.output(n, i)? {
        Some(o) => o.buf,
        None => {
            let name = format!("{}_unused_{i}", cx.node(n).name);
            cx.program.add_buffer(Buffer { name, elem, len: 1, kind: BufferKind::Temp })
        }
    })
}

fn dynamic_quantize(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    use ScalarType::{F32, U8};
    let x = cx.required(n, 0)?;
    if x.elem != ElemType::Scalar(F32) {
        return Err(cx.unsupported(n, format!("{} input", x.elem.name())));
    }
    let y = output_or_temp(cx, n, 0, ElemType::Scalar(U8))?;
    if cx.program.buffer(y).len != x.numel() {
        return Err(cx.unsupported(n, "an omitted quantized output"));
    }
    let scale_out = output_or_temp(cx, n, 1, ElemType::Scalar(F32))?;
    let zero_out = output_or_temp(cx, n, 2, ElemType::Scalar(U8))?;
    let len = x.numel();
    let mut k = cx.kernel(n);
    let (lo, hi) = (k.var(F32), k.var(F32));
    let f = |v: f32| Expr::f32(v);
    // The range, widened to include 0.
    let range = k.nest(&[len], |k, i| {
        let mut s = Scope { k, stmts: Vec::new() };
        let v = load(&mut s, x.buf, F32, i[0].clone());
        s.stmts.extend([Stmt::Assign(lo, Expr::from(lo).min(v.clone())), Stmt::Assign(hi, Expr::from(hi).max(v))]);
        s.stmts
    });
    let scale = k.var(F32);
    let mut s = Scope { k: &mut k, stmts: Vec::new() };
    let width = Expr::from(hi).cmp(CmpOp::Eq, lo.into()).select(f(1.0), Expr::from(hi).bin(BinOp::Sub, lo.into()));
    s.stmts.push(Stmt::Let(scale, width.bin(BinOp::Div, f(255.0))));
    let initial = f(0.0).bin(BinOp::Sub, Expr::from(lo).bin(BinOp::Div, scale.into()));
    let zp = clamp(&mut s, initial, F32, 0.0, 255.0).un(UnOp::Round);
    let zero = s.k.var(F32);
    s.stmts.push(Stmt::Let(zero, zp));
    let mut body = vec![Stmt::Local(lo, f(0.0)), Stmt::Local(hi, f(0.0))];
    body.extend(range);
    body.append(&mut s.stmts);
    body.push(Stmt::Store { buf: scale_out, index: Expr::idx(0), value: scale.into() });
    body.push(Stmt::Store { buf: zero_out, index: Expr::idx(0), value: Expr::from(zero).cast(U8) });
    let quantized = k.nest(&[len], |k, i| {
        let mut s = Scope { k, stmts: Vec::new() };
        let xv = load(&mut s, x.buf, F32, i[0].clone());
        let q = xv.bin(BinOp::Div, scale.into()).un(UnOp::Round).bin(BinOp::Add, zero.into());
        let v = clamp(&mut s, q, F32, 0.0, 255.0).cast(U8);
        s.stmts.push(Stmt::Store { buf: y, index: i[0].clone(), value: v });
        s.stmts
    });
    body.extend(quantized);
    k.body = body;
    cx.push(k);
    Ok(true)
}
