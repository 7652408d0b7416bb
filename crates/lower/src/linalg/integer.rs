//! Quantized products: MatMulInteger (`i8`/`u8` with zero points → `i32`) and QLinearMatMul
//! (zero points and scales on both operands and the result).

use kiln_tir::{DType, NodeId, Tensor, TensorData};

use super::matmul::{MatShape, matmul_nest, plain};
use kiln_loops::builder::broadcast_index;
use kiln_loops::call;
use kiln_loops::ir::*;
use crate::elementwise::Scope;
use crate::{LowerError, Lowerer, Operand};

/// Which operand a quantization parameter belongs to: `A`'s vary per row, `B`'s (and the
/// result's) per column.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Rows,
    Cols,
}

/// A quantization parameter as an expression of the result index `(batch..., i, j)`.
type Param = Box<dyn Fn(&[Expr]) -> Expr>;

/// The loader of parameter `p` (a zero point or scale): absent gives `default`; a scalar is
/// per tensor; a vector of `M` (rows) or `N` (columns) is per row or column; a full-rank
/// tensor shaped `[..., M, 1]` or `[..., 1, N]` broadcasts over the result's batch dims.
fn param(p: Option<Operand>, side: Side, s: &MatShape, default: Expr) -> Result<Param, String> {
    let Some(p) = p else {
        return Ok(Box::new(move |_| default.clone()));
    };
    let buf = p.buf;
    if p.numel() == 1 {
        return Ok(Box::new(move |_| Expr::load(buf, Expr::idx(0))));
    }
    let along = if side == Side::Rows { s.m } else { s.n };
    match p.dims[..] {
        [d] if d == along => Ok(Box::new(move |idx| {
            Expr::load(
                buf,
                idx[idx.len() - if side == Side::Rows { 2 } else { 1 }].clone(),
            )
        })),
        [.., r, c]
            if (side == Side::Rows && c == 1 && (r == 1 || r == s.m))
                || (side == Side::Cols && r == 1 && (c == 1 || c == s.n)) =>
        {
            if p.rank() > s.batch.len() + 2 {
                return Err(format!(
                    "quantization parameter of shape {:?} has too many dims",
                    p.dims
                ));
            }
            let dims = p.dims.clone();
            Ok(Box::new(move |idx| {
                Expr::load(buf, broadcast_index(idx, &dims))
            }))
        }
        _ => Err(format!(
            "quantization parameter of shape {:?} is neither per tensor nor per {}",
            p.dims,
            if side == Side::Rows { "row" } else { "column" }
        )),
    }
}

/// True for the 8-bit integer element types.
fn is_8bit(op: &Operand) -> bool {
    matches!(op.elem, ElemType::Scalar(ScalarType::I8 | ScalarType::U8))
}

/// The runtime's integer product `qgemm` for `C = (A − za)·(B − zb)` into `i32` buffer `c`
/// (laid out as the product's result), when the zero points take one of its forms: absent, one
/// per tensor, one per row of `A` (`[M]` or `[M, 1]`) or one per column of `B` (`[N]` or
/// `[1, N]`), each of its operand's type. `None` otherwise: the caller keeps the loop nest.
/// A single constant `B` (`b_const`, its tensor) is packed here, once, as the runtime reads it.
#[allow(clippy::too_many_arguments)]
fn qgemm_calls(
    cx: &mut Lowerer<'_>,
    k: &mut Kernel,
    s: &MatShape,
    a: &Operand,
    b: &Operand,
    (az, bz): (Option<&Operand>, Option<&Operand>),
    b_const: Option<&Tensor>,
    c: &mut dyn FnMut(&mut Lowerer<'_>) -> BufId,
) -> Option<Vec<Stmt>> {
    let signed = |o: &Operand| match o.elem {
        ElemType::Scalar(ScalarType::I8) => Some(1),
        ElemType::Scalar(ScalarType::U8) => Some(0),
        _ => None,
    };
    let (a_signed, b_signed) = (signed(a)?, signed(b)?);
    // A zero point's count (0, 1, or `along` when it lies along the last axis but one for
    // `A`, the last for `B`) and address.
    let zeros = |z: Option<&Operand>, of: &Operand, along: u64, rows: bool| -> Option<(u64, call::Addr)> {
        let Some(z) = z else { return Some((0, call::Addr::at(of.buf, 0))) };
        if z.elem != of.elem {
            return None;
        }
        let count = match z.dims[..] {
            _ if z.numel() == 1 => 1,
            [d] if d == along => along,
            [r, 1] if rows && r == along => along,
            [1, d] if !rows && d == along => along,
            _ => return None,
        };
        Some((count, call::Addr::at(z.buf, 0)))
    };
    let (a_zeros, za) = zeros(az, a, s.m, true)?;
    let (b_zeros, zb) = zeros(bz, b, s.n, false)?;
    let (a_batches, b_batches, batches) = (s.a_batch.iter().product::<u64>(), s.b_batch.iter().product::<u64>(), s.batch.iter().product::<u64>());
    if s.trans_b {
        return None;
    }
    let c = c(cx);
    // The packed copy of a constant B shared by every row of A.
    let packed = b_const.filter(|_| b_batches == 1).and_then(|t| {
        let (kk, nn) = (usize::try_from(s.k).ok()?, usize::try_from(s.n).ok()?);
        let raw = t.raw()?;
        let len = kiln_runtime::qgemm::packed_b_len(kk, nn)?;
        (raw.len() >= kk * nn && kk > 0 && nn > 0).then_some(())?;
        let mut bytes = vec![0u8; len];
        kiln_runtime::qgemm::pack_b(raw, kk, nn, nn, b_signed != 0, &mut bytes);
        let tensor = Tensor { dtype: DType::I8, shape: vec![len as u64], data: TensorData::Raw(bytes.into()) };
        let name = format!("{}.packed", cx.program.buffers[b.buf.0 as usize].name);
        Some(cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(ScalarType::I8), len: len as u64, kind: BufferKind::Const(tensor) }))
    });
    let int = |v: u64| Expr::idx(v as i64);
    let product = |rows: u64, ao: Expr, bo: Expr, co: Expr| -> Stmt {
        let q = call::Qgemm {
            a: call::Addr { buf: a.buf, index: ao },
            b: call::Addr { buf: packed.unwrap_or(b.buf), index: if packed.is_some() { Expr::idx(0) } else { bo } },
            c: call::Addr { buf: c, index: co },
            za: za.clone(),
            // An unused zero point names the packed copy, so the original B has no reader left.
            zb: if b_zeros == 0 { call::Addr::at(packed.unwrap_or(b.buf), 0) } else { zb.clone() },
            bias: call::Addr { buf: c, index: Expr::idx(0) },
            m: int(rows),
            n: int(s.n),
            k: int(s.k),
            lda: int(s.k),
            ldb: int(s.n),
            ldc: int(s.n),
            a_signed: Expr::idx(a_signed),
            b_signed: Expr::idx(b_signed),
            a_zeros: int(if a_zeros > 1 { rows } else { a_zeros }),
            b_zeros: int(b_zeros),
            bias_mode: Expr::idx(0),
            b_packed: Expr::idx(i64::from(packed.is_some())),
        };
        Stmt::Call(q.into())
    };
    if b_batches == 1 && a_batches == batches && a_zeros <= 1 {
        // One shared right-hand matrix: the batches of A stack into one tall product.
        return Some(vec![product(batches * s.m, Expr::idx(0), Expr::idx(0), Expr::idx(0))]);
    }
    Some(k.nest(&s.batch, |_, bi| vec![product(s.m, s.a_offset(bi), s.b_offset(bi), s.y_offset(bi))]))
}

/// MatMulInteger: `Y = (A - a_zero_point) · (B - b_zero_point)` in `i32`.
pub(super) fn matmul_integer(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let (a, b, y) = (
        cx.required(n, 0)?,
        cx.required(n, 1)?,
        cx.required_output(n, 0)?,
    );
    let (az, bz) = (cx.input(n, 2)?, cx.input(n, 3)?);
    let s = MatShape::new(&a.dims, &b.dims).map_err(|e| cx.unsupported(n, e))?;
    if !is_8bit(&a)
        || !is_8bit(&b)
        || y.elem != ElemType::Scalar(ScalarType::I32)
        || s.numel() != y.numel()
    {
        return Err(cx.unsupported(n, "operands must be 8-bit integers and the result i32"));
    }
    let mut k = cx.kernel(n);
    let b_const = cx.const_input(n, 1);
    if let Some(calls) = qgemm_calls(cx, &mut k, &s, &a, &b, (az.as_ref(), bz.as_ref()), b_const, &mut |_| y.buf) {
        k.body = calls;
        cx.push(k);
        return Ok(());
    }
    let i32z = Expr::int(ScalarType::I32, 0);
    let azp = param(az, Side::Rows, &s, i32z.clone()).map_err(|e| cx.unsupported(n, e))?;
    let bzp = param(bz, Side::Cols, &s, i32z).map_err(|e| cx.unsupported(n, e))?;
    let (ab, bb) = (a.buf, b.buf);
    let load_a = move |i: Expr, idx: &[Expr]| {
        Expr::load(ab, i).cast(ScalarType::I32) - azp(idx).cast(ScalarType::I32)
    };
    let load_b = move |i: Expr, idx: &[Expr]| {
        Expr::load(bb, i).cast(ScalarType::I32) - bzp(idx).cast(ScalarType::I32)
    };
    k.body = matmul_nest(&mut k, &s, ScalarType::I32, &load_a, &load_b, y.buf, &plain)
        .map_err(|e| cx.unsupported(n, e))?;
    cx.push(k);
    Ok(())
}

/// QLinearMatMul: the integer product of the zero-point-shifted operands, rescaled by
/// `a_scale·b_scale / y_scale`, shifted by `y_zero_point`, rounded half to even and saturated
/// (in `f64`, as ONNX's reference computes it).
pub(super) fn qlinear_matmul(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let (a, a_scale, a_zp) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.input(n, 2)?);
    let (b, b_scale, b_zp) = (cx.required(n, 3)?, cx.required(n, 4)?, cx.input(n, 5)?);
    let (y_scale, y_zp) = (cx.required(n, 6)?, cx.input(n, 7)?);
    let bias = cx.input(n, 8)?;
    let y = cx.required_output(n, 0)?;
    let s = MatShape::new(&a.dims, &b.dims).map_err(|e| cx.unsupported(n, e))?;
    if !is_8bit(&a) || !is_8bit(&b) || !is_8bit(&y) || s.numel() != y.numel() {
        return Err(cx.unsupported(n, "operands and result must be 8-bit integers"));
    }
    if bias.as_ref().is_some_and(|b| b.dims != [s.n] || b.elem != ElemType::Scalar(ScalarType::I32)) {
        return Err(cx.unsupported(n, "the bias must be an i32 vector over B's columns"));
    }
    if [&a_scale, &b_scale, &y_scale]
        .iter()
        .any(|sc| !sc.ty().is_float())
    {
        return Err(cx.unsupported(n, "scales must be floats"));
    }
    let mut k = cx.kernel(n);
    let b_const = cx.const_input(n, 3);
    // Constant scales and output zero point: the product with the output stage fused, straight
    // into Y.
    if let Some(stage) = qgemm_stage(cx, n, &s, &y, bias.as_ref().map(|b| b.buf))
        && let Some(calls) = qgemm_calls(cx, &mut k, &s, &a, &b, (a_zp.as_ref(), b_zp.as_ref()), b_const, &mut |_| y.buf)
    {
        k.body = requantized(calls, &stage);
        cx.push(k);
        return Ok(());
    }
    let name = format!("{}_acc", cx.node(n).name);
    let mut acc = None;
    let calls = qgemm_calls(cx, &mut k, &s, &a, &b, (a_zp.as_ref(), b_zp.as_ref()), b_const, &mut |cx| {
        let buf = Buffer { name: name.clone(), elem: ElemType::Scalar(ScalarType::I32), len: s.numel(), kind: BufferKind::Temp };
        *acc.insert(cx.program.add_buffer(buf))
    });
    let bad = |e: String| cx.unsupported(n, e);
    let i32z = Expr::int(ScalarType::I32, 0);
    let azp = param(a_zp, Side::Rows, &s, i32z.clone()).map_err(bad)?;
    let bzp = param(b_zp, Side::Cols, &s, i32z.clone()).map_err(bad)?;
    let yzp = param(y_zp, Side::Cols, &s, i32z).map_err(bad)?;
    let sa = param(Some(a_scale), Side::Rows, &s, Expr::f32(1.0)).map_err(bad)?;
    let sb = param(Some(b_scale), Side::Cols, &s, Expr::f32(1.0)).map_err(bad)?;
    let sy = param(Some(y_scale), Side::Cols, &s, Expr::f32(1.0)).map_err(bad)?;
    let (ab, bb, yty) = (a.buf, b.buf, y.ty());
    let bias_buf = bias.as_ref().map(|b| b.buf);
    let load_a = move |i: Expr, idx: &[Expr]| {
        Expr::load(ab, i).cast(ScalarType::I32) - azp(idx).cast(ScalarType::I32)
    };
    let load_b = move |i: Expr, idx: &[Expr]| {
        Expr::load(bb, i).cast(ScalarType::I32) - bzp(idx).cast(ScalarType::I32)
    };
    let finish = move |_: &mut Scope<'_>, acc: Expr, idx: &[Expr], _: &Expr| {
        let f64_of = |e: Expr| e.cast(ScalarType::F64);
        // The bias joins the `i32` accumulator, wrapping as the routine's does.
        let acc = match (bias_buf, idx.last()) {
            (Some(bb), Some(col)) => acc.bin(BinOp::Add, Expr::load(bb, col.clone())),
            _ => acc,
        };
        let scale = f64_of(sa(idx) * sb(idx) / sy(idx));
        let d = f64_of(acc) * scale + f64_of(yzp(idx));
        Ok(d.math(MathFn::Rint).cast(yty))
    };
    if let (Some(calls), Some(acc)) = (calls, acc) {
        // The product by the runtime, then the requantization element by element.
        k.body = calls;
        let mut dims = s.batch.clone();
        dims.extend([s.m, s.n]);
        let nb = s.batch.len();
        let mut result = Ok(());
        let stores = k.nest(&dims, |k, idx| {
            let at = s.y_offset(&idx[..nb]) + idx[nb].clone() * s.n as i64 + idx[nb + 1].clone();
            let mut sc = Scope { k, stmts: Vec::new() };
            match finish(&mut sc, Expr::load(acc, at.clone()), idx, &at) {
                Ok(value) => sc.stmts.push(Stmt::Store { buf: y.buf, index: at, value }),
                Err(e) => result = Err(e),
            }
            sc.stmts
        });
        result.map_err(|e| cx.unsupported(n, e))?;
        k.body.extend(stores);
    } else {
        k.body = matmul_nest(&mut k, &s, ScalarType::I32, &load_a, &load_b, y.buf, &finish).map_err(|e| cx.unsupported(n, e))?;
    }
    cx.push(k);
    Ok(())
}

/// QLinearMatMul's output stage as `qgemm_requantize` takes it.
struct Stage {
    /// `a_scale · b_scale / y_scale` in `f32`, one or one per column.
    scales: BufId,
    scale_mode: i64,
    zero: i64,
    signed: i64,
    /// The `i32` bias per column (kiln's ninth input), else a buffer for the bias operand the
    /// routine does not read.
    bias: BufId,
    bias_mode: i64,
}

/// A QLinear op's output stage from its constant inputs 1, 4, 6 and 7 (the two operands'
/// scales, Y's scale and zero point, as QLinearConv and QLinearMatMul both number them): the
/// scales `s1 · s4 / s6` in `f32`, as the element loop computes them (one, or one per element
/// of input 4), Y's zero point (0 when absent) and 1 for an `i8` Y, 0 for `u8`. `None` when a
/// parameter is not constant, input 1's or 6's scale or the zero point is not a scalar, or Y
/// is not 8-bit.
pub(crate) struct OutputStage {
    pub scales: Vec<f32>,
    pub zero: i64,
    pub signed: i64,
}

pub(crate) fn output_stage(cx: &Lowerer<'_>, n: NodeId, y: &Operand) -> Option<OutputStage> {
    let f32s = |i: usize| -> Option<Vec<f32>> {
        let t = cx.const_input(n, i)?;
        (t.dtype == DType::F32).then(|| t.raw().map(|r| r.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()))?
    };
    let (s1, s4, s6) = (f32s(1)?, f32s(4)?, f32s(6)?);
    let ([s1], [s6]) = (s1.as_slice(), s6.as_slice()) else { return None };
    let scales = s4.iter().map(|s| s1 * s / s6).collect();
    let zero = match cx.node(n).inputs.get(7).copied().flatten() {
        None => 0,
        Some(_) => match cx.const_input(n, 7)?.to_i64s()?.as_slice() {
            [z] => *z,
            _ => return None,
        },
    };
    let signed = match y.elem {
        ElemType::Scalar(ScalarType::I8) => 1,
        ElemType::Scalar(ScalarType::U8) => 0,
        _ => return None,
    };
    Some(OutputStage { scales, zero, signed })
}

/// A new constant buffer `name` holding `values`.
pub(crate) fn f32_constant(cx: &mut Lowerer<'_>, name: String, values: &[f32]) -> BufId {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = Tensor { dtype: DType::F32, shape: vec![values.len() as u64], data: TensorData::Raw(bytes.into()) };
    cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(ScalarType::F32), len: values.len() as u64, kind: BufferKind::Const(t) })
}

/// A new constant buffer `name` of `len` `i32` zeros: the bias operand of an integer routine
/// without a bias (which does not read it) or with a zero one.
pub(crate) fn i32_zeros(cx: &mut Lowerer<'_>, name: String, len: u64) -> BufId {
    let t = Tensor { dtype: DType::I32, shape: vec![len], data: TensorData::Raw(vec![0u8; 4 * len as usize].into()) };
    cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(ScalarType::I32), len, kind: BufferKind::Const(t) })
}

/// QLinearMatMul's output stage as `qgemm_requantize` takes it: A's scale per tensor, B's per
/// tensor or per column.
fn qgemm_stage(cx: &mut Lowerer<'_>, n: NodeId, s: &MatShape, y: &Operand, bias: Option<BufId>) -> Option<Stage> {
    let OutputStage { scales, zero, signed } = output_stage(cx, n, y)?;
    let scale_mode = match scales.len() {
        1 => 0,
        l if l as u64 == s.n && s.n > 1 => 2,
        _ => return None,
    };
    let name = cx.node(n).name.clone();
    let scales = f32_constant(cx, format!("{name}_requantize_scales"), &scales);
    let (bias, bias_mode) = match bias {
        // Per column: `QBias::PerColumn`.
        Some(b) => (b, 2),
        None => (i32_zeros(cx, format!("{name}_no_bias"), 1), 0),
    };
    Some(Stage { scales, scale_mode, zero, signed, bias, bias_mode })
}

/// `stmts` with each `qgemm` call given the output stage (its result's address now Y's).
fn requantized(stmts: Vec<Stmt>, stage: &Stage) -> Vec<Stmt> {
    stmts
        .into_iter()
        .map(|st| match st {
            Stmt::For { var, extent, body } => Stmt::For { var, extent, body: requantized(body, stage) },
            Stmt::Call(kiln_loops::Call::Qgemm(q)) => {
                let q = call::Qgemm { bias: call::Addr::at(stage.bias, 0), bias_mode: Expr::idx(stage.bias_mode), ..*q };
                let y = q.c.clone();
                Stmt::Call(q.requantized(y, call::Addr::at(stage.scales, 0), Expr::idx(stage.scale_mode), Expr::idx(stage.zero), Expr::idx(stage.signed)).into())
            }
            other => other,
        })
        .collect()
}
