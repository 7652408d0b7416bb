//! The e-graph analysis: every e-class knows its tensor type and, when it is small and
//! computable, its value.
//!
//! Types come from the tensor IR's own inference (`kiln_tir::infer::infer_op`) and values
//! from the reference evaluator, so a rule can never invent a type or a constant the rest of
//! kiln would disagree with. `merge` checks that the two sides of every union agree; a
//! disagreement is a wrong rule, recorded in [`Tir::conflicts`] and reported as an error.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use egg::{Analysis, DidMerge, EGraph, Id};
use kiln_tir::infer::{InferInput, infer_op};
use kiln_tir::{DType, Dim, Op, OpKind, Tensor, TensorType, ValueId};

use crate::lang::{ENode, Head, Ops};

/// The e-graph type used throughout the optimizer.
pub type Egraph = EGraph<ENode, Tir>;

/// Facts about one e-class.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The type; `None` only for the class of omitted inputs.
    pub ty: Option<TensorType>,
    /// The value, when every input is known and the result has at most
    /// [`Tir::fold_limit`] elements.
    pub value: Option<Tensor>,
}

/// Where a leaf comes from.
#[derive(Clone, Debug)]
pub enum LeafOrigin {
    /// A value of the input graph: a parameter, a constant, or an output of a node the
    /// optimizer treats as opaque (control flow, random ops, several outputs).
    Value(ValueId),
    /// A constant the optimizer computed.
    Folded,
}

/// A leaf of the e-graph.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Its type.
    pub ty: TensorType,
    /// Its value, for constants.
    pub value: Option<Tensor>,
    /// Where it comes from.
    pub origin: LeafOrigin,
}

/// How a rule made an e-node: the rule and the rules behind the e-nodes it consumed.
#[derive(Clone, Debug)]
pub struct Created {
    /// Rule names, first applied first.
    pub rules: Vec<&'static str>,
}

/// The analysis state: interned ops, leaves, provenance and conflicts.
#[derive(Debug)]
pub struct Tir {
    /// Interned ops of [`Head::Op`] nodes.
    pub ops: Ops,
    /// Leaves of [`Head::Leaf`] nodes.
    pub leaves: Vec<Leaf>,
    /// E-nodes rules added, with their provenance. Keys are canonical when recorded; look
    /// them up through [`Tir::created_canonical`] after the run.
    pub created: HashMap<ENode, Created>,
    /// Unions whose sides disagreed on their facts.
    pub conflicts: Vec<String>,
    /// Results with more elements than this are not computed.
    pub fold_limit: u64,
    /// Rule matches already applied: the rule and the canonical classes of the match.
    pub applied: HashSet<(&'static str, Vec<Id>)>,
    /// Constants the optimizer made, by content, so equal ones share a leaf.
    pub folded: HashMap<(DType, Vec<u64>, Vec<u8>), u32>,
    /// The facts a rule inferred for the node it is about to add, which `make` takes instead
    /// of inferring them again.
    pub inferred: Option<(ENode, Facts)>,
}

impl Tir {
    /// An empty analysis folding values of up to `fold_limit` elements.
    pub fn new(fold_limit: u64) -> Tir {
        Tir {
            ops: Ops::default(),
            leaves: Vec::new(),
            created: HashMap::default(),
            conflicts: Vec::new(),
            fold_limit,
            applied: HashSet::default(),
            folded: HashMap::default(),
            inferred: None,
        }
    }

    /// [`Tir::created`] with keys canonicalized in `eg` (run after the e-graph is rebuilt).
    pub fn created_canonical(eg: &Egraph) -> HashMap<ENode, Created> {
        let mut out: HashMap<ENode, Created> = HashMap::default();
        for (node, c) in &eg.analysis.created {
            let key = ENode {
                head: node.head,
                args: node.args.iter().map(|&a| eg.find(a)).collect(),
            };
            out.entry(key).or_insert_with(|| c.clone());
        }
        out
    }
}

/// Ops whose results are not a function of their inputs; they are never merged or folded.
pub fn is_random(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::RandomNormal
            | OpKind::RandomNormalLike
            | OpKind::RandomUniform
            | OpKind::RandomUniformLike
            | OpKind::Bernoulli
            | OpKind::Multinomial
    )
}

/// The type and (small) value of `op` applied to classes `args` of `eg`; `None` when the
/// types do not check.
pub fn infer(eg: &Egraph, op: &Op, args: &[Id]) -> Option<Facts> {
    let facts: Vec<&Facts> = args.iter().map(|&a| &eg[a].data).collect();
    infer_facts(&eg.analysis, op, &facts)
}

fn infer_facts(tir: &Tir, op: &Op, args: &[&Facts]) -> Option<Facts> {
    let mut inputs = Vec::with_capacity(args.len());
    for f in args {
        inputs.push(f.ty.as_ref().map(|ty| InferInput {
            ty,
            value: f.value.as_ref(),
        }));
    }
    let mut fresh_count = 0u32;
    let mut fresh = || {
        fresh_count += 1;
        Dim::sym(&format!("opt{fresh_count}"))
    };
    let ty = infer_op(op, &inputs, &[], 1, &mut fresh).ok()?.pop()?;
    let value = compute(tir, op, args, &ty);
    Some(Facts {
        ty: Some(ty),
        value,
    })
}

/// The value of `op` on known inputs, when it is small enough to keep.
fn compute(tir: &Tir, op: &Op, args: &[&Facts], ty: &TensorType) -> Option<Tensor> {
    let kind = op.kind();
    if is_random(kind) || args.is_empty() || ty.numel()? > tir.fold_limit {
        return None;
    }
    // Shape and Size need only the input's static type.
    if let Op::Shape(s) = op {
        let dims = args[0].ty.as_ref()?.known_dims()?;
        let rank = dims.len() as i64;
        let clamp = |i: i64| (if i < 0 { i + rank } else { i }).clamp(0, rank) as usize;
        let (start, end) = (clamp(s.start), clamp(s.end.unwrap_or(rank)));
        let values: Vec<i64> = dims
            .get(start..end.max(start))?
            .iter()
            .map(|&d| i64::try_from(d).ok())
            .collect::<Option<_>>()?;
        return Some(Tensor::from_i64s(&[values.len() as u64], &values));
    }
    if let Op::Size(_) = op {
        let n = args[0].ty.as_ref()?.numel()?;
        return Some(Tensor::from_i64s(&[], &[i64::try_from(n).ok()?]));
    }
    let mut inputs = Vec::with_capacity(args.len());
    for f in args {
        match (&f.ty, &f.value) {
            (None, _) => inputs.push(None),
            (Some(_), Some(v)) => inputs.push(Some(v)),
            (Some(_), None) => return None,
        }
    }
    let out = kiln_eval::eval_op(op, &inputs, 1).ok()?.pop()?;
    (out.ty() == *ty).then_some(out)
}

impl Analysis<ENode> for Tir {
    type Data = Facts;

    fn make(eg: &mut Egraph, node: &ENode, _id: Id) -> Facts {
        match node.head {
            Head::Absent => Facts::default(),
            Head::Leaf(i) => {
                let leaf = &eg.analysis.leaves[i as usize];
                let small = leaf.value.as_ref().filter(|v| {
                    v.numel().is_some_and(|n| n <= eg.analysis.fold_limit) && v.raw().is_some()
                });
                Facts {
                    ty: Some(leaf.ty.clone()),
                    value: small.cloned(),
                }
            }
            Head::Op(_, a) => {
                if let Some((n, facts)) = eg.analysis.inferred.take()
                    && n == *node
                {
                    return facts;
                }
                let op = eg.analysis.ops.get(a).clone();
                // Nodes only enter the e-graph after their types checked (conversion copies
                // checked types, rules check before adding), so failure here is a kiln bug;
                // the class then has no type and nothing matches on it.
                infer(eg, &op, &node.args).unwrap_or_default()
            }
        }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        let mut changed = DidMerge(false, false);
        match (&a.ty, b.ty) {
            (None, Some(t)) => {
                a.ty = Some(t);
                changed.0 = true;
            }
            (Some(x), Some(y)) if *x != y => {
                // Fresh symbols of data-dependent dims may differ; known facts may not.
                if x.dtype != y.dtype
                    || x.rank() != y.rank()
                    || (x.known_dims().is_some() && y.known_dims().is_some())
                {
                    self.conflicts.push(format!("{x} vs {y}"));
                }
                changed.1 = true;
            }
            (Some(_), None) => changed.1 = true,
            _ => {}
        }
        match (&a.value, b.value) {
            (None, Some(v)) => {
                a.value = Some(v);
                changed.0 = true;
            }
            // Two computations of one class may round differently (a recognized GELU against
            // its decomposition), but never disagree on the type.
            (Some(x), Some(y)) if x.ty() != y.ty() => self.conflicts.push(format!("constant {x:?} vs {y:?}")),
            (Some(_), None) => changed.1 = true,
            _ => {}
        }
        changed
    }
}
