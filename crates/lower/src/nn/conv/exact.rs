//! ConvInteger's and QLinearConv's integer accumulator computed by the `f32` products, when
//! that is exact.
//!
//! The zero-point-shifted operands `x − x_zero` and `w − w_zero` are integers, and so is every
//! partial sum of their products. When `Σ_k |w[m, k] − w_zero[m]| · max|x − x_zero| + |B[m]|`
//! is below 2^24 for every output channel `m`, each partial sum, in any order the products take
//! and with or without fused multiply-adds, is an integer `f32` holds exactly: the `f32`
//! accumulator is the `i32` one. The bound is checked on the constant weights and bias at
//! lowering time; quantized models' weights (per-channel `int8`, most of them far from ±127)
//! meet it for the convolutions of mobile and residual networks. Where it fails, or the weights
//! or zero points are not constants, the caller keeps the direct integer loop nest.
//!
//! The shifted weights become an `f32` constant; the input is shifted into an `f32` scratch
//! tensor by one element-wise loop; a depthwise 2-D convolution is the runtime's `conv2d`, any
//! other an im2col and `sgemm` per image and group (never `conv2d`, whose blocked form may take
//! Winograd's transform, which is not exact); the bias is added by the runtime's `epilogue`.

use bytes::Bytes;
use kiln_tir::{DType, NodeId, Tensor, TensorData};

use super::{ConvShape, conv2d, im2col_sgemm};
use kiln_loops::call;
use kiln_loops::ir::*;
use crate::elementwise::{ElemResult, Scope};
use crate::linalg::{BiasIndex, Epilogue, OutputStage, f32_constant, i32_zeros, output_stage};
use crate::{Lowerer, Operand};

/// Integers of magnitude below this are exact in `f32`.
const EXACT: i64 = 1 << 24;

/// The input indices of one integer convolution's constants: `x`'s zero point, `w`, its zero
/// point, and the `i32` bias (QLinearConv's).
pub(in crate::nn) struct Inputs {
    pub x_zero: Option<usize>,
    pub w: usize,
    pub w_zero: Option<usize>,
    pub bias: Option<usize>,
}

/// Node `n`'s constant weights minus their zero points, as `f32` (`[M, Cg·taps]`), with X's
/// zero point and the constant bias (empty when there is none), when every channel's
/// `Σ |w − w_zero| · max |x − x_zero| + |B|` is below 2^24; `None` otherwise or when a
/// parameter is not constant.
struct Shifted {
    w: Vec<f32>,
    x_zero: i64,
    bias: Vec<i64>,
}

fn shifted(cx: &Lowerer<'_>, n: NodeId, s: &ConvShape, x: &Operand, inputs: &Inputs) -> Option<Shifted> {
    // An input's constant integers; none for an input left out.
    let ints = |i: Option<usize>| -> Option<Vec<i64>> {
        match i {
            Some(i) if cx.node(n).inputs.get(i).copied().flatten().is_some() => cx.const_input(n, i)?.to_i64s(),
            _ => Some(Vec::new()),
        }
    };
    let w = cx.const_input(n, inputs.w)?.to_i64s()?;
    let (w_zero, x_zero, bias) = (ints(inputs.w_zero)?, ints(inputs.x_zero)?, ints(inputs.bias)?);
    let m_count = usize::try_from(s.m).ok()?;
    let per_out = w.len().checked_div(m_count)?;
    if per_out == 0 || w.len() != per_out * m_count || x_zero.len() > 1 {
        return None;
    }
    let w_zero_of = |m: usize| match w_zero.len() {
        0 => Some(0),
        1 => Some(w_zero[0]),
        l if l == m_count => Some(w_zero[m]),
        _ => None,
    };
    if !(bias.is_empty() || bias.len() == m_count) {
        return None;
    }
    let xz = x_zero.first().copied().unwrap_or(0);
    let (lo, hi) = match x.elem {
        ElemType::Scalar(ScalarType::U8) => (0, 255),
        ElemType::Scalar(ScalarType::I8) => (-128, 127),
        _ => return None,
    };
    let x_max = (lo - xz).abs().max((hi - xz).abs());
    let mut shifted = Vec::with_capacity(w.len());
    for (m, row) in w.chunks_exact(per_out).enumerate() {
        let wz = w_zero_of(m)?;
        let sum: i64 = row.iter().map(|&v| (v - wz).abs()).sum();
        if sum.checked_mul(x_max)?.checked_add(bias.get(m).map_or(0, |b| b.abs()))? >= EXACT {
            return None;
        }
        shifted.extend(row.iter().map(|&v| (v - wz) as f32));
    }
    Some(Shifted { w: shifted, x_zero: xz, bias })
}

/// The statements computing the accumulator `Σ (x − x_zero)(w − w_zero) + B` of node `n` as
/// integer-valued `f32` into a new scratch tensor `[N, M, out...]`, and that tensor; `None`
/// when exactness is not assured (see the module comment).
pub(in crate::nn) fn accumulate(
    cx: &mut Lowerer<'_>,
    k: &mut Kernel,
    n: NodeId,
    s: &ConvShape,
    x: &Operand,
    inputs: &Inputs,
) -> Option<(Vec<Stmt>, Operand)> {
    let Shifted { w: shifted, x_zero: xz, bias } = shifted(cx, n, s, x, inputs)?;
    let w = &shifted;
    let name = &cx.node(n).name;
    let f32s = |values: &[f32], dims: &[u64]| Tensor {
        dtype: DType::F32,
        shape: dims.to_vec(),
        data: TensorData::Raw(Bytes::from(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())),
    };
    let w_dims = [s.m, s.cg * s.win.taps()];
    let buffer = |name: String, len: u64, kind: BufferKind| Buffer { name, elem: ElemType::Scalar(ScalarType::F32), len, kind };
    let w_buf = buffer(format!("{name}_w_shifted"), w.len() as u64, BufferKind::Const(f32s(&shifted, &w_dims)));
    let b_buf = (!bias.is_empty()).then(|| {
        let b: Vec<f32> = bias.iter().map(|&v| v as f32).collect();
        buffer(format!("{name}_bias_f32"), s.m, BufferKind::Const(f32s(&b, &[s.m])))
    });
    let x_buf = buffer(format!("{name}_x_shifted"), x.numel(), BufferKind::Temp);
    let acc_len = s.batch * s.m * s.win.out_plane();
    let acc_buf = buffer(format!("{name}_acc"), acc_len, BufferKind::Temp);
    let f32t = ElemType::Scalar(ScalarType::F32);
    let operand = |buf: BufId, dims: Vec<u64>| Operand { buf, dims, elem: f32t };
    let wf = operand(cx.program.add_buffer(w_buf), vec![s.m, s.cg * s.win.taps()]);
    let bf = b_buf.map(|b| operand(cx.program.add_buffer(b), vec![s.m]));
    let xf = operand(cx.program.add_buffer(x_buf), x.dims.clone());
    let acc = operand(cx.program.add_buffer(acc_buf), vec![s.batch, s.m, s.win.out_plane()]);

    let mut body = k.nest(&[x.numel()], |_, i| {
        let v = Expr::load(x.buf, i[0].clone()).cast(ScalarType::F32) - Expr::f32(xz as f32);
        vec![Stmt::Store { buf: xf.buf, index: i[0].clone(), value: v }]
    });
    if s.cg == 1 && s.mg == 1 && s.win.rank() == 2 {
        body.push(conv2d(s, &xf, &wf, bf.as_ref(), &Epilogue::NONE, &acc));
    } else {
        body.extend(im2col_sgemm(cx, k, s, &xf, &wf, &acc));
        let bias = bf.map(|b| (b.buf, BiasIndex::PerRow { period: s.m }));
        body.extend(Epilogue::NONE.call(&acc, bias, s.batch * s.m, s.win.out_plane()));
    }
    Some((body, acc))
}

/// The loop storing `y[n, m, p] = f(acc[n, m, p], c)` over the output (the accumulator an
/// integer-valued `f32`, exact in `f64` and `i32` alike), where `c` is
/// `channel(m)` computed once per output channel (a requantization scale) into a variable of
/// type `channel_ty`.
pub(in crate::nn) fn finish(
    k: &mut Kernel,
    s: &ConvShape,
    acc: &Operand,
    y: &Operand,
    channel: (&dyn Fn(&Expr) -> Expr, ScalarType),
    f: &dyn Fn(&mut Scope<'_>, Expr, Expr) -> ElemResult,
) -> Result<Vec<Stmt>, String> {
    let p = s.win.out_plane();
    let mut result = Ok(());
    let stmts = k.nest(&[s.batch, s.m], |k, i| {
        let c = k.var(channel.1);
        let mut body = vec![Stmt::Let(c, (channel.0)(&i[1]))];
        let row = (i[0].clone() * s.m as i64 + i[1].clone()) * p as i64;
        body.extend(k.nest(&[p], |k, j| {
            let at = row.clone() + j[0].clone();
            let mut sc = Scope { k, stmts: Vec::new() };
            let v = Expr::load(acc.buf, at.clone());
            match f(&mut sc, v, Expr::Var(c)) {
                Ok(value) => sc.stmts.push(Stmt::Store { buf: y.buf, index: at, value }),
                Err(e) => result = Err(e),
            }
            sc.stmts
        }));
        body
    });
    result.map(|()| stmts)
}

/// QLinearConv's output stage, when the scales (inputs 1, 4 and 6: X's, W's per tensor or
/// channel, Y's) are `f32` constants and Y's zero point (input 7) a constant or absent: the
/// per-channel scale `x_scale · w_scale[m] / y_scale` computed in `f32` as the loop would
/// compute it, in a constant buffer.
pub(in crate::nn) struct Stage {
    scales: BufId,
    zero: i64,
    /// 1 for an `i8` output, 0 for `u8`.
    signed: i64,
}

/// Node `n`'s output stage into `y`; `None` when a parameter is not constant or has another form.
pub(in crate::nn) fn stage(cx: &mut Lowerer<'_>, n: NodeId, s: &ConvShape, y: &Operand) -> Option<Stage> {
    let OutputStage { scales, zero, signed } = output_stage(cx, n, y)?;
    let m = usize::try_from(s.m).ok()?;
    let scales = match scales.len() {
        1 => vec![scales[0]; m],
        l if l == m => scales,
        _ => return None,
    };
    let scales = f32_constant(cx, format!("{}_requantize_scales", cx.node(n).name), &scales);
    Some(Stage { scales, zero, signed })
}

/// The output stage as one runtime `requantize` call over the accumulator `acc`.
pub(in crate::nn) fn requantize(stage: &Stage, s: &ConvShape, acc: &Operand, y: &Operand) -> Stmt {
    let int = |v: u64| Expr::idx(v as i64);
    let call = call::Requantize {
        x: call::Addr::at(acc.buf, 0),
        s: call::Addr::at(stage.scales, 0),
        y: call::Addr::at(y.buf, 0),
        rows: int(s.batch * s.m),
        cols: int(s.win.out_plane()),
        period: int(s.m),
        zero: Expr::idx(stage.zero),
        signed: Expr::idx(stage.signed),
        int_x: Expr::idx(i64::from(acc.elem == ElemType::Scalar(ScalarType::I32))),
    };
    Stmt::Call(call.into())
}

/// Where a pointwise product's results go.
pub(in crate::nn) enum Results<'a> {
    /// `i32` accumulators, into the buffer the closure makes.
    Acc(&'a mut dyn FnMut(&mut Lowerer<'_>) -> BufId),
    /// Requantized by the output stage into `y`; `zero_bias` makes an `i32` buffer of the
    /// output channels' zeros, for a convolution without a bias.
    Requantized { y: BufId, stage: &'a Stage, zero_bias: &'a mut dyn FnMut(&mut Lowerer<'_>) -> BufId },
}

/// Whether the convolution is pointwise: a 1×1 window with unit strides, no padding and one
/// group.
pub(in crate::nn) fn is_pointwise(s: &ConvShape) -> bool {
    let win = &s.win;
    let unit = win.kernel.iter().all(|&d| d == 1) && win.strides.iter().all(|&d| d == 1) && win.pad_begin.iter().chain(&win.pad_end).all(|&p| p == 0);
    s.groups == 1 && unit && win.input == win.output
}

/// An integer convolution as the runtime's integer product per image and group:
/// `acc[b, g] = (W_g − w_zero)·(B − x_zero) + bias_g`, W's `Mg × Cg·taps` rows against `B`, the
/// group's `Cg × P` planes of X when the convolution is pointwise, else their byte im2col
/// (`[Cg·taps, P]`, one or two spatial dims, X's zero point in the padding so that it adds
/// nothing). The result goes into the `i32` buffer `acc()` makes or, requantized, into Y (both
/// laid out as Y). X's zero point must be per tensor (and, for the im2col, a constant: input
/// `x_zero_input` of node `n`), W's per tensor or per output channel, each of its operand's
/// type; the bias, if any, an `i32` vector over the output channels. Exact for any values.
/// `None` when the convolution has another form.
#[allow(clippy::too_many_arguments)]
pub(in crate::nn) fn product(
    cx: &mut Lowerer<'_>,
    k: &mut Kernel,
    n: NodeId,
    s: &ConvShape,
    (x, w): (&Operand, &Operand),
    (x_zero, w_zero, x_zero_input): (Option<&Operand>, Option<&Operand>, Option<usize>),
    bias: Option<&Operand>,
    out: Results<'_>,
) -> Option<Vec<Stmt>> {
    let pointwise = is_pointwise(s);
    if !pointwise && !matches!(s.win.rank(), 1 | 2) {
        return None;
    }
    let signed = |o: &Operand| match o.elem {
        ElemType::Scalar(ScalarType::I8) => Some(1),
        ElemType::Scalar(ScalarType::U8) => Some(0),
        _ => None,
    };
    let (w_signed, x_signed) = (signed(w)?, signed(x)?);
    let zeros = |z: Option<&Operand>, of: &Operand, per: u64| -> Option<(u64, call::Addr)> {
        match z {
            None => Some((0, call::Addr::at(of.buf, 0))),
            Some(z) if z.elem == of.elem && z.numel() == 1 => Some((1, call::Addr::at(z.buf, 0))),
            Some(z) if z.elem == of.elem && z.dims == [per] && per > 1 => Some((per, call::Addr::at(z.buf, 0))),
            Some(_) => None,
        }
    };
    let (a_zeros, za) = zeros(w_zero, w, s.m)?;
    let (b_zeros, zb) = zeros(x_zero, x, 1)?;
    let bias = match bias {
        None => None,
        Some(b) if b.dims == [s.m] && b.elem == ElemType::Scalar(ScalarType::I32) => Some(b.buf),
        Some(_) => return None,
    };
    // The padding's byte: X's zero point, which must be known now.
    let pad = match (pointwise, x_zero) {
        (true, _) | (false, None) => 0,
        (false, Some(_)) => *cx.const_input(n, x_zero_input?)?.to_i64s()?.first()?,
    };
    let (p, taps) = (s.win.out_plane(), s.win.taps());
    let depth = s.cg * taps;
    // Constant weights, zero points and bias: the row term in the bias (`row_term.rs`).
    let name = k.name.clone();
    let ((zb, b_zeros), bias) = match super::row_term::fold(cx, &name, (w.buf, w_signed == 1), (s.m, depth), (&za, a_zeros), (&zb, b_zeros), x_signed == 1, bias) {
        Some(f) => ((f.zb, 1), Some(f.bias)),
        None => ((zb, b_zeros), bias),
    };
    let col = (!pointwise).then(|| {
        let name = format!("{}_col", k.name);
        cx.program.add_buffer(Buffer { name, elem: x.elem, len: depth * p, kind: BufferKind::Temp })
    });
    // The result's buffer, the bias's (an unused one is the `i32` result's, or zeros) and the
    // output stage.
    let (c, bias_buf, out_stage) = match out {
        Results::Acc(acc) => {
            let acc = acc(cx);
            (acc, bias.unwrap_or(acc), None)
        }
        Results::Requantized { y, stage, zero_bias } => (y, bias.unwrap_or_else(|| zero_bias(cx)), Some(stage)),
    };
    let int = |v: u64| Expr::idx(v as i64);
    let window = s.win.call_operands();
    Some(k.nest(&[s.batch, s.groups], |_, idx| {
        let (b, g) = (&idx[0], &idx[1]);
        // The group's first input channel, and its first output channel.
        let (c0, m0) = (b.clone() * s.c as i64 + g.clone() * s.cg as i64, g.clone() * s.mg as i64);
        let at = |buf: BufId, per: u64, count: u64| call::Addr { buf, index: if count > 1 { m0.clone() * per as i64 } else { Expr::idx(0) } };
        let mut stmts = Vec::new();
        let b_matrix = match col {
            None => call::Addr { buf: x.buf, index: c0 * s.win.plane() as i64 },
            Some(col) => {
                let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = window.clone();
                let unroll = call::Im2colBytes {
                    x: call::Addr { buf: x.buf, index: c0 * s.win.plane() as i64 },
                    col: call::Addr::at(col, 0),
                    channels: int(s.cg),
                    ih,
                    iw,
                    oh,
                    ow,
                    kh,
                    kw,
                    sh,
                    sw,
                    ph,
                    pw,
                    dh,
                    dw,
                    pad: Expr::idx(pad),
                    signed: Expr::idx(x_signed),
                };
                stmts.push(Stmt::Call(unroll.into()));
                call::Addr::at(col, 0)
            }
        };
        let q = call::Qgemm {
            a: call::Addr { buf: w.buf, index: m0.clone() * depth as i64 },
            b: b_matrix,
            c: call::Addr { buf: c, index: (b.clone() * s.m as i64 + m0.clone()) * p as i64 },
            za: if a_zeros > 1 { at(za.buf, 1, a_zeros) } else { za.clone() },
            zb: zb.clone(),
            bias: if bias.is_some() { at(bias_buf, 1, s.m) } else { call::Addr::at(bias_buf, 0) },
            m: int(s.mg),
            n: int(p),
            k: int(depth),
            lda: int(depth),
            ldb: int(p),
            ldc: int(p),
            a_signed: Expr::idx(w_signed),
            b_signed: Expr::idx(x_signed),
            a_zeros: int(if a_zeros > 1 { s.mg } else { a_zeros }),
            b_zeros: int(b_zeros),
            bias_mode: Expr::idx(i64::from(bias.is_some())),
            b_packed: Expr::idx(0),
        };
        stmts.push(Stmt::Call(match out_stage {
            // Per output channel: the rows of `W`.
            Some(st) => q.clone().requantized(q.c.clone(), at(st.scales, 1, s.m), Expr::idx(1), Expr::idx(st.zero), Expr::idx(st.signed)).into(),
            None => q.into(),
        }));
        stmts
    }))
}

/// A 2-D depthwise convolution (one input and one output channel per group) with the output
/// stage `stage`, as one `dwconv2d_requantize` call from X into Y, its constant weights
/// shifted by their zero points; `None` when the convolution has another form, a parameter is
/// not constant, or the `f32` sums would not be exact.
pub(in crate::nn) fn depthwise(cx: &mut Lowerer<'_>, n: NodeId, s: &ConvShape, x: &Operand, y: &Operand, stage: &Stage, inputs: &Inputs, bias: Option<&Operand>) -> Option<Stmt> {
    if !(s.cg == 1 && s.mg == 1 && s.win.rank() == 2) {
        return None;
    }
    let x_signed = match x.elem {
        ElemType::Scalar(ScalarType::I8) => 1,
        ElemType::Scalar(ScalarType::U8) => 0,
        _ => return None,
    };
    let bias = match bias {
        None => None,
        Some(b) if b.dims == [s.m] && b.elem == ElemType::Scalar(ScalarType::I32) => Some(b.buf),
        Some(_) => return None,
    };
    let shifted = shifted(cx, n, s, x, inputs)?;
    let name = cx.node(n).name.clone();
    let bytes: Vec<u8> = shifted.w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = Tensor { dtype: DType::F32, shape: vec![s.m, s.win.taps()], data: TensorData::Raw(Bytes::from(bytes)) };
    let w = cx.program.add_buffer(Buffer { name: format!("{name}_w_shifted"), elem: ElemType::Scalar(ScalarType::F32), len: shifted.w.len() as u64, kind: BufferKind::Const(t) });
    // An unused bias operand still names an `i32` buffer.
    let bias_buf = bias.unwrap_or_else(|| i32_zeros(cx, format!("{name}_no_bias"), 1));
    let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = s.win.call_operands();
    let int = |v: u64| Expr::idx(v as i64);
    let call = call::DwConv2dRequantize {
        x: call::Addr::at(x.buf, 0),
        w: call::Addr::at(w, 0),
        bias: call::Addr::at(bias_buf, 0),
        scales: call::Addr::at(stage.scales, 0),
        y: call::Addr::at(y.buf, 0),
        planes: int(s.batch * s.m),
        channels: int(s.m),
        ih,
        iw,
        oh,
        ow,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
        x_signed: Expr::idx(x_signed),
        x_zero: Expr::idx(shifted.x_zero),
        bias_mode: Expr::idx(i64::from(bias.is_some())),
        zero: Expr::idx(stage.zero),
        y_signed: Expr::idx(stage.signed),
    };
    Some(Stmt::Call(call.into()))
}
