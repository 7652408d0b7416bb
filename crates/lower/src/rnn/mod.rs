//! Recurrent layers: RNN, GRU and LSTM, each one kernel of plain loop nests.
//!
//! For each direction (forward, then reverse when bidirectional), the kernel walks the
//! sequence step by step and, for every batch row, computes the gate pre-activations
//! `X·Wᵀ + Wb` and `H·Rᵀ + Rb` into a scratch buffer, then the new hidden (and cell) state
//! element by element into state buffers, writing `Y` as it goes and `Y_h`/`Y_c` at the end.
//! Arithmetic is in the input's value type (`f32` for `f32` and half-precision inputs, `f64`
//! for `f64`).
//!
//! `sequence_lens` follows onnxruntime: batch row `b` runs `len[b]` steps (the reverse
//! direction starts at step `len[b] − 1`), `Y` is zero past them, and `Y_h`/`Y_c` hold the
//! state after the last step run (zero for a row of length 0). Lengths outside
//! `0..=seq_length` are a run-time error. `clip` bounds the input of every gate activation
//! (not `h(C)` of the LSTM). onnxruntime is also the model for activation parameters: each
//! function that takes `alpha`/`beta` consumes the next ones (see `activation.rs`).

mod activation;
mod gemm;

use kiln_tir::op::{RnnActivation, RnnDirection};
use kiln_tir::{NodeId, Op};

use self::activation::Act;
use super::{LowerError, Lowerer, Operand};
use kiln_loops::ir::*;

/// Which recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// `H = f(X·Wᵀ + H·Rᵀ + b)`.
    Rnn,
    /// Update, reset and hidden gates (`z, r, h`).
    Gru { linear_before_reset: bool },
    /// Input, output, forget and cell gates (`i, o, f, c`), with optional peepholes.
    Lstm { input_forget: bool },
}

impl Cell {
    /// Gates per hidden unit (rows of `W` and `R` per direction, in units of `hidden_size`).
    fn gates(self) -> u64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// The activation functions per direction when the attribute is empty.
    fn default_activations(self) -> &'static [RnnActivation] {
        use RnnActivation::{Sigmoid, Tanh};
        match self {
            Cell::Rnn => &[Tanh],
            Cell::Gru { .. } => &[Sigmoid, Tanh],
            Cell::Lstm { .. } => &[Sigmoid, Tanh, Tanh],
        }
    }
}

/// The attributes the three ops share.
struct Attrs<'a> {
    activations: &'a [RnnActivation],
    alpha: &'a [f32],
    beta: &'a [f32],
    clip: Option<f32>,
    direction: RnnDirection,
    hidden_size: Option<i64>,
    layout: i64,
}

/// Lowers `n` if it is RNN, GRU or LSTM.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (cell, attrs) = match &cx.node(n).op {
        Op::RNN(a) => (Cell::Rnn, Attrs { activations: &a.activations, alpha: &a.activation_alpha, beta: &a.activation_beta, clip: a.clip, direction: a.direction, hidden_size: a.hidden_size, layout: a.layout }),
        Op::GRU(a) => (
            Cell::Gru { linear_before_reset: a.linear_before_reset != 0 },
            Attrs { activations: &a.activations, alpha: &a.activation_alpha, beta: &a.activation_beta, clip: a.clip, direction: a.direction, hidden_size: a.hidden_size, layout: a.layout },
        ),
        Op::LSTM(a) => (
            Cell::Lstm { input_forget: a.input_forget != 0 },
            Attrs { activations: &a.activations, alpha: &a.activation_alpha, beta: &a.activation_beta, clip: a.clip, direction: a.direction, hidden_size: a.hidden_size, layout: a.layout },
        ),
        _ => return Ok(false),
    };
    recurrent(cx, n, cell, &attrs)?;
    Ok(true)
}

/// Sizes and layout: `layout == 0` is `X[T, B, I]`, `Y[T, D, B, H]`, states `[D, B, H]`;
/// `layout == 1` is `X[B, T, I]`, `Y[B, T, D, H]`, states `[B, D, H]`.
struct Geometry {
    seq: u64,
    batch: u64,
    input: u64,
    hidden: u64,
    dirs: u64,
    batch_major: bool,
}

impl Geometry {
    /// The row of `X` (as a `[T·B, I]` or `[B·T, I]` matrix) of step `t` of batch row `b`.
    fn x_row(&self, t: &Expr, b: &Expr) -> Expr {
        let (outer, inner, n_inner) = if self.batch_major { (b, t, self.seq) } else { (t, b, self.batch) };
        outer.clone() * n_inner as i64 + inner.clone()
    }

    fn x(&self, t: &Expr, b: &Expr, k: &Expr) -> Expr {
        self.x_row(t, b) * self.input as i64 + k.clone()
    }

    fn y(&self, t: &Expr, d: u64, b: &Expr, j: &Expr) -> Expr {
        let (d, h) = (d as i64, self.hidden as i64);
        let (dirs, batch, seq) = (self.dirs as i64, self.batch as i64, self.seq as i64);
        if self.batch_major {
            ((b.clone() * seq + t.clone()) * dirs + d) * h + j.clone()
        } else {
            ((t.clone() * dirs + d) * batch + b.clone()) * h + j.clone()
        }
    }

    fn state(&self, d: u64, b: &Expr, j: &Expr) -> Expr {
        let h = self.hidden as i64;
        if self.batch_major {
            (b.clone() * self.dirs as i64 + d as i64) * h + j.clone()
        } else {
            (Expr::idx((d * self.batch) as i64) + b.clone()) * h + j.clone()
        }
    }

    fn state_dims(&self) -> Vec<u64> {
        if self.batch_major { vec![self.batch, self.dirs, self.hidden] } else { vec![self.dirs, self.batch, self.hidden] }
    }

    fn y_dims(&self) -> Vec<u64> {
        if self.batch_major { vec![self.batch, self.seq, self.dirs, self.hidden] } else { vec![self.seq, self.dirs, self.batch, self.hidden] }
    }
}

/// Everything one direction's loop nest reads and writes.
struct Layer {
    cell: Cell,
    geo: Geometry,
    /// The arithmetic type.
    ty: ScalarType,
    clip: Option<f32>,
    x: Operand,
    w: Operand,
    r: Operand,
    bias: Option<Operand>,
    lens: Option<Operand>,
    h0: Option<Operand>,
    c0: Option<Operand>,
    peep: Option<Operand>,
    y: Option<Operand>,
    y_h: Option<Operand>,
    y_c: Option<Operand>,
    /// Hidden state `[B, H]` of the direction being computed.
    hs: BufId,
    /// Cell state `[B, H]` (LSTM; other cells never use it).
    cs: BufId,
    /// Gate pre-activations of one batch row: `X·Wᵀ + Wb` (`G·H`), then `H·Rᵀ + Rb` (`G·H`).
    gates: BufId,
    /// `r ⊙ H` of one batch row (GRU without `linear_before_reset`; other cells never use it).
    rh: BufId,
}

fn recurrent(cx: &mut Lowerer<'_>, n: NodeId, cell: Cell, attrs: &Attrs<'_>) -> Result<(), LowerError> {
    let dirs = match attrs.direction {
        RnnDirection::Forward | RnnDirection::Reverse => 1,
        RnnDirection::Bidirectional => 2,
    };
    let x = cx.required(n, 0)?;
    let w = cx.required(n, 1)?;
    let r = cx.required(n, 2)?;
    let bias = cx.input(n, 3)?;
    let lens = cx.input(n, 4)?;
    let h0 = cx.input(n, 5)?;
    let (c0, peep) = match cell {
        Cell::Lstm { .. } => (cx.input(n, 6)?, cx.input(n, 7)?),
        _ => (None, None),
    };
    let y = cx.output(n, 0)?;
    let y_h = cx.output(n, 1)?;
    let y_c = if matches!(cell, Cell::Lstm { .. }) { cx.output(n, 2)? } else { None };

    let geo = geometry(&x, &r, dirs, attrs).map_err(|why| cx.unsupported(n, why))?;
    let acts = activations(cell, attrs, dirs as usize).map_err(|why| cx.unsupported(n, why))?;
    let ty = x.ty();
    let (g, h) = (cell.gates(), geo.hidden);
    let checks: [(&str, Option<&Operand>, Vec<u64>); 9] = [
        ("W", Some(&w), vec![dirs, g * h, geo.input]),
        ("R", Some(&r), vec![dirs, g * h, h]),
        ("B", bias.as_ref(), vec![dirs, 2 * g * h]),
        ("initial_h", h0.as_ref(), geo.state_dims()),
        ("initial_c", c0.as_ref(), geo.state_dims()),
        ("P", peep.as_ref(), vec![dirs, 3 * h]),
        ("Y", y.as_ref(), geo.y_dims()),
        ("Y_h", y_h.as_ref(), geo.state_dims()),
        ("Y_c", y_c.as_ref(), geo.state_dims()),
    ];
    if !ty.is_float() {
        return Err(cx.unsupported(n, format!("{} input (the op is defined on floats)", ty.name())));
    }
    for (name, op, dims) in &checks {
        if let Some(op) = op {
            if op.dims != *dims {
                return Err(cx.unsupported(n, format!("{name} has shape {:?}, expected {dims:?}", op.dims)));
            }
            if op.ty() != ty {
                return Err(cx.unsupported(n, format!("{name} is {}, X is {}", op.elem.name(), x.elem.name())));
            }
        }
    }
    if lens.as_ref().is_some_and(|l| l.dims != [geo.batch] || l.ty().is_float() || l.ty() == ScalarType::Bool) {
        return Err(cx.unsupported(n, format!("sequence_lens must be {} integers", geo.batch)));
    }

    let mut k = cx.kernel(n);
    let temp = |cx: &mut Lowerer<'_>, what: &str, len: u64| cx.program.add_buffer(Buffer { name: format!("{}_{what}", k.name), elem: ElemType::Scalar(ty), len, kind: BufferKind::Temp });
    let hs = temp(cx, "h", geo.batch * h);
    let cs = if matches!(cell, Cell::Lstm { .. }) { temp(cx, "c", geo.batch * h) } else { hs };
    let gates = temp(cx, "gates", 2 * g * h);
    let rh = if matches!(cell, Cell::Gru { linear_before_reset: false }) { temp(cx, "rh", h) } else { gates };
    let error = lens.as_ref().map(|_| cx.error(n, format!("sequence_lens holds a length outside 0..={}", geo.seq)));
    // Plain f32 operands take the matrix-product path.
    let products = [Some(&x), Some(&w), Some(&r), bias.as_ref()].into_iter().flatten().all(crate::linalg::is_f32);
    let scratch = products.then(|| gemm::Scratch {
        gx: temp(cx, "gx", geo.seq * geo.batch * g * h),
        pre: temp(cx, "pre", geo.batch * g * h),
        rows: temp(cx, "rows", geo.batch * h),
    });
    let layer = Layer { cell, geo, ty, clip: attrs.clip, x, w, r, bias, lens, h0, c0, peep, y, y_h, y_c, hs, cs, gates, rh };

    let mut body = Vec::new();
    if let (Some(l), Some(error)) = (&layer.lens, error) {
        body.extend(k.nest(&[layer.geo.batch], |_, i| {
            let len = load_len(l, &i[0]);
            let cond = len.clone().cmp(CmpOp::Ge, Expr::idx(0)).bin(BinOp::And, len.cmp(CmpOp::Le, Expr::idx(layer.geo.seq as i64)));
            vec![Stmt::Check { cond, error }]
        }));
        // Steps past a row's length are never written: they are zero.
        if let Some(y) = &layer.y {
            body.extend(k.nest(&[y.numel()], |_, i| vec![Stmt::Store { buf: y.buf, index: i[0].clone(), value: Expr::float(ty, 0.0) }]));
        }
    }
    let per_dir = acts.len() / dirs as usize;
    for d in 0..dirs {
        let reverse = attrs.direction == RnnDirection::Reverse || d == 1;
        body.extend(direction(&mut k, &layer, scratch.as_ref(), d, reverse, &acts[d as usize * per_dir..][..per_dir]));
    }
    k.body = body;
    cx.push(k);
    Ok(())
}

fn geometry(x: &Operand, r: &Operand, dirs: u64, attrs: &Attrs<'_>) -> Result<Geometry, String> {
    let batch_major = match attrs.layout {
        0 => false,
        1 => true,
        other => return Err(format!("layout {other}")),
    };
    let [a, b, input] = x.dims[..] else {
        return Err(format!("X has shape {:?}, expected rank 3", x.dims));
    };
    let (seq, batch) = if batch_major { (b, a) } else { (a, b) };
    let Some(&hidden) = r.dims.get(2) else {
        return Err(format!("R has shape {:?}, expected rank 3", r.dims));
    };
    if attrs.hidden_size.is_some_and(|hs| hs != hidden as i64) {
        return Err(format!("hidden_size {:?} differs from R's last dim {hidden}", attrs.hidden_size));
    }
    Ok(Geometry { seq, batch, input, hidden, dirs, batch_major })
}

/// The activation functions of every direction, in order (`activations` may list one set
/// for both directions of a bidirectional layer).
fn activations(cell: Cell, attrs: &Attrs<'_>, dirs: usize) -> Result<Vec<Act>, String> {
    let per_dir = cell.default_activations().len();
    let names: Vec<RnnActivation> = if attrs.activations.is_empty() {
        cell.default_activations().iter().cycle().take(per_dir * dirs).copied().collect()
    } else {
        attrs.activations.to_vec()
    };
    let mut acts = activation::resolve(&names, attrs.alpha, attrs.beta);
    if acts.len() == per_dir && dirs == 2 {
        acts.extend_from_within(..);
    }
    if acts.len() != per_dir * dirs {
        return Err(format!("{} activation functions for {dirs} direction(s) of {per_dir}", acts.len()));
    }
    Ok(acts)
}

/// `sequence_lens[b]` as `i64`.
fn load_len(lens: &Operand, b: &Expr) -> Expr {
    let v = Expr::load(lens.buf, b.clone());
    if lens.ty() == ScalarType::I64 { v } else { v.cast(ScalarType::I64) }
}

/// One direction: the initial state, every step (as matrix products with `scratch`, else one
/// batch row at a time), and the final state.
fn direction(k: &mut Kernel, l: &Layer, scratch: Option<&gemm::Scratch>, d: u64, reverse: bool, acts: &[Act]) -> Vec<Stmt> {
    let (geo, ty) = (&l.geo, l.ty);
    let h = geo.hidden as i64;
    let lstm = matches!(l.cell, Cell::Lstm { .. });
    let mut out = k.nest(&[geo.batch, geo.hidden], |_, i| {
        let (b, j) = (&i[0], &i[1]);
        let at = b.clone() * h + j.clone();
        let init = |op: &Option<Operand>| op.as_ref().map_or(Expr::float(ty, 0.0), |o| Expr::load(o.buf, geo.state(d, b, j)));
        let mut v = vec![Stmt::Store { buf: l.hs, index: at.clone(), value: init(&l.h0) }];
        if lstm {
            v.push(Stmt::Store { buf: l.cs, index: at, value: init(&l.c0) });
        }
        v
    });
    if let Some(scratch) = scratch {
        out.extend(gemm::steps(k, l, scratch, d, reverse, acts));
    } else {
        out.extend(k.nest(&[geo.seq], |k, i| rows(k, l, &i[0], reverse, &[], |k, b, t, _| step(k, l, d, b, t, acts))));
    }
    for (state, out_op) in [(l.hs, &l.y_h), (l.cs, &l.y_c)] {
        if let Some(o) = out_op {
            out.extend(k.nest(&[geo.batch, geo.hidden], |_, i| {
                let (b, j) = (&i[0], &i[1]);
                let mut value = Expr::load(state, b.clone() * h + j.clone());
                if let Some(lens) = &l.lens {
                    // onnxruntime gives a row of length 0 a zero state, not the initial one.
                    value = load_len(lens, b).cmp(CmpOp::Gt, Expr::idx(0)).select(value, Expr::float(ty, 0.0));
                }
                vec![Stmt::Store { buf: o.buf, index: geo.state(d, b, j), value }]
            }));
        }
    }
    out
}

/// A nest over the batch rows still running at step `step` and `dims` within each: `body(k, b,
/// t, idx)` with `t` the row's time: `step`, or `len − 1 − step` in reverse (`len` is the row's
/// length, or the sequence's without `sequence_lens`).
fn rows(k: &mut Kernel, l: &Layer, step: &Expr, reverse: bool, dims: &[u64], body: impl FnOnce(&mut Kernel, &Expr, &Expr, &[Expr]) -> Vec<Stmt>) -> Vec<Stmt> {
    let geo = &l.geo;
    let mut all = vec![geo.batch];
    all.extend_from_slice(dims);
    k.nest(&all, |k, i| {
        let b = &i[0];
        let time = |len: Expr| if reverse { len - 1 - step.clone() } else { step.clone() };
        let Some(lens) = &l.lens else {
            return body(k, b, &time(Expr::idx(geo.seq as i64)), &i[1..]);
        };
        let (len, t) = (k.var(ScalarType::I64), k.var(ScalarType::I64));
        let mut then = vec![Stmt::Let(t, time(Expr::Var(len)))];
        then.extend(body(k, b, &Expr::Var(t), &i[1..]));
        vec![Stmt::Let(len, load_len(lens, b)), Stmt::If { cond: step.clone().cmp(CmpOp::Lt, Expr::Var(len)), then, otherwise: Vec::new() }]
    })
}

/// Binds expressions to `let` variables while a block is built.
struct Block<'k> {
    k: &'k mut Kernel,
    ty: ScalarType,
    stmts: Vec<Stmt>,
}

impl Block<'_> {
    fn bind(&mut self, e: Expr) -> Expr {
        let v = self.k.var(self.ty);
        self.stmts.push(Stmt::Let(v, e));
        Expr::Var(v)
    }

    /// `act(clip(pre))`, bound.
    fn activate(&mut self, act: Act, pre: Expr, clip: Option<f32>) -> Expr {
        let pre = match clip {
            Some(c) => pre.max(Expr::float(self.ty, -f64::from(c))).min(Expr::float(self.ty, f64::from(c))),
            None => pre,
        };
        let pre = self.bind(pre);
        let v = act.apply(pre, self.ty);
        self.bind(v)
    }
}

/// One step of one batch row `b` at time `t`.
fn step(k: &mut Kernel, l: &Layer, d: u64, b: &Expr, t: &Expr, acts: &[Act]) -> Vec<Stmt> {
    let (geo, ty) = (&l.geo, l.ty);
    let (hid, gh) = (geo.hidden as i64, (l.cell.gates() * geo.hidden) as i64);
    let zero = Expr::float(ty, 0.0);
    let row_h = b.clone() * hid;
    // Gate pre-activations: gates[r] = X·W[r]ᵀ + Wb[r], gates[G·H + r] = H·R[r]ᵀ + Rb[r].
    let mut out = k.nest(&[gh as u64], |k, i| {
        let r = &i[0];
        let (ax, mut v) = super::linalg::accumulate(k, ty, zero.clone(), &[geo.input], |_, p| {
            Expr::load(l.x.buf, geo.x(t, b, &p[0])) * Expr::load(l.w.buf, (Expr::idx(d as i64 * gh) + r.clone()) * geo.input as i64 + p[0].clone())
        });
        let (ah, v2) = super::linalg::accumulate(k, ty, zero.clone(), &[geo.hidden], |_, p| {
            Expr::load(l.hs, row_h.clone() + p[0].clone()) * Expr::load(l.r.buf, (Expr::idx(d as i64 * gh) + r.clone()) * hid + p[0].clone())
        });
        v.extend(v2);
        let bias = |off: i64| l.bias.as_ref().map(|bo| Expr::load(bo.buf, Expr::idx(d as i64 * 2 * gh + off) + r.clone()));
        let with = |acc: Var, b: Option<Expr>| b.map_or(Expr::Var(acc), |b| Expr::Var(acc) + b);
        v.push(Stmt::Store { buf: l.gates, index: r.clone(), value: with(ax, bias(0)) });
        v.push(Stmt::Store { buf: l.gates, index: r.clone() + gh, value: with(ah, bias(gh)) });
        v
    });
    let gate = |off: i64, j: &Expr| Expr::load(l.gates, j.clone() + off);
    if l.cell == (Cell::Gru { linear_before_reset: false }) {
        // The hidden gate's recurrent term is (r ⊙ H)·Rhᵀ + Rbh: r first, then the product.
        out.extend(k.nest(&[geo.hidden], |k, i| {
            let p = &i[0];
            let mut blk = Block { k, ty, stmts: Vec::new() };
            let r = blk.activate(acts[0], gate(hid, p) + gate(gh + hid, p), l.clip);
            blk.stmts.push(Stmt::Store { buf: l.rh, index: p.clone(), value: r * Expr::load(l.hs, row_h.clone() + p.clone()) });
            blk.stmts
        }));
        out.extend(k.nest(&[geo.hidden], |k, i| {
            let j = &i[0];
            let row = Expr::idx(d as i64 * gh + 2 * hid) + j.clone();
            let (acc, mut v) = super::linalg::accumulate(k, ty, zero.clone(), &[geo.hidden], |_, p| Expr::load(l.rh, p[0].clone()) * Expr::load(l.r.buf, row.clone() * hid + p[0].clone()));
            let bias = l.bias.as_ref().map(|bo| Expr::load(bo.buf, Expr::idx(d as i64 * 2 * gh + gh + 2 * hid) + j.clone()));
            v.push(Stmt::Store { buf: l.gates, index: j.clone() + (gh + 2 * hid), value: bias.map_or(Expr::Var(acc), |b| Expr::Var(acc) + b) });
            v
        }));
    }
    out.extend(k.nest(&[geo.hidden], |k, i| {
        let j = &i[0];
        let at = row_h.clone() + j.clone();
        let mut blk = Block { k, ty, stmts: Vec::new() };
        let one = Expr::float(ty, 1.0);
        let both = |g: i64| gate(g * hid, j) + gate(gh + g * hid, j);
        let hnew = match l.cell {
            Cell::Rnn => blk.activate(acts[0], both(0), l.clip),
            Cell::Gru { linear_before_reset } => {
                let z = blk.activate(acts[0], both(0), l.clip);
                let pre = if linear_before_reset {
                    let r = blk.activate(acts[0], both(1), l.clip);
                    gate(2 * hid, j) + r * gate(gh + 2 * hid, j)
                } else {
                    both(2)
                };
                let hh = blk.activate(acts[1], pre, l.clip);
                let hold = blk.bind(Expr::load(l.hs, at.clone()));
                blk.bind((one - z.clone()) * hh + z * hold)
            }
            Cell::Lstm { input_forget } => {
                let peep = |g: i64, c: &Expr| l.peep.as_ref().map(|p| Expr::load(p.buf, Expr::idx(d as i64 * 3 * hid + g * hid) + j.clone()) * c.clone());
                let plus = |e: Expr, p: Option<Expr>| p.map_or(e.clone(), |p| e + p);
                let cold = blk.bind(Expr::load(l.cs, at.clone()));
                // Gate rows are i, o, f, c; peepholes are i, o, f.
                let i_g = blk.activate(acts[0], plus(both(0), peep(0, &cold)), l.clip);
                let f_g = if input_forget { blk.bind(one - i_g.clone()) } else { blk.activate(acts[0], plus(both(2), peep(2, &cold)), l.clip) };
                let c_g = blk.activate(acts[1], both(3), l.clip);
                let c = blk.bind(f_g * cold + i_g * c_g);
                let o_g = blk.activate(acts[0], plus(both(1), peep(1, &c)), l.clip);
                let hc = blk.bind(acts[2].apply(c.clone(), ty));
                blk.stmts.push(Stmt::Store { buf: l.cs, index: at.clone(), value: c });
                blk.bind(o_g * hc)
            }
        };
        blk.stmts.push(Stmt::Store { buf: l.hs, index: at, value: hnew.clone() });
        if let Some(y) = &l.y {
            blk.stmts.push(Stmt::Store { buf: y.buf, index: geo.y(t, d, b, j), value: hnew });
        }
        blk.stmts
    }));
    out
}

#[cfg(test)]
mod tests;
