//! Sliding-window routines as loops: convolutions, im2col, max pooling. A tap outside the
//! input is skipped by an `If` around its load (never a select, which would load it).

use kiln_loops::call::{Conv2d, DwConv2d, DwConv2dRequantize, Im2col, Im2colBytes, MaxPool2d};
use kiln_loops::ir::*;

use super::{activation, at, bind, int, local, put, size};

/// The 2-D window operands the routines share.
struct Window {
    ih: i64,
    iw: i64,
    oh: u64,
    ow: u64,
    kh: u64,
    kw: u64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
}

impl Window {
    #[allow(clippy::too_many_arguments)]
    fn new(ih: &Expr, iw: &Expr, oh: &Expr, ow: &Expr, kh: &Expr, kw: &Expr, sh: &Expr, sw: &Expr, ph: &Expr, pw: &Expr, dh: &Expr, dw: &Expr) -> Result<Window, String> {
        Ok(Window {
            ih: int(ih, "ih")?,
            iw: int(iw, "iw")?,
            oh: size(oh, "oh")?,
            ow: size(ow, "ow")?,
            kh: size(kh, "kh")?,
            kw: size(kw, "kw")?,
            sh: int(sh, "sh")?,
            sw: int(sw, "sw")?,
            ph: int(ph, "ph")?,
            pw: int(pw, "pw")?,
            dh: int(dh, "dh")?,
            dw: int(dw, "dw")?,
        })
    }

    /// Elements of one input plane.
    fn plane(&self) -> i64 {
        self.ih * self.iw
    }

    /// `body(offset in the input plane)` for output `(oy, ox)` and tap `(ky, kx)`, guarded by
    /// an `If` for the sides where some tap falls outside the input; with `outside`, what runs
    /// instead there.
    fn tap(&self, k: &mut Kernel, o: [&Expr; 2], t: [&Expr; 2], body: Vec<Stmt>, outside: Vec<Stmt>, offset: Var) -> Vec<Stmt> {
        let (oy, ox) = (o[0].clone(), o[1].clone());
        let (ky, kx) = (t[0].clone(), t[1].clone());
        let (ly, iy) = bind(k, ScalarType::I64, oy * self.sh - self.ph + ky * self.dh);
        let (lx, ix) = bind(k, ScalarType::I64, ox * self.sw - self.pw + kx * self.dw);
        // The largest row and column any tap reaches decide whether the far sides need a test.
        let far_y = (self.oh as i64 - 1) * self.sh - self.ph + (self.kh as i64 - 1) * self.dh;
        let far_x = (self.ow as i64 - 1) * self.sw - self.pw + (self.kw as i64 - 1) * self.dw;
        let mut tests = Vec::new();
        if self.ph > 0 {
            tests.push(iy.clone().cmp(CmpOp::Ge, Expr::idx(0)));
        }
        if far_y >= self.ih {
            tests.push(iy.clone().cmp(CmpOp::Lt, Expr::idx(self.ih)));
        }
        if self.pw > 0 {
            tests.push(ix.clone().cmp(CmpOp::Ge, Expr::idx(0)));
        }
        if far_x >= self.iw {
            tests.push(ix.clone().cmp(CmpOp::Lt, Expr::idx(self.iw)));
        }
        let mut stmts = vec![ly, lx, Stmt::Let(offset, iy * self.iw + ix)];
        match tests.into_iter().reduce(|a, b| a.bin(BinOp::And, b)) {
            None => stmts.extend(body),
            Some(cond) => stmts.push(Stmt::If { cond, then: body, otherwise: outside }),
        }
        stmts
    }
}

pub(super) fn conv2d(k: &mut Kernel, c: &Conv2d) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    let (batch, channels, out_channels, groups) = (size(&c.batch, "batch")?, size(&c.channels, "channels")?, size(&c.out_channels, "out_channels")?, size(&c.groups, "groups")?);
    if groups == 0 || channels % groups != 0 || out_channels % groups != 0 {
        return Err(format!("{groups} groups do not divide {channels} input and {out_channels} output channels"));
    }
    let (cg, mg) = (channels / groups, out_channels / groups);
    let (bias, residual, act) = (int(&c.bias, "bias")? != 0, int(&c.residual, "residual")? != 0, int(&c.act, "act")?);
    let mut error = None;
    let body = k.nest(&[batch, out_channels, w.oh, w.ow], |k, i| {
        let (n, m, oy, ox) = (&i[0], &i[1], &i[2], &i[3]);
        let (init, acc) = local(k, ScalarType::F32, Expr::f32(0.0));
        // The first input channel of output channel m's group, in batch item n.
        let (lc0, c0) = bind(k, ScalarType::I64, n.clone() * channels as i64 + m.clone() / mg as i64 * cg as i64);
        let taps = k.nest(&[cg, w.kh, w.kw], |k, t| {
            let (ci, ky, kx) = (&t[0], &t[1], &t[2]);
            let off = k.var(ScalarType::I64);
            let x = at(&c.x, (c0.clone() + ci.clone()) * w.plane() + Expr::Var(off));
            let wt = at(&c.w, ((m.clone() * cg as i64 + ci.clone()) * w.kh as i64 + ky.clone()) * w.kw as i64 + kx.clone());
            w.tap(k, [oy, ox], [ky, kx], vec![Stmt::Assign(acc, Expr::Var(acc) + x * wt)], vec![], off)
        });
        let y_off = ((n.clone() * out_channels as i64 + m.clone()) * w.oh as i64 + oy.clone()) * w.ow as i64 + ox.clone();
        let mut v = Expr::Var(acc);
        if bias {
            v = v + at(&c.b, m.clone());
        }
        if residual {
            v = v + at(&c.z, y_off.clone());
        }
        let (lv, v) = bind(k, ScalarType::F32, v);
        let mut stmts = vec![init, lc0];
        stmts.extend(taps);
        stmts.push(lv);
        match activation(act, &c.alpha, &c.beta, v) {
            Ok(y) => stmts.push(put(&c.y, y_off, y)),
            Err(e) => error = Some(e),
        }
        stmts
    });
    match error {
        Some(e) => Err(e),
        None => Ok(body),
    }
}

pub(super) fn dwconv2d(k: &mut Kernel, c: &DwConv2d) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    let (planes, channels) = (size(&c.planes, "planes")?, size(&c.channels, "channels")?.max(1));
    let accumulate = int(&c.accumulate, "accumulate")? != 0;
    Ok(k.nest(&[planes, w.oh, w.ow], |k, i| {
        let (p, oy, ox) = (&i[0], &i[1], &i[2]);
        let y_off = (p.clone() * w.oh as i64 + oy.clone()) * w.ow as i64 + ox.clone();
        let (init, acc) = local(k, ScalarType::F32, Expr::f32(0.0));
        let taps = k.nest(&[w.kh, w.kw], |k, t| {
            let (ky, kx) = (&t[0], &t[1]);
            let off = k.var(ScalarType::I64);
            let x = at(&c.x, p.clone() * w.plane() + Expr::Var(off));
            let wt = at(&c.w, ((p.clone() % channels as i64) * w.kh as i64 + ky.clone()) * w.kw as i64 + kx.clone());
            w.tap(k, [oy, ox], [ky, kx], vec![Stmt::Assign(acc, Expr::Var(acc) + x * wt)], vec![], off)
        });
        let mut stmts = vec![init];
        stmts.extend(taps);
        let sum = if accumulate { at(&c.y, y_off.clone()) + Expr::Var(acc) } else { Expr::Var(acc) };
        stmts.push(put(&c.y, y_off, sum));
        stmts
    }))
}

/// The sums as `f32` ones, as the routine computes them (exact under its contract), then in
/// `i32` with the bias, requantized in `f64` as `requantize`.
pub(super) fn dwconv2d_requantize(k: &mut Kernel, c: &DwConv2dRequantize) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    let (planes, channels) = (size(&c.planes, "planes")?, size(&c.channels, "channels")?.max(1));
    let (x_zero, bias_mode) = (int(&c.x_zero, "x_zero")?, int(&c.bias_mode, "bias_mode")?);
    let zero = Expr::float(ScalarType::F64, int(&c.zero, "zero")? as f64);
    let y_ty = if int(&c.y_signed, "y_signed")? != 0 { ScalarType::I8 } else { ScalarType::U8 };
    if !(0..=1).contains(&bias_mode) {
        return Err(format!("dwconv2d_requantize with bias mode {bias_mode}"));
    }
    Ok(k.nest(&[planes, w.oh, w.ow], |k, i| {
        let (p, oy, ox) = (&i[0], &i[1], &i[2]);
        let y_off = (p.clone() * w.oh as i64 + oy.clone()) * w.ow as i64 + ox.clone();
        let ch = p.clone() % channels as i64;
        let (init, acc) = local(k, ScalarType::F32, Expr::f32(0.0));
        let taps = k.nest(&[w.kh, w.kw], |k, t| {
            let (ky, kx) = (&t[0], &t[1]);
            let off = k.var(ScalarType::I64);
            let x = at(&c.x, p.clone() * w.plane() + Expr::Var(off)).cast(ScalarType::F32) - Expr::f32(x_zero as f32);
            let wt = at(&c.w, (ch.clone() * w.kh as i64 + ky.clone()) * w.kw as i64 + kx.clone());
            w.tap(k, [oy, ox], [ky, kx], vec![Stmt::Assign(acc, Expr::Var(acc) + x * wt)], vec![], off)
        });
        let mut stmts = vec![init];
        stmts.extend(taps);
        let bias = if bias_mode != 0 { at(&c.bias, ch.clone()) } else { Expr::int(ScalarType::I32, 0) };
        let sum = Expr::Var(acc).cast(ScalarType::I32) + bias;
        let scale = at(&c.scales, ch).cast(ScalarType::F64);
        let level = (sum.cast(ScalarType::F64) * scale + zero.clone()).un(UnOp::Round).cast(y_ty);
        stmts.push(put(&c.y, y_off, level));
        stmts
    }))
}

pub(super) fn im2col(k: &mut Kernel, c: &Im2col) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    Ok(window_matrix(k, &w, size(&c.channels, "channels")?, &c.x, &c.col, Expr::f32(0.0)))
}

pub(super) fn im2col_bytes(k: &mut Kernel, c: &Im2colBytes) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    let pad = int(&c.pad, "pad")? as u8;
    let pad = if int(&c.signed, "signed")? != 0 { Expr::int(ScalarType::I8, i64::from(pad as i8)) } else { Expr::int(ScalarType::U8, i64::from(pad)) };
    Ok(window_matrix(k, &w, size(&c.channels, "channels")?, &c.x, &c.col, pad))
}

/// The im2col matrix of `channels` planes of `x` into `col`: row `(channel, ky, kx)`, column
/// `(oy, ox)`, `pad` where the tap falls outside the plane.
fn window_matrix(k: &mut Kernel, w: &Window, channels: u64, x: &Addr, col: &Addr, pad: Expr) -> Vec<Stmt> {
    let cols = (w.oh * w.ow) as i64;
    k.nest(&[channels, w.kh, w.kw, w.oh, w.ow], |k, i| {
        let (ch, ky, kx, oy, ox) = (&i[0], &i[1], &i[2], &i[3], &i[4]);
        let row = (ch.clone() * w.kh as i64 + ky.clone()) * w.kw as i64 + kx.clone();
        let col_off = row * cols + oy.clone() * w.ow as i64 + ox.clone();
        let off = k.var(ScalarType::I64);
        let inside = put(col, col_off.clone(), at(x, ch.clone() * w.plane() + Expr::Var(off)));
        let outside = put(col, col_off, pad.clone());
        w.tap(k, [oy, ox], [ky, kx], vec![inside], vec![outside], off)
    })
}

pub(super) fn maxpool2d(k: &mut Kernel, c: &MaxPool2d) -> Result<Vec<Stmt>, String> {
    let w = Window::new(&c.ih, &c.iw, &c.oh, &c.ow, &c.kh, &c.kw, &c.sh, &c.sw, &c.ph, &c.pw, &c.dh, &c.dw)?;
    let planes = size(&c.planes, "planes")?;
    Ok(k.nest(&[planes, w.oh, w.ow], |k, i| {
        let (p, oy, ox) = (&i[0], &i[1], &i[2]);
        let (init_max, max) = local(k, ScalarType::F32, Expr::f32(0.0));
        let (init_found, found) = local(k, ScalarType::Bool, Expr::Const(Scalar::Bool(false)));
        let taps = k.nest(&[w.kh, w.kw], |k, t| {
            let (ky, kx) = (&t[0], &t[1]);
            let off = k.var(ScalarType::I64);
            let (lv, v) = bind(k, ScalarType::F32, at(&c.x, p.clone() * w.plane() + Expr::Var(off)));
            // The first tap inside, or one strictly greater: a NaN wins only as the first.
            let first = Expr::Var(found).cmp(CmpOp::Eq, Expr::Const(Scalar::Bool(false)));
            let take = Stmt::If {
                cond: first.bin(BinOp::Or, v.clone().cmp(CmpOp::Gt, Expr::Var(max))),
                then: vec![Stmt::Assign(max, v), Stmt::Assign(found, Expr::Const(Scalar::Bool(true)))],
                otherwise: vec![],
            };
            w.tap(k, [oy, ox], [ky, kx], vec![lv, take], vec![], off)
        });
        let mut stmts = vec![init_max, init_found];
        stmts.extend(taps);
        stmts.push(put(&c.y, (p.clone() * w.oh as i64 + oy.clone()) * w.ow as i64 + ox.clone(), Expr::Var(max)));
        stmts
    }))
}
