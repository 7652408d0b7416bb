//! Normalizations: BatchNormalization, LayerNormalization, InstanceNormalization,
//! GroupNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN.

use kiln_tir::Op;

use crate::args::Args;
use crate::array::{Arr, broadcast_to, norm_axis};
use crate::error::{Result, invalid};
use crate::shape_ops::norm_axes;

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::BatchNormalization(o) => batch_norm(a, f64::from(o.epsilon), f64::from(o.momentum), o.training_mode != 0),
        Op::LayerNormalization(o) => layer_norm(a, o.axis, f64::from(o.epsilon), o.stash_type, false),
        Op::RMSNormalization(o) => layer_norm(a, o.axis, f64::from(o.epsilon), o.stash_type, true),
        Op::InstanceNormalization(o) => group_norm(a, None, f64::from(o.epsilon)),
        Op::GroupNormalization(o) => group_norm(a, Some(o.num_groups), f64::from(o.epsilon)),
        Op::LpNormalization(o) => lp_norm(a, o.axis, o.p),
        Op::MeanVarianceNormalization(o) => mvn(a, &o.axes),
        Op::LRN(o) => lrn(a, o.size, f64::from(o.alpha), f64::from(o.beta), f64::from(o.bias)),
        _ => return None,
    })
}

/// A per-channel parameter input with `channels` values.
fn per_channel(a: &Args, i: usize, channels: usize) -> Result<Vec<f64>> {
    let p = a.arr(i)?;
    if p.len() != channels {
        return Err(invalid(a.op, format!("input {i} has {} values for {channels} channels", p.len())));
    }
    Ok(p.f(a.op)?.to_vec())
}

/// `(batch, channels, spatial size)` of an `[N, C, ...]` input.
fn nc(a: &Args, x: &Arr) -> Result<(usize, usize, usize)> {
    if x.shape.len() < 2 {
        return Err(invalid(a.op, format!("input must have rank 2 or more, has shape {:?}", x.shape)));
    }
    Ok((x.shape[0], x.shape[1], x.shape[2..].iter().product()))
}

fn batch_norm(a: &Args, eps: f64, momentum: f64, training: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (n, c, s) = nc(a, &x)?;
    let v = x.f(a.op)?;
    let (scale, bias) = (per_channel(a, 1, c)?, per_channel(a, 2, c)?);
    let (in_mean, in_var) = (per_channel(a, 3, c)?, per_channel(a, 4, c)?);
    let (mean, var) = if training {
        let count = (n * s) as f64;
        let lanes = |ch: usize| (0..n).flat_map(move |b| ((b * c + ch) * s..(b * c + ch + 1) * s).map(|i| v[i]));
        let mean: Vec<f64> = (0..c).map(|ch| lanes(ch).sum::<f64>() / count).collect();
        let var: Vec<f64> = (0..c).map(|ch| lanes(ch).map(|e| (e - mean[ch]).powi(2)).sum::<f64>() / count).collect();
        (mean, var)
    } else {
        (in_mean.clone(), in_var.clone())
    };
    let mut y = vec![0.0; v.len()];
    for (i, (out, &e)) in y.iter_mut().zip(v).enumerate() {
        let ch = (i / s.max(1)) % c;
        *out = (e - mean[ch]) / (var[ch] + eps).sqrt() * scale[ch] + bias[ch];
    }
    let mut outs = vec![Arr::floats(x.dtype, x.shape.clone(), y)];
    if training {
        let run = |r: &[f64], cur: &[f64]| r.iter().zip(cur).map(|(&r, &c)| r * momentum + c * (1.0 - momentum)).collect();
        outs.push(Arr::floats(x.dtype, vec![c], run(&in_mean, &mean)));
        outs.push(Arr::floats(x.dtype, vec![c], run(&in_var, &var)));
    }
    Ok(outs)
}

/// LayerNormalization (outputs Y, Mean, InvStdDev) or, with `rms`, RMSNormalization: both
/// normalize over axes `axis..rank`, then scale (and shift) with inputs broadcast to X.
fn layer_norm(a: &Args, axis: i64, eps: f64, stash: kiln_tir::DType, rms: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let v = x.f(a.op)?;
    let scale = broadcast_to(a.op, &a.arr(1)?, &x.shape)?;
    let scale = scale.f(a.op)?;
    let bias = if rms { None } else { a.opt_arr(2)?.map(|b| broadcast_to(a.op, &b, &x.shape)).transpose()? };
    let bias = bias.as_ref().map(|b| b.f(a.op)).transpose()?;
    let inner: usize = x.shape[ax..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    let mut y = vec![0.0; v.len()];
    let (mut means, mut inv_stds) = (Vec::with_capacity(outer), Vec::with_capacity(outer));
    for o in 0..outer {
        let lane = &v[o * inner..(o + 1) * inner];
        let mean = if rms { 0.0 } else { lane.iter().sum::<f64>() / inner as f64 };
        let var = lane.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / inner as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for i in o * inner..(o + 1) * inner {
            y[i] = (v[i] - mean) * inv * scale[i] + bias.map_or(0.0, |b| b[i]);
        }
        means.push(mean);
        inv_stds.push(inv);
    }
    let mut stat_shape = x.shape[..ax].to_vec();
    stat_shape.resize(x.shape.len(), 1);
    let mut outs = vec![Arr::floats(x.dtype, x.shape.clone(), y)];
    if !rms {
        outs.push(Arr::floats(stash, stat_shape.clone(), means));
        outs.push(Arr::floats(stash, stat_shape, inv_stds));
    }
    Ok(outs)
}

/// GroupNormalization with `groups`, or InstanceNormalization (one group per channel); the
/// scale and bias are per channel.
fn group_norm(a: &Args, groups: Option<i64>, eps: f64) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (n, c, s) = nc(a, &x)?;
    let g = match groups {
        None => c,
        Some(g) => usize::try_from(g).ok().filter(|&g| g > 0 && c % g == 0).ok_or_else(|| invalid(a.op, format!("num_groups {g} does not divide {c} channels")))?,
    };
    let (scale, bias) = (per_channel(a, 1, c)?, per_channel(a, 2, c)?);
    let v = x.f(a.op)?;
    let lane = c / g * s;
    let mut y = vec![0.0; v.len()];
    for l in 0..n * g {
        let part = &v[l * lane..(l + 1) * lane];
        let mean = part.iter().sum::<f64>() / lane as f64;
        let var = part.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / lane as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for i in l * lane..(l + 1) * lane {
            let ch = (i / s.max(1)) % c;
            y[i] = (v[i] - mean) * inv * scale[ch] + bias[ch];
        }
    }
    Ok(vec![Arr::floats(x.dtype, x.shape.clone(), y)])
}

fn lp_norm(a: &Args, axis: i64, p: i64) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    if p != 1 && p != 2 {
        return Err(invalid(a.op, format!("p = {p} is not 1 or 2")));
    }
    let v = x.f(a.op)?;
    let (outer, dim, inner) = (x.shape[..ax].iter().product::<usize>(), x.shape[ax], x.shape[ax + 1..].iter().product::<usize>());
    let mut y = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * dim + j) * inner + i;
            let norm = if p == 1 { (0..dim).map(|j| v[at(j)].abs()).sum::<f64>() } else { (0..dim).map(|j| v[at(j)].powi(2)).sum::<f64>().sqrt() };
            // A zero norm gives zeros, as the ONNX reference defines.
            (0..dim).for_each(|j| y[at(j)] = if norm == 0.0 { 0.0 } else { v[at(j)] / norm });
        }
    }
    Ok(vec![Arr::floats(x.dtype, x.shape.clone(), y)])
}

/// `(X - mean) / (sqrt(variance) + 1e-9)` over `axes`, as ONNX's function body defines it.
fn mvn(a: &Args, axes: &[i64]) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let axes = norm_axes(a.op, axes, x.shape.len())?;
    let v = x.f(a.op)?;
    let st = crate::array::strides(&x.shape);
    let key = |i: usize| -> usize { (0..x.shape.len()).filter(|d| !axes.contains(d)).map(|d| (i / st[d]) % x.shape[d] * st[d]).sum() };
    let mut groups: std::collections::BTreeMap<usize, (f64, f64, usize)> = std::collections::BTreeMap::new();
    for (i, &e) in v.iter().enumerate() {
        let g = groups.entry(key(i)).or_insert((0.0, 0.0, 0));
        g.0 += e;
        g.2 += 1;
    }
    for (i, &e) in v.iter().enumerate() {
        if let Some(g) = groups.get_mut(&key(i)) {
            let mean = g.0 / g.2 as f64;
            g.1 += (e - mean).powi(2);
        }
    }
    let y = v
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            let (sum, sq, n) = groups.get(&key(i)).copied().unwrap_or((0.0, 0.0, 1));
            (e - sum / n as f64) / ((sq / n as f64).sqrt() + 1e-9)
        })
        .collect();
    Ok(vec![Arr::floats(x.dtype, x.shape.clone(), y)])
}

fn lrn(a: &Args, size: i64, alpha: f64, beta: f64, bias: f64) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (n, c, s) = nc(a, &x)?;
    let size = usize::try_from(size).ok().filter(|&v| v > 0).ok_or_else(|| invalid(a.op, format!("size {size} must be positive")))?;
    let v = x.f(a.op)?;
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let mut y = vec![0.0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let (lo, hi) = (ch.saturating_sub(before), (ch + after).min(c - 1));
            for p in 0..s {
                let sq: f64 = (lo..=hi).map(|k| v[(b * c + k) * s + p].powi(2)).sum();
                let i = (b * c + ch) * s + p;
                y[i] = v[i] / (bias + alpha / size as f64 * sq).powf(beta);
            }
        }
    }
    Ok(vec![Arr::floats(x.dtype, x.shape.clone(), y)])
}
