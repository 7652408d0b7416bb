//! LinearAttention: a recurrent state `S` (`d_k × d_v` per batch and key/value head) updated
//! token by token and read by every query head of the group:
//! - `gated`: `S ← exp(g_t)·S` first (`g_t` per head or per key feature);
//! - `delta`: `v_t ← β_t·(v_t − Sᵀk_t)`;
//! - all rules: `S ← S + k_t ⊗ v_t`, then `o_t = scale · q_tᵀS`.
//!
//! Everything is computed in `f32`, as the reference does (inputs are widened, the output and
//! the state rounded once at the end). The default scale `1/√d_k` is a double in the reference,
//! so its product with the `f32` read-out is formed in `f64` and rounded, as there.

use kiln_tir::op::{LinearAttention, UpdateRule};
use kiln_tir::NodeId;

use super::{is_float, Num};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// The shapes of one node: batch, tokens, query heads, key/value heads, key and value sizes.
struct Dims {
    batch: u64,
    tokens: u64,
    q_heads: u64,
    kv_heads: u64,
    dk: u64,
    dv: u64,
}

/// Lowers one LinearAttention node.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId, a: &LinearAttention) -> Result<(), LowerError> {
    let (q, key, v) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.required(n, 2)?);
    let (past, decay, beta) = (cx.input(n, 3)?, cx.input(n, 4)?, cx.input(n, 5)?);
    let (gated, delta) = match a.update_rule {
        UpdateRule::Linear => (false, false),
        UpdateRule::Gated => (true, false),
        UpdateRule::Delta => (false, true),
        UpdateRule::GatedDelta => (true, true),
    };
    if gated != decay.is_some() || delta != beta.is_some() {
        return Err(cx.unsupported(n, "decay must be given exactly for gated rules and beta exactly for delta rules"));
    }
    if a.q_num_heads <= 0 || a.kv_num_heads <= 0 || a.q_num_heads % a.kv_num_heads != 0 {
        return Err(cx.unsupported(n, "q_num_heads must be a positive multiple of kv_num_heads"));
    }
    let (hq, hkv) = (a.q_num_heads as u64, a.kv_num_heads as u64);
    let (&[b, t, qw], &[kb, kt, kw], &[vb, vt, vw]) = (&q.dims[..], &key.dims[..], &v.dims[..]) else {
        return Err(cx.unsupported(n, "query, key and value must be 3-D"));
    };
    if qw % hq != 0 || vw % hkv != 0 || (kb, kt, vb, vt) != (b, t, b, t) || kw != hkv * (qw / hq) {
        return Err(cx.unsupported(n, "query, key and value shapes do not agree with the head counts"));
    }
    let d = Dims { batch: b, tokens: t, q_heads: hq, kv_heads: hkv, dk: qw / hq, dv: vw / hkv };
    let elem = q.elem;
    let floats = [&key, &v].iter().all(|o| o.elem == elem) && [&decay, &beta].iter().all(|o| o.as_ref().is_none_or(|o| o.elem == elem));
    if !is_float(elem) || elem == ElemType::Scalar(ScalarType::F64) || !floats {
        return Err(cx.unsupported(n, "inputs must share one of f16, bf16 and f32"));
    }
    // Decay per head (last axis `H_kv`) or per key feature (`H_kv·d_k`); beta per head or shared.
    let decay_per_feature = match &decay {
        Some(g) if g.dims == [b, t, hkv] => false,
        Some(g) if g.dims == [b, t, hkv * d.dk] => true,
        Some(_) => return Err(cx.unsupported(n, "decay must be [B, T, H_kv] or [B, T, H_kv·d_k]")),
        None => false,
    };
    let beta_per_head = match &beta {
        Some(x) if x.dims == [b, t, hkv] => true,
        Some(x) if x.dims == [b, t, 1] => false,
        Some(_) => return Err(cx.unsupported(n, "beta must be [B, T, H_kv] or [B, T, 1]")),
        None => false,
    };
    let state_dims = [b, hkv, d.dk, d.dv];
    if past.as_ref().is_some_and(|p| p.dims != state_dims || !is_float(p.elem) || p.elem == ElemType::Scalar(ScalarType::F64)) {
        return Err(cx.unsupported(n, "past_state must be [B, H_kv, d_k, d_v] of f16, bf16 or f32"));
    }
    let y = cx.required_output(n, 0)?;
    let present = cx.output(n, 1)?;
    let state_elem = past.as_ref().map_or(elem, |p| p.elem);
    if y.dims != [b, t, hq * d.dv] || y.elem != elem || present.as_ref().is_some_and(|p| p.dims != state_dims || p.elem != state_elem) {
        return Err(cx.unsupported(n, "the outputs have unexpected shapes or types"));
    }

    let mut k = cx.kernel(n);
    let num = Num::new(cx, &k.name, &[elem]);
    let f32e = ElemType::Scalar(ScalarType::F32);
    let state = match &present {
        Some(p) if p.elem == f32e => p.buf,
        _ => cx.program.add_buffer(Buffer { name: format!("{}_state", k.name), elem: f32e, len: state_dims.iter().product(), kind: BufferKind::Temp }),
    };
    let v_new = cx.program.add_buffer(Buffer { name: format!("{}_v", k.name), elem: f32e, len: d.dv, kind: BufferKind::Temp });
    let (dk, dv) = (d.dk as i64, d.dv as i64);
    let group = d.q_heads / d.kv_heads;
    // Element (b, token, head, feature) of a packed [B, T, H·D] tensor.
    let packed = |x: &Operand, heads: u64, dim: i64, bi: &Expr, ti: &Expr, h: &Expr, f: Expr| num.load_op(x, (bi.clone() * d.tokens as i64 + ti.clone()) * (heads as i64 * dim) + h.clone() * dim + f);
    let st_at = |bi: &Expr, g: &Expr, r: &Expr, c: &Expr| ((bi.clone() * d.kv_heads as i64 + g.clone()) * dk + r.clone()) * dv + c.clone();
    let scale = if a.scale == 0.0 { Scale::Double(1.0 / (d.dk as f64).sqrt()) } else { Scale::Single(a.scale) };

    k.body = k.nest(&[d.batch, d.kv_heads], |k, ix| {
        let (bi, g) = (&ix[0], &ix[1]);
        let mut s = k.nest(&[d.dk, d.dv], |_, rc| {
            let init = match &past {
                Some(p) => num.load_op(p, st_at(bi, g, &rc[0], &rc[1])),
                None => num.c(0.0),
            };
            vec![Stmt::Store { buf: state, index: st_at(bi, g, &rc[0], &rc[1]), value: init }]
        });
        s.extend(k.nest(&[d.tokens], |k, tt| {
            let ti = &tt[0];
            let mut s = Vec::new();
            if let Some(gate) = &decay {
                s.extend(k.nest(&[d.dk, d.dv], |_, rc| {
                    let at = st_at(bi, g, &rc[0], &rc[1]);
                    let gv = if decay_per_feature { packed(gate, d.kv_heads, dk, bi, ti, g, rc[0].clone()) } else { packed(gate, d.kv_heads, 1, bi, ti, g, Expr::idx(0)) };
                    vec![Stmt::Store { buf: state, index: at.clone(), value: Expr::load(state, at) * gv.math(MathFn::Exp) }]
                }));
            }
            // The value written this step: v_t, or β_t·(v_t − Sᵀk_t).
            s.extend(k.nest(&[d.dv], |k, c| {
                let vv = packed(&v, d.kv_heads, dv, bi, ti, g, c[0].clone());
                let value = match &beta {
                    Some(bt) => {
                        let acc = k.var(ScalarType::F32);
                        let mut s = vec![Stmt::Local(acc, num.c(0.0))];
                        s.extend(k.nest(&[d.dk], |_, r| {
                            let term = Expr::load(state, st_at(bi, g, &r[0], &c[0])) * packed(&key, d.kv_heads, dk, bi, ti, g, r[0].clone());
                            vec![Stmt::Assign(acc, Expr::Var(acc) + term)]
                        }));
                        let bv = if beta_per_head { packed(bt, d.kv_heads, 1, bi, ti, g, Expr::idx(0)) } else { packed(bt, 1, 1, bi, ti, &Expr::idx(0), Expr::idx(0)) };
                        s.push(Stmt::Store { buf: v_new, index: c[0].clone(), value: bv * (vv - Expr::Var(acc)) });
                        return s;
                    }
                    None => vv,
                };
                vec![Stmt::Store { buf: v_new, index: c[0].clone(), value }]
            }));
            s.extend(k.nest(&[d.dk, d.dv], |_, rc| {
                let at = st_at(bi, g, &rc[0], &rc[1]);
                let outer = packed(&key, d.kv_heads, dk, bi, ti, g, rc[0].clone()) * Expr::load(v_new, rc[1].clone());
                vec![Stmt::Store { buf: state, index: at.clone(), value: Expr::load(state, at) + outer }]
            }));
            // Read-out for each query head of the group.
            s.extend(k.nest(&[group, d.dv], |k, rc| {
                let h = g.clone() * group as i64 + rc[0].clone();
                let acc = k.var(ScalarType::F32);
                let mut s = vec![Stmt::Local(acc, num.c(0.0))];
                s.extend(k.nest(&[d.dk], |_, r| {
                    let term = packed(&q, d.q_heads, dk, bi, ti, &h, r[0].clone()) * Expr::load(state, st_at(bi, g, &r[0], &rc[1]));
                    vec![Stmt::Assign(acc, Expr::Var(acc) + term)]
                }));
                let out = match scale {
                    Scale::Single(c) => Expr::Var(acc) * Expr::f32(c),
                    Scale::Double(c) => (Expr::Var(acc).cast(ScalarType::F64) * Expr::float(ScalarType::F64, c)).cast(ScalarType::F32),
                };
                let at = (bi.clone() * d.tokens as i64 + ti.clone()) * (d.q_heads * d.dv) as i64 + h * dv + rc[1].clone();
                s.push(num.store_op(&y, at, out));
                s
            }));
            s
        }));
        if let Some(p) = present.as_ref().filter(|p| p.buf != state) {
            s.extend(k.nest(&[d.dk, d.dv], |_, rc| {
                let at = st_at(bi, g, &rc[0], &rc[1]);
                vec![num.store_op(p, at.clone(), Expr::load(state, at))]
            }));
        }
        s
    });
    cx.push(k);
    Ok(())
}

/// The read-out scale: an explicit `f32` attribute, or the default `1/√d_k` as a double.
#[derive(Clone, Copy)]
enum Scale {
    Single(f32),
    Double(f64),
}
