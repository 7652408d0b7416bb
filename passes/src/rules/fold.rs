//! Constant folding: a class whose value the analysis computed (every input known, the result
//! under the size limit) gets that value as a constant leaf, which extraction prefers. Shape
//! arithmetic collapses the same way once input shapes are bound: `Shape` of a static type
//! has a value, and so do the `Gather`/`Concat`/... chains that consume it.

use egg::Id;

use super::{Hit, Rule, Topic, add_constant, value};
use crate::analysis::Egraph;
use crate::lang::Head;

pub(super) fn rules() -> Vec<Rule> {
    vec![Rule {
        name: "fold-constant",
        algebra: "f(c1, ..., cn) -> eval(f, c1, ..., cn)",
        topic: Topic::Fold,
        pattern: "?x",
        apply: fold,
    }]
}

fn fold(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let class = &eg[hit.class];
    if class.nodes.iter().any(|n| matches!(n.head, Head::Leaf(_))) {
        return None;
    }
    let v = value(eg, hit.class)?.clone();
    Some(add_constant(eg, v))
}
