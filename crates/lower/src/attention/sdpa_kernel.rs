//! The Attention kernel: a loop nest over (batch, key/value head, query head of its group),
//! and inside it one pass set per query row.
//!
//! Before the nest, the present key/value caches are written (past then new along the
//! position axis) and every key is scaled by `√scale` into a scratch buffer of the data type.
//! Each query row then makes four passes over the keys:
//! 1. the row's scores `(√s·q)·(√s·k)`, softcapped, plus the bias; their maximum and the
//!    bias's maximum (−∞ means the row is fully masked);
//! 2. `exp(score − max)` and the sum;
//! 3. the probabilities (zero in a fully masked row);
//! 4. for each output feature, the probability-weighted sum of the values.
//!
//! With `f32` data the two products are runtime `sgemm` calls instead, one per query head: all
//! its rows' scores before the passes, all its rows' outputs after them.
//! When, besides, the softmax is computed in `f32` with no softcap and no fourth output, passes
//! 2 and 3 are the runtime's vectorized `softmax` (`e^x` within 1.5 ulp instead of the `f64`
//! `exp` rounded): one call for all rows of a head when no mask or window applies, else a call
//! per row after pass 1, which then zeroes a fully masked row.
//!
//! Rounding follows the reference's arrays (see [`Num`]): the scaled Q and K, the product,
//! each softcap step, the biased scores, the softmax's shift, exponentials, sum and quotient,
//! and the probabilities cast back to the data type. The one exception: with `sgemm`, `f32` Q
//! and K and no past keys, the scores are `s·(q·k)` (the scale as the product's factor, Q and
//! K read in place) rather than `(√s·q)·(√s·k)`.

use kiln_tir::NodeId;

use super::sdpa::{Dims, Heads, Offset, Plan, QkOutput};
use super::Num;
use kiln_loops::ir::*;
use crate::linalg::Sgemm;
use crate::Lowerer;

/// Emits the kernel for a checked plan.
pub(super) fn emit(cx: &mut Lowerer<'_>, n: NodeId, p: &Plan) {
    let d = p.dims;
    let total = d.total();
    let mut k = cx.kernel(n);
    let mut elems = vec![p.t, p.v.elem, p.score, p.soft];
    if let Some(m) = p.mask.as_ref().filter(|m| !m.boolean) {
        elems.push(m.op.elem);
    }
    let num = Num::new(cx, &k.name, &elems);
    let mut temp = |name: &str, elem: ElemType, len: u64| cx.program.add_buffer(Buffer { name: format!("{}_{name}", k.name), elem, len, kind: BufferKind::Temp });
    let ks = Heads::four(temp("scaled_k", p.t, d.batch * d.kv_heads * total * d.head), p.t, d.kv_heads, total, d.head);
    // f32 data (and f32 arithmetic) multiply with the runtime's sgemm, a query head at a time:
    // the scores of all its rows, then the weighted values; the row passes in between are the
    // same.
    let f32e = ElemType::Scalar(ScalarType::F32);
    let gemm = p.t == f32e && p.v.elem == f32e && num.ty == ScalarType::F32 && d.q_len > 0 && d.head > 0 && d.v_head > 0;
    let q_rows = if gemm { d.q_len } else { 1 };
    // With sgemm, each query head gets its own scores (and scaled queries) when all heads'
    // fit in PER_HEAD_MAX elements: the heads are then independent iterations, which the
    // code generator splits over threads (`kiln_loops::parallel`).
    let heads = d.batch * d.q_heads;
    let per_head = gemm && heads > 1 && heads.checked_mul(q_rows * total.max(d.head)).is_some_and(|n| n <= PER_HEAD_MAX);
    let copies = if per_head { heads } else { 1 };
    let qs = temp("scaled_q", p.t, copies * q_rows * d.head);
    let row = temp("scores", ElemType::Scalar(num.ty), copies * q_rows * total);
    // With a cache, attention reads the concatenated values: the present_value output, or a
    // scratch copy when that output is unused.
    let v_src = match (&p.past, &p.present_value) {
        (Some(_), Some(pv)) => Some(Heads::four(pv.buf, pv.elem, d.kv_heads, total, d.v_head)),
        (Some(_), None) => Some(Heads::four(temp("values", p.v.elem, d.batch * d.kv_heads * total * d.v_head), p.v.elem, d.kv_heads, total, d.v_head)),
        (None, Some(pv)) => Some(Heads::four(pv.buf, pv.elem, d.kv_heads, total, d.v_head)),
        (None, None) => None,
    };

    let mut body = Vec::new();
    if let Some(pk) = &p.present_key {
        let dst = Heads::four(pk.buf, pk.elem, d.kv_heads, total, d.head);
        body.extend(concat(&mut k, &d, p.past.map(|x| x.0), p.k, d.head, &mut |ix, src, at| vec![Stmt::Store { buf: dst.buf, index: dst.at(&ix[0], &ix[1], at, &ix[3]), value: Expr::load(src.buf, src.at(&ix[0], &ix[1], &ix[2], &ix[3])) }]));
    }
    if let Some(dst) = v_src {
        body.extend(concat(&mut k, &d, p.past.map(|x| x.1), p.v, d.v_head, &mut |ix, src, at| vec![Stmt::Store { buf: dst.buf, index: dst.at(&ix[0], &ix[1], at, &ix[3]), value: Expr::load(src.buf, src.at(&ix[0], &ix[1], &ix[2], &ix[3])) }]));
    }
    let scale = num.c(p.scale);
    // With sgemm, f32 Q and K and no past keys, the product reads Q and K where they are and
    // applies the scale as its factor: `s·(q·k)` instead of `(√s·q)·(√s·k)`, one rounding
    // fewer per element, and no scaled copies (scalar loops of generated code).
    let in_place = gemm && p.q.elem == f32e && p.k.elem == f32e && p.past.is_none();
    if !in_place {
        body.extend(concat(&mut k, &d, p.past.map(|x| x.0), p.k, d.head, &mut |ix, src, at| {
            let value = num.load(src.buf, src.elem, src.at(&ix[0], &ix[1], &ix[2], &ix[3])) * scale.clone();
            vec![num.store(ks.buf, ks.elem, ks.at(&ix[0], &ix[1], at, &ix[3]), value)]
        }));
    }
    // With f32 throughout and nothing recorded between the softmax's steps, the runtime's
    // vectorized softmax replaces passes 2 and 3: for all rows of a head at once when no bias
    // applies (pass 1 would only copy the scores), else row by row after pass 1.
    let runtime_softmax = gemm && num.ty == ScalarType::F32 && p.score == f32e && p.soft == f32e && p.softcap.is_none() && p.qk.is_none();
    let unbiased = p.mask.is_none() && !p.causal && p.window.0 < 0 && p.window.1 < 0 && p.nonpad.is_none();
    // With a bias, pass 1 runs over all of a head's rows first, recording whether each row has
    // a bias above −∞ (0: fully masked) here; then one softmax call takes the head's rows.
    let i32e = ElemType::Scalar(ScalarType::I32);
    let unmasked = (gemm && runtime_softmax && !unbiased).then(|| cx.program.add_buffer(Buffer { name: format!("{}_unmasked", k.name), elem: i32e, len: copies * q_rows, kind: BufferKind::Temp }));
    let rows = Rows { p, num: &num, ks, qs, row, v: v_src.unwrap_or(p.v), gemm, runtime_softmax, per_head, unmasked };
    let heads = k.nest(&[d.batch, d.kv_heads, d.group()], |k, ix| {
        let (b, g) = (&ix[0], &ix[1]);
        let h = g.clone() * d.group() as i64 + ix[2].clone();
        let mut s = Vec::new();
        let zero = Expr::idx(0);
        // The head's scores and scaled queries.
        let (row_at, qs_at) = if per_head {
            let head = b.clone() * d.q_heads as i64 + h.clone();
            (head.clone() * (q_rows * total) as i64, head * (q_rows * d.head) as i64)
        } else {
            (zero.clone(), zero.clone())
        };
        if in_place {
            let alpha = (p.scale * p.scale) as f32;
            s.push(Sgemm { a: (p.q.buf, p.q.at(b, &h, &zero, &zero)), b: (p.k.buf, p.k.at(b, g, &zero, &zero)), c: (row, row_at.clone()), m: d.q_len, n: total, k: d.head, lda: p.q.row_stride(), ldb: p.k.row_stride(), ldc: total, trans_a: false, trans_b: true, alpha, beta: 0.0 }.call());
        } else if gemm {
            s.extend(k.nest(&[d.q_len, d.head], |_, f| vec![Stmt::Store { buf: qs, index: qs_at.clone() + f[0].clone() * d.head as i64 + f[1].clone(), value: Expr::load(p.q.buf, p.q.at(b, &h, &f[0], &f[1])) * scale.clone() }]));
            s.push(Sgemm { a: (qs, qs_at.clone()), b: (ks.buf, ks.at(b, g, &zero, &zero)), c: (row, row_at.clone()), m: d.q_len, n: total, k: d.head, lda: d.head, ldb: d.head, ldc: total, trans_a: false, trans_b: true, alpha: 1.0, beta: 0.0 }.call());
        }
        if runtime_softmax && unbiased {
            s.push(softmax_call(row, row_at.clone(), d.q_len, total));
        } else {
            s.extend(k.nest(&[d.q_len], |k, i| rows.emit(k, b, g, &h, &i[0])));
            if let Some(flags) = unmasked {
                // Passes 2 and 3 for the head's rows at once; a fully masked row is then zeroed.
                s.push(softmax_call(row, row_at.clone(), d.q_len, total));
                let flags_at = rows.head_base(b, &h, d.q_len);
                s.extend(k.nest(&[d.q_len], |k, i| {
                    let masked = Expr::load(flags, flags_at.clone() + i[0].clone()).cmp(CmpOp::Eq, Expr::int(ScalarType::I32, 0));
                    let at = row_at.clone() + i[0].clone() * total as i64;
                    let zero = k.nest(&[total], |_, jj| vec![Stmt::Store { buf: row, index: at.clone() + jj[0].clone(), value: Expr::f32(0.0) }]);
                    vec![Stmt::If { cond: masked, then: zero, otherwise: Vec::new() }]
                }));
            }
        }
        if gemm {
            let (v, y) = (&rows.v, &p.y);
            s.push(Sgemm { a: (row, row_at.clone()), b: (v.buf, v.at(b, g, &zero, &zero)), c: (y.buf, y.at(b, &h, &zero, &zero)), m: d.q_len, n: d.v_head, k: total, lda: total, ldb: v.row_stride(), ldc: y.row_stride(), trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0 }.call());
        }
        s
    });
    body.extend(heads);
    k.body = body;
    cx.push(k);
}

/// The most elements of per-head scores (and of per-head scaled queries) a kernel takes: 4 Mi,
/// 16 MiB of `f32`. Larger ones share one head's buffer and run the heads in turn.
const PER_HEAD_MAX: u64 = 1 << 22;

/// The passes over the keys for one query row.
struct Rows<'a> {
    p: &'a Plan,
    num: &'a Num,
    /// The scaled keys, `[B, kv_heads, total, head]`.
    ks: Heads,
    /// The scaled query row (or, with sgemm, all rows of the head).
    qs: BufId,
    /// The row's scores, then its probabilities (with sgemm, all rows of the head, computed
    /// before the passes).
    row: BufId,
    /// The values, past and new.
    v: Heads,
    gemm: bool,
    /// Whether passes 2 and 3 are the runtime's softmax.
    runtime_softmax: bool,
    /// Whether each query head has its own scores (with sgemm).
    per_head: bool,
    /// Whether each row has a bias above −∞ (`i32` 1 or 0), when the runtime's softmax runs
    /// after pass 1 over a head's rows (per head, as the scores).
    unmasked: Option<BufId>,
}

/// The runtime's softmax over `rows × cols` `f32` scores at `buf[at]`.
fn softmax_call(buf: BufId, at: Expr, rows: u64, cols: u64) -> Stmt {
    Stmt::Call(kiln_loops::call::Softmax { x: Addr::new(buf, at), rows: Expr::idx(rows as i64), cols: Expr::idx(cols as i64) }.into())
}

impl Rows<'_> {
    /// Where head `h` of batch `b` starts in a per-head buffer of `len` elements per head (0
    /// when the heads share one).
    fn head_base(&self, b: &Expr, h: &Expr, len: u64) -> Expr {
        if self.per_head { (b.clone() * self.p.dims.q_heads as i64 + h.clone()) * len as i64 } else { Expr::idx(0) }
    }

    /// The statements for query row `i` of head `h` (key/value head `g`) of batch `b`.
    fn emit(&self, k: &mut Kernel, b: &Expr, g: &Expr, h: &Expr, i: &Expr) -> Vec<Stmt> {
        let (p, num, d) = (self.p, self.num, self.p.dims);
        let total = d.total();
        let (qs, row, ks, v_src) = (self.qs, self.row, self.ks, self.v);
        let cty = ElemType::Scalar(num.ty);
        let base = if self.per_head { (b.clone() * d.q_heads as i64 + h.clone()) * (d.q_len * total) as i64 } else { Expr::idx(0) };
        let at = |j: &Expr| if self.gemm { base.clone() + i.clone() * total as i64 + j.clone() } else { j.clone() };
        let mut s = Vec::new();
        if !self.gemm {
            s.extend(k.nest(&[d.head], |_, f| vec![num.store(qs, p.t, f[0].clone(), num.load(p.q.buf, p.q.elem, p.q.at(b, h, i, &f[0])) * num.c(p.scale))]));
        }
        let qk_at = |j: &Expr| ((b.clone() * d.q_heads as i64 + h.clone()) * d.q_len as i64 + i.clone()) * total as i64 + j.clone();
        let qk_store = |s: &mut Vec<Stmt>, mode: QkOutput, j: &Expr, value: &Expr| {
            if let Some((out, _)) = p.qk.as_ref().filter(|(_, m)| *m == mode) {
                s.push(num.store_op(out, qk_at(j), value.clone()));
            }
        };
        // The causal frontier and window are relative to `i + offset`.
        let pos = k.var(ScalarType::I64);
        let offset = match p.offset {
            Offset::Fixed(o) => Expr::idx(o),
            Offset::PerBatch(buf) => Expr::load(buf, b.clone()) - d.q_len as i64,
        };
        s.push(Stmt::Let(pos, i.clone() + offset));
        let (max, bias_max) = (k.var(num.ty), k.var(num.ty));
        s.push(Stmt::Local(max, num.neg_inf()));
        s.push(Stmt::Local(bias_max, num.neg_inf()));
        let live = k.var(ScalarType::I32);
        s.push(Stmt::Local(live, Expr::int(ScalarType::I32, 0)));

        // Pass 1: scores.
        s.extend(k.nest(&[total], |k, jj| {
            let j = &jj[0];
            let mut s = Vec::new();
            let raw = if self.gemm {
                num.bind(k, &mut s, Expr::load(row, at(j)))
            } else {
                let acc = k.var(num.ty);
                s.push(Stmt::Local(acc, num.c(0.0)));
                s.extend(k.nest(&[d.head], |_, f| {
                    let term = num.load(qs, p.t, f[0].clone()) * num.load(ks.buf, ks.elem, ks.at(b, g, j, &f[0]));
                    vec![Stmt::Assign(acc, Expr::Var(acc) + term)]
                }));
                num.round(k, &mut s, p.t, Expr::Var(acc))
            };
            qk_store(&mut s, QkOutput::Raw, j, &raw);
            let capped = match p.softcap {
                Some(c) => {
                    let x = num.round(k, &mut s, p.t, raw / num.c(c));
                    let x = num.round(k, &mut s, p.t, x.math(MathFn::Tanh));
                    num.round(k, &mut s, p.t, x * num.c(c))
                }
                None => raw,
            };
            qk_store(&mut s, QkOutput::Capped, j, &capped);
            let bias = bias(k, &mut s, num, p, [b, h, i, j], &Expr::Var(pos));
            match self.unmasked {
                // An integer maximum: one vector instruction, where a float one takes several.
                Some(_) => s.push(Stmt::Assign(live, Expr::Var(live).max(bias.clone().cmp(CmpOp::Ne, num.neg_inf()).select(Expr::int(ScalarType::I32, 1), Expr::int(ScalarType::I32, 0))))),
                None => s.push(Stmt::Assign(bias_max, Expr::Var(bias_max).max(bias.clone()))),
            }
            let biased = num.round(k, &mut s, p.score, capped + bias);
            qk_store(&mut s, QkOutput::Biased, j, &biased);
            // Rounding again to the same type would change nothing.
            let x = if p.soft == p.score { biased } else { num.round(k, &mut s, p.soft, biased) };
            s.push(num.store(row, cty, at(j), x.clone()));
            // The runtime's softmax over the head's rows finds the maximum itself.
            if self.unmasked.is_none() {
                s.push(Stmt::Assign(max, Expr::Var(max).max(x)));
            }
            s
        }));

        if let Some(flags) = self.unmasked {
            // Passes 2 and 3 follow for all of the head's rows.
            s.push(Stmt::Store { buf: flags, index: self.head_base(b, h, d.q_len) + i.clone(), value: Expr::Var(live) });
            return s;
        }
        if self.runtime_softmax {
            // Passes 2 and 3 in the runtime; a fully masked row is then zeroed.
            s.push(softmax_call(row, at(&Expr::idx(0)), 1, total));
            let masked = Expr::Var(bias_max).cmp(CmpOp::Eq, num.neg_inf());
            let zero = k.nest(&[total], |_, jj| vec![num.store(row, cty, at(&jj[0]), num.c(0.0))]);
            s.push(Stmt::If { cond: masked, then: zero, otherwise: Vec::new() });
            return s;
        }

        // Pass 2: exponentials and their sum. A row whose maximum is −∞ shifts by 0, so it
        // stays all zeros instead of becoming NaN.
        let shift = num.bind(k, &mut s, Expr::Var(max).cmp(CmpOp::Eq, num.neg_inf()).select(num.c(0.0), Expr::Var(max)));
        let sum = k.var(num.ty);
        s.push(Stmt::Local(sum, num.c(0.0)));
        s.extend(k.nest(&[total], |k, jj| {
            let j = &jj[0];
            let mut s = Vec::new();
            let x = num.round(k, &mut s, p.soft, Expr::load(row, at(j)) - shift.clone());
            let e = num.round(k, &mut s, p.soft, x.math(MathFn::Exp));
            s.push(num.store(row, cty, at(j), e.clone()));
            // numpy sums f16 (and f32, f64) in a wider accumulator; ml_dtypes' bf16 rounds
            // after every addition.
            let next = if p.soft == ElemType::BF16 { num.round(k, &mut s, p.soft, Expr::Var(sum) + e) } else { Expr::Var(sum) + e };
            s.push(Stmt::Assign(sum, next));
            s
        }));
        let total_sum = num.round(k, &mut s, p.soft, Expr::Var(sum));
        let denom = num.bind(k, &mut s, total_sum.clone().cmp(CmpOp::Eq, num.c(0.0)).select(num.c(1.0), total_sum));
        let masked = k.var(ScalarType::Bool);
        s.push(Stmt::Let(masked, Expr::Var(bias_max).cmp(CmpOp::Eq, num.neg_inf())));

        // Pass 3: probabilities, in the data type.
        s.extend(k.nest(&[total], |k, jj| {
            let j = &jj[0];
            let mut s = Vec::new();
            let prob = num.round(k, &mut s, p.soft, Expr::load(row, at(j)) / denom.clone());
            let prob = num.bind(k, &mut s, Expr::Var(masked).select(num.c(0.0), prob));
            qk_store(&mut s, QkOutput::Probs, j, &prob);
            let prob = if p.soft == p.t { prob } else { num.round(k, &mut s, p.t, prob) };
            s.push(num.store(row, cty, at(j), prob));
            s
        }));

        // Pass 4: the weighted sum of the values (with sgemm, after all rows).
        if !self.gemm {
            s.extend(k.nest(&[d.v_head], |k, f| {
                let acc = k.var(num.ty);
                let mut s = vec![Stmt::Local(acc, num.c(0.0))];
                s.extend(k.nest(&[total], |_, jj| {
                    let term = Expr::load(row, jj[0].clone()) * num.load(v_src.buf, v_src.elem, v_src.at(b, g, &jj[0], &f[0]));
                    vec![Stmt::Assign(acc, Expr::Var(acc) + term)]
                }));
                s.push(num.store(p.y.buf, p.y.elem, p.y.at(b, h, i, &f[0]), Expr::Var(acc)));
                s
            }));
        }
        s
    }
}

/// The body of [`concat`]'s loop nest: gets the source index `(b, g, t, d)`, the source tensor
/// and the position `t` has in the concatenation.
type ConcatBody<'a> = &'a mut dyn FnMut(&[Expr], &Heads, &Expr) -> Vec<Stmt>;

/// Loops over every element of the concatenation of `past` and `new` along the position
/// axis, `dim` features per position.
fn concat(k: &mut Kernel, d: &Dims, past: Option<Heads>, new: Heads, dim: u64, f: ConcatBody<'_>) -> Vec<Stmt> {
    let mut parts = Vec::new();
    if let Some(past) = past {
        parts.push((past, d.past, 0i64));
    }
    parts.push((new, d.kv_len, d.past as i64));
    let mut out = Vec::new();
    for (src, len, start) in parts {
        out.extend(k.nest(&[d.batch, d.kv_heads, len, dim], |_, ix| f(ix, &src, &(ix[2].clone() + start))));
    }
    out
}

/// The additive bias of score `(b, h, i, j)` in the computation type: the mask's value (0 or
/// −∞ for a boolean mask, −∞ past its end) plus 0 or −∞ for the causal frontier, the window
/// and the `nonpad_kv_seqlen` padding. `pos` is the query's absolute position `i + offset`.
fn bias(k: &mut Kernel, s: &mut Vec<Stmt>, num: &Num, p: &Plan, [b, h, i, j]: [&Expr; 4], pos: &Expr) -> Expr {
    let mut value = None;
    if let Some(m) = &p.mask {
        value = Some(if m.len == 0 {
            num.neg_inf()
        } else {
            let last = m.len as i64 - 1;
            let jj = if m.len == p.dims.total() { j.clone() } else { j.clone().min(Expr::idx(last)) };
            let at = b.clone() * m.strides[0] + h.clone() * m.strides[1] + i.clone() * m.strides[2] + jj;
            let v = if m.boolean { Expr::load(m.op.buf, at).select(num.c(0.0), num.neg_inf()) } else { num.load_op(&m.op, at) };
            if m.len == p.dims.total() { v } else { j.clone().cmp(CmpOp::Le, Expr::idx(last)).select(v, num.neg_inf()) }
        });
    }
    let mut allowed: Option<Expr> = None;
    let mut and = |c: Expr| allowed = Some(match allowed.take() { Some(a) => a.bin(BinOp::And, c), None => c });
    if p.causal {
        and(j.clone().cmp(CmpOp::Le, pos.clone()));
    }
    let (left, right) = p.window;
    if left >= 0 {
        and((pos.clone() - j.clone()).cmp(CmpOp::Le, Expr::idx(left)));
    }
    if right >= 0 {
        and((j.clone() - pos.clone()).cmp(CmpOp::Le, Expr::idx(right)));
    }
    if let Some(buf) = p.nonpad {
        and(j.clone().cmp(CmpOp::Lt, Expr::load(buf, b.clone())));
    }
    let value = match (value, allowed) {
        (Some(v), Some(a)) => v + a.select(num.c(0.0), num.neg_inf()),
        (None, Some(a)) => a.select(num.c(0.0), num.neg_inf()),
        (Some(v), None) => v,
        (None, None) => num.c(0.0),
    };
    num.bind(k, s, value)
}
