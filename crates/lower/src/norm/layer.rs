//! LayerNormalization and RMSNormalization: normalization over the trailing axes from `axis`
//! on, with a scale (and for LayerNormalization a bias) broadcast to the input. In `f32` with
//! `f32` statistics, a scale and bias that vary along the normalized axes only and no Mean or
//! InvStdDev output, one call of the runtime's `layernorm`; otherwise a loop nest.

use kiln_tir::{DType, NodeId, Op};

use super::{broadcasts_to, expect_dims, expect_float, inv_std, moments, stats_type};
use kiln_loops::builder::broadcast_index;
use kiln_loops::call;
use kiln_loops::ir::*;
use crate::reduce::{axis, bind, convert, expect_len, fold_sum, load_as, Split};
use crate::linalg::is_f32;
use crate::{LowerError, Lowerer, Operand};

/// Which normalization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Subtract the mean, divide by the standard deviation.
    Layer,
    /// Divide by the root mean square.
    Rms,
}

/// Lowers `n` if it is LayerNormalization or RMSNormalization.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (kind, ax, epsilon, stash) = match &cx.node(n).op {
        Op::LayerNormalization(a) => (Kind::Layer, a.axis, a.epsilon, a.stash_type),
        Op::RMSNormalization(a) => (Kind::Rms, a.axis, a.epsilon, a.stash_type),
        _ => return Ok(false),
    };
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    let a = axis(cx, n, ax, x.rank())?;
    let scale = cx.required(n, 1)?;
    let bias = if kind == Kind::Layer { cx.input(n, 2)? } else { None };
    for p in std::iter::once(&scale).chain(&bias) {
        if !broadcasts_to(&p.dims, &x.dims) || !p.ty().is_float() {
            return Err(cx.unsupported(n, format!("scale or bias of shape {:?} does not broadcast to {:?}", p.dims, x.dims)));
        }
    }
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    let split = Split::trailing(&x.dims, a);
    let (mean_out, inv_out) = if kind == Kind::Layer { (cx.output(n, 1)?, cx.output(n, 2)?) } else { (None, None) };
    for o in mean_out.iter().chain(&inv_out) {
        expect_len(cx, n, o, split.outer_count())?;
    }
    let ct = stats_type(x.ty(), stash == DType::F64);
    // The common case, f32 statistics of f32 rows with a scale and bias per column and no
    // statistics outputs, is the runtime's vectorized `layernorm` over the rows.
    let per_column = |p: &Operand| {
        let lead = x.rank() - p.dims.len();
        (0..x.rank()).all(|i| {
            let d = if i < lead { 1 } else { p.dims[i - lead] };
            if i < a { d == 1 } else { d == x.dims[i] }
        })
    };
    let runtime = is_f32(&x)
        && is_f32(&y)
        && ct == ScalarType::F32
        && mean_out.is_none()
        && inv_out.is_none()
        && std::iter::once(&scale).chain(&bias).all(|p| is_f32(p) && per_column(p));
    if runtime {
        let int = |v: u64| Expr::idx(v as i64);
        let norm = call::LayerNorm {
            x: Addr::at(x.buf, 0),
            scale: Addr::at(scale.buf, 0),
            b: Addr::at(bias.as_ref().map_or(scale.buf, |b| b.buf), 0),
            y: Addr::at(y.buf, 0),
            rows: int(split.outer_count()),
            cols: int(split.inner_count()),
            bias: int(u64::from(bias.is_some())),
            rms: int(u64::from(kind == Kind::Rms)),
            epsilon: Expr::f32(epsilon),
        };
        let mut k = cx.kernel(n);
        k.body = vec![Stmt::Call(norm.into())];
        cx.push(k);
        return Ok(true);
    }
    let affine = |full: &[Expr], v: Expr| -> Expr {
        let v = v * load_as(&scale, broadcast_index(full, &scale.dims), ct);
        match &bias {
            Some(b) => v + load_as(b, broadcast_index(full, &b.dims), ct),
            None => v,
        }
    };
    let store = |out: &Option<Operand>, index: Expr, v: Expr| out.as_ref().map(|out| Stmt::Store { buf: out.buf, index, value: convert(v, ct, out.ty()) });

    let mut k = cx.kernel(n);
    let body = k.nest(&split.outer_dims(), |k, o| {
        let (mut s, center, inv) = match kind {
            Kind::Layer => {
                let (mut s, mean, var) = moments(k, &x, &split, o, ct);
                let inv = bind(k, &mut s, ct, inv_std(var, epsilon, ct));
                s.extend(store(&mean_out, split.outer_index(o), mean.clone()));
                s.extend(store(&inv_out, split.outer_index(o), inv.clone()));
                (s, Some(mean), inv)
            }
            Kind::Rms => {
                let (mut s, squares) = fold_sum(k, &split, o, ct, |f| {
                    let v = load_as(&x, split.flat(f), ct);
                    v.clone() * v
                });
                let inv = bind(k, &mut s, ct, inv_std(squares / Expr::float(ct, split.inner_count() as f64), epsilon, ct));
                (s, None, inv)
            }
        };
        s.extend(k.nest(&split.inner_dims(), |_, j| {
            let full = split.full(o, j);
            let v = load_as(&x, split.flat(&full), ct);
            let v = match center {
                Some(m) => v - m,
                None => v,
            };
            let v = affine(&full, v * inv);
            vec![Stmt::Store { buf: y.buf, index: split.flat(&full), value: convert(v, ct, y.ty()) }]
        }));
        s
    });
    k.body = body;
    cx.push(k);
    Ok(true)
}
