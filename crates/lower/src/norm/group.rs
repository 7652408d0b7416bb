//! InstanceNormalization, GroupNormalization and MeanVarianceNormalization: mean and variance
//! over groups of axes (spatial axes; channel groups and spatial axes; any given axes).

use kiln_tir::{DType, NodeId, Op};

use super::{expect_dims, expect_float, inv_std, moments, stats_type};
use kiln_loops::ir::*;
use crate::reduce::{axis, bind, convert, load_as, Split};
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is InstanceNormalization, GroupNormalization or MeanVarianceNormalization.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::InstanceNormalization(a) => {
            let epsilon = a.epsilon;
            channel_groups(cx, n, 0, epsilon, false)?;
        }
        Op::GroupNormalization(a) => {
            let (groups, epsilon, stash) = (a.num_groups, a.epsilon, a.stash_type == DType::F64);
            channel_groups(cx, n, groups, epsilon, stash)?;
        }
        Op::MeanVarianceNormalization(a) => {
            let axes = a.axes.clone();
            mvn(cx, n, &axes)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Instance (`groups == 0`: one group per channel) or group normalization of x [N, C, ...]
/// with per-channel scale and bias.
fn channel_groups(cx: &mut Lowerer<'_>, n: NodeId, groups: i64, epsilon: f32, stash_f64: bool) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    if x.rank() < 2 {
        return Err(cx.unsupported(n, "input of rank < 2"));
    }
    let c = x.dims[1];
    let g = if groups == 0 { c } else { u64::try_from(groups).unwrap_or(0) };
    if g == 0 || c % g != 0 {
        return Err(cx.unsupported(n, format!("{c} channels do not split into {groups} groups")));
    }
    let scale = cx.required(n, 1)?;
    let bias = cx.required(n, 2)?;
    if scale.numel() != c || bias.numel() != c || !scale.ty().is_float() || !bias.ty().is_float() {
        return Err(cx.unsupported(n, "scale and bias are not float vectors of the channel count"));
    }
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    let ct = stats_type(x.ty(), stash_f64);
    // A view of x as [N, groups, channels per group, spatial].
    let per = c / g;
    let view = [x.dims[0], g, per, x.dims[2..].iter().product()];
    let split = Split::new(&view, vec![false, false, true, true]);
    let mut k = cx.kernel(n);
    let body = k.nest(&split.outer_dims(), |k, o| {
        let (mut s, mean, var) = moments(k, &x, &split, o, ct);
        let inv = bind(k, &mut s, ct, inv_std(var, epsilon, ct));
        s.extend(k.nest(&split.inner_dims(), |_, j| {
            let full = split.full(o, j);
            let ch = full[1].clone() * per as i64 + full[2].clone();
            let at = split.flat(&full);
            let v = (load_as(&x, at.clone(), ct) - mean) * inv * load_as(&scale, ch.clone(), ct) + load_as(&bias, ch, ct);
            vec![Stmt::Store { buf: y.buf, index: at, value: convert(v, ct, y.ty()) }]
        }));
        s
    });
    k.body = body;
    cx.push(k);
    Ok(())
}

/// MeanVarianceNormalization: `(x − mean) / (std + 1e-9)` over `axes`.
fn mvn(cx: &mut Lowerer<'_>, n: NodeId, axes: &[i64]) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    expect_float(cx, n, &x)?;
    let mut inner = vec![false; x.rank()];
    for &a in axes {
        inner[axis(cx, n, a, x.rank())?] = true;
    }
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &x.dims)?;
    let ct = stats_type(x.ty(), false);
    let split = Split::new(&x.dims, inner);
    let mut k = cx.kernel(n);
    let body = k.nest(&split.outer_dims(), |k, o| {
        let (mut s, mean, var) = moments(k, &x, &split, o, ct);
        let denom = bind(k, &mut s, ct, var.un(UnOp::Sqrt) + Expr::float(ct, 1e-9));
        s.extend(k.nest(&split.inner_dims(), |_, j| {
            let at = split.index(o, j);
            let v = (load_as(&x, at.clone(), ct) - mean) / denom;
            vec![Stmt::Store { buf: y.buf, index: at, value: convert(v, ct, y.ty()) }]
        }));
        s
    });
    k.body = body;
    cx.push(k);
    Ok(())
}
