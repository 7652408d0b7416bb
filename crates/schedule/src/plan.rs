//! The memory planner: every intermediate buffer gets an offset in one arena.
//!
//! Liveness is computed over the kernel order: a temp is live from the first kernel that
//! touches it to the last. Buffers whose lifetimes do not overlap may share memory; they are
//! placed greedily, largest first, at the lowest 64-byte-aligned offset free for the whole
//! lifetime. A kernel that reads a dying temp only at the positions it writes another temp of
//! the same size, in a single pass (an elementwise op), writes in place: the two share one slot.
//! So does a blocked convolution's output with the residual addend that dies there (the
//! routine reads each addend element only for the output element at its position).

use std::collections::HashMap;
use std::fmt::Write as _;

use kiln_loops::call::Operand;
use kiln_loops::ir::*;

/// Offsets in the arena are multiples of this.
pub const ALIGN: u64 = 64;

/// Where each buffer lives, and how much arena a run needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryPlan {
    /// Arena byte offset of each temp buffer (`None` for inputs, outputs and constants, and
    /// for temps no kernel touches).
    pub offsets: Vec<Option<u64>>,
    /// First and last kernel index that touch each buffer.
    pub lifetimes: Vec<Option<(usize, usize)>>,
    /// Arena size in bytes.
    pub arena_bytes: u64,
    /// The largest total size of temps live at one time: no plan can use less arena.
    pub lower_bound: u64,
}

fn aligned(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

/// Plans `p`'s temps.
pub fn plan(p: &Program) -> MemoryPlan {
    let n = p.buffers.len();
    let mut lifetimes: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut in_place: Vec<(BufId, BufId, usize)> = Vec::new();
    for (k, kernel) in p.kernels.iter().enumerate() {
        let mut uses = Uses::default();
        uses.block(&kernel.body);
        for &b in uses.loads.keys().chain(uses.stores.keys()).chain(&uses.calls) {
            if let Some(slot) = lifetimes.get_mut(b.0 as usize) {
                *slot = Some(slot.map_or((k, k), |(s, _)| (s, k)));
            }
        }
        in_place.extend(uses.in_place_pairs(p).into_iter().map(|(r, w)| (r, w, k)));
    }

    // Slots: groups of temps that share memory. A written temp joins the slot of the temp
    // it overwrites in place when that temp dies in the same kernel.
    let is_temp = |b: BufId| p.buffers.get(b.0 as usize).is_some_and(|x| x.kind == BufferKind::Temp);
    let mut slot_of: Vec<Option<usize>> = vec![None; n];
    let mut slots: Vec<(u64, usize, usize)> = Vec::new(); // (bytes, first, last)
    for (b, life) in lifetimes.iter().enumerate() {
        let Some((first, last)) = *life else { continue };
        if !is_temp(BufId(b as u32)) {
            continue;
        }
        let bytes = aligned(p.buffers[b].bytes().max(1));
        let joined = in_place.iter().find_map(|&(r, w, k)| {
            let r_slot = slot_of[r.0 as usize]?;
            let ends_here = lifetimes[r.0 as usize].is_some_and(|(_, l)| l == k) && slots[r_slot].2 == k;
            (w.0 as usize == b && k == first && ends_here && slots[r_slot].0 == bytes).then_some(r_slot)
        });
        match joined {
            Some(s) => {
                slots[s].2 = last;
                slot_of[b] = Some(s);
            }
            None => {
                slot_of[b] = Some(slots.len());
                slots.push((bytes, first, last));
            }
        }
    }

    // Greedy placement, largest first.
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&s| (std::cmp::Reverse(slots[s].0), slots[s].1));
    let mut placed: Vec<(u64, u64, usize, usize)> = Vec::new(); // (offset, bytes, first, last)
    let mut slot_offset = vec![0u64; slots.len()];
    let mut arena = 0u64;
    for s in order {
        let (bytes, first, last) = slots[s];
        let mut busy: Vec<(u64, u64)> = placed.iter().filter(|&&(_, _, f, l)| f <= last && first <= l).map(|&(o, b, _, _)| (o, o + b)).collect();
        busy.sort_unstable();
        let mut offset = 0u64;
        for (start, end) in busy {
            if offset + bytes <= start {
                break;
            }
            offset = offset.max(end);
        }
        placed.push((offset, bytes, first, last));
        slot_offset[s] = offset;
        arena = arena.max(offset + bytes);
    }

    let offsets = (0..n).map(|b| slot_of[b].map(|s| slot_offset[s])).collect();
    let mut lower_bound = 0u64;
    for k in 0..p.kernels.len() {
        let live: u64 = (0..slots.len()).filter(|&s| slots[s].1 <= k && k <= slots[s].2).map(|s| slots[s].0).sum();
        lower_bound = lower_bound.max(live);
    }
    MemoryPlan { offsets, lifetimes, arena_bytes: arena, lower_bound }
}

/// The buffers a kernel touches, with the index expressions of its loads and stores and
/// whether each access is single-pass (its index uses every enclosing loop variable, so no
/// element is visited twice).
#[derive(Default)]
struct Uses<'a> {
    loads: HashMap<BufId, Vec<(&'a Expr, bool)>>,
    stores: HashMap<BufId, Vec<(&'a Expr, bool)>>,
    calls: Vec<BufId>,
    /// Call statements.
    call_stmts: usize,
    /// (addend, output) of the calls that may write their output over their addend.
    addends: Vec<(BufId, BufId)>,
    loops: Vec<Var>,
}

/// The (addend, output) of a call that may write its output over its addend: a
/// `conv2d_nchwc` that adds a residual laid out as its output, both operands at the same
/// offset, reads each addend element only to compute the output element at its position. The
/// call's other operands must be other buffers, but for an unused bias passed as the output.
fn in_place_addend(call: &Call) -> Option<(BufId, BufId)> {
    let Call::Conv2dNchwc(c) = call else { return None };
    let flag = |e: &Expr| match e {
        Expr::Const(Scalar::Int(_, v)) => Some(*v),
        _ => None,
    };
    let (bias, residual) = (flag(&c.bias)?, flag(&c.residual)?);
    let (x, w, b, z, y) = (c.x.buf, c.w.buf, c.b.buf, c.z.buf, c.y.buf);
    let apart = ![x, w, b].contains(&z) && ![x, w].contains(&y) && (b != y || bias == 0) && z != y;
    (residual != 0 && apart && c.z.index == c.y.index && matches!(c.z.index, Expr::Const(_))).then_some((z, y))
}


impl<'a> Uses<'a> {
    fn block(&mut self, stmts: &'a [Stmt]) {
        for s in stmts {
            match s {
                Stmt::For { var, body, .. } => {
                    self.loops.push(*var);
                    self.block(body);
                    self.loops.pop();
                }
                Stmt::Let(_, e) | Stmt::Local(_, e) | Stmt::Assign(_, e) => self.expr(e),
                Stmt::Store { buf, index, value } => {
                    let single = self.single_pass(index);
                    self.stores.entry(*buf).or_default().push((index, single));
                    self.expr(index);
                    self.expr(value);
                }
                Stmt::If { cond, then, otherwise } => {
                    self.expr(cond);
                    self.block(then);
                    self.block(otherwise);
                }
                Stmt::Check { cond, .. } => self.expr(cond),
                Stmt::Call(call) => {
                    self.call_stmts += 1;
                    // Inside a loop the call would read, on a later iteration, the output
                    // it wrote over its addend.
                    if self.loops.is_empty() {
                        self.addends.extend(in_place_addend(call));
                    }
                    for operand in call.operands() {
                        if let Operand::Addr(a) = operand {
                            self.calls.push(a.buf);
                        }
                        self.expr(operand.expr());
                    }
                }
            }
        }
    }

    fn expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Const(_) | Expr::Var(_) => {}
            Expr::Load { buf, index } => {
                let single = self.single_pass(index);
                self.loads.entry(*buf).or_default().push((index, single));
                self.expr(index);
            }
            _ => e.for_each_operand(|a| self.expr(a)),
        }
    }

    fn single_pass(&self, index: &Expr) -> bool {
        self.loops.iter().all(|&v| index.mentions(v))
    }

    /// (read, written) temp pairs where every read of `read` is at the one index `written` is
    /// stored at, in a single pass: overwriting `read` in place cannot change what the kernel
    /// computes. A loop around the access that its index ignores (a kernel that repeats a
    /// region's body) reads the same elements again, so it rules the pair out.
    /// With calls, only the addend and output of a kernel's one call pair up, when no load or
    /// store touches either.
    fn in_place_pairs(&self, p: &Program) -> Vec<(BufId, BufId)> {
        let same_size = |r: BufId, w: BufId| p.buffer(r).bytes() == p.buffer(w).bytes() && p.buffer(r).elem.bits() == p.buffer(w).elem.bits();
        if !self.calls.is_empty() {
            let untouched = |b: BufId| !self.loads.contains_key(&b) && !self.stores.contains_key(&b);
            let one_call = self.call_stmts == 1;
            return self.addends.iter().copied().filter(|&(z, y)| one_call && untouched(z) && untouched(y) && same_size(z, y)).collect();
        }
        let mut out = Vec::new();
        for (&w, w_idx) in &self.stores {
            let [(index, true)] = w_idx[..] else { continue };
            if self.loads.contains_key(&w) {
                continue;
            }
            for (&r, r_idx) in &self.loads {
                let same = r_idx.iter().all(|&(i, single)| single && i == index) && !self.stores.contains_key(&r);
                // Equal widths too: with packed types, element `index` of both must share its bits.
                if same && same_size(r, w) {
                    out.push((r, w));
                }
            }
        }
        // The maps' order differs from run to run; the plan must not.
        out.sort_unstable_by_key(|&(r, w)| (r.0, w.0));
        out
    }
}

impl MemoryPlan {
    /// The plan as text: one line per buffer with its offset, size and lifetime, then the
    /// arena's size and the lower bound.
    pub fn print(&self, p: &Program) -> String {
        let mut s = String::new();
        for (i, b) in p.buffers.iter().enumerate() {
            let place = match (&b.kind, self.offsets.get(i).copied().flatten()) {
                (BufferKind::Temp, Some(o)) => format!("arena+{o}"),
                (BufferKind::Temp, None) => "unused".to_string(),
                (BufferKind::Input(n), _) => format!("input {n}"),
                (BufferKind::Output(n), _) => format!("output {n}"),
                (BufferKind::Const(_), _) => "constant".to_string(),
            };
            let life = match self.lifetimes.get(i).copied().flatten() {
                Some((f, l)) => format!("kernels {f}..={l}"),
                None => "-".to_string(),
            };
            let _ = writeln!(s, "@{i:<4} {place:<16} {:>12} bytes  {life:<20} {}", b.bytes(), b.name);
        }
        let _ = writeln!(s, "arena: {} bytes; lower bound (peak live bytes): {} bytes", self.arena_bytes, self.lower_bound);
        s
    }
}
