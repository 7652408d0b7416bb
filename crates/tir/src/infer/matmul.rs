//! Products: MatMul (and its integer and quantized forms), Gemm, Einsum, Det.

use std::collections::BTreeMap;

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::{FusedMatMul, Gemm};
use crate::types::TensorType;

use super::common::{
    Cx, Res, attr_err, fmt_dims, set, shape_err, tt, unify,
};

/// numpy `matmul` shapes: 1-D operands are promoted and their added axis removed again; batch
/// axes broadcast.
pub(super) fn matmul_shape(cx: &mut Cx<'_, '_>, a: &[Dim], b: &[Dim]) -> Res<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return Err(shape_err(format!(
            "matmul operands must have rank at least 1, found {} and {}",
            fmt_dims(a),
            fmt_dims(b)
        )));
    }
    let a2: Vec<Dim> = if a.len() == 1 {
        vec![Dim::Known(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Vec<Dim> = if b.len() == 1 {
        vec![b[0].clone(), Dim::Known(1)]
    } else {
        b.to_vec()
    };
    let (ra, rb) = (a2.len(), b2.len());
    unify(
        &a2[ra - 1],
        &b2[rb - 2],
        &format!("inner dims of {} and {} differ", fmt_dims(a), fmt_dims(b)),
    )?;
    let mut out = cx.broadcast(&[&a2[..ra - 2], &b2[..rb - 2]])?;
    if a.len() > 1 {
        out.push(a2[ra - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[rb - 1].clone());
    }
    Ok(out)
}

/// MatMul.
pub(super) fn matmul(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, set::REDUCIBLE)?;
    cx.same(0, 1)?;
    Ok(vec![tt(
        d,
        matmul_shape(cx, &cx.ty(0)?.shape, &cx.ty(1)?.shape)?,
    )])
}

/// FusedMatMul: `A · op(B)` with an optional bias over the last axis and a residual addend.
pub(super) fn fused_matmul(cx: &mut Cx<'_, '_>, a: &FusedMatMul) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in 1..4 {
        cx.same(0, i)?;
    }
    let mut b = cx.ty(1)?.shape.clone();
    if a.transB != 0 {
        let r = b.len();
        if r < 2 {
            return Err(shape_err(format!(
                "transB needs B of rank at least 2, found {}",
                fmt_dims(&b)
            )));
        }
        b.swap(r - 2, r - 1);
    }
    let shape = matmul_shape(cx, &cx.ty(0)?.shape, &b)?;
    if let Some(bias) = cx.opt(2) {
        let n = shape.last().cloned().unwrap_or(Dim::Known(1));
        if bias.shape.len() != 1 || bias.shape[0] != n {
            return Err(shape_err(format!(
                "bias {bias} is not a vector of the {n} output columns"
            )));
        }
    }
    let y = tt(d, shape);
    super::conv::residual(cx, 3, &y)?;
    Ok(vec![y])
}

/// MatMulInteger: 8-bit operands with optional zero points, i32 output.
pub(super) fn matmul_integer(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 4)?;
    cx.check(0, set::INT8)?;
    cx.check(1, set::INT8)?;
    cx.same(0, 2)?;
    cx.same(1, 3)?;
    Ok(vec![tt(
        DType::I32,
        matmul_shape(cx, &cx.ty(0)?.shape, &cx.ty(1)?.shape)?,
    )])
}

/// QLinearMatMul: a, its scale and zero point, b, its scale and zero point, y's scale and zero
/// point, and (kiln's, for a QDQ Gemm) an optional `i32` bias added to each column's
/// accumulator; the output has the type of y's zero point.
pub(super) fn qlinear_matmul(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(8, 9)?;
    cx.check_opt(8, set::I32)?;
    cx.rank_is(8, 1, "bias")?;
    cx.check(0, set::QUANT8)?;
    cx.check(3, set::QUANT8)?;
    let d = cx.check(7, set::QUANT8)?;
    cx.same(0, 2)?;
    cx.same(3, 5)?;
    cx.check(1, set::SCALE)?;
    cx.same(1, 4)?;
    cx.same(1, 6)?;
    Ok(vec![tt(
        d,
        matmul_shape(cx, &cx.ty(0)?.shape, &cx.ty(3)?.shape)?,
    )])
}

/// Gemm: `[M, N]` from 2-D operands (optionally transposed); C broadcasts to it.
pub(super) fn gemm(cx: &mut Cx<'_, '_>, a: &Gemm) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::REDUCIBLE)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    cx.rank_is(0, 2, "A")?;
    cx.rank_is(1, 2, "B")?;
    let (x, y) = (cx.ty(0)?, cx.ty(1)?);
    let (m, ka) = if a.transA != 0 {
        (&x.shape[1], &x.shape[0])
    } else {
        (&x.shape[0], &x.shape[1])
    };
    let (kb, n) = if a.transB != 0 {
        (&y.shape[1], &y.shape[0])
    } else {
        (&y.shape[0], &y.shape[1])
    };
    unify(
        ka,
        kb,
        &format!(
            "inner dims of A {} and B {} differ",
            fmt_dims(&x.shape),
            fmt_dims(&y.shape)
        ),
    )?;
    let out = vec![m.clone(), n.clone()];
    if let Some(c) = cx.opt(2) {
        cx.broadcasts_to(&c.shape, &out, "C")?;
    }
    Ok(vec![tt(d, out)])
}

/// One operand of an einsum equation: its labels and where its ellipsis is.
struct Term {
    labels: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(text: &str) -> Res<Term> {
    let bytes = text.as_bytes();
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'.' if bytes[i..].starts_with(b"...") && ellipsis.is_none() => {
                ellipsis = Some(labels.len());
                i += 3;
            }
            c if c.is_ascii_alphabetic() => {
                labels.push(c);
                i += 1;
            }
            b' ' => i += 1,
            _ => {
                return Err(attr_err(format!(
                    "einsum term `{text}` is not letters with at most one `...`"
                )));
            }
        }
    }
    Ok(Term { labels, ellipsis })
}

/// Einsum: output dims from the equation's labels; the ellipsis dims broadcast.
pub(super) fn einsum(cx: &mut Cx<'_, '_>, equation: &str) -> Res<Vec<TensorType>> {
    cx.arity(1, usize::MAX)?;
    let d = cx.check(0, set::NUMERIC)?;
    for i in 1..cx.len() {
        cx.same(0, i)?;
    }
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Res<_>>()?;
    if terms.len() != cx.len() {
        return Err(attr_err(format!(
            "einsum equation `{equation}` has {} operands, the node has {}",
            terms.len(),
            cx.len()
        )));
    }
    let mut sizes: BTreeMap<u8, Dim> = BTreeMap::new();
    let mut counts: BTreeMap<u8, usize> = BTreeMap::new();
    let mut ellipses: Vec<Vec<Dim>> = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let shape = &cx.ty(i)?.shape;
        let n = term.labels.len();
        let ell_rank = match term.ellipsis {
            Some(_) => shape.len().checked_sub(n),
            None => (shape.len() == n).then_some(0),
        }
        .ok_or_else(|| {
            shape_err(format!(
                "operand {i} of shape {} does not fit einsum term {}",
                fmt_dims(shape),
                String::from_utf8_lossy(&term.labels)
            ))
        })?;
        let at = term.ellipsis.unwrap_or(n);
        ellipses.push(shape[at..at + ell_rank].to_vec());
        for (j, &label) in term.labels.iter().enumerate() {
            let dim = &shape[if j < at { j } else { j + ell_rank }];
            *counts.entry(label).or_default() += 1;
            let merged = match sizes.get(&label) {
                None => dim.clone(),
                Some(prev) => cx.broadcast_dim(prev, dim).ok_or_else(|| {
                    shape_err(format!(
                        "einsum label `{}` has sizes {prev} and {dim}",
                        label as char
                    ))
                })?,
            };
            sizes.insert(label, merged);
        }
    }
    let ell_refs: Vec<&[Dim]> = ellipses.iter().map(Vec::as_slice).collect();
    let ell = cx.broadcast(&ell_refs)?;
    let out_term = match rhs {
        Some(r) => parse_term(r)?,
        None => Term {
            labels: counts
                .iter()
                .filter(|(_, n)| **n == 1)
                .map(|(l, _)| *l)
                .collect(),
            ellipsis: Some(0),
        },
    };
    let mut shape = Vec::new();
    for (j, label) in out_term.labels.iter().enumerate() {
        if out_term.ellipsis == Some(j) {
            shape.extend(ell.iter().cloned());
        }
        if out_term.labels[..j].contains(label) {
            return Err(attr_err(format!(
                "einsum output label `{}` appears twice",
                *label as char
            )));
        }
        let size = sizes.get(label).ok_or_else(|| {
            attr_err(format!(
                "einsum output label `{}` is not in any operand",
                *label as char
            ))
        })?;
        shape.push(size.clone());
    }
    if out_term.ellipsis == Some(out_term.labels.len()) {
        shape.extend(ell);
    }
    Ok(vec![tt(d, shape)])
}

/// Det: the determinants of `[*, M, M]` matrices, shape `[*]`.
pub(super) fn det(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.rank_at_least(0, 2, "X")?;
    let x = cx.ty(0)?;
    let r = x.rank();
    unify(&x.shape[r - 2], &x.shape[r - 1], "matrices must be square")?;
    Ok(vec![tt(d, x.shape[..r - 2].to_vec())])
}
