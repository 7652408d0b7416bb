//! Layout: Transpose and Reshape cancel, shrink to views, or disappear into the op that
//! reads them; BatchNormalization and per-channel constant Mul fold into Conv weights.

use egg::Id;
use kiln_tir::op::{Conv, FusedMatMul, Reshape, Transpose};
use kiln_tir::{DType, Op, OpKind, Tensor};

use super::{
    Hit, Rule, Topic, add, add_constant, add_shape, constant, f32s, find, pick, root, same_type, ty,
};
use crate::analysis::Egraph;

type Apply = fn(&mut Egraph, &Hit<'_>) -> Option<Id>;

pub(super) fn rules() -> Vec<Rule> {
    let r = |name, algebra, pattern, apply: Apply| Rule {
        name,
        algebra,
        topic: Topic::Layout,
        pattern,
        apply,
    };
    vec![
        r(
            "transpose-transpose",
            "transpose<q>(transpose<p>(x)) -> transpose<p∘q>(x)",
            "(transpose (transpose ?x))",
            transpose_transpose,
        ),
        r(
            "transpose-identity",
            "transpose<0,1,...>(x) -> x",
            "(transpose ?x)",
            transpose_identity,
        ),
        r(
            "transpose-unit-dims",
            "transpose<p>(x) -> reshape(x) when p only moves size-1 axes",
            "(transpose ?x)",
            transpose_unit_dims,
        ),
        r(
            "reshape-reshape",
            "reshape(reshape(x, s), t) -> reshape(x, t)",
            "(reshape (reshape ?x ?s) ?t)",
            reshape_reshape,
        ),
        r(
            "view-identity",
            "reshape(x: T, s): T -> x",
            "(reshape ?x ?s)",
            view_identity,
        ),
        r(
            "squeeze-identity",
            "squeeze(x: T, a): T -> x",
            "(squeeze ?x ?s)",
            view_identity,
        ),
        r(
            "unsqueeze-identity",
            "unsqueeze(x: T, a): T -> x",
            "(unsqueeze ?x ?s)",
            view_identity,
        ),
        r(
            "identity-op",
            "identity(x) -> x",
            "(identity ?x)",
            |_, hit| Some(hit.var("?x")),
        ),
        r(
            "transpose-through-unit-reshape",
            "transpose<p>(reshape(y, [1..1, d...])) -> reshape(transpose<p'>(y)) when p keeps the unit axes",
            "(transpose (reshape ?y ?s))",
            transpose_through_unit_reshape,
        ),
        r(
            "mul-into-matmul",
            "mm(a, B, c) · k[N] -> mm(a, B·k, c·k) for constant B, c",
            "(mul ?m ?k)",
            mul_into_matmul,
        ),
        r(
            "add-through-reshape",
            "z + reshape(m) -> reshape(reshape(z) + m) when no operand broadcasts",
            "(add ?z (reshape ?m ?s))",
            add_through_reshape,
        ),
        r(
            "transpose-into-matmul",
            "a · transpose<..., n-1, n-2>(b) -> fused_matmul<transB>(a, b)",
            "(matmul ?a (transpose ?b))",
            transpose_into_matmul,
        ),
        r(
            "batchnorm-into-conv",
            "bn(conv(x, w, b), s, t, m, v) -> conv(x, w·s/√(v+ε), (b-m)·s/√(v+ε)+t)",
            "(batch_normalization ?c ?s ?t ?m ?v)",
            batchnorm_into_conv,
        ),
        r(
            "mul-into-conv",
            "conv(x, w, b) · k[M,1,1] -> conv(x, w·k, b·k)",
            "(mul ?c ?k)",
            mul_into_conv,
        ),
        r(
            "conv-dead-taps",
            "conv(x, w, b) -> conv(x, w[.., k0..=k1], b) when taps outside k0..=k1 only meet padding",
            "(conv ?x ?w ?b)",
            conv_dead_taps,
        ),
    ]
}

fn perm_of(op: &Op, rank: usize) -> Option<Vec<usize>> {
    let Op::Transpose(t) = op else { return None };
    if t.perm.is_empty() {
        return Some((0..rank).rev().collect());
    }
    let p: Vec<usize> = t
        .perm
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&i| i < rank))
        .collect::<Option<_>>()?;
    (p.len() == rank).then_some(p)
}

fn transpose_op(perm: &[usize]) -> Op {
    Op::Transpose(Transpose {
        perm: perm.iter().map(|&i| i as i64).collect(),
    })
}

fn transpose_transpose(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let rank = ty(eg, x)?.rank();
    let fx = eg.find(x);
    let of_x = |eg: &Egraph, c: Id| pick(eg, c, OpKind::Transpose, |m| eg.find(m.args[0]) == fx);
    let (outer, inner_args, node) = pick(eg, hit.class, OpKind::Transpose, |n| {
        of_x(eg, n.args[0]).is_some()
    })?;
    let (inner, _, inner_node) = of_x(eg, inner_args.first().copied().flatten()?)?;
    let (p, q) = (perm_of(&inner, rank)?, perm_of(&outer, rank)?);
    // out[i] = mid[q[i]] = x[p[q[i]]].
    let composed: Vec<usize> = q.iter().map(|&i| p[i]).collect();
    add(
        eg,
        hit.rule,
        transpose_op(&composed),
        &[Some(x)],
        &[&node, &inner_node],
    )
}

fn transpose_identity(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let (op, ..) = root(eg, hit, &[Some(x)])?;
    let p = perm_of(&op, ty(eg, x)?.rank())?;
    p.iter().enumerate().all(|(i, &j)| i == j).then_some(x)
}

fn transpose_unit_dims(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let dims = ty(eg, x)?.known_dims()?;
    let out = ty(eg, hit.class)?.known_dims()?;
    let (op, _, node) = root(eg, hit, &[Some(x)])?;
    let p = perm_of(&op, dims.len())?;
    // The axes longer than 1 must keep their order; then the bytes do not move.
    let moved: Vec<usize> = p.iter().copied().filter(|&i| dims[i] != 1).collect();
    if !moved.windows(2).all(|w| w[0] < w[1]) || p.iter().enumerate().all(|(i, &j)| i == j) {
        return None;
    }
    let shape = add_shape(eg, &out);
    add(
        eg,
        hit.rule,
        Op::Reshape(Reshape { allowzero: 0 }),
        &[Some(x), Some(shape)],
        &[&node],
    )
}

fn reshape_reshape(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let out = ty(eg, hit.class)?.known_dims()?;
    let (.., node) = root(eg, hit, &[None, Some(hit.var("?t"))])?;
    let shape = add_shape(eg, &out);
    add(
        eg,
        hit.rule,
        Op::Reshape(Reshape { allowzero: 0 }),
        &[Some(x), Some(shape)],
        &[&node],
    )
}

fn view_identity(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    (same_type(eg, x, hit.class) && ty(eg, x)?.known_dims().is_some()).then_some(x)
}

/// Moves an elementwise Add below a Reshape of one operand, so the Add meets the op that made
/// that operand (a product absorbs it as its residual).
fn add_through_reshape(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (z, m, s) = (hit.var("?z"), hit.var("?m"), hit.var("?s"));
    let out = ty(eg, hit.class)?.known_dims()?;
    let inner = ty(eg, m)?.known_dims()?;
    if !same_type(eg, z, hit.class) || ty(eg, m)?.dtype != ty(eg, z)?.dtype || inner.iter().product::<u64>() != out.iter().product::<u64>() {
        return None;
    }
    let (.., add_node) = root(eg, hit, &[Some(z), None])?;
    let (.., reshape_node) = pick(eg, add_node.args[1], OpKind::Reshape, |n| eg.find(n.args[0]) == eg.find(m) && eg.find(n.args[1]) == eg.find(s))?;
    let inner_shape = add_shape(eg, &inner);
    let rz = add(eg, hit.rule, Op::Reshape(Reshape { allowzero: 0 }), &[Some(z), Some(inner_shape)], &[])?;
    let sum = add(eg, hit.rule, Op::Add(kiln_tir::op::Add {}), &[Some(rz), Some(m)], &[&add_node])?;
    let out_shape = add_shape(eg, &out);
    add(eg, hit.rule, Op::Reshape(Reshape { allowzero: 0 }), &[Some(sum), Some(out_shape)], &[&reshape_node])
}

fn transpose_into_matmul(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (a, b) = (hit.var("?a"), hit.var("?b"));
    let rank = ty(eg, b)?.rank();
    let (fa, fb) = (eg.find(a), eg.find(b));
    let of_b = |eg: &Egraph, c: Id| pick(eg, c, OpKind::Transpose, |m| eg.find(m.args[0]) == fb);
    let (.., mm) = pick(eg, hit.class, OpKind::MatMul, |n| {
        eg.find(n.args[0]) == fa && of_b(eg, n.args[1]).is_some()
    })?;
    let (t, _, tnode) = of_b(eg, mm.args[1])?;
    let p = perm_of(&t, rank)?;
    let swapped = rank >= 2
        && p[rank - 2] == rank - 1
        && p[rank - 1] == rank - 2
        && p[..rank - 2].iter().enumerate().all(|(i, &j)| i == j);
    if !swapped || ty(eg, a)?.dtype != DType::F32 {
        return None;
    }
    add(
        eg,
        hit.rule,
        Op::FusedMatMul(FusedMatMul {
            transB: 1,
            ..Default::default()
        }),
        &[Some(a), Some(b)],
        &[&mm, &tnode],
    )
}

fn to_tensor(shape: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32s(shape, v)
}

/// A Conv whose weights (and bias) are constants.
struct ConstConv {
    conv: Conv,
    x: Id,
    w: Vec<f32>,
    wshape: Vec<u64>,
    b: Option<Vec<f32>>,
    node: crate::lang::ENode,
}

/// The Conv in class `c` with constant f32 weights (and bias).
fn const_conv(eg: &Egraph, c: Id) -> Option<ConstConv> {
    let (Op::Conv(conv), args, node) = find(eg, c, OpKind::Conv)? else {
        return None;
    };
    let (x, w) = (args.first().copied().flatten()?, args.get(1).copied().flatten()?);
    let wshape = ty(eg, w)?.known_dims()?;
    let wv = f32s(eg, w)?;
    let b = match args.get(2).copied().flatten() {
        Some(b) => Some(f32s(eg, b)?),
        None => None,
    };
    Some(ConstConv { conv, x, w: wv, wshape, b, node })
}

/// Scales conv weights and bias per output channel: `w[m] · k[m]`, `b[m] · k[m] + t[m]`.
fn rescale(eg: &mut Egraph, rule: &'static str, c: ConstConv, k: &[f64], t: &[f64], also: &crate::lang::ENode) -> Option<Id> {
    let ConstConv { conv, x, w, wshape, b, node } = c;
    let b = b.as_deref();
    let m = wshape[0] as usize;
    if k.len() != m || t.len() != m || m == 0 || !w.len().is_multiple_of(m) {
        return None;
    }
    let per = w.len() / m;
    let nw: Vec<f32> = w
        .iter()
        .enumerate()
        .map(|(i, &v)| (f64::from(v) * k[i / per]) as f32)
        .collect();
    let nb: Vec<f32> = (0..m)
        .map(|i| (b.map_or(0.0, |b| f64::from(b[i])) * k[i] + t[i]) as f32)
        .collect();
    let wc = add_constant(eg, to_tensor(&wshape, &nw));
    let bc = add_constant(eg, to_tensor(&[m as u64], &nb));
    add(eg, rule, Op::Conv(conv), &[Some(x), Some(wc), Some(bc)], &[also, &node])
}

fn batchnorm_into_conv(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let args = ["?c", "?s", "?t", "?m", "?v"].map(|v| Some(hit.var(v)));
    let (Op::BatchNormalization(bn), _, bnode) = root(eg, hit, &args)? else {
        return None;
    };
    if bn.training_mode != 0 {
        return None;
    }
    let c = const_conv(eg, hit.var("?c"))?;
    let [s, t, mean, var] = ["?s", "?t", "?m", "?v"].map(|v| f32s(eg, hit.var(v)));
    let (s, t, mean, var) = (s?, t?, mean?, var?);
    let inv: Vec<f64> = s
        .iter()
        .zip(&var)
        .map(|(&s, &v)| f64::from(s) / (f64::from(v) + f64::from(bn.epsilon)).sqrt())
        .collect();
    let shift: Vec<f64> = (0..inv.len())
        .map(|i| f64::from(t[i]) - f64::from(mean[i]) * inv[i])
        .collect();
    rescale(eg, hit.rule, c, &inv, &shift, &bnode)
}

fn mul_into_conv(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let k = hit.var("?k");
    // Declined matches are tried every iteration: what decides cheaply comes before the
    // weights are read.
    constant(eg, k)?;
    let (Op::Conv(_), args, _) = find(eg, hit.var("?c"), OpKind::Conv)? else {
        return None;
    };
    let m = *ty(eg, args.get(1).copied().flatten()?)?.known_dims()?.first()?;
    let kd = ty(eg, k)?.known_dims()?;
    // k must be one scalar or per output channel: [M, 1, ...] or [1, M, 1, ...] against
    // the output's [N, M, spatial...].
    let rank = ty(eg, hit.class)?.rank();
    let numel: u64 = kd.iter().product();
    let per_channel = numel == m && kd.len() <= rank && kd.len() + 1 >= rank && {
        let lead = rank - kd.len();
        kd.iter()
            .enumerate()
            .all(|(i, &d)| if i + lead == 1 { d == m } else { d == 1 })
    };
    if !(per_channel || numel == 1 && kd.len() <= rank) || !same_type(eg, hit.class, hit.var("?c"))
    {
        return None;
    }
    let mut kv: Vec<f64> = f32s(eg, k)?.into_iter().map(f64::from).collect();
    if kv.len() == 1 {
        kv = vec![kv[0]; m as usize];
    }
    let c = const_conv(eg, hit.var("?c"))?;
    let (.., mnode) = root(eg, hit, &[Some(hit.var("?c")), Some(k)])?;
    let zeros = vec![0.0; kv.len()];
    rescale(eg, hit.rule, c, &kv, &zeros, &mnode)
}

/// The kernel taps `first..=last` along one spatial axis that read the input for some output
/// position: tap `t` reads `o·stride − pad + t·dilation` for outputs `o` in `0..out`. `None`
/// when no tap does.
fn live_taps(input: i64, out: i64, kernel: i64, stride: i64, dilation: i64, pad: i64) -> Option<(i64, i64)> {
    let live = |t: i64| {
        let c = t * dilation - pad;
        // The first output whose position is not before the input, and whether it is inside.
        let o = if c >= 0 { 0 } else { (-c + stride - 1) / stride };
        o < out && o * stride + c < input
    };
    let first = (0..kernel).find(|&t| live(t))?;
    let last = (0..kernel).rev().find(|&t| live(t))?;
    Some((first, last))
}

/// Drops the kernel rows and columns of a Conv with constant weights that only ever meet
/// padding, as a 3×3 layer's outer taps do on a 1×1 input: the smaller kernel, its padding
/// moved in by as much, computes the same sums without reading the dead weights.
fn conv_dead_taps(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, w, b) = (hit.var("?x"), hit.var("?w"), hit.var("?b"));
    let (Op::Conv(conv), _, node) = root(eg, hit, &[Some(x), Some(w), Some(b)])? else {
        return None;
    };
    let (xd, wd, yd) = (ty(eg, x)?.known_dims()?, ty(eg, w)?.known_dims()?, ty(eg, hit.class)?.known_dims()?);
    let rank = wd.len().checked_sub(2).filter(|&r| r > 0)?;
    if conv.auto_pad != kiln_tir::op::AutoPad::Notset || xd.len() != wd.len() || yd.len() != wd.len() {
        return None;
    }
    let attr = |v: &[i64], i: usize, default: i64| if v.is_empty() { Some(default) } else { v.get(i).copied() };
    let mut spans = Vec::with_capacity(rank);
    let mut pads = vec![0i64; 2 * rank];
    for i in 0..rank {
        let [input, out, kernel] = [xd[2 + i], yd[2 + i], wd[2 + i]].map(|d| i64::try_from(d).ok());
        let (input, out, kernel) = (input?, out?, kernel?);
        let (stride, dilation) = (attr(&conv.strides, i, 1)?, attr(&conv.dilations, i, 1)?);
        let (before, after) = (attr(&conv.pads, i, 0)?, attr(&conv.pads, rank + i, 0)?);
        if stride <= 0 || dilation <= 0 || attr(&conv.kernel_shape, i, kernel)? != kernel {
            return None;
        }
        let (first, last) = live_taps(input, out, kernel, stride, dilation, before)?;
        pads[i] = before - first * dilation;
        pads[rank + i] = after - (kernel - 1 - last) * dilation;
        if pads[i] < 0 || pads[rank + i] < 0 {
            return None;
        }
        spans.push((first as u64, (last - first + 1) as u64));
    }
    if spans.iter().zip(&wd[2..]).all(|(&(first, len), &k)| first == 0 && len == k) {
        return None;
    }
    // The kept weights are read from the constant's bytes: the dead ones need no copy.
    let weights = constant(eg, w).filter(|t| t.dtype == DType::F32)?.raw()?;
    let mut shape = wd[..2].to_vec();
    shape.extend(spans.iter().map(|&(_, len)| len));
    // Each kept weight's index in the old kernel, by the new one's row-major order.
    let old_strides: Vec<u64> = (0..wd.len()).map(|a| wd[a + 1..].iter().product()).collect();
    let total: u64 = shape.iter().product();
    let mut kept = Vec::with_capacity(usize::try_from(total).ok()?);
    let mut index = vec![0u64; shape.len()];
    for _ in 0..total {
        let at: u64 = index.iter().enumerate().map(|(a, &i)| (if a >= 2 { i + spans[a - 2].0 } else { i }) * old_strides[a]).sum();
        let byte = usize::try_from(at).ok()?.checked_mul(4)?;
        kept.push(f32::from_le_bytes(weights.get(byte..byte + 4)?.try_into().ok()?));
        for a in (0..shape.len()).rev() {
            index[a] += 1;
            if index[a] < shape[a] {
                break;
            }
            index[a] = 0;
        }
    }
    let smaller = Conv {
        kernel_shape: if conv.kernel_shape.is_empty() { Vec::new() } else { spans.iter().map(|&(_, len)| len as i64).collect() },
        pads,
        ..conv
    };
    let wc = add_constant(eg, to_tensor(&shape, &kept));
    add(eg, hit.rule, Op::Conv(smaller), &[Some(x), Some(wc), Some(b)], &[&node])
}

/// Scales a product's constant right-hand matrix (and bias) column by column.
fn mul_into_matmul(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (m, k) = (hit.var("?m"), hit.var("?k"));
    let mut p = super::fusion::as_product(eg, m)?;
    if p.args[3].is_some() || p.op.activation != kiln_tir::op::Activation::None || !same_type(eg, m, hit.class) {
        return None;
    }
    let b = p.args[1]?;
    let bdims = ty(eg, b)?.known_dims()?;
    let [rows, cols] = <[u64; 2]>::try_from(&bdims[..]).ok()?;
    let n = if p.op.transB != 0 { rows } else { cols };
    let kd = ty(eg, k)?.known_dims()?;
    let knum: u64 = kd.iter().product();
    let along_n = knum == n && kd.last() == Some(&n);
    if !(along_n || knum == 1) {
        return None;
    }
    let kv = f32s(eg, k)?;
    let scale = |j: usize| if kv.len() == 1 { kv[0] } else { kv[j] };
    let bv = f32s(eg, b)?;
    let scaled: Vec<f32> = bv
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let j = if p.op.transB != 0 { i / cols as usize } else { i % cols as usize };
            v * scale(j)
        })
        .collect();
    p.args[1] = Some(add_constant(eg, Tensor::from_f32s(&bdims, &scaled)));
    if let Some(c) = p.args[2] {
        let cv = f32s(eg, c)?;
        let cs: Vec<f32> = cv.iter().enumerate().map(|(j, &v)| v * scale(j)).collect();
        p.args[2] = Some(add_constant(eg, Tensor::from_f32s(&[cs.len() as u64], &cs)));
    }
    let (.., mul_node) = root(eg, hit, &[Some(m), Some(k)])?;
    add(eg, hit.rule, Op::FusedMatMul(p.op), &p.args, &[&p.node, &mul_node])
}

/// A transpose of a reshape that only prepends unit axes, which the transpose leaves in
/// place, is the reshape of a transpose of the original: the transpose can then meet (and
/// cancel against) another one below.
fn transpose_through_unit_reshape(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (y, s) = (hit.var("?y"), hit.var("?s"));
    let inner = ty(eg, y)?.known_dims()?;
    let fy = eg.find(y);
    let fs = eg.find(s);
    let of_y = |eg: &Egraph, c: Id| pick(eg, c, OpKind::Reshape, |m| eg.find(m.args[0]) == fy && eg.find(m.args[1]) == fs);
    let (op, _, tnode) = pick(eg, hit.class, OpKind::Transpose, |n| of_y(eg, n.args[0]).is_some())?;
    let (.., rnode) = of_y(eg, tnode.args[0])?;
    let reshaped = ty(eg, tnode.args[0])?.known_dims()?;
    let k = reshaped.len().checked_sub(inner.len())?;
    if k == 0 || reshaped[..k].iter().any(|&d| d != 1) || reshaped[k..] != inner[..] {
        return None;
    }
    let p = perm_of(&op, reshaped.len())?;
    if p[..k].iter().enumerate().any(|(i, &j)| i != j) {
        return None;
    }
    let q: Vec<usize> = p[k..].iter().map(|&j| j - k).collect();
    let moved = add(eg, hit.rule, transpose_op(&q), &[Some(y)], &[&tnode])?;
    let out = ty(eg, hit.class)?.known_dims()?;
    let shape = add_shape(eg, &out);
    add(eg, hit.rule, Op::Reshape(Reshape { allowzero: 0 }), &[Some(moved), Some(shape)], &[&rnode])
}
