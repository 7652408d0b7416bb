//! The rewrite rules, one file per topic, and the few helpers every rule uses.
//!
//! A rule is a kebab-case name, its algebra in one line, an egg pattern that pins the shape of
//! the match, and an applier in Rust that checks what a pattern cannot (types, constant
//! values, attributes) and builds the replacement. Appliers build through [`add`], which type
//! checks the new node with the tensor IR's inference before it enters the e-graph and records
//! which rule made it.

mod algebra;
mod casts;
mod fold;
mod fusion;
mod layout;
mod recognize;

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use kiln_tir::{DType, Op, OpKind, Tensor, TensorType};

use crate::analysis::{Created, Egraph, Leaf, LeafOrigin, Tir, infer};
use crate::lang::{ENode, Head};

/// The topic a rule belongs to (the file it lives in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topic {
    /// Constant folding.
    Fold,
    /// Cast elimination.
    Casts,
    /// Algebraic identities and canonical forms.
    Algebra,
    /// Transpose/Reshape and weight layout.
    Layout,
    /// Fused ops.
    Fusion,
}

/// One rewrite rule.
pub struct Rule {
    /// Kebab-case name, shown in statistics and provenance.
    pub name: &'static str,
    /// The rule's algebra in one line.
    pub algebra: &'static str,
    /// Its topic.
    pub topic: Topic,
    /// The egg pattern (ops by text name, any attributes; `none` is an omitted input).
    pub pattern: &'static str,
    /// Builds the replacement for a match, or declines it.
    pub apply: fn(&mut Egraph, &Hit<'_>) -> Option<Id>,
}

/// One match: the matched class and the pattern variables.
pub struct Hit<'a> {
    /// The class the pattern's root matched.
    pub class: Id,
    /// The rule applying.
    pub rule: &'static str,
    /// The op kind at the pattern's root (`None` for a bare variable).
    pub root: Option<OpKind>,
    subst: &'a Subst,
    /// The pattern's variables by name (with their `?`).
    names: &'a [(String, Var)],
}

impl Hit<'_> {
    /// The class bound to pattern variable `name` (with its `?`).
    pub fn var(&self, name: &str) -> Id {
        // Rule patterns are compile-time strings checked by a test, so a bad name is a bug.
        self.opt_var(name).unwrap_or_else(|| panic!("rule {}: no pattern variable {name}", self.rule))
    }

    /// The class bound to pattern variable `name`, if the pattern has it.
    pub fn opt_var(&self, name: &str) -> Option<Id> {
        // A lookup among the pattern's few names: parsing a `Var` interns its name.
        let &(_, v) = self.names.iter().find(|(n, _)| n == name)?;
        self.subst.get(v).copied()
    }
}

/// Every rule, in topic order.
pub fn all() -> Vec<Rule> {
    let mut rules = Vec::new();
    rules.extend(fold::rules());
    rules.extend(casts::rules());
    rules.extend(algebra::rules());
    rules.extend(layout::rules());
    rules.extend(fusion::rules());
    rules.extend(recognize::rules());
    rules
}

struct RuleApplier {
    name: &'static str,
    root: Option<OpKind>,
    vars: Vec<Var>,
    /// The variables by name, for [`Hit::var`].
    names: Vec<(String, Var)>,
    apply: fn(&mut Egraph, &Hit<'_>) -> Option<Id>,
}

impl Applier<ENode, Tir> for RuleApplier {
    fn apply_one(
        &self,
        eg: &mut Egraph,
        class: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<ENode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        // egg searches every rule every iteration; a match already applied (up to merges
        // since) would only rebuild what it built before. A declined match is tried again:
        // what it waited for (a fused node in a class, a known value) may have arrived.
        let mut key = vec![eg.find(class)];
        key.extend(self.vars.iter().map(|&v| eg.find(subst[v])));
        if eg.analysis.applied.contains(&(self.name, key.clone())) {
            return Vec::new();
        }
        let hit = Hit { class, rule: self.name, root: self.root, subst, names: &self.names };
        let built = (self.apply)(eg, &hit);
        if built.is_some() {
            eg.analysis.applied.insert((self.name, key));
        }
        match built {
            Some(new) if eg.union(class, new) => vec![new],
            _ => Vec::new(),
        }
    }
}

/// The rules as egg rewrites.
pub fn rewrites(rules: &[Rule]) -> Vec<Rewrite<ENode, Tir>> {
    rules
        .iter()
        .map(|r| {
            let pattern: Pattern<ENode> = r
                .pattern
                .parse()
                .unwrap_or_else(|e| panic!("rule {}: bad pattern: {e}", r.name));
            let vars = pattern.vars();
            let root = match pattern.ast.as_ref().last() {
                Some(egg::ENodeOrVar::ENode(n)) => n.kind(),
                _ => None,
            };
            Rewrite::new(
                r.name,
                pattern,
                RuleApplier {
                    name: r.name,
                    root,
                    names: vars.iter().map(|v| (v.to_string(), *v)).collect(),
                    vars,
                    apply: r.apply,
                },
            )
            .unwrap_or_else(|e| panic!("rule {}: {e}", r.name))
        })
        .collect()
}

// ---- helpers shared by the rule files ----

/// The type of class `id`.
pub fn ty(eg: &Egraph, id: Id) -> Option<&TensorType> {
    eg[id].data.ty.as_ref()
}

/// The element type of class `id`.
pub fn dtype(eg: &Egraph, id: Id) -> Option<DType> {
    ty(eg, id).map(|t| t.dtype)
}

/// The known small value of class `id`.
pub fn value(eg: &Egraph, id: Id) -> Option<&Tensor> {
    eg[id].data.value.as_ref()
}

/// The value of class `id` when it is a constant leaf of any size (weights included).
pub fn constant(eg: &Egraph, id: Id) -> Option<&Tensor> {
    if let Some(v) = value(eg, id) {
        return Some(v);
    }
    eg[id].nodes.iter().find_map(|n| match n.head {
        Head::Leaf(i) => eg.analysis.leaves[i as usize]
            .value
            .as_ref()
            .filter(|t| t.raw().is_some()),
        _ => None,
    })
}

/// The elements of a float or integer constant as `f64`.
pub fn elements(t: &Tensor) -> Option<Vec<f64>> {
    let raw = t.raw()?;
    Some(match t.dtype {
        DType::F32 => raw
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DType::F64 => raw
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        _ => t.to_i64s()?.into_iter().map(|v| v as f64).collect(),
    })
}

/// The one value every element of class `id`'s constant has.
pub fn splat(eg: &Egraph, id: Id) -> Option<f64> {
    let v = elements(value(eg, id)?)?;
    let first = *v.first()?;
    v.iter()
        .all(|&x| x == first || (x.is_nan() && first.is_nan()))
        .then_some(first)
}

/// The `f32` elements of class `id`'s constant (any size).
pub fn f32s(eg: &Egraph, id: Id) -> Option<Vec<f32>> {
    let t = constant(eg, id)?;
    (t.dtype == DType::F32).then(|| {
        t.raw().map(|r| {
            r.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    })?
}

/// The first node of `kind` in class `id`: its op and inputs (`None` for omitted ones).
pub fn find(eg: &Egraph, id: Id, kind: OpKind) -> Option<(Op, Vec<Option<Id>>, ENode)> {
    let node = eg[id].nodes.iter().find(|n| n.kind() == Some(kind))?;
    let Head::Op(_, a) = node.head else {
        return None;
    };
    let args = node
        .args
        .iter()
        .map(|&c| (!is_absent(eg, c)).then_some(c))
        .collect();
    Some((eg.analysis.ops.get(a).clone(), args, node.clone()))
}

/// The first node of `kind` in class `id` that `pred` accepts. Appliers use it to read the
/// node a pattern matched: a class may hold several nodes of one kind (with other attributes
/// or arguments), and attributes must come from the node whose arguments the rule uses.
pub fn pick(
    eg: &Egraph,
    id: Id,
    kind: OpKind,
    pred: impl Fn(&ENode) -> bool,
) -> Option<(Op, Vec<Option<Id>>, ENode)> {
    let node = eg[id]
        .nodes
        .iter()
        .find(|n| n.kind() == Some(kind) && pred(n))?;
    let Head::Op(_, a) = node.head else {
        return None;
    };
    let args = node
        .args
        .iter()
        .map(|&c| (!is_absent(eg, c)).then_some(c))
        .collect();
    Some((eg.analysis.ops.get(a).clone(), args, node.clone()))
}

/// The node the pattern's root matched: of the root's kind, with `args` (canonical classes
/// of the pattern's variables, `None` where the pattern nests a node) as its arguments.
pub fn root(
    eg: &Egraph,
    hit: &Hit<'_>,
    args: &[Option<Id>],
) -> Option<(Op, Vec<Option<Id>>, ENode)> {
    let args: Vec<Option<Id>> = args.iter().map(|a| a.map(|a| eg.find(a))).collect();
    pick(eg, hit.class, hit.root?, |n| {
        n.args.len() == args.len()
            && n.args
                .iter()
                .zip(&args)
                .all(|(&x, y)| y.is_none_or(|y| eg.find(x) == y))
    })
}

/// True when class `id` holds an omitted input.
pub fn is_absent(eg: &Egraph, id: Id) -> bool {
    eg[id].nodes.iter().any(|n| n.head == Head::Absent)
}

/// Adds `op` applied to `args` (`None` = omitted) if it type checks; `consumed` are the nodes
/// the replacement absorbs, whose provenance it inherits.
pub fn add(
    eg: &mut Egraph,
    rule: &'static str,
    op: Op,
    args: &[Option<Id>],
    consumed: &[&ENode],
) -> Option<Id> {
    let mut ids: Vec<Id> = Vec::with_capacity(args.len());
    let keep = args.iter().rposition(|a| a.is_some()).map_or(0, |i| i + 1);
    for a in &args[..keep] {
        ids.push(match a {
            Some(id) => eg.find(*id),
            None => eg.add(ENode {
                head: Head::Absent,
                args: Vec::new(),
            }),
        });
    }
    let kind = op.kind();
    let index = eg.analysis.ops.intern(op);
    let node = ENode {
        head: Head::Op(kind, index),
        args: ids,
    };
    // A node already in the graph type checked when it entered; most of what rules build is.
    // A new one's facts go to `make` (through `Tir::inferred`) when egg adds it below.
    if eg.lookup(node.clone()).is_none() {
        let facts = {
            let eg: &Egraph = eg;
            infer(eg, eg.analysis.ops.get(index), &node.args)?
        };
        facts.ty.as_ref()?;
        eg.analysis.inferred = Some((node.clone(), facts));
    }
    let mut rules = Vec::new();
    for c in consumed {
        let key = ENode {
            head: c.head,
            args: c.args.iter().map(|&a| eg.find(a)).collect(),
        };
        if let Some(prev) = eg
            .analysis
            .created
            .get(&key)
            .or_else(|| eg.analysis.created.get(*c))
        {
            for r in &prev.rules {
                if !rules.contains(r) {
                    rules.push(*r);
                }
            }
        }
    }
    rules.push(rule);
    eg.analysis
        .created
        .entry(node.clone())
        .or_insert(Created { rules });
    Some(eg.add(node))
}

/// Adds a constant the optimizer computed.
pub fn add_constant(eg: &mut Egraph, t: Tensor) -> Id {
    let key = (
        t.dtype,
        t.shape.clone(),
        t.raw().map(<[u8]>::to_vec).unwrap_or_default(),
    );
    if let Some(&i) = eg.analysis.folded.get(&key) {
        return eg.add(ENode {
            head: Head::Leaf(i),
            args: Vec::new(),
        });
    }
    let i = eg.analysis.leaves.len() as u32;
    eg.analysis.folded.insert(key, i);
    eg.analysis.leaves.push(Leaf {
        ty: t.ty(),
        value: Some(t),
        origin: LeafOrigin::Folded,
    });
    eg.add(ENode {
        head: Head::Leaf(i),
        args: Vec::new(),
    })
}

/// Adds an `i64` shape constant.
pub fn add_shape(eg: &mut Egraph, dims: &[u64]) -> Id {
    let v: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    add_constant(eg, Tensor::from_i64s(&[v.len() as u64], &v))
}

/// True when class `a` and `b` have the same known type.
pub fn same_type(eg: &Egraph, a: Id, b: Id) -> bool {
    matches!((ty(eg, a), ty(eg, b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_pattern_parses_and_names_are_unique() {
        let rules = super::all();
        let _ = super::rewrites(&rules);
        let mut names: Vec<&str> = rules.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len(), "duplicate rule names");
        for r in &rules {
            assert!(
                r.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{} is not kebab-case",
                r.name
            );
            assert!(
                !r.algebra.is_empty() && !r.algebra.contains('\n'),
                "{}: algebra must be one line",
                r.name
            );
        }
    }

    /// egg matches a subterm whose variables are all bound already by looking the term up in
    /// the e-graph's hash-cons, with the pattern's node, whose attributes are "any": the lookup
    /// finds no real node, so such a pattern never matches. Patterns therefore name every
    /// operand apart, and appliers check the ones that must be the same class.
    #[test]
    fn no_pattern_repeats_a_variable() {
        for r in super::all() {
            let mut vars: Vec<&str> = r.pattern.split(|c: char| c.is_whitespace() || c == '(' || c == ')').filter(|t| t.starts_with('?')).collect();
            let n = vars.len();
            vars.sort_unstable();
            vars.dedup();
            assert_eq!(n, vars.len(), "rule {}: pattern {} repeats a variable", r.name, r.pattern);
        }
    }
}
