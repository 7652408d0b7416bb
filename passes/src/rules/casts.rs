//! Cast elimination. A cast is a function of the value alone, so a cast whose input came
//! through an exact (value-preserving) cast can read the original value instead.

use egg::Id;
use kiln_tir::op::Cast;
use kiln_tir::{DType, Op, OpKind};

use super::{Hit, Rule, Topic, add, dtype, pick, root};
use crate::analysis::Egraph;

pub(super) fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "cast-same-type",
            algebra: "cast<T>(x: T) -> x",
            topic: Topic::Casts,
            pattern: "(cast ?x)",
            apply: same_type,
        },
        Rule {
            name: "cast-like-resolve",
            algebra: "cast_like(x, t: T) -> cast<T>(x)",
            topic: Topic::Casts,
            pattern: "(cast_like ?x ?t)",
            apply: cast_like,
        },
        Rule {
            name: "cast-exact-chain",
            algebra: "cast<C>(cast<B>(x: A)) -> cast<C>(x) when A -> B is exact",
            topic: Topic::Casts,
            pattern: "(cast (cast ?x))",
            apply: chain,
        },
        Rule {
            name: "cast-before-transpose",
            algebra: "cast(transpose(x)) -> transpose(cast(x))",
            topic: Topic::Casts,
            pattern: "(cast (transpose ?x))",
            apply: cast_inward,
        },
        Rule {
            name: "cast-after-transpose",
            algebra: "transpose(cast(x)) -> cast(transpose(x))",
            topic: Topic::Casts,
            pattern: "(transpose (cast ?x))",
            apply: cast_outward,
        },
        Rule {
            name: "cast-before-reshape",
            algebra: "cast(reshape(x, s)) -> reshape(cast(x), s)",
            topic: Topic::Casts,
            pattern: "(cast (reshape ?x ?s))",
            apply: cast_inward,
        },
        Rule {
            name: "cast-after-reshape",
            algebra: "reshape(cast(x), s) -> cast(reshape(x, s))",
            topic: Topic::Casts,
            pattern: "(reshape (cast ?x) ?s)",
            apply: cast_outward,
        },
    ]
}

/// The data-movement op (Transpose or Reshape) in class `c` whose data input is `x`, with its
/// arguments.
fn movement_of(eg: &Egraph, c: Id, x: Id) -> Option<(Op, Vec<Option<Id>>, crate::lang::ENode)> {
    let fx = eg.find(x);
    [OpKind::Transpose, OpKind::Reshape].into_iter().find_map(|k| pick(eg, c, k, |n| eg.find(n.args[0]) == fx))
}

/// `cast(move(x)) -> move(cast(x))`: moving elements commutes with converting each of them.
/// Both orders stay in the e-graph; the cost model prefers moving the narrower elements.
fn cast_inward(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let fx = eg.find(x);
    let (cast, cast_args, cast_node) = pick(eg, hit.class, OpKind::Cast, |n| movement_of(eg, n.args[0], fx).is_some())?;
    let (mv, mut mv_args, mv_node) = movement_of(eg, cast_args.first().copied().flatten()?, x)?;
    let inner = add(eg, hit.rule, cast, &[Some(x)], &[&cast_node])?;
    mv_args[0] = Some(inner);
    add(eg, hit.rule, mv, &mv_args, &[&mv_node])
}

/// `move(cast(x)) -> cast(move(x))`.
fn cast_outward(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let fx = eg.find(x);
    let is_cast_of_x = |eg: &Egraph, c: Id| pick(eg, c, OpKind::Cast, |m| eg.find(m.args[0]) == fx);
    let (mv, mut mv_args, mv_node) = [OpKind::Transpose, OpKind::Reshape].into_iter().find_map(|k| pick(eg, hit.class, k, |n| is_cast_of_x(eg, n.args[0]).is_some()))?;
    let (cast, _, cast_node) = is_cast_of_x(eg, mv_args.first().copied().flatten()?)?;
    mv_args[0] = Some(x);
    let moved = add(eg, hit.rule, mv, &mv_args, &[&mv_node])?;
    add(eg, hit.rule, cast, &[Some(moved)], &[&cast_node])
}

/// True when every value of `from` is a value of `to`.
pub fn widens(from: DType, to: DType) -> bool {
    use DType::*;
    from == to
        || match from {
            Bool => matches!(
                to,
                I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64 | F16 | BF16 | F32 | F64
            ),
            I8 => matches!(to, I16 | I32 | I64 | F16 | BF16 | F32 | F64),
            U8 => matches!(
                to,
                I16 | U16 | I32 | U32 | I64 | U64 | F16 | BF16 | F32 | F64
            ),
            I16 => matches!(to, I32 | I64 | F32 | F64),
            U16 => matches!(to, I32 | U32 | I64 | U64 | F32 | F64),
            I32 => matches!(to, I64 | F64),
            U32 => matches!(to, I64 | U64 | F64),
            F16 | BF16 => matches!(to, F32 | F64),
            F32 => to == F64,
            _ => false,
        }
}

fn same_type(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let (Op::Cast(c), ..) = root(eg, hit, &[Some(x)])? else {
        return None;
    };
    (dtype(eg, x)? == c.to).then_some(x)
}

fn cast_like(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, t) = (hit.var("?x"), hit.var("?t"));
    let (Op::CastLike(c), _, node) = root(eg, hit, &[Some(x), Some(t)])? else {
        return None;
    };
    let op = Op::Cast(Cast {
        round_mode: c.round_mode,
        saturate: c.saturate,
        to: dtype(eg, t)?,
    });
    add(eg, hit.rule, op, &[Some(x)], &[&node])
}

fn chain(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let x = hit.var("?x");
    let fx = eg.find(x);
    let of_x = |eg: &Egraph, c: Id| pick(eg, c, OpKind::Cast, |m| eg.find(m.args[0]) == fx);
    let (outer, inner_args, outer_node) = pick(eg, hit.class, OpKind::Cast, |n| {
        of_x(eg, n.args[0]).is_some()
    })?;
    let (Op::Cast(mid), ..) = of_x(eg, inner_args.first().copied().flatten()?)? else {
        return None;
    };
    widens(dtype(eg, x)?, mid.to).then(|| add(eg, hit.rule, outer, &[Some(x)], &[&outer_node]))?
}
