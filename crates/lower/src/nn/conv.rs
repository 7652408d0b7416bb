//! Conv, kiln's FusedConv, ConvInteger and QLinearConv.
//!
//! A 1-D or 2-D `f32` Conv or FusedConv is one call of the runtime's fused `conv2d` (1-D planes
//! are planes of one row): im2col panels packed on the fly and `sgemm`'s kernels, or for a
//! depthwise convolution (one output channel per input channel: `group == C == M`) the
//! `dwconv2d` routine, with the bias, residual addend and activation applied to each finished
//! block or plane. Over three or more spatial
//! dims, `f32` Conv that is not depthwise is an im2col loop nest into a scratch buffer plus one
//! `sgemm` per image and group (a 1×1 unstrided, unpadded convolution multiplies the input
//! directly), writing the bare convolution (`beta = 0`); one call of the runtime's `epilogue`
//! then adds the bias (per row of the `[N·M, P]` output: channel `r mod M`) and FusedConv's
//! residual addend and activation ([`Epilogue::call`]; no call when there is none of them).
//! ConvInteger and QLinearConv with constant weights accumulate through those same `f32`
//! products when that is provably exact ([`exact`]). Other depthwise convolutions, other
//! element types and the remaining quantized forms are a direct loop nest, the bias its
//! accumulator's start and the [`Epilogue`] part of each element's store.

mod exact;
mod row_term;

use kiln_tir::NodeId;
use kiln_tir::op::{AutoPad, FusedConv};

use super::{Window, WindowAttrs, guarded, spatial};
use kiln_loops::builder::{linear, strides};
use kiln_loops::call;
use kiln_loops::ir::*;
use crate::elementwise::{ElemResult, Scope};
use crate::linalg::{BiasIndex, Epilogue, Sgemm, i32_zeros, is_f32, zero};
use crate::{LowerError, Lowerer, Operand};

/// The attributes the three convolutions share.
pub(super) struct ConvAttrs<'a> {
    pub auto_pad: AutoPad,
    pub dilations: &'a [i64],
    pub group: i64,
    pub kernel_shape: &'a [i64],
    pub pads: &'a [i64],
    pub strides: &'a [i64],
}

/// A convolution's sizes: `x[N, C, in...] ⊛ w[M, C/G, kernel...] → y[N, M, out...]`.
struct ConvShape {
    batch: u64,
    c: u64,
    m: u64,
    groups: u64,
    cg: u64,
    mg: u64,
    win: Window,
}

impl ConvShape {
    fn new(x: &Operand, w: &Operand, y: &Operand, a: &ConvAttrs<'_>) -> Result<ConvShape, String> {
        let (xin, wk, yout) = (
            spatial(&x.dims, "X")?,
            spatial(&w.dims, "W")?,
            spatial(&y.dims, "Y")?,
        );
        let (batch, c, m) = (x.dims[0], x.dims[1], w.dims[0]);
        if wk.len() != xin.len() || yout.len() != xin.len() {
            return Err("X, W and Y differ in rank".into());
        }
        if !a.kernel_shape.is_empty() && a.kernel_shape.iter().zip(wk).any(|(&k, &w)| k as u64 != w)
        {
            return Err(format!(
                "kernel_shape {:?} differs from W's dims {wk:?}",
                a.kernel_shape
            ));
        }
        let groups = u64::try_from(a.group)
            .ok()
            .filter(|&g| g > 0 && c % g == 0 && m % g == 0)
            .ok_or_else(|| {
                format!(
                    "group {} does not divide {c} input and {m} output channels",
                    a.group
                )
            })?;
        let (cg, mg) = (c / groups, m / groups);
        if w.dims[1] != cg || y.dims[..2] != [batch, m] {
            return Err(format!(
                "W {:?} and Y {:?} do not fit X {:?} with {groups} groups",
                w.dims, y.dims, x.dims
            ));
        }
        let win = Window::new(
            &WindowAttrs {
                auto_pad: a.auto_pad,
                kernel: wk,
                strides: a.strides,
                dilations: a.dilations,
                pads: a.pads,
            },
            xin,
            yout,
        )?;
        Ok(ConvShape {
            batch,
            c,
            m,
            groups,
            cg,
            mg,
            win,
        })
    }

    /// True for a 1×1 convolution without stride or padding: the input is already the
    /// im2col matrix.
    fn pointwise(&self) -> bool {
        self.win.kernel.iter().all(|&k| k == 1)
            && self.win.strides.iter().all(|&s| s == 1)
            && self.win.input == self.win.output
            && self.win.pad_begin.iter().all(|&p| p == 0)
    }
}

/// How a direct convolution computes: the accumulator's type and start (per output channel
/// `m`), one product term from loaded input and weight values, and the stored result from the
/// sum, `m` and the output element's flat index (statements it needs go into the scope).
struct Direct<'a> {
    acc_ty: ScalarType,
    init: &'a dyn Fn(&Expr) -> Expr,
    term: &'a dyn Fn(Expr, Expr, &Expr) -> Expr,
    finish: &'a dyn Fn(&mut Scope<'_>, Expr, &Expr, &Expr) -> ElemResult,
}

/// The sum itself as the stored result.
fn plain(_: &mut Scope<'_>, acc: Expr, _: &Expr, _: &Expr) -> ElemResult {
    Ok(acc)
}

/// `y[n, m, o] = finish(init(m) + Σ_{c, t} term(x[n, c, pos(o, t)], w[m, c, t], m))`, with
/// taps outside the input skipped (zero padding); an `Err` is `finish`'s.
fn direct(
    k: &mut Kernel,
    s: &ConvShape,
    x: BufId,
    w: BufId,
    y: BufId,
    d: &Direct<'_>,
) -> Result<Vec<Stmt>, String> {
    let r = s.win.rank();
    let mut dims = vec![s.batch, s.groups, s.mg];
    dims.extend(&s.win.output);
    let mut inner = vec![s.cg];
    inner.extend(&s.win.kernel);
    let (kst, ost) = (strides(&s.win.kernel), strides(&s.win.output));
    let mut result = Ok(());
    let stmts = k.nest(&dims, |k, idx| {
        let (nn, g, o) = (&idx[0], &idx[1], &idx[3..]);
        let m = g.clone() * s.mg as i64 + idx[2].clone();
        let acc = k.var(d.acc_ty);
        let mut body = vec![Stmt::Local(acc, (d.init)(&m))];
        body.extend(k.nest(&inner, |_, it| {
            let (ci, t) = (&it[0], &it[1..=r]);
            let c = g.clone() * s.cg as i64 + ci.clone();
            let pos = s.win.positions(o, t);
            let xv = Expr::load(
                x,
                (nn.clone() * s.c as i64 + c) * s.win.plane() as i64 + s.win.flat(&pos),
            );
            let wv = Expr::load(
                w,
                (m.clone() * s.cg as i64 + ci.clone()) * s.win.taps() as i64 + linear(t, &kst),
            );
            guarded(
                s.win.inside(&pos),
                vec![Stmt::Assign(acc, Expr::Var(acc) + (d.term)(xv, wv, &m))],
            )
        }));
        let at = (nn.clone() * s.m as i64 + m.clone()) * s.win.out_plane() as i64 + linear(o, &ost);
        let mut sc = Scope { k, stmts: body };
        match (d.finish)(&mut sc, Expr::Var(acc), &m, &at) {
            Ok(value) => sc.stmts.push(Stmt::Store {
                buf: y,
                index: at,
                value,
            }),
            Err(why) => result = Err(why),
        }
        sc.stmts
    });
    result.map(|()| stmts)
}

/// Conv.
pub(super) fn conv(cx: &mut Lowerer<'_>, n: NodeId, a: &ConvAttrs<'_>) -> Result<(), LowerError> {
    conv_kernel(cx, n, a, None)
}

/// FusedConv: Conv's kernel with the epilogue of the residual addend `Z` (input 3) and the
/// activation.
pub(super) fn fused_conv(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    a: &ConvAttrs<'_>,
    f: &FusedConv,
) -> Result<(), LowerError> {
    conv_kernel(cx, n, a, Some(f))
}

/// Conv, or FusedConv when `fused` gives its activation.
fn conv_kernel(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    a: &ConvAttrs<'_>,
    fused: Option<&FusedConv>,
) -> Result<(), LowerError> {
    let (x, w, bias, y) = (
        cx.required(n, 0)?,
        cx.required(n, 1)?,
        cx.input(n, 2)?,
        cx.required_output(n, 0)?,
    );
    let s = ConvShape::new(&x, &w, &y, a).map_err(|e| cx.unsupported(n, e))?;
    if x.elem != w.elem || x.elem != y.elem || !x.ty().is_float() {
        return Err(cx.unsupported(n, "X, W and Y must have one float element type"));
    }
    if bias
        .as_ref()
        .is_some_and(|b| b.dims != [s.m] || b.elem != y.elem)
    {
        return Err(cx.unsupported(n, "B must be a vector over the output channels"));
    }
    let epilogue = match fused {
        Some(f) => Epilogue::new(cx.input(n, 3)?.as_ref(), f.activation, f.alpha, f.beta, &y)
            .map_err(|e| cx.unsupported(n, e))?,
        None => Epilogue::NONE,
    };
    let mut k = cx.kernel(n);
    // One input and one output channel per group: over other than two spatial dims, the
    // direct nest even in f32.
    let depthwise = s.cg == 1 && s.mg == 1;
    if is_f32(&x) && matches!(s.win.rank(), 1 | 2) {
        k.body = vec![conv2d(&s, &x, &w, bias.as_ref(), &epilogue, &y)];
    } else if is_f32(&x) && !depthwise {
        k.body = im2col_sgemm(cx, &mut k, &s, &x, &w, &y);
        let bias = bias.map(|b| (b.buf, BiasIndex::PerRow { period: s.m }));
        k.body
            .extend(epilogue.call(&y, bias, s.batch * s.m, s.win.out_plane()));
    } else {
        let ty = y.ty();
        let bb = bias.as_ref().map(|b| b.buf);
        let init = move |m: &Expr| bb.map_or_else(|| zero(ty), |b| Expr::load(b, m.clone()));
        let finish =
            |sc: &mut Scope<'_>, acc: Expr, _: &Expr, at: &Expr| epilogue.apply(sc, acc, at, ty);
        let d = Direct {
            acc_ty: ty,
            init: &init,
            term: &|xv, wv, _| xv * wv,
            finish: &finish,
        };
        k.body = direct(&mut k, &s, x.buf, w.buf, y.buf, &d).map_err(|e| cx.unsupported(n, e))?;
    }
    cx.push(k);
    Ok(())
}

/// The `f32` 2-D Conv with its bias and epilogue: one call of the runtime's fused `conv2d`
/// (unused operands passed as `y`'s address).
fn conv2d(
    s: &ConvShape,
    x: &Operand,
    w: &Operand,
    bias: Option<&Operand>,
    e: &Epilogue,
    y: &Operand,
) -> Stmt {
    let int = |v: u64| Expr::idx(v as i64);
    let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = s.win.call_operands();
    let (code, alpha, beta) = e.code();
    let c = call::Conv2d {
        x: Addr::at(x.buf, 0),
        w: Addr::at(w.buf, 0),
        b: Addr::at(bias.map_or(y.buf, |b| b.buf), 0),
        z: Addr::at(e.z.unwrap_or(y.buf), 0),
        y: Addr::at(y.buf, 0),
        batch: int(s.batch),
        channels: int(s.c),
        out_channels: int(s.m),
        groups: int(s.groups),
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
        bias: int(u64::from(bias.is_some())),
        residual: int(u64::from(e.z.is_some())),
        act: Expr::idx(code),
        alpha: Expr::f32(alpha),
        beta: Expr::f32(beta),
    };
    Stmt::Call(c.into())
}

/// The `f32` Conv over other than two spatial dims: per image and group, im2col of the group's
/// input channels into a scratch matrix `[Cg·taps, P]` (a loop nest) and `Y_g[Mg, P] =
/// W_g[Mg, Cg·taps] · col`.
fn im2col_sgemm(
    cx: &mut Lowerer<'_>,
    k: &mut Kernel,
    s: &ConvShape,
    x: &Operand,
    w: &Operand,
    y: &Operand,
) -> Vec<Stmt> {
    let (p, taps) = (s.win.out_plane(), s.win.taps());
    let mut body = Vec::new();
    let col = (!s.pointwise()).then(|| {
        cx.program.add_buffer(Buffer {
            name: format!("{}_col", k.name),
            elem: x.elem,
            len: s.cg * taps * p,
            kind: BufferKind::Temp,
        })
    });
    let r = s.win.rank();
    let (kst, ost) = (strides(&s.win.kernel), strides(&s.win.output));
    body.extend(k.nest(&[s.batch, s.groups], |k, idx| {
        let (nn, g) = (&idx[0], &idx[1]);
        let c0 = nn.clone() * s.c as i64 + g.clone() * s.cg as i64;
        let mut stmts = Vec::new();
        let b_matrix = match col {
            None => (x.buf, c0 * s.win.plane() as i64),
            // One or two spatial dims of `f32`: the runtime's im2col.
            Some(col) if matches!(r, 1 | 2) && x.elem == ElemType::Scalar(ScalarType::F32) => {
                let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = s.win.call_operands();
                let c = call::Im2col {
                    x: Addr { buf: x.buf, index: c0.clone() * s.win.plane() as i64 },
                    col: Addr::at(col, 0),
                    channels: Expr::idx(s.cg as i64),
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
                };
                stmts.push(Stmt::Call(c.into()));
                (col, Expr::idx(0))
            }
            Some(col) => {
                let mut dims = vec![s.cg];
                dims.extend(&s.win.kernel);
                dims.extend(&s.win.output);
                stmts.extend(k.nest(&dims, |_, it| {
                    let (ci, t, o) = (&it[0], &it[1..=r], &it[r + 1..]);
                    let pos = s.win.positions(o, t);
                    let at =
                        (ci.clone() * taps as i64 + linear(t, &kst)) * p as i64 + linear(o, &ost);
                    let load = Stmt::Store {
                        buf: col,
                        index: at.clone(),
                        value: Expr::load(
                            x.buf,
                            (c0.clone() + ci.clone()) * s.win.plane() as i64 + s.win.flat(&pos),
                        ),
                    };
                    match s.win.inside(&pos) {
                        None => vec![load],
                        Some(cond) => vec![Stmt::If {
                            cond,
                            then: vec![load],
                            otherwise: vec![Stmt::Store {
                                buf: col,
                                index: at,
                                value: Expr::f32(0.0),
                            }],
                        }],
                    }
                }));
                (col, Expr::idx(0))
            }
        };
        let kk = s.cg * taps;
        stmts.push(
            Sgemm {
                a: (w.buf, g.clone() * (s.mg * kk) as i64),
                b: b_matrix,
                c: (
                    y.buf,
                    (nn.clone() * s.m as i64 + g.clone() * s.mg as i64) * p as i64,
                ),
                m: s.mg,
                n: p,
                k: kk,
                lda: kk,
                ldb: p,
                ldc: p,
                trans_a: false,
                trans_b: false,
                alpha: 1.0,
                beta: 0.0,
            }
            .call(),
        );
        stmts
    }));
    body
}

/// True for the 8-bit integer element types.
fn is_8bit(op: &Operand) -> bool {
    matches!(op.elem, ElemType::Scalar(ScalarType::I8 | ScalarType::U8))
}

/// A quantization parameter as an expression of the output channel `m`.
type ChannelParam = Box<dyn Fn(&Expr) -> Expr>;

/// A zero point or scale that is per tensor (one element) or per output channel (`[M]`);
/// `None` for any other shape.
fn per_channel(p: Option<&Operand>, m_count: u64, default: Expr) -> Option<ChannelParam> {
    match p {
        None => Some(Box::new(move |_| default.clone())),
        Some(p) if p.numel() == 1 => {
            let b = p.buf;
            Some(Box::new(move |_| Expr::load(b, Expr::idx(0))))
        }
        Some(p) if p.dims == [m_count] => {
            let b = p.buf;
            Some(Box::new(move |m| Expr::load(b, m.clone())))
        }
        Some(_) => None,
    }
}

/// ConvInteger: the convolution of `x − x_zero_point` and `w − w_zero_point` in `i32`.
pub(super) fn conv_integer(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    a: &ConvAttrs<'_>,
) -> Result<(), LowerError> {
    let (x, w, xz, wz, y) = (
        cx.required(n, 0)?,
        cx.required(n, 1)?,
        cx.input(n, 2)?,
        cx.input(n, 3)?,
        cx.required_output(n, 0)?,
    );
    let s = ConvShape::new(&x, &w, &y, a).map_err(|e| cx.unsupported(n, e))?;
    if !is_8bit(&x) || !is_8bit(&w) || y.elem != ElemType::Scalar(ScalarType::I32) {
        return Err(cx.unsupported(n, "X and W must be 8-bit integers and Y i32"));
    }
    let i32z = Expr::int(ScalarType::I32, 0);
    let (Some(xzp), Some(wzp)) = (
        per_channel(xz.as_ref(), 1, i32z.clone()),
        per_channel(wz.as_ref(), s.m, i32z.clone()),
    ) else {
        return Err(cx.unsupported(
            n,
            "zero points must be per tensor (X) or per tensor or output channel (W)",
        ));
    };
    let i32t = ScalarType::I32;
    let mut k = cx.kernel(n);
    let depthwise = s.cg == 1 && s.mg == 1 && !exact::is_pointwise(&s);
    if !depthwise && let Some(body) = exact::product(cx, &mut k, n, &s, (&x, &w), (xz.as_ref(), wz.as_ref(), Some(2)), None, exact::Results::Acc(&mut |_| y.buf)) {
        k.body = body;
        cx.push(k);
        return Ok(());
    }
    let inputs = exact::Inputs { x_zero: Some(2), w: 1, w_zero: Some(3), bias: None };
    if let Some((mut body, acc)) = exact::accumulate(cx, &mut k, n, &s, &x, &inputs) {
        let unused = |_: &Expr| Expr::int(i32t, 0);
        let finish = exact::finish(&mut k, &s, &acc, &y, (&unused, i32t), &|_, v, _| Ok(v.cast(i32t)));
        body.extend(finish.map_err(|e| cx.unsupported(n, e))?);
        k.body = body;
        cx.push(k);
        return Ok(());
    }
    // A depthwise one the `f32` products cannot take: one small product per channel still
    // beats the loop nest.
    if depthwise && let Some(body) = exact::product(cx, &mut k, n, &s, (&x, &w), (xz.as_ref(), wz.as_ref(), Some(2)), None, exact::Results::Acc(&mut |_| y.buf)) {
        k.body = body;
        cx.push(k);
        return Ok(());
    }
    let term = move |xv: Expr, wv: Expr, m: &Expr| {
        (xv.cast(i32t) - xzp(m).cast(i32t)) * (wv.cast(i32t) - wzp(m).cast(i32t))
    };
    let d = Direct {
        acc_ty: i32t,
        init: &|_| i32z.clone(),
        term: &term,
        finish: &plain,
    };
    k.body = direct(&mut k, &s, x.buf, w.buf, y.buf, &d).map_err(|e| cx.unsupported(n, e))?;
    cx.push(k);
    Ok(())
}

/// QLinearConv: the integer convolution of the zero-point-shifted operands plus the `i32`
/// bias, rescaled by `x_scale·w_scale / y_scale` (per output channel when `w_scale` is),
/// shifted by `y_zero_point`, rounded half to even and saturated.
pub(super) fn qlinear_conv(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    a: &ConvAttrs<'_>,
) -> Result<(), LowerError> {
    let (x, x_scale, xz) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.input(n, 2)?);
    let (w, w_scale, wz) = (cx.required(n, 3)?, cx.required(n, 4)?, cx.input(n, 5)?);
    let (y_scale, yz, bias) = (cx.required(n, 6)?, cx.input(n, 7)?, cx.input(n, 8)?);
    let y = cx.required_output(n, 0)?;
    let s = ConvShape::new(&x, &w, &y, a).map_err(|e| cx.unsupported(n, e))?;
    if !is_8bit(&x)
        || !is_8bit(&w)
        || !is_8bit(&y)
        || [&x_scale, &w_scale, &y_scale]
            .iter()
            .any(|sc| !sc.ty().is_float())
    {
        return Err(cx.unsupported(n, "X, W and Y must be 8-bit integers and the scales floats"));
    }
    let scalar = |o: &Option<Operand>| o.as_ref().is_none_or(|z| z.numel() == 1);
    if !scalar(&xz) || !scalar(&yz) || x_scale.numel() != 1 || y_scale.numel() != 1 {
        return Err(cx.unsupported(n, "X's and Y's zero points and scales must be scalars"));
    }
    if bias
        .as_ref()
        .is_some_and(|b| b.dims != [s.m] || b.elem != ElemType::Scalar(ScalarType::I32))
    {
        return Err(cx.unsupported(n, "B must be an i32 vector over the output channels"));
    }
    let i32t = ScalarType::I32;
    let i32z = Expr::int(i32t, 0);
    let params = (
        per_channel(xz.as_ref(), 1, i32z.clone()),
        per_channel(wz.as_ref(), s.m, i32z.clone()),
        per_channel(yz.as_ref(), 1, i32z.clone()),
        per_channel(Some(&w_scale), s.m, Expr::f32(1.0)),
    );
    let (Some(xzp), Some(wzp), Some(yzp), Some(ws)) = params else {
        return Err(cx.unsupported(
            n,
            "W's zero point and scale must be per tensor or per output channel",
        ));
    };
    let (xs, ys, yty, f64t) = (x_scale.buf, y_scale.buf, y.ty(), ScalarType::F64);
    // The requantization scale of output channel `m`, as the reference computes it.
    let scale = |m: &Expr| (Expr::load(xs, Expr::idx(0)) * ws(m) / Expr::load(ys, Expr::idx(0))).cast(f64t);
    let requantize = |acc: Expr, scale: Expr| (acc.cast(f64t) * scale + yzp(&Expr::idx(0)).cast(f64t)).un(UnOp::Round).cast(yty);
    let mut k = cx.kernel(n);
    // A pointwise convolution with constant scales: the integer product with the output stage
    // fused, straight into Y.
    let stage = exact::stage(cx, n, &s, &y);
    // A depthwise one: the sums and the output stage in one routine, from X straight into Y.
    let inputs = exact::Inputs { x_zero: Some(2), w: 3, w_zero: Some(5), bias: Some(8) };
    if let Some(st) = stage.as_ref()
        && let Some(call) = exact::depthwise(cx, n, &s, &x, &y, st, &inputs, bias.as_ref())
    {
        k.body = vec![call];
        cx.push(k);
        return Ok(());
    }
    // Any other with constant scales (and a depthwise one the routine above does not take):
    // the integer product with the output stage fused, straight into Y.
    if let Some(st) = stage.as_ref() {
        let name = format!("{}_zero_bias", cx.node(n).name);
        let out = exact::Results::Requantized { y: y.buf, stage: st, zero_bias: &mut |cx| i32_zeros(cx, name.clone(), s.m) };
        if let Some(body) = exact::product(cx, &mut k, n, &s, (&x, &w), (xz.as_ref(), wz.as_ref(), Some(2)), bias.as_ref(), out) {
            k.body = body;
            cx.push(k);
            return Ok(());
        }
    }
    let name = format!("{}_acc", cx.node(n).name);
    let mut acc = None;
    let product = exact::product(cx, &mut k, n, &s, (&x, &w), (xz.as_ref(), wz.as_ref(), Some(2)), bias.as_ref(), exact::Results::Acc(&mut |cx| {
        let len = s.batch * s.m * s.win.out_plane();
        let buf = Buffer { name: name.clone(), elem: ElemType::Scalar(i32t), len, kind: BufferKind::Temp };
        *acc.insert(cx.program.add_buffer(buf))
    }));
    // The accumulator from the integer product, else the exact float products.
    let accumulated = match (product, acc) {
        (Some(body), Some(acc)) => Some((body, Operand { buf: acc, dims: vec![s.batch, s.m, s.win.out_plane()], elem: ElemType::Scalar(i32t) })),
        _ => exact::accumulate(cx, &mut k, n, &s, &x, &inputs),
    };
    if let Some((mut body, acc)) = accumulated {
        match &stage {
            Some(st) => body.push(exact::requantize(st, &s, &acc, &y)),
            None => {
                let finish = exact::finish(&mut k, &s, &acc, &y, (&scale, f64t), &|_, acc, c| Ok(requantize(acc, c)));
                body.extend(finish.map_err(|e| cx.unsupported(n, e))?);
            }
        }
        k.body = body;
        cx.push(k);
        return Ok(());
    }
    let bb = bias.as_ref().map(|b| b.buf);
    let init = move |m: &Expr| bb.map_or_else(|| Expr::int(i32t, 0), |b| Expr::load(b, m.clone()));
    let term = |xv: Expr, wv: Expr, m: &Expr| {
        (xv.cast(i32t) - xzp(m).cast(i32t)) * (wv.cast(i32t) - wzp(m).cast(i32t))
    };
    let finish = |_: &mut Scope<'_>, acc: Expr, m: &Expr, _: &Expr| Ok(requantize(acc, scale(m)));
    let d = Direct {
        acc_ty: i32t,
        init: &init,
        term: &term,
        finish: &finish,
    };
    k.body = direct(&mut k, &s, x.buf, w.buf, y.buf, &d).map_err(|e| cx.unsupported(n, e))?;
    cx.push(k);
    Ok(())
}
