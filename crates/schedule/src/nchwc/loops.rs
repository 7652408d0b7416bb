//! Generated loop kernels inside a blocked chain.
//!
//! Between convolutions, networks put kernels of plain loops: a squeeze-excitation's mean over
//! the pixels, its gate, the product that scales each channel, an addition. A loop kernel can
//! stay in a chain when it has one channel loop `c` through which it indexes each buffer it
//! shares with the chain as `n·C·P + c·P + s`: `C` the loop's extent, `n` an image, `s` a pixel
//! of `P` made of the other loops (`P = 1` for a vector of channels). The element's blocked
//! index is `n·CB·16·P + (c / 16)·16·P + 16·s + c % 16`, with `CB` the blocks of 16 channels.
//!
//! The rewrite splits the channel loop into blocks and lanes, `c = 16·block + lane`, and when
//! the channel loop's body is a perfect nest of lets and stores it makes the lanes the
//! innermost loop: the blocked accesses are then contiguous and the loop vectorizes. That
//! reorders only iterations of different channels, which touch different elements of every
//! buffer the kernel writes (each is indexed through `c` with `s < P`). Buffers outside the
//! chain keep their layout and their indices. Lanes past the last channel of a blocked buffer
//! the kernel writes are set to zero: the convolutions read them (times zero weights, which
//! would keep a NaN).

use std::collections::HashMap;

use kiln_loops::affine::Affine;
use kiln_loops::ir::*;
use kiln_runtime::nchwc::LANES;

use super::Layout;

/// A loop kernel's accesses, as the analysis sees them.
pub(super) struct Accesses {
    /// Each access: buffer, its index as an affine form over loop variables (when it is one),
    /// whether it writes.
    list: Vec<(BufId, Option<Affine>, bool)>,
    /// The loops' variables and extents, outermost first.
    loops: Vec<(Var, u64)>,
}

/// How a loop kernel runs in the chain.
#[derive(Clone, Debug)]
pub(super) struct Looped {
    c: Var,
    /// Every buffer indexed through `c`, with its layout (blocked or not).
    tensors: Vec<(BufId, Layout)>,
    /// One loop over all elements of same-sized buffers, each at the loop's index: the kernel
    /// runs on the blocked buffers whole, as a routine would (`c` is that loop).
    pub(super) elementwise: bool,
}

/// The accesses of `kernel` when it is made of loops, lets and stores only (no call).
pub(super) fn accesses(kernel: &Kernel) -> Option<Accesses> {
    fn walk(stmts: &[Stmt], env: &mut HashMap<Var, Option<Affine>>, out: &mut Accesses) -> Option<()> {
        for s in stmts {
            match s {
                Stmt::For { var, extent, body } => {
                    env.insert(*var, loop_form(*var, *extent));
                    out.loops.push((*var, *extent));
                    walk(body, env, out)?;
                }
                Stmt::Let(v, e) => {
                    loads(e, env, out);
                    let a = Affine::of(e, &|v| env.get(&v).cloned().flatten());
                    env.insert(*v, a);
                }
                Stmt::Local(v, e) | Stmt::Assign(v, e) => {
                    loads(e, env, out);
                    env.insert(*v, None);
                }
                Stmt::Store { buf, index, value } => {
                    loads(index, env, out);
                    loads(value, env, out);
                    out.list.push((*buf, Affine::of(index, &|v| env.get(&v).cloned().flatten()), true));
                }
                Stmt::If { cond, then, otherwise } => {
                    loads(cond, env, out);
                    walk(then, env, out)?;
                    walk(otherwise, env, out)?;
                }
                Stmt::Check { cond, .. } => loads(cond, env, out),
                Stmt::Call(_) => return None,
            }
        }
        Some(())
    }
    fn loads(e: &Expr, env: &HashMap<Var, Option<Affine>>, out: &mut Accesses) {
        if let Expr::Load { buf, index } = e {
            out.list.push((*buf, Affine::of(index, &|v| env.get(&v).cloned().flatten()), false));
        }
        e.for_each_operand(|a| loads(a, env, out));
    }
    let mut out = Accesses { list: Vec::new(), loops: Vec::new() };
    walk(&kernel.body, &mut HashMap::new(), &mut out)?;
    Some(out)
}

/// The layout of a buffer of `len` elements indexed `index` through channel loop `c` of
/// `channels`, when the index has the form `n·C·P + c·P + s` with `0 ≤ s < P`.
fn layout_of(index: &Affine, c: Var, channels: u64, loops: &[(Var, u64)], len: u64) -> Option<Layout> {
    let p = index.coeff(c);
    let cp = p.checked_mul(i128::from(channels))?;
    if p <= 0 || index.constant < 0 {
        return None;
    }
    let (mut images, mut s_max) = (None, index.constant);
    for &(v, k) in &index.coeffs {
        if v == c {
            continue;
        }
        let extent = i128::from(loops.iter().find(|l| l.0 == v)?.1);
        if k == cp && images.is_none() {
            images = Some(extent);
        } else if k > 0 && k < p {
            s_max = s_max.checked_add(k.checked_mul(extent - 1)?)?;
        } else {
            return None;
        }
    }
    let images = images.unwrap_or(1);
    (s_max < p && images.checked_mul(cp)? == i128::from(len)).then_some(())?;
    Some((usize::try_from(images).ok()?, usize::try_from(channels).ok()?, usize::try_from(p).ok()?))
}

/// The kernel seen through channel loop `c`: the buffers every access indexes through `c` in
/// one layout (`f32` ones), and the others' accesses (buffer, writes).
pub(super) fn through(a: &Accesses, c: Var, p: &Program) -> Option<(Looped, Vec<(BufId, bool)>)> {
    let &(_, channels) = a.loops.iter().find(|l| l.0 == c)?;
    let mut layouts: HashMap<BufId, Option<Layout>> = HashMap::new();
    for (b, index, _) in &a.list {
        let buffer = p.buffers.get(b.0 as usize)?;
        let l = index.as_ref().and_then(|i| layout_of(i, c, channels, &a.loops, buffer.len)).filter(|_| buffer.elem == ElemType::Scalar(ScalarType::F32));
        let e = layouts.entry(*b).or_insert(l);
        if *e != l {
            *e = None;
        }
    }
    let mut tensors: Vec<(BufId, Layout)> = layouts.iter().filter_map(|(&b, l)| Some((b, (*l)?))).collect();
    tensors.sort_by_key(|t| t.0);
    let others = a.list.iter().filter(|(b, ..)| layouts[b].is_none()).map(|&(b, _, w)| (b, w)).collect();
    Some((Looped { c, tensors, elementwise: false }, others))
}

/// The kernel as one loop `for i in 0..L` whose every access is element `i` of an `f32` buffer
/// of `L` elements: its loop variable and buffers (with whether written). Such a kernel (an
/// elementwise operation on tensors of one shape) computes the same values in any layout, and
/// the layout it gets is its operands'.
pub(super) fn elementwise(kernel: &Kernel, a: &Accesses, p: &Program) -> Option<(Var, Vec<(BufId, bool)>)> {
    let [Stmt::For { var, extent, .. }] = &kernel.body[..] else { return None };
    let at_i = Affine::var(*var);
    let mut buffers: Vec<(BufId, bool)> = Vec::new();
    for (b, index, writes) in &a.list {
        let buffer = p.buffers.get(b.0 as usize)?;
        (index.as_ref() == Some(&at_i) && buffer.len == *extent && buffer.elem == ElemType::Scalar(ScalarType::F32)).then_some(())?;
        match buffers.iter_mut().find(|x| x.0 == *b) {
            Some(x) => x.1 |= writes,
            None => buffers.push((*b, *writes)),
        }
    }
    (a.loops.len() == 1 && *extent > 1).then_some((*var, buffers))
}

impl Looped {
    /// An elementwise kernel over loop `i` whose buffers take `layout`.
    pub(super) fn elementwise(i: Var, buffers: &[(BufId, bool)], layout: Layout) -> Looped {
        Looped { c: i, tensors: buffers.iter().map(|&(b, _)| (b, layout)).collect(), elementwise: true }
    }
}

/// Rewrites an elementwise kernel to run over its buffers' blocked form, whole: the buffers of
/// `copies` replaced by their blocked copies, the padding lanes of what it writes set to zero.
pub(super) fn rewrite_elementwise(kernel: &mut Kernel, looped: &Looped, copies: &HashMap<BufId, BufId>) {
    let Some(&(_, layout)) = looped.tensors.first() else { return };
    let len = super::blocked_len(layout) as u64;
    let mut written = Vec::new();
    for s in &mut kernel.body {
        if let Stmt::For { var, extent, body } = s
            && *var == looped.c
        {
            *extent = len;
            let stmts = std::mem::take(body);
            *body = stmts.into_iter().map(|s| replace_buffers(s, copies, &mut written)).collect();
        }
    }
    let padding = zero_padding(kernel, &written, layout);
    kernel.body.extend(padding);
}

fn replace_buffers(s: Stmt, copies: &HashMap<BufId, BufId>, written: &mut Vec<BufId>) -> Stmt {
    fn expr(e: Expr, copies: &HashMap<BufId, BufId>) -> Expr {
        match e {
            Expr::Load { buf, index } => Expr::Load { buf: *copies.get(&buf).unwrap_or(&buf), index: Box::new(expr(*index, copies)) },
            other => map_operands(other, &mut |a| expr(a, copies)),
        }
    }
    match s {
        Stmt::Let(v, e) => Stmt::Let(v, expr(e, copies)),
        Stmt::Store { buf, index, value } => {
            let buf = *copies.get(&buf).unwrap_or(&buf);
            written.push(buf);
            Stmt::Store { buf, index, value: expr(value, copies) }
        }
        other => other,
    }
}

/// Loops storing zero in the padding lanes of `buffers`, all of `layout`.
fn zero_padding(kernel: &mut Kernel, buffers: &[BufId], (n, channels, pixels): Layout) -> Vec<Stmt> {
    let tail = channels % LANES;
    let mut buffers = buffers.to_vec();
    buffers.sort();
    buffers.dedup();
    if tail == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for b in buffers {
        let image = (channels.div_ceil(LANES) * LANES * pixels) as i64;
        let (img, px, lane) = (kernel.var(ScalarType::I64), kernel.var(ScalarType::I64), kernel.var(ScalarType::I64));
        let first = image - (LANES * pixels) as i64 + tail as i64;
        let index = sum([mul(Expr::Var(img), image), mul(Expr::Var(px), LANES as i64), Expr::Var(lane), Expr::idx(first)]);
        let store = Stmt::Store { buf: b, index, value: Expr::f32(0.0) };
        let lanes = Stmt::For { var: lane, extent: (LANES - tail) as u64, body: vec![store] };
        let pixels = Stmt::For { var: px, extent: pixels as u64, body: vec![lanes] };
        out.push(Stmt::For { var: img, extent: n as u64, body: vec![pixels] });
    }
    out
}

/// The channel loops to try: every loop of more than one iteration.
pub(super) fn channel_loops(a: &Accesses) -> impl Iterator<Item = Var> + '_ {
    a.loops.iter().filter(|l| l.1 > 1).map(|l| l.0)
}

impl Looped {
    /// The buffers indexed through the channel loop, with their layouts and whether written.
    pub(super) fn tensors<'a>(&'a self, a: &'a Accesses) -> impl Iterator<Item = (BufId, bool, Layout)> + 'a {
        self.tensors.iter().map(|&(b, l)| (b, a.list.iter().any(|x| x.0 == b && x.2), l))
    }
}

/// Rewrites `kernel` so that it indexes the buffers of `blocked` in the blocked layout.
pub(super) fn rewrite(kernel: &mut Kernel, looped: &Looped, blocked: &HashMap<BufId, Layout>) {
    let mut body = std::mem::take(&mut kernel.body);
    let mut written = Vec::new();
    let mut cx = Rewrite { kernel, looped, blocked, env: HashMap::new(), written: &mut written };
    body = cx.stmts(body);
    // The padding lanes of what the kernel writes, per layout.
    written.sort();
    written.dedup();
    for b in written {
        body.extend(zero_padding(kernel, &[b], blocked[&b]));
    }
    kernel.body = body;
}

/// A loop variable's affine form: a loop of one iteration is the constant 0 to the layout.
fn loop_form(var: Var, extent: u64) -> Option<Affine> {
    Some(if extent == 1 { Affine::constant(0) } else { Affine::var(var) })
}

fn mul(e: Expr, k: i64) -> Expr {
    e.bin(BinOp::Mul, Expr::idx(k))
}

fn sum(terms: impl IntoIterator<Item = Expr>) -> Expr {
    let mut terms = terms.into_iter();
    let first = terms.next().unwrap_or(Expr::idx(0));
    terms.fold(first, |a, t| a.bin(BinOp::Add, t))
}

struct Rewrite<'a> {
    kernel: &'a mut Kernel,
    looped: &'a Looped,
    blocked: &'a HashMap<BufId, Layout>,
    /// The affine form of each variable in scope, the channel loop's variable as itself.
    env: HashMap<Var, Option<Affine>>,
    /// The blocked buffers the kernel writes.
    written: &'a mut Vec<BufId>,
}

impl Rewrite<'_> {
    fn stmts(&mut self, stmts: Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::For { var, extent, body } if var == self.looped.c => {
                    self.env.insert(var, Some(Affine::var(var)));
                    out.extend(self.channel_loop(var, extent, body));
                }
                Stmt::For { var, extent, body } => {
                    self.env.insert(var, loop_form(var, extent));
                    let body = self.stmts(body);
                    out.push(Stmt::For { var, extent, body });
                }
                Stmt::Let(v, e) => {
                    let a = Affine::of(&e, &|v| self.env.get(&v).cloned().flatten());
                    self.env.insert(v, a);
                    out.push(Stmt::Let(v, e));
                }
                Stmt::If { cond, then, otherwise } => {
                    let (then, otherwise) = (self.stmts(then), self.stmts(otherwise));
                    out.push(Stmt::If { cond, then, otherwise });
                }
                other => out.push(other),
            }
        }
        out
    }

    /// The channel loop over `c` as blocks of lanes, then the last partial block (a copy of
    /// the body with its own variables).
    fn channel_loop(&mut self, c: Var, channels: u64, body: Vec<Stmt>) -> Vec<Stmt> {
        let lanes = LANES as u64;
        let (full, tail) = (channels / lanes, channels % lanes);
        // The partial block first: its copy of the body is renamed before the original is
        // moved into the full blocks.
        let last = if tail > 0 {
            let mut names = HashMap::from([(c, self.kernel.var(ScalarType::I64))]);
            let copy = rename_stmts(&body, self.kernel, &mut names);
            self.env.insert(names[&c], Some(Affine::var(names[&c])));
            self.block(names[&c], Expr::idx(full as i64), tail, copy)
        } else {
            Vec::new()
        };
        let mut out = Vec::new();
        if full > 0 {
            let block = self.kernel.var(ScalarType::I64);
            let nest = self.block(c, Expr::Var(block), lanes, body);
            out.push(Stmt::For { var: block, extent: full, body: nest });
        }
        out.extend(last);
        out
    }

    /// One block of `width` lanes: `body` (the channel loop's) with `c = 16·block + lane`,
    /// the lanes innermost when `body` is a perfect nest of lets and stores or a reduction.
    fn block(&mut self, c: Var, block: Expr, width: u64, body: Vec<Stmt>) -> Vec<Stmt> {
        let (nest, inner) = perfect_nest(&body);
        let flat = inner.iter().all(|s| match s {
            Stmt::Let(..) => true,
            Stmt::Store { buf, .. } => self.looped.tensors.iter().any(|t| t.0 == *buf),
            _ => false,
        });
        if flat {
            let inner = inner.to_vec();
            return vec![self.lanes_inner(c, &block, width, &nest, inner)];
        }
        if let Some(r) = Reduction::of(&body, self.looped, self.kernel) {
            return self.reduction(c, &block, width, r);
        }
        let lane = self.kernel.var(ScalarType::I64);
        let c_of = Stmt::Let(c, sum([mul(block.clone(), LANES as i64), Expr::Var(lane)]));
        let mut cx = Block { rw: self, c, block, lane };
        let mut stmts = vec![c_of];
        stmts.extend(cx.stmts(body));
        vec![Stmt::For { var: lane, extent: width, body: stmts }]
    }

    /// `for nest { for lane in 0..width { let c = 16·block + lane; inner } }`, the blocked
    /// accesses of `inner` rewritten.
    fn lanes_inner(&mut self, c: Var, block: &Expr, width: u64, nest: &[(Var, u64)], inner: Vec<Stmt>) -> Stmt {
        let lane = self.kernel.var(ScalarType::I64);
        let c_of = Stmt::Let(c, sum([mul(block.clone(), LANES as i64), Expr::Var(lane)]));
        self.env.insert(c, Some(Affine::var(c)));
        for &(v, extent) in nest {
            self.env.insert(v, loop_form(v, extent));
        }
        let mut cx = Block { rw: self, c, block: block.clone(), lane };
        let mut stmts = vec![c_of];
        stmts.extend(cx.stmts(inner));
        let mut s = Stmt::For { var: lane, extent: width, body: stmts };
        for &(v, extent) in nest.iter().rev() {
            s = Stmt::For { var: v, extent, body: vec![s] };
        }
        s
    }

    /// A reduction over the pixels with the lanes innermost: its output holds each channel's
    /// accumulator (the same type, so each lane computes what the local did, in its order):
    /// one pass sets it to the initial value, one accumulates under the pixel loops, one
    /// finishes it.
    fn reduction(&mut self, c: Var, block: &Expr, width: u64, r: Reduction) -> Vec<Stmt> {
        let Reduction { acc, init, nest, step, finish, out, index } = r;
        let load = Expr::Load { buf: out, index: Box::new(index.clone()) };
        let mut first = HashMap::from([(c, self.kernel.var(ScalarType::I64))]);
        let set = rename_stmts(&[Stmt::Store { buf: out, index: index.clone(), value: init }], self.kernel, &mut first);
        let set = self.lanes_inner(first[&c], block, width, &[], set);
        let mut step_body = vec![Stmt::Let(acc, load.clone())];
        step_body.extend(step);
        let step = self.lanes_inner(c, block, width, &nest, step_body);
        let mut last = HashMap::from([(c, self.kernel.var(ScalarType::I64))]);
        let mut finish_body = vec![Stmt::Let(acc, load)];
        finish_body.extend(finish);
        let finish_body = rename_stmts(&finish_body, self.kernel, &mut last);
        let finish = self.lanes_inner(last[&c], block, width, &[], finish_body);
        vec![set, step, finish]
    }
}

/// The loops of a perfect nest (each body one loop) and the innermost body.
fn perfect_nest(body: &[Stmt]) -> (Vec<(Var, u64)>, &[Stmt]) {
    let mut nest = Vec::new();
    let mut inner = body;
    while let [Stmt::For { var, extent, body }] = inner {
        nest.push((*var, *extent));
        inner = body;
    }
    (nest, inner)
}

/// A channel loop's body that reduces over pixels into one accumulator and stores a function
/// of it: `local acc = init; for pixels { lets; acc = e }; lets; out[index] = value`.
struct Reduction {
    acc: Var,
    init: Expr,
    nest: Vec<(Var, u64)>,
    /// The innermost lets and the update, as `out[index] = e`.
    step: Vec<Stmt>,
    /// The lets after the loops and the store of the result.
    finish: Vec<Stmt>,
    out: BufId,
    index: Expr,
}

impl Reduction {
    /// The reduction `body` is, when its output is an `f32` buffer indexed through the channel
    /// loop that nothing else in it reads or writes, and the accumulator is an `f32` local that
    /// only the update and the finishing lets and store read.
    fn of(body: &[Stmt], looped: &Looped, kernel: &Kernel) -> Option<Reduction> {
        let [Stmt::Local(acc, init), pixels @ Stmt::For { .. }, finish @ .., Stmt::Store { buf: out, index, value }] = body else { return None };
        let (nest, inner) = perfect_nest(std::slice::from_ref(pixels));
        let [lets @ .., Stmt::Assign(updated, e)] = inner else { return None };
        let only_lets = |stmts: &[Stmt]| stmts.iter().all(|s| matches!(s, Stmt::Let(..)));
        (updated == acc && only_lets(lets) && only_lets(finish) && kernel.vars.get(acc.0 as usize) == Some(&ScalarType::F32)).then_some(())?;
        looped.tensors.iter().any(|t| t.0 == *out).then_some(())?;
        // The output is touched by the final store alone; the accumulator is read by the update
        // and after the loops only.
        let mut touched = Vec::new();
        super::touches(std::slice::from_ref(pixels), &mut touched);
        super::expr_touches(init, &mut touched);
        for s in finish {
            super::touches(std::slice::from_ref(s), &mut touched);
        }
        super::expr_touches(index, &mut touched);
        super::expr_touches(value, &mut touched);
        let index_vars_outside = !index.mentions(*acc) && !finish.iter().any(|s| matches!(s, Stmt::Let(w, _) if index.mentions(*w)));
        (!touched.iter().any(|t| t.0 == *out) && !init.mentions(*acc) && index_vars_outside).then_some(())?;
        let mut step = lets.to_vec();
        step.push(Stmt::Store { buf: *out, index: index.clone(), value: e.clone() });
        let mut finish = finish.to_vec();
        finish.push(Stmt::Store { buf: *out, index: index.clone(), value: value.clone() });
        Some(Reduction { acc: *acc, init: init.clone(), nest, step, finish, out: *out, index: index.clone() })
    }
}

/// The statements inside one block of channels, the blocked buffers' indices rewritten.
struct Block<'r, 'a> {
    rw: &'r mut Rewrite<'a>,
    /// The channel variable, now `16·block + lane`.
    c: Var,
    block: Expr,
    lane: Var,
}

impl Block<'_, '_> {
    fn stmts(&mut self, stmts: Vec<Stmt>) -> Vec<Stmt> {
        stmts.into_iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: Stmt) -> Stmt {
        match s {
            Stmt::For { var, extent, body } => {
                self.rw.env.insert(var, loop_form(var, extent));
                Stmt::For { var, extent, body: self.stmts(body) }
            }
            Stmt::Let(v, e) => {
                let a = self.affine(&e);
                let e = self.expr(e);
                self.rw.env.insert(v, a);
                Stmt::Let(v, e)
            }
            Stmt::Local(v, e) => {
                self.rw.env.insert(v, None);
                Stmt::Local(v, self.expr(e))
            }
            Stmt::Assign(v, e) => Stmt::Assign(v, self.expr(e)),
            Stmt::Store { buf, index, value } => {
                let value = self.expr(value);
                let index = match self.rw.blocked.get(&buf) {
                    Some(&layout) => {
                        self.rw.written.push(buf);
                        self.index(&index, layout)
                    }
                    None => self.expr(index),
                };
                Stmt::Store { buf, index, value }
            }
            Stmt::If { cond, then, otherwise } => Stmt::If { cond: self.expr(cond), then: self.stmts(then), otherwise: self.stmts(otherwise) },
            Stmt::Check { cond, error } => Stmt::Check { cond: self.expr(cond), error },
            call @ Stmt::Call(_) => call,
        }
    }

    fn affine(&self, e: &Expr) -> Option<Affine> {
        Affine::of(e, &|v| self.rw.env.get(&v).cloned().flatten())
    }

    fn expr(&mut self, e: Expr) -> Expr {
        match e {
            Expr::Load { buf, index } => {
                let index = match self.rw.blocked.get(&buf) {
                    Some(&layout) => self.index(&index, layout),
                    None => self.expr(*index),
                };
                Expr::Load { buf, index: Box::new(index) }
            }
            other => map_operands(other, &mut |a| self.expr(a)),
        }
    }

    /// The blocked index of the element a plain `index` names in a buffer of `layout` (the
    /// analysis found it affine, `n·C·P + c·P + s`).
    fn index(&self, index: &Expr, (_, channels, pixels): Layout) -> Expr {
        let Some(a) = self.affine(index) else { return index.clone() };
        let image = (channels * pixels) as i128;
        let block = (LANES * pixels) as i64;
        let mut terms = vec![mul(self.block.clone(), block), Expr::Var(self.lane)];
        for &(v, k) in &a.coeffs {
            if v == self.c {
                continue;
            }
            let k = if k == image { block as i128 * channels.div_ceil(LANES) as i128 } else { k * LANES as i128 };
            terms.push(mul(Expr::Var(v), k as i64));
        }
        terms.push(Expr::idx((a.constant * LANES as i128) as i64));
        sum(terms)
    }
}

/// `e` with each direct operand replaced by `f` of it.
fn map_operands(e: Expr, f: &mut impl FnMut(Expr) -> Expr) -> Expr {
    match e {
        Expr::Const(_) | Expr::Var(_) => e,
        Expr::Load { buf, index } => Expr::Load { buf, index: Box::new(f(*index)) },
        Expr::Unary(op, a) => Expr::Unary(op, Box::new(f(*a))),
        Expr::Binary(op, a, b) => Expr::Binary(op, Box::new(f(*a)), Box::new(f(*b))),
        Expr::Cmp(op, a, b) => Expr::Cmp(op, Box::new(f(*a)), Box::new(f(*b))),
        Expr::Select(c, a, b) => Expr::Select(Box::new(f(*c)), Box::new(f(*a)), Box::new(f(*b))),
        Expr::Cast(t, m, a) => Expr::Cast(t, m, Box::new(f(*a))),
        Expr::Bitcast(t, a) => Expr::Bitcast(t, Box::new(f(*a))),
        Expr::Math(m, args) => Expr::Math(m, args.into_iter().map(f).collect()),
    }
}

/// A copy of `stmts` whose definitions are fresh variables of `kernel` (`names` maps the old
/// to the new, and may name outer variables to replace).
fn rename_stmts(stmts: &[Stmt], kernel: &mut Kernel, names: &mut HashMap<Var, Var>) -> Vec<Stmt> {
    let fresh = |v: Var, kernel: &mut Kernel, names: &mut HashMap<Var, Var>| {
        let ty = kernel.vars[v.0 as usize];
        let w = kernel.var(ty);
        names.insert(v, w);
        w
    };
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        out.push(match s {
            Stmt::For { var, extent, body } => {
                let var = fresh(*var, kernel, names);
                Stmt::For { var, extent: *extent, body: rename_stmts(body, kernel, names) }
            }
            Stmt::Let(v, e) => {
                let e = rename(e.clone(), names);
                Stmt::Let(fresh(*v, kernel, names), e)
            }
            Stmt::Local(v, e) => {
                let e = rename(e.clone(), names);
                Stmt::Local(fresh(*v, kernel, names), e)
            }
            Stmt::Assign(v, e) => Stmt::Assign(*names.get(v).unwrap_or(v), rename(e.clone(), names)),
            Stmt::Store { buf, index, value } => Stmt::Store { buf: *buf, index: rename(index.clone(), names), value: rename(value.clone(), names) },
            Stmt::If { cond, then, otherwise } => {
                Stmt::If { cond: rename(cond.clone(), names), then: rename_stmts(then, kernel, names), otherwise: rename_stmts(otherwise, kernel, names) }
            }
            Stmt::Check { cond, error } => Stmt::Check { cond: rename(cond.clone(), names), error: *error },
            Stmt::Call(c) => Stmt::Call(c.clone()),
        });
    }
    out
}

fn rename(e: Expr, names: &HashMap<Var, Var>) -> Expr {
    match e {
        Expr::Var(v) => Expr::Var(*names.get(&v).unwrap_or(&v)),
        other => map_operands(other, &mut |a| rename(a, names)),
    }
}
