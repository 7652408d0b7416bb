//! Einsum as one generic loop nest: a loop over every output label, and inside it a sum over
//! every contracted label of the product of the operands' elements. Repeated labels within an
//! operand (diagonals), ellipses (with broadcasting of size-1 dims) and the implicit output
//! form (`"ij,jk"`) are handled.

use std::collections::BTreeMap;

use kiln_tir::NodeId;

use super::{accumulate, zero};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// A label: a letter, or one dim covered by an ellipsis (numbered from the left of the widest
/// ellipsis, so operands' ellipses align on the right as broadcasting does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Ellipsis(usize),
    Letter(char),
}

/// One side of the equation: the letters before and after its ellipsis (if it has one).
struct Term {
    head: Vec<char>,
    ellipsis: bool,
    tail: Vec<char>,
}

fn parse_term(t: &str) -> Result<Term, String> {
    let (head, tail, ellipsis) = match t.split_once("...") {
        Some((h, rest)) => (h, rest, true),
        None => (t, "", false),
    };
    let letters = |s: &str| -> Result<Vec<char>, String> {
        s.chars().map(|c| if c.is_ascii_alphabetic() { Ok(c) } else { Err(format!("`{c}` in equation term `{t}`")) }).collect()
    };
    Ok(Term { head: letters(head)?, ellipsis, tail: letters(tail)? })
}

impl Term {
    /// The labels of an operand of rank `rank`, with `width` the widest ellipsis.
    fn labels(&self, rank: usize, width: usize) -> Vec<Label> {
        let n_ell = if self.ellipsis { rank.saturating_sub(self.head.len() + self.tail.len()) } else { 0 };
        let mut out: Vec<Label> = self.head.iter().map(|&c| Label::Letter(c)).collect();
        out.extend((width - n_ell..width).map(Label::Ellipsis));
        out.extend(self.tail.iter().map(|&c| Label::Letter(c)));
        out
    }

    fn letters(&self) -> usize {
        self.head.len() + self.tail.len()
    }
}

/// The parsed equation applied to operands of the given ranks and dims.
struct Plan {
    /// Each operand's label per axis.
    inputs: Vec<Vec<Label>>,
    /// The output's labels.
    output: Vec<Label>,
    /// Every label's extent.
    size: BTreeMap<Label, u64>,
}

fn plan(equation: &str, dims: &[Vec<u64>]) -> Result<Plan, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms = lhs.split(',').map(parse_term).collect::<Result<Vec<_>, _>>()?;
    if terms.len() != dims.len() {
        return Err(format!("the equation has {} operands but the node {}", terms.len(), dims.len()));
    }
    let mut width = 0;
    for (t, d) in terms.iter().zip(dims) {
        if d.len() < t.letters() || (!t.ellipsis && d.len() != t.letters()) {
            return Err(format!("operand of rank {} does not fit its equation term", d.len()));
        }
        width = width.max(d.len() - t.letters());
    }
    let inputs: Vec<Vec<Label>> = terms.iter().zip(dims).map(|(t, d)| t.labels(d.len(), width)).collect();
    let mut size = BTreeMap::new();
    for (labels, d) in inputs.iter().zip(dims) {
        for (&l, &extent) in labels.iter().zip(d) {
            let s = size.entry(l).or_insert(extent);
            match (l, *s) {
                (_, s0) if s0 == extent => {}
                (Label::Ellipsis(_), 1) => *s = extent,
                (Label::Ellipsis(_), _) if extent == 1 => {}
                _ => return Err(format!("label {l:?} has extents {} and {extent}", *s)),
            }
        }
    }
    let output = match rhs {
        Some(r) => {
            let t = parse_term(r)?;
            let out = t.labels(t.letters() + if t.ellipsis { width } else { 0 }, width);
            if out.iter().any(|l| !size.contains_key(l)) {
                return Err("an output label no operand has".into());
            }
            out
        }
        None => {
            let mut count = BTreeMap::new();
            for l in inputs.iter().flatten() {
                *count.entry(*l).or_insert(0) += 1;
            }
            // Ellipsis dims first, then letters that occur once, in alphabetical order.
            let mut out: Vec<Label> = (0..width).map(Label::Ellipsis).collect();
            out.extend(count.iter().filter(|&(l, &c)| matches!(l, Label::Letter(_)) && c == 1).map(|(l, _)| *l));
            out
        }
    };
    for (i, l) in output.iter().enumerate() {
        if output[..i].contains(l) {
            return Err(format!("output label {l:?} repeats"));
        }
    }
    Ok(Plan { inputs, output, size })
}

/// Einsum.
pub(super) fn einsum(cx: &mut Lowerer<'_>, n: NodeId, equation: &str) -> Result<(), LowerError> {
    let count = cx.node(n).inputs.len();
    let ops: Vec<Operand> = (0..count).map(|i| cx.required(n, i)).collect::<Result<_, _>>()?;
    let y = cx.required_output(n, 0)?;
    let dims: Vec<Vec<u64>> = ops.iter().map(|o| o.dims.clone()).collect();
    let p = plan(equation, &dims).map_err(|e| cx.unsupported(n, format!("equation `{equation}`: {e}")))?;
    let out_dims: Vec<u64> = p.output.iter().map(|l| p.size[l]).collect();
    if out_dims != y.dims || ops.iter().any(|o| o.ty() != y.ty()) {
        return Err(cx.unsupported(n, format!("equation `{equation}` does not give the output's shape and type")));
    }
    let summed: Vec<Label> = p.size.keys().filter(|l| !p.output.contains(l)).copied().collect();
    let sum_dims: Vec<u64> = summed.iter().map(|l| p.size[l]).collect();
    let ty = y.ty();
    let mut k = cx.kernel(n);
    let body = k.nest(&out_dims, |k, out_idx| {
        let (acc, mut body) = accumulate(k, ty, zero(ty), &sum_dims, |_, sum_idx| {
            let index_of = |l: &Label| {
                let at = p.output.iter().position(|o| o == l);
                at.map(|i| out_idx[i].clone()).unwrap_or_else(|| sum_idx[summed.iter().position(|s| s == l).unwrap_or(0)].clone())
            };
            let mut product: Option<Expr> = None;
            for (o, labels) in ops.iter().zip(&p.inputs) {
                let st = o.strides();
                let flat = labels.iter().zip(&o.dims).zip(&st).fold(Expr::idx(0), |acc, ((l, &d), &s)| if d == 1 { acc } else { acc + index_of(l) * s });
                let v = Expr::load(o.buf, flat);
                product = Some(match product {
                    Some(pr) => pr * v,
                    None => v,
                });
            }
            product.unwrap_or_else(|| Expr::int(ty, 1))
        });
        body.push(Stmt::Store { buf: y.buf, index: kiln_loops::builder::linear(out_idx, &y.strides()), value: Expr::Var(acc) });
        body
    });
    k.body = body;
    cx.push(k);
    Ok(())
}
