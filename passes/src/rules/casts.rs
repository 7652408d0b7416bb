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
    ]
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
