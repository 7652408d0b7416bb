//! Recognition of the ops exporters decompose: GELU (erf and tanh forms), LayerNorm and Softmax
//! become the single ops, and scaled dot-product attention becomes `Attention`. These rules
//! run after `fusion.rs`'s, in the same topic.

use egg::Id;
use kiln_tir::op::{Attention, Gelu, GeluApprox, LayerNormalization, Softmax, Transpose};
use kiln_tir::{DType, Op, OpKind};

use super::fusion::is_f32;
use super::{Hit, Rule, Topic, add, dtype, find, pick, same_type, splat, ty, value};
use crate::analysis::Egraph;

type Apply = fn(&mut Egraph, &Hit<'_>) -> Option<Id>;

pub(super) fn rules() -> Vec<Rule> {
    let r = |name, algebra, pattern, apply: Apply| Rule {
        name,
        algebra,
        topic: Topic::Fusion,
        pattern,
        apply,
    };
    vec![
        r(
            "gelu-erf",
            "x · (½ · (1 + erf(x/√2))) -> gelu(x)",
            "(mul ?x (mul ?h (add (erf ?u) ?one)))",
            gelu_erf,
        ),
        r(
            "gelu-erf-half-first",
            "(x · ½) · (1 + erf(x/√2)) -> gelu(x)",
            "(mul (mul ?x ?h) (add (erf ?u) ?one))",
            gelu_erf,
        ),
        r(
            "gelu-erf-half-last",
            "(x · (1 + erf(x/√2))) · ½ -> gelu(x)",
            "(mul (mul ?x (add (erf ?u) ?one)) ?h)",
            gelu_erf,
        ),
        r(
            "gelu-tanh",
            "(½x) · (1 + tanh(√(2/π)·(x + 0.044715·x³))) -> gelu<tanh>(x)",
            "(mul ?hx (add ?one (tanh ?u)))",
            gelu_tanh,
        ),
        r(
            "layer-norm",
            "(x - mean(x)) / √(mean((x - mean(x))²) + ε) · γ + β -> layer_norm(x, γ, β)",
            "(add (mul (div ?d (sqrt (add ?var ?eps))) ?gamma) ?beta)",
            layer_norm,
        ),
        r(
            "softmax",
            "exp(x - max(x)) / Σ exp(x - max(x)) -> softmax(x)",
            "(div ?e (reduce_sum ?s ?axes))",
            softmax,
        ),
        r(
            "attention",
            "softmax(s·(q·kᵀ) + mask) · v -> attention(q, k, v, mask)",
            "(matmul (softmax ?s) ?v)",
            attention,
        ),
    ]
}


fn near(v: Option<f64>, want: f64) -> bool {
    v.is_some_and(|v| (v - want).abs() <= 1e-6 * want.abs().max(1.0))
}

/// True when class `u` computes `x / √2` (or `x · (1/√2)`).
fn is_x_over_sqrt2(eg: &Egraph, u: Id, x: Id) -> bool {
    let x = eg.find(x);
    eg[u].nodes.iter().any(|n| match (n.kind(), &n.args[..]) {
        (Some(OpKind::Div), [a, c]) => {
            eg.find(*a) == x && near(splat(eg, *c), std::f64::consts::SQRT_2)
        }
        (Some(OpKind::Mul), [a, c]) => {
            eg.find(*a) == x && near(splat(eg, *c), std::f64::consts::FRAC_1_SQRT_2)
        }
        _ => false,
    })
}

fn gelu_erf(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, h, u, one) = (hit.var("?x"), hit.var("?h"), hit.var("?u"), hit.var("?one"));
    let float = dtype(eg, x)
        .is_some_and(|d| matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16));
    if !float
        || !near(splat(eg, h), 0.5)
        || !near(splat(eg, one), 1.0)
        || !is_x_over_sqrt2(eg, u, x)
        || !same_type(eg, x, hit.class)
    {
        return None;
    }
    let (.., node) = find(eg, hit.class, OpKind::Mul)?;
    add(
        eg,
        hit.rule,
        Op::Gelu(Gelu {
            approximate: GeluApprox::None,
        }),
        &[Some(x)],
        &[&node],
    )
}

/// The `x` of a class computing `½·x` (either operand order).
fn half_of(eg: &Egraph, hx: Id) -> Option<Id> {
    eg[hx]
        .nodes
        .iter()
        .find_map(|n| match (n.kind(), &n.args[..]) {
            (Some(OpKind::Mul), [a, c]) if near(splat(eg, *c), 0.5) => Some(*a),
            _ => None,
        })
}

/// True when class `u` computes `√(2/π)·(x + 0.044715·x³)` in the exporters' usual shape.
fn is_tanh_arg(eg: &Egraph, u: Id, x: Id) -> bool {
    let x = eg.find(x);
    let cube = |c: Id| {
        eg[c].nodes.iter().any(|n| match (n.kind(), &n.args[..]) {
            (Some(OpKind::Pow), [a, e]) => eg.find(*a) == x && near(splat(eg, *e), 3.0),
            _ => false,
        })
    };
    let inner = |s: Id| {
        eg[s].nodes.iter().any(|n| match (n.kind(), &n.args[..]) {
            (Some(OpKind::Add), [a, t]) => {
                eg.find(*a) == x
                    && eg[*t].nodes.iter().any(|m| match (m.kind(), &m.args[..]) {
                        (Some(OpKind::Mul), [p, k]) => cube(*p) && near(splat(eg, *k), 0.044715),
                        _ => false,
                    })
            }
            _ => false,
        })
    };
    eg[u].nodes.iter().any(|n| match (n.kind(), &n.args[..]) {
        (Some(OpKind::Mul), [s, k]) => {
            inner(*s) && near(splat(eg, *k), (2.0 / std::f64::consts::PI).sqrt())
        }
        _ => false,
    })
}

fn gelu_tanh(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (hx, one, u) = (hit.var("?hx"), hit.var("?one"), hit.var("?u"));
    let x = half_of(eg, hx)?;
    if !near(splat(eg, one), 1.0)
        || !is_tanh_arg(eg, u, x)
        || !same_type(eg, x, hit.class)
        || !is_f32(eg, x)
    {
        return None;
    }
    let (.., node) = find(eg, hit.class, OpKind::Mul)?;
    add(
        eg,
        hit.rule,
        Op::Gelu(Gelu {
            approximate: GeluApprox::Tanh,
        }),
        &[Some(x)],
        &[&node],
    )
}

/// True when `axes` (a class) is the single last axis of a rank-`rank` tensor.
fn last_axis(eg: &Egraph, axes: Option<Id>, rank: usize) -> bool {
    let Some(v) = axes.and_then(|a| value(eg, a)).and_then(|t| t.to_i64s()) else {
        return false;
    };
    v.len() == 1 && (v[0] == -1 || v[0] == rank as i64 - 1)
}

/// The `x` of a class computing `ReduceMean(x, [-1], keepdims=1)`.
fn mean_last(eg: &Egraph, class: Id) -> Option<Id> {
    let (Op::ReduceMean(r), args, _) = find(eg, class, OpKind::ReduceMean)? else {
        return None;
    };
    let x = args.first().copied().flatten()?;
    (r.keepdims == 1 && last_axis(eg, args.get(1).copied().flatten(), ty(eg, x)?.rank()))
        .then_some(x)
}

fn layer_norm(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (d, var, eps, gamma, beta) = (
        hit.var("?d"),
        hit.var("?var"),
        hit.var("?eps"),
        hit.var("?gamma"),
        hit.var("?beta"),
    );
    // d = x - mean(x)
    let (_, sub, _) = find(eg, d, OpKind::Sub)?;
    let (x, mean) = (
        sub.first().copied().flatten()?,
        sub.get(1).copied().flatten()?,
    );
    if mean_last(eg, mean).map(|m| eg.find(m)) != Some(eg.find(x)) {
        return None;
    }
    // var = mean(d²), with d² as Pow(d, 2) or d·d.
    let sq = mean_last(eg, var)?;
    let d = eg.find(d);
    let squares = eg[sq].nodes.iter().any(|n| match (n.kind(), &n.args[..]) {
        (Some(OpKind::Pow), [a, e]) => eg.find(*a) == d && near(splat(eg, *e), 2.0),
        (Some(OpKind::Mul), [a, b]) => eg.find(*a) == d && eg.find(*b) == d,
        _ => false,
    });
    let width = *ty(eg, x)?.known_dims()?.last()?;
    let vec_of_width = |c: Id| {
        ty(eg, c)
            .and_then(|t| t.known_dims())
            .is_some_and(|s| s == [width])
    };
    if !squares
        || !is_f32(eg, x)
        || !vec_of_width(gamma)
        || !vec_of_width(beta)
        || !same_type(eg, x, hit.class)
    {
        return None;
    }
    let epsilon = splat(eg, eps)? as f32;
    let (.., node) = find(eg, hit.class, OpKind::Add)?;
    add(
        eg,
        hit.rule,
        Op::LayerNormalization(LayerNormalization {
            axis: -1,
            epsilon,
            stash_type: DType::F32,
        }),
        &[Some(x), Some(gamma), Some(beta)],
        &[&node],
    )
}

fn softmax(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (e, axes) = (hit.var("?e"), hit.var("?axes"));
    let (fe, fa) = (eg.find(e), eg.find(axes));
    let sum_of_e = |eg: &Egraph, c: Id| {
        pick(eg, c, OpKind::ReduceSum, |n| {
            eg.find(n.args[0]) == fe && n.args.get(1).map(|&a| eg.find(a)) == Some(fa)
        })
    };
    let (.., div) = pick(eg, hit.class, OpKind::Div, |n| {
        eg.find(n.args[0]) == fe && sum_of_e(eg, n.args[1]).is_some()
    })?;
    let (Op::ReduceSum(rs), ..) = sum_of_e(eg, div.args[1])? else {
        return None;
    };
    let (_, exp_args, _) = find(eg, e, OpKind::Exp)?;
    let shifted = exp_args.first().copied().flatten()?;
    let (_, sub, _) = find(eg, shifted, OpKind::Sub)?;
    let (x, m) = (
        sub.first().copied().flatten()?,
        sub.get(1).copied().flatten()?,
    );
    let rank = ty(eg, x)?.rank();
    let (Op::ReduceMax(rm), max_args, _) = find(eg, m, OpKind::ReduceMax)? else {
        return None;
    };
    let max_of_x = max_args.first().copied().flatten().map(|a| eg.find(a)) == Some(eg.find(x))
        && rm.keepdims == 1
        && last_axis(eg, max_args.get(1).copied().flatten(), rank);
    if !max_of_x
        || rs.keepdims != 1
        || !last_axis(eg, Some(axes), rank)
        || !same_type(eg, x, hit.class)
    {
        return None;
    }
    add(
        eg,
        hit.rule,
        Op::Softmax(Softmax { axis: -1 }),
        &[Some(x)],
        &[&div],
    )
}

/// Peels constant scalar factors off class `c`: `(c', s)` with `c = c' · s`.
fn unscale(eg: &Egraph, mut c: Id) -> (Id, f64) {
    let mut scale = 1.0;
    for _ in 0..4 {
        let step = eg[c]
            .nodes
            .iter()
            .find_map(|n| match (n.kind(), &n.args[..]) {
                (Some(OpKind::Mul), [a, k]) => splat(eg, *k)
                    .filter(|_| ty(eg, *k).is_some_and(|t| t.numel() == Some(1)))
                    .map(|s| (*a, s)),
                (Some(OpKind::Div), [a, k]) => splat(eg, *k)
                    .filter(|s| *s != 0.0 && ty(eg, *k).is_some_and(|t| t.numel() == Some(1)))
                    .map(|s| (*a, 1.0 / s)),
                _ => None,
            });
        match step {
            Some((a, s)) => {
                c = a;
                scale *= s;
            }
            None => break,
        }
    }
    (c, scale)
}

fn attention(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (s, v) = (hit.var("?s"), hit.var("?v"));
    let (fs, fv) = (eg.find(s), eg.find(v));
    let softmax_of_s =
        |eg: &Egraph, c: Id| pick(eg, c, OpKind::Softmax, |n| eg.find(n.args[0]) == fs);
    let (.., mm) = pick(eg, hit.class, OpKind::MatMul, |n| {
        eg.find(n.args[1]) == fv && softmax_of_s(eg, n.args[0]).is_some()
    })?;
    let (Op::Softmax(sm), ..) = softmax_of_s(eg, mm.args[0])? else {
        return None;
    };
    let rank = ty(eg, s)?.rank();
    if rank != 4 || !(sm.axis == -1 || sm.axis == 3) || !is_f32(eg, v) || ty(eg, v)?.rank() != 4 {
        return None;
    }
    // scores = scale · (q · kᵀ) [+ mask]
    let (mut scores, mut mask) = (s, None);
    if let Some((_, args, _)) = find(eg, s, OpKind::Add) {
        let (a, b) = (
            args.first().copied().flatten()?,
            args.get(1).copied().flatten()?,
        );
        if find(eg, unscale(eg, a).0, OpKind::MatMul).is_some() {
            (scores, mask) = (a, Some(b));
        }
    }
    let (qk, outer) = unscale(eg, scores);
    let (_, qk_args, _) = find(eg, qk, OpKind::MatMul)?;
    let (q, sq) = unscale(eg, qk_args.first().copied().flatten()?);
    let (kt, sk) = unscale(eg, qk_args.get(1).copied().flatten()?);
    if ty(eg, q)?.rank() != 4 || ty(eg, kt)?.rank() != 4 || mask.is_some_and(|m| !is_f32(eg, m)) {
        return None;
    }
    let scale = (outer * sq * sk) as f32;
    let k = add(
        eg,
        hit.rule,
        Op::Transpose(Transpose {
            perm: vec![0, 1, 3, 2],
        }),
        &[Some(kt)],
        &[],
    )?;
    add(
        eg,
        hit.rule,
        Op::Attention(Attention {
            scale: Some(scale),
            ..Default::default()
        }),
        &[Some(q), Some(k), Some(v), mask],
        &[&mm],
    )
}
