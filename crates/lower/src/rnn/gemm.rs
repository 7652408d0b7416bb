//! The `f32` recurrence as matrix products: for each direction, one `sgemm_fused` computes
//! `X·Wᵀ + Wb` for every step at once, and each step computes `H·Rᵀ + Rb` for the whole batch
//! with another. The products read `W` and `R` in place, so constant weights are packed once
//! when the model is compiled (`kiln_schedule::prepack`). The gate math of a step is then a few
//! element-wise passes over `[batch, hidden]`; sigmoid, tanh and relu gates without `clip`
//! run as the runtime's epilogue over each row's gates, the rest inline.
//!
//! Per row and step, `pre` (`[batch, G·H]`) holds `H·Rᵀ + Rb`, then the gates' pre-activations,
//! then (in place) their activations. The GRU's hidden gate takes `r` first: with
//! `linear_before_reset`, `pre_h = Xh + Wbh + r ⊙ (H·Rhᵀ + Rbh)`; without it, the product
//! `(r ⊙ H)·Rhᵀ` runs after the other gates, from `rh` (`[batch, hidden]`).

use super::activation::Act;
use super::{Block, Cell, Layer, rows};
use kiln_loops::call;
use kiln_loops::ir::*;

/// The buffers only this path uses.
pub(super) struct Scratch {
    /// `X·Wᵀ + Wb` of one direction: a row of `G·H` per row of `X`, in `X`'s row order.
    pub gx: BufId,
    /// The batch's gates of the current step, `[batch, G·H]`.
    pub pre: BufId,
    /// `r ⊙ H` (GRU without `linear_before_reset`), or `h(C)` (LSTM), `[batch, hidden]`.
    pub rows: BufId,
}

/// The epilogue's code for `act` applied on its own (no clip), if it has one.
fn epilogue_code(act: Act) -> Option<i64> {
    match act {
        Act::Relu => Some(1),
        Act::Sigmoid => Some(4),
        Act::Tanh => Some(5),
        _ => None,
    }
}

/// A product of this path: `C = A·op(B)ᵀ + bias`, `B` row-major as `W`/`R` store it.
struct Product {
    a: Addr,
    lda: u64,
    b: Addr,
    c: Addr,
    ldc: u64,
    m: u64,
    n: u64,
    k: u64,
    /// The per-column bias and its buffer offset.
    bias: Option<Addr>,
}

impl Product {
    fn call(self) -> Stmt {
        let int = |v: u64| Expr::idx(v as i64);
        let (bias, mode) = match self.bias {
            Some(b) => (b, 2),
            None => (self.c.clone(), 0),
        };
        Stmt::Call(
            call::SgemmFused {
                a: self.a,
                b: self.b,
                z: self.c.clone(),
                c: self.c,
                bias,
                m: int(self.m),
                n: int(self.n),
                k: int(self.k),
                lda: int(self.lda),
                ldb: int(self.k),
                ldc: int(self.ldc),
                trans_a: int(0),
                trans_b: int(1),
                nr: int(0),
                kc: int(0),
                bias_mode: Expr::idx(mode),
                period: int(0),
                residual: int(0),
                act: int(0),
                alpha: Expr::f32(1.0),
                beta: Expr::f32(0.0),
                act_alpha: Expr::f32(0.0),
                act_beta: Expr::f32(0.0),
            }
            .into(),
        )
    }
}

/// The loop nests of one direction's steps, between its initial and final states.
pub(super) fn steps(k: &mut Kernel, l: &Layer, s: &Scratch, d: u64, reverse: bool, acts: &[Act]) -> Vec<Stmt> {
    let geo = &l.geo;
    let (h, gh) = (geo.hidden, l.cell.gates() * geo.hidden);
    let bias = |off: u64| l.bias.as_ref().map(|b| Addr::at(b.buf, (d * 2 * gh + off) as i64));
    let weights = |m: &super::Operand, rows_before: u64, width: u64| Addr::at(m.buf, ((d * gh + rows_before) * width) as i64);
    let mut out = vec![
        Product { a: Addr::at(l.x.buf, 0), lda: geo.input, b: weights(&l.w, 0, geo.input), c: Addr::at(s.gx, 0), ldc: gh, m: geo.seq * geo.batch, n: gh, k: geo.input, bias: bias(0) }
            .call(),
    ];
    // Gates activated by the epilogue are read as they are by the update below.
    let pre_activated = l.clip.is_none() && l.peep.is_none() && acts.iter().all(|a| epilogue_code(*a).is_some());
    let gru_late = l.cell == (Cell::Gru { linear_before_reset: false });
    out.extend(k.nest(&[geo.seq], |k, i| {
        let step = &i[0];
        let mut v = Vec::new();
        // H·Rᵀ + Rb for every gate the state feeds directly.
        let direct = if gru_late { 2 * h } else { gh };
        v.push(Product { a: Addr::at(l.hs, 0), lda: h, b: weights(&l.r, 0, h), c: Addr::at(s.pre, 0), ldc: gh, m: geo.batch, n: direct, k: h, bias: bias(gh) }.call());
        // Add X·Wᵀ + Wb: all gates, or all but the GRU's hidden gate, which needs r first.
        let summed = if matches!(l.cell, Cell::Gru { .. }) { 2 * h } else { gh };
        v.extend(rows(k, l, step, reverse, &[summed], |_, b, t, j| {
            let at = b.clone() * gh as i64 + j[0].clone();
            vec![Stmt::Store { buf: s.pre, index: at.clone(), value: Expr::load(s.pre, at) + Expr::load(s.gx, geo.x_row(t, b) * gh as i64 + j[0].clone()) }]
        }));
        // The gates of the first activation: z and r, or i, o and f, or the RNN's one.
        let first = match l.cell {
            Cell::Rnn => h,
            Cell::Gru { .. } => 2 * h,
            Cell::Lstm { .. } => 3 * h,
        };
        if pre_activated {
            v.extend(activate(k, l, step, reverse, acts[0], s.pre, gh, 0, first));
        }
        if let Cell::Gru { linear_before_reset } = l.cell {
            let r = |blk: &mut Block<'_>, b: &Expr, j: &Expr| {
                let pre = Expr::load(s.pre, b.clone() * gh as i64 + j.clone() + h as i64);
                if pre_activated { pre } else { blk.activate(acts[0], pre, l.clip) }
            };
            let at_h = |b: &Expr, j: &Expr| b.clone() * gh as i64 + j.clone() + 2 * h as i64;
            let xh = |t: &Expr, b: &Expr, j: &Expr| Expr::load(s.gx, geo.x_row(t, b) * gh as i64 + j.clone() + 2 * h as i64);
            if linear_before_reset {
                v.extend(rows(k, l, step, reverse, &[h], |k, b, t, j| {
                    let mut blk = Block { k, ty: l.ty, stmts: Vec::new() };
                    let r = r(&mut blk, b, &j[0]);
                    let value = xh(t, b, &j[0]) + r * Expr::load(s.pre, at_h(b, &j[0]));
                    blk.stmts.push(Stmt::Store { buf: s.pre, index: at_h(b, &j[0]), value });
                    blk.stmts
                }));
            } else {
                v.extend(rows(k, l, step, reverse, &[h], |k, b, _, j| {
                    let mut blk = Block { k, ty: l.ty, stmts: Vec::new() };
                    let r = r(&mut blk, b, &j[0]);
                    let at = b.clone() * h as i64 + j[0].clone();
                    blk.stmts.push(Stmt::Store { buf: s.rows, index: at.clone(), value: r * Expr::load(l.hs, at) });
                    blk.stmts
                }));
                v.push(Product { a: Addr::at(s.rows, 0), lda: h, b: weights(&l.r, 2 * h, h), c: Addr::at(s.pre, 2 * h as i64), ldc: gh, m: geo.batch, n: h, k: h, bias: bias(gh + 2 * h) }.call());
                v.extend(rows(k, l, step, reverse, &[h], |_, b, t, j| {
                    vec![Stmt::Store { buf: s.pre, index: at_h(b, &j[0]), value: xh(t, b, &j[0]) + Expr::load(s.pre, at_h(b, &j[0])) }]
                }));
            }
            if pre_activated {
                v.extend(activate(k, l, step, reverse, acts[1], s.pre, gh, 2 * h, h));
            }
        }
        if pre_activated && matches!(l.cell, Cell::Lstm { .. }) {
            // The cell gate's activation differs from i, o and f's.
            v.extend(activate(k, l, step, reverse, acts[1], s.pre, gh, 3 * h, h));
        }
        v.extend(update(k, l, s, d, step, reverse, acts, pre_activated));
        v
    }));
    out
}

/// `act` in place over columns `from..from + cols` of every running row of `buf` (row stride
/// `stride`), as the runtime's epilogue.
#[allow(clippy::too_many_arguments)]
fn activate(k: &mut Kernel, l: &Layer, step: &Expr, reverse: bool, act: Act, buf: BufId, stride: u64, from: u64, cols: u64) -> Vec<Stmt> {
    let code = epilogue_code(act).unwrap_or(0);
    rows(k, l, step, reverse, &[], |_, b, _, _| {
        let y = Addr::new(buf, b.clone() * stride as i64 + from as i64);
        let e = call::Epilogue {
            y: y.clone(),
            b: y.clone(),
            z: y,
            rows: Expr::idx(1),
            cols: Expr::idx(cols as i64),
            bias_mode: Expr::idx(0),
            period: Expr::idx(0),
            residual: Expr::idx(0),
            act: Expr::idx(code),
            alpha: Expr::f32(0.0),
            beta: Expr::f32(0.0),
        };
        vec![Stmt::Call(e.into())]
    })
}

/// The new state of every running row from its gates, written to the state buffers and `Y`.
#[allow(clippy::too_many_arguments)]
fn update(k: &mut Kernel, l: &Layer, s: &Scratch, d: u64, step: &Expr, reverse: bool, acts: &[Act], pre_activated: bool) -> Vec<Stmt> {
    let (geo, ty) = (&l.geo, l.ty);
    let (hid, gh) = (geo.hidden as i64, (l.cell.gates() * geo.hidden) as i64);
    let lstm_h = matches!(l.cell, Cell::Lstm { .. }) && pre_activated;
    let mut out = rows(k, l, step, reverse, &[geo.hidden], |k, b, t, i| {
        let j = &i[0];
        let at = b.clone() * hid + j.clone();
        let gate = |g: i64| Expr::load(s.pre, b.clone() * gh + j.clone() + g * hid);
        let mut blk = Block { k, ty, stmts: Vec::new() };
        let act = |blk: &mut Block<'_>, a: Act, pre: Expr| if pre_activated { blk.bind(pre) } else { blk.activate(a, pre, l.clip) };
        let one = Expr::float(ty, 1.0);
        let hnew = match l.cell {
            Cell::Rnn => act(&mut blk, acts[0], gate(0)),
            Cell::Gru { .. } => {
                let z = act(&mut blk, acts[0], gate(0));
                let hh = act(&mut blk, acts[1], gate(2));
                let hold = blk.bind(Expr::load(l.hs, at.clone()));
                blk.bind((one - z.clone()) * hh + z * hold)
            }
            Cell::Lstm { input_forget } => {
                let peep = |g: i64, c: &Expr| l.peep.as_ref().map(|p| Expr::load(p.buf, Expr::idx(d as i64 * 3 * hid + g * hid) + j.clone()) * c.clone());
                let plus = |e: Expr, p: Option<Expr>| p.map_or(e.clone(), |p| e + p);
                let cold = blk.bind(Expr::load(l.cs, at.clone()));
                // Gate columns are i, o, f, c; peepholes are i, o, f.
                let i_g = act(&mut blk, acts[0], plus(gate(0), peep(0, &cold)));
                let f_g = if input_forget { blk.bind(one - i_g.clone()) } else { act(&mut blk, acts[0], plus(gate(2), peep(2, &cold))) };
                let c_g = act(&mut blk, acts[1], gate(3));
                let c = blk.bind(f_g * cold + i_g * c_g);
                blk.stmts.push(Stmt::Store { buf: l.cs, index: at.clone(), value: c.clone() });
                if lstm_h {
                    // o ⊙ h(C) once h(C) has run over the row: the next nest.
                    blk.stmts.push(Stmt::Store { buf: s.rows, index: at.clone(), value: c });
                    return blk.stmts;
                }
                let o_g = act(&mut blk, acts[0], plus(gate(1), peep(1, &c)));
                let hc = blk.bind(acts[2].apply(c, ty));
                blk.bind(o_g * hc)
            }
        };
        blk.stmts.push(Stmt::Store { buf: l.hs, index: at, value: hnew.clone() });
        if let Some(y) = &l.y {
            blk.stmts.push(Stmt::Store { buf: y.buf, index: geo.y(t, d, b, j), value: hnew });
        }
        blk.stmts
    });
    if lstm_h {
        out.extend(activate(k, l, step, reverse, acts[2], s.rows, geo.hidden, 0, geo.hidden));
        out.extend(rows(k, l, step, reverse, &[geo.hidden], |_, b, t, i| {
            let j = &i[0];
            let at = b.clone() * hid + j.clone();
            let hnew = Expr::load(s.pre, b.clone() * gh + j.clone() + hid) * Expr::load(s.rows, at.clone());
            let mut v = vec![Stmt::Store { buf: l.hs, index: at, value: hnew.clone() }];
            if let Some(y) = &l.y {
                v.push(Stmt::Store { buf: y.buf, index: geo.y(t, d, b, j), value: hnew });
            }
            v
        }));
    }
    out
}
