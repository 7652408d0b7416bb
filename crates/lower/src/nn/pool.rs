//! Pools: MaxPool (with its optional Indices output), AveragePool, LpPool, their global forms,
//! and MaxUnpool.
//!
//! A pool is a loop over `[N·C, out...]` with a loop over the window's taps inside; taps that
//! fall outside the input (padding, or past the end under `ceil_mode`) are skipped. The global
//! pools are windows as large as the input. An `f32` max pool over two spatial dims without
//! the Indices output is one call of the runtime's `maxpool2d` instead (the same taps, order
//! and NaN rule, vectorized).

use kiln_tir::op::{AutoPad, MaxUnpool};
use kiln_tir::{NodeId, Op};

use super::{all, guarded, in_range, spatial, Window, WindowAttrs};
use kiln_loops::builder::{linear, strides};
use kiln_loops::call;
use kiln_loops::ir::*;
use crate::linalg::zero;
use crate::{LowerError, Lowerer};

/// What a pool computes over its window.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    /// The maximum; Indices are flattened row-major, or column-major over the spatial dims
    /// when `column_major` (`storage_order = 1`).
    Max { column_major: bool },
    /// The mean over the taps inside the input, or over the taps inside the padded input when
    /// `include_pad`.
    Average { include_pad: bool },
    /// `(Σ |x|^p)^(1/p)`.
    Lp(i64),
}

/// The attributes of a windowed pool, as owned values.
struct PoolAttrs {
    reduction: Reduction,
    auto_pad: AutoPad,
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    pads: Vec<i64>,
}

fn attrs(op: &Op, input: &[u64]) -> Option<PoolAttrs> {
    let global = |reduction| PoolAttrs { reduction, auto_pad: AutoPad::Notset, kernel: input.iter().map(|&d| d as i64).collect(), strides: Vec::new(), dilations: Vec::new(), pads: Vec::new() };
    Some(match op {
        Op::MaxPool(a) => PoolAttrs { reduction: Reduction::Max { column_major: a.storage_order != 0 }, auto_pad: a.auto_pad, kernel: a.kernel_shape.clone(), strides: a.strides.clone(), dilations: a.dilations.clone(), pads: a.pads.clone() },
        Op::AveragePool(a) => PoolAttrs { reduction: Reduction::Average { include_pad: a.count_include_pad != 0 }, auto_pad: a.auto_pad, kernel: a.kernel_shape.clone(), strides: a.strides.clone(), dilations: a.dilations.clone(), pads: a.pads.clone() },
        Op::LpPool(a) => PoolAttrs { reduction: Reduction::Lp(a.p), auto_pad: a.auto_pad, kernel: a.kernel_shape.clone(), strides: a.strides.clone(), dilations: a.dilations.clone(), pads: a.pads.clone() },
        Op::GlobalMaxPool(_) => global(Reduction::Max { column_major: false }),
        Op::GlobalAveragePool(_) => global(Reduction::Average { include_pad: false }),
        Op::GlobalLpPool(a) => global(Reduction::Lp(a.p)),
        _ => return None,
    })
}

/// The lowest value of `ty` (the start of a maximum).
fn lowest(ty: ScalarType) -> Expr {
    match ty {
        ScalarType::F32 | ScalarType::F64 => Expr::float(ty, f64::NEG_INFINITY),
        ScalarType::I8 => Expr::int(ty, i8::MIN.into()),
        ScalarType::I16 => Expr::int(ty, i16::MIN.into()),
        ScalarType::I32 => Expr::int(ty, i32::MIN.into()),
        ScalarType::I64 => Expr::int(ty, i64::MIN),
        _ => Expr::int(ty, 0),
    }
}

/// MaxPool, AveragePool, LpPool and the global pools.
pub(super) fn pool(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let (x, y) = (cx.required(n, 0)?, cx.required_output(n, 0)?);
    let bad = |e: String| cx.unsupported(n, e);
    let (xin, yout) = (spatial(&x.dims, "X").map_err(bad)?, spatial(&y.dims, "Y").map_err(bad)?);
    let a = attrs(&cx.node(n).op, xin).ok_or_else(|| cx.unsupported(n, "not a pool"))?;
    if a.kernel.iter().any(|&k| k < 1) {
        return Err(cx.unsupported(n, "kernel extents must be positive"));
    }
    let kernel: Vec<u64> = a.kernel.iter().map(|&k| k as u64).collect();
    let win = Window::new(&WindowAttrs { auto_pad: a.auto_pad, kernel: &kernel, strides: &a.strides, dilations: &a.dilations, pads: &a.pads }, xin, yout).map_err(|e| cx.unsupported(n, e))?;
    let ty = x.ty();
    if x.elem != y.elem || x.dims[..2] != y.dims[..2] {
        return Err(cx.unsupported(n, "X and Y differ in type, batch or channels"));
    }
    match a.reduction {
        Reduction::Max { .. } if ty == ScalarType::Bool => return Err(cx.unsupported(n, "MaxPool of bool")),
        Reduction::Average { .. } | Reduction::Lp(_) if !ty.is_float() => return Err(cx.unsupported(n, "an integer average or Lp pool")),
        Reduction::Lp(p) if p < 1 => return Err(cx.unsupported(n, format!("p = {p}"))),
        _ => {}
    }
    let indices = match a.reduction {
        Reduction::Max { .. } => cx.output(n, 1)?,
        _ => None,
    };
    if indices.as_ref().is_some_and(|i| i.elem != ElemType::Scalar(ScalarType::I64) || i.dims != y.dims) {
        return Err(cx.unsupported(n, "Indices must be i64 shaped like Y"));
    }
    if matches!(a.reduction, Reduction::Max { .. }) && indices.is_none() && x.elem == ElemType::Scalar(ScalarType::F32) && win.rank() == 2 {
        // The runtime's maxpool2d over all N·C planes; its taps and NaN rule are the nest's below.
        let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = win.call_operands();
        let planes = Expr::idx((x.dims[0] * x.dims[1]) as i64);
        let pool = call::MaxPool2d { x: Addr::at(x.buf, 0), y: Addr::at(y.buf, 0), planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw };
        let mut k = cx.kernel(n);
        k.body = vec![Stmt::Call(pool.into())];
        cx.push(k);
        return Ok(());
    }
    let (plane, out_plane) = (win.plane() as i64, win.out_plane() as i64);
    let ost = strides(&win.output);
    // Column-major strides of the spatial dims, for `storage_order = 1`.
    let col_strides: Vec<i64> = (0..win.rank()).map(|i| win.input[..i].iter().product::<u64>() as i64).collect();
    let all_inside = (0..win.rank()).all(|i| win.always_inside(i));
    let mut dims = vec![x.dims[0] * x.dims[1]];
    dims.extend(&win.output);
    let mut k = cx.kernel(n);
    k.body = k.nest(&dims, |k, idx| {
        let (nc, o) = (&idx[0], &idx[1..]);
        let out_at = nc.clone() * out_plane + linear(o, &ost);
        let base = nc.clone() * plane;
        let mut body = Vec::new();
        match a.reduction {
            Reduction::Max { column_major } => {
                let (acc, best) = (k.var(ty), k.var(ScalarType::I64));
                body.extend([Stmt::Local(acc, lowest(ty)), Stmt::Local(best, Expr::idx(-1))]);
                body.extend(k.nest(&win.kernel, |k, t| {
                    let pos = win.positions(o, t);
                    let v = k.var(ty);
                    let at = base.clone() + if column_major { linear(&pos, &col_strides) } else { win.flat(&pos) };
                    let better = Expr::Var(v).cmp(CmpOp::Gt, Expr::Var(acc)).bin(BinOp::Or, Expr::Var(best).cmp(CmpOp::Lt, Expr::idx(0)));
                    let take = vec![Stmt::Assign(acc, Expr::Var(v)), Stmt::Assign(best, at)];
                    guarded(win.inside(&pos), vec![Stmt::Let(v, Expr::load(x.buf, base.clone() + win.flat(&pos))), Stmt::If { cond: better, then: take, otherwise: Vec::new() }])
                }));
                // A window with no tap inside the input yields 0 and index −1, as ONNX's reference does.
                let found = Expr::Var(best).cmp(CmpOp::Ge, Expr::idx(0));
                body.push(Stmt::Store { buf: y.buf, index: out_at.clone(), value: found.select(Expr::Var(acc), zero(ty)) });
                if let Some(ind) = &indices {
                    body.push(Stmt::Store { buf: ind.buf, index: out_at, value: Expr::Var(best) });
                }
            }
            Reduction::Average { include_pad } => {
                let (sum, count) = (k.var(ty), k.var(ScalarType::I64));
                body.extend([Stmt::Local(sum, zero(ty)), Stmt::Local(count, Expr::idx(0))]);
                body.extend(k.nest(&win.kernel, |_, t| {
                    let pos = win.positions(o, t);
                    let add = Stmt::Assign(sum, Expr::Var(sum) + Expr::load(x.buf, base.clone() + win.flat(&pos)));
                    let counted = Stmt::Assign(count, Expr::Var(count) + 1);
                    if include_pad {
                        // Taps in the explicit padding count; taps past it (ceil_mode) do not.
                        let padded = all((0..win.rank()).filter(|&i| !win.always_inside(i)).map(|i| in_range(pos[i].clone(), -win.pad_begin[i], win.input[i] as i64 + win.pad_end[i])));
                        let mut then = vec![counted];
                        then.extend(guarded(win.inside(&pos), vec![add]));
                        guarded(padded, then)
                    } else {
                        guarded(win.inside(&pos), vec![add, counted])
                    }
                }));
                let divisor = if all_inside { Expr::float(ty, win.taps() as f64) } else { Expr::Var(count).cast(ty) };
                body.push(Stmt::Store { buf: y.buf, index: out_at, value: Expr::Var(sum) / divisor });
            }
            Reduction::Lp(p) => {
                let sum = k.var(ty);
                body.push(Stmt::Local(sum, zero(ty)));
                body.extend(k.nest(&win.kernel, |_, t| {
                    let pos = win.positions(o, t);
                    let v = Expr::load(x.buf, base.clone() + win.flat(&pos));
                    let term = match p {
                        1 => v.un(UnOp::Abs),
                        2 => v.clone() * v,
                        _ => Expr::Math(MathFn::Pow, vec![v.un(UnOp::Abs), Expr::float(ty, p as f64)]),
                    };
                    guarded(win.inside(&pos), vec![Stmt::Assign(sum, Expr::Var(sum) + term)])
                }));
                let value = match p {
                    1 => Expr::Var(sum),
                    2 => Expr::Var(sum).un(UnOp::Sqrt),
                    _ => Expr::Math(MathFn::Pow, vec![Expr::Var(sum), Expr::float(ty, 1.0 / p as f64)]),
                };
                body.push(Stmt::Store { buf: y.buf, index: out_at, value });
            }
        }
        body
    });
    cx.push(k);
    Ok(())
}

/// MaxUnpool: zeros, then each input element stored at its index. Indices are flat over the
/// shape MaxPool's attributes infer (`(in − 1)·stride − pads + kernel`); a larger
/// `output_shape` holds that block in its leading corner, as ONNX's reference places it. An
/// index outside the inferred shape is a run-time error.
pub(super) fn max_unpool(cx: &mut Lowerer<'_>, n: NodeId, a: &MaxUnpool) -> Result<(), LowerError> {
    let (x, ind, y) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.required_output(n, 0)?);
    if ind.dims != x.dims || ind.elem != ElemType::Scalar(ScalarType::I64) || x.elem != y.elem {
        return Err(cx.unsupported(n, "I must be i64 shaped like X, and Y typed like X"));
    }
    let xin = spatial(&x.dims, "X").map_err(|e| cx.unsupported(n, e))?;
    let r = xin.len();
    let st = if a.strides.is_empty() { vec![1; r] } else { a.strides.clone() };
    let pads = if a.pads.is_empty() { vec![0; 2 * r] } else { a.pads.clone() };
    if a.kernel_shape.len() != r || st.len() != r || pads.len() != 2 * r || y.rank() != r + 2 {
        return Err(cx.unsupported(n, "kernel_shape, strides and pads do not fit X"));
    }
    let mut inferred = x.dims[..2].to_vec();
    for i in 0..r {
        let d = (xin[i] as i64 - 1) * st[i] - pads[i] - pads[r + i] + a.kernel_shape[i];
        inferred.push(u64::try_from(d).map_err(|_| cx.unsupported(n, "the inferred output shape is negative"))?);
    }
    if inferred.iter().zip(&y.dims).any(|(&i, &o)| i > o) {
        return Err(cx.unsupported(n, format!("output shape {:?} is smaller than the inferred {inferred:?}", y.dims)));
    }
    let total: u64 = inferred.iter().product();
    let err = cx.error(n, format!("an index is outside the {total} elements of the unpooled shape {inferred:?}"));
    let ty = y.ty();
    let mut k = cx.kernel(n);
    let mut body = k.nest(&[y.numel()], |_, i| vec![Stmt::Store { buf: y.buf, index: i[0].clone(), value: zero(ty) }]);
    let (ist, yst) = (strides(&inferred), strides(&y.dims));
    body.extend(k.nest(&[x.numel()], |k, e| {
        let at = k.var(ScalarType::I64);
        // Re-linearize the index over the output's dims when they are larger.
        let target = if inferred == y.dims {
            Expr::Var(at)
        } else {
            (0..inferred.len()).fold(Expr::idx(0), |acc, d| acc + (Expr::Var(at) / ist[d]) % inferred[d] as i64 * yst[d])
        };
        vec![
            Stmt::Let(at, Expr::load(ind.buf, e[0].clone())),
            Stmt::Check { cond: in_range(Expr::Var(at), 0, total as i64), error: err },
            Stmt::Store { buf: y.buf, index: target, value: Expr::load(x.buf, e[0].clone()) },
        ]
    }));
    k.body = body;
    cx.push(k);
    Ok(())
}
