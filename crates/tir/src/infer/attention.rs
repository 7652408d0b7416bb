//! Attention layers: Attention, RotaryEmbedding, LinearAttention.

use crate::dim::Dim;
use crate::op::{Attention, LinearAttention, RotaryEmbedding, UpdateRule};
use crate::types::TensorType;

use super::common::{Cx, Res, TypeSet, add, attr_err, mul, positive, set, shape_err, tt, unify};

/// `d / heads` for a packed `[.., heads * head_size]` dim.
fn per_head(cx: &mut Cx<'_, '_>, d: &Dim, heads: &Dim, what: &str) -> Res<Dim> {
    match (d, heads) {
        (Dim::Known(n), Dim::Known(h)) if *h == 0 || n % h != 0 => Err(shape_err(format!("{what} {n} does not divide into {h} heads"))),
        _ => Ok(d.div_exact(heads).unwrap_or_else(|| cx.fresh())),
    }
}

/// A positive head count from an optional attribute.
fn heads(v: Option<i64>, name: &str) -> Res<Dim> {
    match v {
        Some(h) => Ok(Dim::Known(positive(h, name)?)),
        None => Err(attr_err(format!("`{name}` is required for 3-D inputs"))),
    }
}

/// Attention: `Y`, `present_key`, `present_value` and `qk_matmul_output` for 4-D
/// `(batch, heads, seq, head_size)` or 3-D `(batch, seq, heads * head_size)` inputs.
pub(super) fn attention(cx: &mut Cx<'_, '_>, a: &Attention) -> Res<Vec<TensorType>> {
    cx.arity(3, 7)?;
    let dq = cx.check(0, set::FLOAT)?;
    let dv = cx.check(2, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 4)?;
    cx.same(2, 5)?;
    cx.check_opt(6, set::I64)?;
    const MASK: TypeSet = set::ORDERED;
    cx.check_opt(3, MASK)?;
    let (q, k, v) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    for (i, t) in [(0, q), (1, k), (2, v)] {
        if t.rank() != 3 && t.rank() != 4 {
            return Err(shape_err(format!("input {i} must be 3-D or 4-D, found {t}")));
        }
    }
    let batch = unify(&q.shape[0], &k.shape[0], "Q and K differ in batch size")?;
    let batch = unify(&batch, &v.shape[0], "Q and V differ in batch size")?;
    let kv_heads = if k.rank() == 4 { k.shape[1].clone() } else { heads(a.kv_num_heads, "kv_num_heads")? };
    let (q_heads, q_seq) = if q.rank() == 4 { (q.shape[1].clone(), q.shape[2].clone()) } else { (heads(a.q_num_heads, "q_num_heads")?, q.shape[1].clone()) };
    if let (Dim::Known(hq), Dim::Known(hkv)) = (&q_heads, &kv_heads)
        && (*hkv == 0 || hq % hkv != 0)
    {
        return Err(shape_err(format!("{hq} query heads are not a multiple of {hkv} key/value heads")));
    }
    let (kv_seq, k_head) =
        if k.rank() == 4 { (k.shape[2].clone(), k.shape[3].clone()) } else { (k.shape[1].clone(), per_head(cx, &k.shape[2], &kv_heads, "key hidden size")?) };
    let v_head = if v.rank() == 4 { v.shape[3].clone() } else { per_head(cx, &v.shape[2], &kv_heads, "value hidden size")? };
    let total = match cx.opt(4) {
        Some(pk) if pk.rank() == 4 => add(&pk.shape[2], &kv_seq)?,
        Some(pk) => return Err(shape_err(format!("past_key must be 4-D, found {pk}"))),
        None => kv_seq,
    };
    let y = if q.rank() == 4 {
        vec![batch.clone(), q_heads.clone(), q_seq.clone(), v_head.clone()]
    } else {
        vec![batch.clone(), q_seq.clone(), mul(&q_heads, &v_head)?]
    };
    Ok(vec![
        tt(dq, y),
        tt(dq, vec![batch.clone(), kv_heads.clone(), total.clone(), k_head]),
        tt(dv, vec![batch.clone(), kv_heads, total.clone(), v_head]),
        tt(dq, vec![batch, q_heads, q_seq, total]),
    ])
}

/// RotaryEmbedding: the input's type.
pub(super) fn rotary_embedding(cx: &mut Cx<'_, '_>, a: &RotaryEmbedding) -> Res<Vec<TensorType>> {
    cx.arity(3, 4)?;
    cx.check(0, set::FLOAT)?;
    cx.same(0, 1)?;
    cx.same(0, 2)?;
    cx.check_opt(3, set::I64)?;
    let x = cx.ty(0)?;
    match x.rank() {
        4 => {}
        3 if a.num_heads.is_some() => {}
        3 => return Err(attr_err("`num_heads` is required for 3-D input")),
        _ => return Err(shape_err(format!("input must be 3-D or 4-D, found {x}"))),
    }
    Ok(vec![x.clone()])
}

/// LinearAttention: output `(B, T, H_q * d_v)` and state `(B, H_kv, d_k, d_v)`.
pub(super) fn linear_attention(cx: &mut Cx<'_, '_>, a: &LinearAttention) -> Res<Vec<TensorType>> {
    cx.arity(3, 6)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in [1, 2, 4, 5] {
        cx.same(0, i)?;
    }
    let ds = cx.check_opt(3, set::FLOAT)?.unwrap_or(d);
    for (i, name) in [(0, "query"), (1, "key"), (2, "value")] {
        cx.rank_is(i, 3, name)?;
    }
    let (needs_decay, needs_beta) = match a.update_rule {
        UpdateRule::Linear => (false, false),
        UpdateRule::Gated => (true, false),
        UpdateRule::Delta => (false, true),
        UpdateRule::GatedDelta => (true, true),
    };
    if needs_decay && cx.opt(4).is_none() {
        return Err(shape_err(format!("update_rule `{}` needs the decay input", a.update_rule.as_str())));
    }
    if needs_beta && cx.opt(5).is_none() {
        return Err(shape_err(format!("update_rule `{}` needs the beta input", a.update_rule.as_str())));
    }
    let (q, k, v) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    let hq = Dim::Known(positive(a.q_num_heads, "q_num_heads")?);
    let hkv = Dim::Known(positive(a.kv_num_heads, "kv_num_heads")?);
    if a.q_num_heads % a.kv_num_heads != 0 {
        return Err(attr_err(format!("q_num_heads {} is not a multiple of kv_num_heads {}", a.q_num_heads, a.kv_num_heads)));
    }
    let batch = unify(&q.shape[0], &k.shape[0], "query and key differ in batch size")?;
    let seq = unify(&q.shape[1], &k.shape[1], "query and key differ in length")?;
    let dk = per_head(cx, &k.shape[2], &hkv, "key hidden size")?;
    let dv = per_head(cx, &v.shape[2], &hkv, "value hidden size")?;
    Ok(vec![tt(d, vec![batch.clone(), seq, mul(&hq, &dv)?]), tt(ds, vec![batch, hkv, dk, dv])])
}
