//! Specialization to concrete sizes: binding symbols, or graph inputs to concrete shapes.

use crate::dim::Dim;
use crate::graph::{Graph, ValueDef, ValueId};

use super::{GraphInferError, infer_graph};

/// The terms of a dim's text form (`seq*4-2` is `[(4, [seq]), (-2, [])]`).
fn terms(d: &Dim) -> Option<Vec<(i128, Vec<String>)>> {
    let text = d.to_string();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let (sign, body) = match rest.as_bytes()[0] {
            b'-' => (-1i128, &rest[1..]),
            b'+' => (1, &rest[1..]),
            _ => (1, rest),
        };
        let end = body.find(['+', '-']).unwrap_or(body.len());
        let (mut coef, mut syms) = (sign, Vec::new());
        for f in body[..end].split('*') {
            match f.parse::<i128>() {
                Ok(n) => coef = coef.checked_mul(n)?,
                Err(_) if crate::dim::is_symbol(f) => syms.push(f.to_string()),
                Err(_) => return None,
            }
        }
        out.push((coef, syms));
        rest = &body[end..];
    }
    Some(out)
}

/// Replaces bound symbols by their sizes, or `None` when the result is negative or
/// overflows. (Term by term, so that `seq-2` with `seq = 5` is 3.)
pub(super) fn substitute(d: &Dim, lookup: &dyn Fn(&str) -> Option<u64>) -> Option<Dim> {
    let Dim::Sym(_) = d else {
        return Some(d.clone());
    };
    let mut known: i128 = 0;
    let mut plus = Vec::new();
    let mut minus = Vec::new();
    for (coef, syms) in terms(d)? {
        let mut c = coef;
        let mut left = Vec::new();
        for s in syms {
            match lookup(&s) {
                Some(v) => c = c.checked_mul(i128::from(v))?,
                None => left.push(s),
            }
        }
        if left.is_empty() {
            known = known.checked_add(c)?;
        } else {
            let mut t = Dim::Known(u64::try_from(c.unsigned_abs()).ok()?);
            for s in &left {
                t = t.mul(&Dim::sym(s))?;
            }
            if c < 0 { minus.push(t) } else { plus.push(t) }
        }
    }
    let mut acc = Dim::Known(u64::try_from(known.max(0)).ok()?);
    for t in &plus {
        acc = acc.add(t)?;
    }
    for t in &minus {
        acc = acc.sub(t)?;
    }
    if known < 0 {
        acc = acc.sub(&Dim::Known(u64::try_from(-known).ok()?))?;
    }
    Some(acc)
}

/// An error about a value rather than a node: a graph input or a region parameter.
fn value_error(g: &Graph, id: ValueId, message: String) -> GraphInferError {
    let Some(v) = g.values.get(id.index()) else {
        return GraphInferError { node: None, node_name: format!("value {id}"), op: "", message };
    };
    if let ValueDef::Node { node, .. } = v.def
        && let Some(n) = g.nodes.get(node.index())
    {
        return GraphInferError { node: Some(node), node_name: n.name.clone(), op: n.op.kind().text_name(), message };
    }
    let node_name = if v.name.is_empty() { format!("value {id}") } else { format!("value {id} ({:?})", v.name) };
    GraphInferError { node: None, node_name, op: "", message }
}

/// Binds symbols to sizes everywhere (inputs and all values) and re-infers: the way to
/// compile for concrete input shapes, e.g. `bind_symbols(&mut g, &[("batch", 1), ("seq", 128)])`.
pub fn bind_symbols(g: &mut Graph, bindings: &[(&str, u64)]) -> Result<(), Vec<GraphInferError>> {
    let lookup = |s: &str| bindings.iter().find(|(n, _)| *n == s).map(|(_, v)| *v);
    let mut errors = Vec::new();
    for i in 0..g.values.len() {
        let id = ValueId(i as u32);
        let mut bad = None;
        let shape: Vec<Dim> = g.values[i]
            .ty
            .shape
            .iter()
            .map(|d| {
                substitute(d, &lookup).unwrap_or_else(|| {
                    bad = Some(d.clone());
                    d.clone()
                })
            })
            .collect();
        g.values[i].ty.shape = shape;
        // Node outputs are re-inferred below; only parameters must bind cleanly.
        if let (Some(d), ValueDef::Param) = (bad, &g.values[i].def) {
            errors.push(value_error(g, id, format!("dim {d} is negative or overflows with the given sizes")));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    infer_graph(g)
}

/// The value of `d` with every symbol replaced by `s`, or `None` if it is not a number.
fn eval_at(d: &Dim, s: u64) -> Option<i128> {
    substitute(d, &|_| Some(s)).and_then(|v| v.known()).map(i128::from)
}

/// Solves `d == size` for `d` linear in its only symbol, returning the symbol's size.
fn solve_linear(d: &Dim, size: u64) -> Option<u64> {
    // Evaluate far from zero so that no term goes negative.
    let base = 1u64 << 20;
    let (a, b, c) = (eval_at(d, base)?, eval_at(d, base + 1)?, eval_at(d, base + 2)?);
    let slope = b - a;
    if slope <= 0 || c - b != slope {
        return None;
    }
    let intercept = a - slope * i128::from(base);
    let rest = i128::from(size) - intercept;
    if rest < 0 || rest % slope != 0 {
        return None;
    }
    u64::try_from(rest / slope).ok()
}

/// Binds graph input `index` to a concrete shape (unifying symbols: a symbol seen in two
/// inputs must get the same size, else error) and re-infers.
pub fn bind_input_shapes(g: &mut Graph, shapes: &[(usize, Vec<u64>)]) -> Result<(), Vec<GraphInferError>> {
    let mut errors = Vec::new();
    let mut bound: Vec<(String, u64)> = Vec::new();
    let mut pending: Vec<(ValueId, usize, Dim, u64)> = Vec::new();
    let mut targets = Vec::new();
    for (index, dims) in shapes {
        let Some(&id) = g.body.params.get(*index) else {
            errors.push(GraphInferError {
                node: None,
                node_name: format!("graph input {index}"),
                op: "",
                message: format!("the graph has only {} inputs", g.body.params.len()),
            });
            continue;
        };
        let Some(declared) = g.values.get(id.index()).map(|v| v.ty.clone()) else {
            continue;
        };
        if declared.rank() != dims.len() {
            errors.push(value_error(g, id, format!("has rank {} ({declared}), the given shape {dims:?} has rank {}", declared.rank(), dims.len())));
            continue;
        }
        for (k, (d, &size)) in declared.shape.iter().zip(dims).enumerate() {
            match d {
                Dim::Known(n) if *n != size => errors.push(value_error(g, id, format!("dim {k} is {n}, the given shape {dims:?} has {size}"))),
                Dim::Known(_) => {}
                _ => pending.push((id, k, d.clone(), size)),
            }
        }
        targets.push((id, dims.clone()));
    }
    // Single symbols bind directly; polynomials are solved once enough of their symbols are
    // known, or checked when all are.
    loop {
        let mut progress = false;
        let mut rest = Vec::new();
        for (id, k, d, size) in pending {
            let lookup = |s: &str| bound.iter().find(|(n, _)| n == s).map(|(_, v)| *v);
            let Some(now) = substitute(&d, &lookup) else {
                errors.push(value_error(g, id, format!("dim {k} ({d}) is negative or overflows with the sizes bound so far")));
                continue;
            };
            match now.symbols().as_slice() {
                [] => {
                    if now != Dim::Known(size) {
                        errors.push(value_error(g, id, format!("dim {k} ({d}) is {now} by the other inputs' sizes, but {size} is given")));
                    }
                }
                [s] => match solve_linear(&now, size) {
                    Some(v) => {
                        bound.push((s.to_string(), v));
                        progress = true;
                    }
                    None => errors.push(value_error(g, id, format!("dim {k} ({d}) cannot be {size} for any size of `{s}`"))),
                },
                _ => rest.push((id, k, d, size)),
            }
        }
        pending = rest;
        if !progress || pending.is_empty() {
            break;
        }
    }
    for (id, k, d, size) in pending {
        errors.push(value_error(g, id, format!("dim {k} ({d}) = {size} does not determine its symbols")));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (id, dims) in targets {
        g.values[id.index()].ty.shape = dims.into_iter().map(Dim::Known).collect();
    }
    let refs: Vec<(&str, u64)> = bound.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    bind_symbols(g, &refs)
}

/// Makes graph inputs `values` constants and re-infers types: every use of input `index` reads
/// the given tensor instead. Shapes that depend on those inputs' values (a Reshape target,
/// Reduce axes, a TopK `k` fed as graph inputs) become static. The inputs stay in the graph's
/// signature, unused.
pub fn bind_input_values(g: &mut Graph, values: &[(usize, crate::Tensor)]) -> Result<(), Vec<GraphInferError>> {
    substitute_input_values(g, values)?;
    super::infer_graph(g)
}

/// [`bind_input_values`] without the re-inference, for callers that fold shape computations
/// before inferring again.
pub fn substitute_input_values(g: &mut Graph, values: &[(usize, crate::Tensor)]) -> Result<(), Vec<GraphInferError>> {
    for (index, t) in values {
        let Some(&param) = g.body.params.get(*index) else {
            return Err(vec![GraphInferError {
                node: None,
                node_name: format!("graph input {index}"),
                op: "",
                message: format!("the graph has only {} inputs", g.body.params.len()),
            }]);
        };
        if g.ty(param).dtype != t.dtype || g.ty(param).rank() != t.shape.len() {
            return Err(vec![GraphInferError {
                node: None,
                node_name: g.value(param).name.clone(),
                op: "",
                message: format!("a value of type {} cannot stand for an input of type {}", t.ty(), g.ty(param)),
            }]);
        }
        let name = format!("{}#value", g.value(param).name);
        let c = g.add_value(t.ty(), name, crate::ValueDef::Const(t.clone()));
        g.body.consts.push(c);
        for node in &mut g.nodes {
            for input in node.inputs.iter_mut().flatten() {
                if *input == param {
                    *input = c;
                }
            }
        }
    }
    Ok(())
}

/// Integer inputs up to this many elements may decide shapes.
const MAX_SHAPE_INPUT: u64 = 64;

/// Graph inputs whose values may decide shapes inside the graph, for binding with
/// [`bind_input_values`]: empty when every value's shape is already static and no `If` waits
/// for its condition to choose between ranks; otherwise the
/// inputs that look like shape parameters rather than data — integer tensors of at most 64
/// elements (shapes, axes, pads, repeats, `k`), and 1-D float tensors of at most 8 elements
/// (Resize scales). `g`'s input shapes must be bound already.
pub fn shape_deciding_inputs(g: &Graph) -> Vec<usize> {
    let branch_open = g.assumptions.iter().any(|a| matches!(a.what, crate::Assumed::Branch { .. }));
    if !branch_open && g.values.iter().all(|v| v.ty.known_dims().is_some()) {
        return Vec::new();
    }
    g.body
        .params
        .iter()
        .enumerate()
        .filter(|&(_, &p)| {
            let ty = g.ty(p);
            let numel = ty.numel().unwrap_or(u64::MAX);
            (ty.dtype.is_int() && numel <= MAX_SHAPE_INPUT) || (ty.dtype.is_float() && ty.rank() == 1 && numel <= 8)
        })
        .map(|(i, _)| i)
        .collect()
}
