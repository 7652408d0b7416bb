//! Convolution chains in the blocked channel layout NCHW16c (`kiln_runtime::nchwc`).
//!
//! In NCHW a 1×1 convolution is `W · X` with `X`'s rows a plane apart, and every tile of its
//! output is a few rows of a few lines a plane apart; with the channels in blocks of 16 per
//! pixel, each load and store of the blocked routine is a whole line and each tile sums in
//! registers over all steps (`conv_one` with `KILN_NCHWC=1`, operands from memory: faster on
//! ResNet-50's 1×1 and 3×3 layers). The layout pays only where tensors stay in it from one
//! convolution to the next: reordering a tensor costs a pass over it.
//!
//! The pass finds the kernels that are one call of a routine with a blocked form (`conv2d` of
//! one group or depthwise, with no activation, Relu, Clip or HardSwish; `maxpool2d`) and joins them into chains
//! through the intermediates that only such calls touch, each written by one of them before
//! the others read it. A chain's intermediates take the blocked layout (and its length, the
//! channels padded to 16); its calls become `conv2d_nchwc` and `maxpool2d_nchwc`; a tensor it
//! reads from elsewhere is reordered into a blocked copy (`to_nchwc`) before the first call
//! that reads it, unless only convolutions of one group over fewer than 16 channels read it
//! (a network's image: they read its planes, `x_blocked` 0, where a reorder would write 16
//! floats per pixel and the convolution pad them again); one it leaves for others is written
//! blocked and reordered back (`from_nchwc`) right after. A chain is rewritten only when it has
//! at least two convolutions per boundary tensor: ResNet-50 and MobileNet-V2 each become one
//! chain from the stem to the last convolution, whose output alone is reordered.
//!
//! Kernels of generated loops join chains too (`loops`): an elementwise kernel over tensors of
//! one shape runs on the blocked tensors whole, like a routine; one that indexes its tensors
//! through a channel loop (a mean over the pixels, a per-channel gate, a product broadcasting
//! it) takes blocked indices for the chain's intermediates and keeps the others'. With them a
//! squeeze-excitation block stays in the layout, and the mean before a classifier reads it.
//!
//! The blocked routine is written for AVX-512 (its portable loop computes the same values
//! slowly): the caller runs the pass only for code that runs on such a CPU, before `prepack`
//! (which packs the blocked convolutions' weights in their panels).

use std::collections::{HashMap, HashSet};

use kiln_runtime::conv::Conv2d;
use kiln_runtime::nchwc;

use kiln_loops::call::{self, Operand, OperandMut};
use kiln_loops::ir::*;

mod loops;

/// The blocked layout of an operand: images, channels, pixels per channel.
type Layout = (usize, usize, usize);

/// Two operands' layouts are the same bytes when these agree: with whole blocks of channels,
/// the images' blocks follow one another as one image's would.
fn same_bytes(l: Layout) -> Layout {
    if l.1 % nchwc::LANES == 0 { (1, l.0 * l.1, l.2) } else { l }
}

/// Floats of a blocked tensor.
pub(super) fn blocked_len(l: Layout) -> usize {
    nchwc::blocked_len(l.1, l.2).saturating_mul(l.0)
}

/// A kernel that is one call with a blocked form.
struct Candidate {
    kernel: usize,
    conv: bool,
    /// Tensor operands: operand name, buffer, whether written, layout.
    operands: Vec<(&'static str, BufId, bool, Layout)>,
    /// Addresses the routine does not read (a bias or addend it is told not to add, passed
    /// as `y`'s address).
    unused: Vec<&'static str>,
    /// Whether the call may read its input as NCHW planes: a convolution of one group over
    /// fewer than 16 channels (a network's first, on its image).
    x_plain: bool,
    /// For a kernel of loops, its channel loop (its tensor operands are the buffers indexed
    /// through it; `loops`).
    looped: Option<loops::Looped>,
}

/// The call of kernel `k` when it has a blocked form and its tensor operands start at
/// element 0.
fn candidate(k: usize, kernel: &Kernel) -> Option<Candidate> {
    let [Stmt::Call(call)] = &kernel.body[..] else { return None };
    let int = |e: &Expr| match e {
        Expr::Const(Scalar::Int(ScalarType::I64, v)) => Some(*v),
        _ => None,
    };
    let float = |e: &Expr| match e {
        Expr::Const(Scalar::F32(v)) => Some(*v),
        _ => None,
    };
    let at_zero = |a: &Addr| match a.index {
        Expr::Const(Scalar::Int(_, 0)) => Some(a.buf),
        _ => None,
    };
    match call {
        Call::Conv2d(conv) => {
            let ints: Vec<i64> = conv.ints().into_iter().map(int).collect::<Option<_>>()?;
            let c = Conv2d::from_args(ints.try_into().ok()?, float(&conv.alpha)?, float(&conv.beta)?)?;
            if !nchwc::conv::supports(&c) {
                return None;
            }
            let (x, y) = (at_zero(&conv.x)?, at_zero(&conv.y)?);
            let out = (c.batch, c.out_channels, c.win.oh * c.win.ow);
            let mut operands = vec![("x", x, false, (c.batch, c.channels, c.win.h * c.win.w)), ("y", y, true, out)];
            if c.residual {
                operands.push(("z", at_zero(&conv.z)?, false, out));
            }
            let unused = [("b", c.bias), ("z", c.residual)].into_iter().filter(|&(_, used)| !used).map(|(name, _)| name).collect();
            let x_plain = c.groups == 1 && c.channels < nchwc::LANES;
            Some(Candidate { kernel: k, conv: true, operands, unused, x_plain, looped: None })
        }
        Call::MaxPool2d(pool) => {
            let ints: Vec<usize> = std::iter::once(&pool.planes).chain(pool.window()).map(|e| int(e).and_then(|v| usize::try_from(v).ok())).collect::<Option<_>>()?;
            let &[planes, h, w, oh, ow, ..] = &ints[..] else { return None };
            (oh * ow > 0 && ints[6..].iter().all(|&s| s > 0)).then_some(())?;
            let (x, y) = (at_zero(&pool.x)?, at_zero(&pool.y)?);
            Some(Candidate { kernel: k, conv: false, operands: vec![("x", x, false, (1, planes, h * w)), ("y", y, true, (1, planes, oh * ow))], unused: Vec::new(), x_plain: false, looped: None })
        }
        _ => None,
    }
}

/// The loop kernels a chain could hold, each seen through the channel loop that indexes the
/// most buffers whose layout the calls (or loop kernels found before) give, and none in another
/// layout; with each one's accesses to the buffers not indexed through it.
fn looped_candidates(p: &Program, calls: &[Candidate]) -> Vec<(Candidate, Vec<(BufId, bool)>)> {
    let mut known: HashMap<BufId, Layout> = HashMap::new();
    for c in calls {
        for o in &c.operands {
            known.entry(o.1).or_insert(o.3);
        }
    }
    let taken: HashSet<usize> = calls.iter().map(|c| c.kernel).collect();
    let mut pending: Vec<(usize, loops::Accesses)> = p.kernels.iter().enumerate().filter(|(k, _)| !taken.contains(k)).filter_map(|(k, kernel)| Some((k, loops::accesses(kernel)?))).collect();
    let mut found = Vec::new();
    // Layouts flow along the kernels' order, mostly: a few passes reach what one would not.
    for _ in 0..4 {
        let before = found.len();
        pending.retain(|(k, a)| {
            if let Some((i, buffers)) = loops::elementwise(&p.kernels[*k], a, p) {
                let layouts: Vec<Layout> = buffers.iter().filter_map(|b| known.get(&b.0).copied()).collect();
                let Some(&layout) = layouts.first() else { return true };
                if layouts.iter().any(|&l| same_bytes(l) != same_bytes(layout)) {
                    return false;
                }
                let looped = loops::Looped::elementwise(i, &buffers, layout);
                let operands: Vec<_> = buffers.iter().map(|&(b, writes)| ("", b, writes, layout)).collect();
                for o in &operands {
                    known.entry(o.1).or_insert(o.3);
                }
                found.push((Candidate { kernel: *k, conv: false, operands, unused: Vec::new(), x_plain: false, looped: Some(looped) }, Vec::new()));
                return false;
            }
            let mut best: Option<(usize, loops::Looped, Vec<(BufId, bool)>)> = None;
            for c in loops::channel_loops(a) {
                let Some((looped, others)) = loops::through(a, c, p) else { continue };
                let tensors: Vec<(BufId, bool, Layout)> = looped.tensors(a).collect();
                let agree = tensors.iter().filter(|t| known.get(&t.0).is_some_and(|&l| same_bytes(l) == same_bytes(t.2))).count();
                let clash = tensors.iter().any(|t| known.get(&t.0).is_some_and(|&l| same_bytes(l) != same_bytes(t.2)));
                if agree > 0 && !clash && best.as_ref().is_none_or(|b| b.0 < agree) {
                    best = Some((agree, looped, others));
                }
            }
            let Some((_, looped, others)) = best else { return true };
            let operands = looped.tensors(a).map(|(b, writes, l)| ("", b, writes, l)).collect::<Vec<_>>();
            for o in &operands {
                known.entry(o.1).or_insert(o.3);
            }
            found.push((Candidate { kernel: *k, conv: false, operands, unused: Vec::new(), x_plain: false, looped: Some(looped) }, others));
            false
        });
        if found.len() == before {
            break;
        }
    }
    found
}

/// Every buffer a statement tree touches, with whether the touch may write it.
fn touches(stmts: &[Stmt], out: &mut Vec<(BufId, bool)>) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => touches(body, out),
            Stmt::Let(_, e) | Stmt::Local(_, e) | Stmt::Assign(_, e) | Stmt::Check { cond: e, .. } => expr_touches(e, out),
            Stmt::Store { buf, index, value } => {
                out.push((*buf, true));
                expr_touches(index, out);
                expr_touches(value, out);
            }
            Stmt::If { cond, then, otherwise } => {
                expr_touches(cond, out);
                touches(then, out);
                touches(otherwise, out);
            }
            Stmt::Call(call) => call_touches(call.operands(), out),
        }
    }
}

/// The buffers an expression loads.
fn expr_touches(e: &Expr, out: &mut Vec<(BufId, bool)>) {
    if let Expr::Load { buf, .. } = e {
        out.push((*buf, false));
    }
    e.for_each_operand(|a| expr_touches(a, out));
}

/// The buffers a call's `operands` touch.
fn call_touches<'a>(operands: impl IntoIterator<Item = Operand<'a>>, out: &mut Vec<(BufId, bool)>) {
    for operand in operands {
        // Any call may write any buffer it is given.
        if let Operand::Addr(a) = operand {
            out.push((a.buf, true));
        }
        expr_touches(operand.expr(), out);
    }
}

/// Whether code for `target` runs the blocked routines' AVX-512 kernels. Their AVX2 kernels
/// are faster than the NCHW routines on depthwise and shallow 1×1 layers but slower on deep
/// layers of few pixels (512 → 512 3×3 on 7², 30 against 46 GFLOP/s on Zen 3): a panel's
/// weights are 64 channels wide, and one line of them every 256 bytes uses a quarter of L2's
/// sets. Until AVX2 has panels of its own width, AVX2 code keeps NCHW.
pub fn pays_on(target: &kiln_target::Target) -> bool {
    crate::kernels(target) == Some(kiln_runtime::gemm::Isa::Avx512)
}

/// Rewrites the chains of `p` worth it into the blocked layout; returns how many calls.
pub fn blocked(p: &mut Program) -> usize {
    let mut cands: Vec<Candidate> = p.kernels.iter().enumerate().filter_map(|(k, kernel)| candidate(k, kernel)).collect();
    if cands.iter().filter(|c| c.conv).count() < 2 {
        return 0;
    }
    // Loop kernels' other accesses (buffers not indexed through their channel loop).
    let mut loop_others: Vec<(usize, Vec<(BufId, bool)>)> = Vec::new();
    for (c, others) in looped_candidates(p, &cands) {
        loop_others.push((c.kernel, others));
        cands.push(c);
    }
    cands.sort_by_key(|c| c.kernel);
    let by_kernel: HashMap<usize, usize> = cands.iter().enumerate().map(|(i, c)| (c.kernel, i)).collect();
    // Each buffer's accesses: (kernel, writes) by anything but a candidate's tensor operands,
    // and (candidate, operand) by those.
    let mut other: HashMap<BufId, Vec<(usize, bool)>> = HashMap::new();
    let mut tensor: HashMap<BufId, Vec<(usize, usize)>> = HashMap::new();
    for (k, kernel) in p.kernels.iter().enumerate() {
        let mut all = Vec::new();
        match (by_kernel.get(&k), &kernel.body[..]) {
            (Some(&i), _) if cands[i].looped.is_some() => {
                for (j, o) in cands[i].operands.iter().enumerate() {
                    tensor.entry(o.1).or_default().push((i, j));
                }
                if let Some((_, others)) = loop_others.iter().find(|o| o.0 == k) {
                    all.extend_from_slice(others);
                }
            }
            (Some(&i), [Stmt::Call(call)]) => {
                let c = &cands[i];
                for (j, o) in c.operands.iter().enumerate() {
                    tensor.entry(o.1).or_default().push((i, j));
                }
                // The weights and the bias are other uses; unused addresses none.
                let signature = call.kind().signature().iter();
                let rest = signature.zip(call.operands()).filter(|(o, _)| !c.unused.contains(&o.name) && !c.operands.iter().any(|t| t.0 == o.name));
                call_touches(rest.map(|(_, operand)| operand), &mut all);
            }
            _ => touches(&kernel.body, &mut all),
        }
        for (b, w) in all {
            other.entry(b).or_default().push((k, w));
        }
    }
    // Intermediates that take the layout in place: only candidates touch them, in one layout,
    // one writing before the others read.
    let in_place = |b: BufId| -> bool {
        let (Some(uses), None) = (tensor.get(&b), other.get(&b)) else { return false };
        if p.buffers[b.0 as usize].kind != BufferKind::Temp {
            return false;
        }
        let layout = |&(i, j): &(usize, usize)| same_bytes(cands[i].operands[j].3);
        let writes: Vec<usize> = uses.iter().filter(|&&(i, j)| cands[i].operands[j].2).map(|&(i, _)| cands[i].kernel).collect();
        let first_read = uses.iter().filter(|&&(i, j)| !cands[i].operands[j].2).map(|&(i, _)| cands[i].kernel).min();
        uses.iter().all(|u| layout(u) == layout(&uses[0])) && writes.len() == 1 && first_read.is_none_or(|r| writes[0] < r)
    };
    let in_place: HashSet<BufId> = tensor.keys().copied().filter(|&b| in_place(b)).collect();
    // A loop kernel keeps the layout of the buffers that do not take it in place: to the
    // chain, its accesses to them are others'.
    for c in cands.iter().filter(|c| c.looped.as_ref().is_some_and(|l| !l.elementwise)) {
        for &(_, b, writes, _) in c.operands.iter().filter(|o| !in_place.contains(&o.1)) {
            other.entry(b).or_default().push((c.kernel, writes));
        }
    }
    // Chains: candidates joined through such intermediates (union-find).
    let mut parent: Vec<usize> = (0..cands.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (b, uses) in &tensor {
        if in_place.contains(b) {
            for &(i, _) in &uses[1..] {
                let (a, c) = (root(&mut parent, uses[0].0), root(&mut parent, i));
                parent[a] = c;
            }
        }
    }
    let mut chains: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..cands.len() {
        let r = root(&mut parent, i);
        chains.entry(r).or_default().push(i);
    }
    let mut rewritten = 0;
    let mut chains: Vec<Vec<usize>> = chains.into_values().collect();
    chains.sort();
    for chain in chains {
        rewritten += rewrite_chain(p, &cands, &chain, &in_place, &other);
    }
    rewritten
}

/// Rewrites one chain when its boundaries allow and it pays; returns how many calls.
fn rewrite_chain(p: &mut Program, cands: &[Candidate], chain: &[usize], in_place: &HashSet<BufId>, other: &HashMap<BufId, Vec<(usize, bool)>>) -> usize {
    let convs = chain.iter().filter(|&&i| cands[i].conv).count();
    // Boundary tensors: (buffer, layout) → the chain's reading kernels, writing kernels, and
    // whether every use is the input of a call that reads NCHW planes as well.
    let mut boundary: Vec<(BufId, Layout, Vec<usize>, Vec<usize>, bool)> = Vec::new();
    for &i in chain.iter().filter(|&&i| cands[i].looped.as_ref().is_none_or(|l| l.elementwise)) {
        for &(name, b, writes, layout) in &cands[i].operands {
            if in_place.contains(&b) {
                continue;
            }
            let at = match boundary.iter().position(|e| e.0 == b) {
                Some(at) => at,
                None => {
                    boundary.push((b, layout, Vec::new(), Vec::new(), true));
                    boundary.len() - 1
                }
            };
            let e = &mut boundary[at];
            if same_bytes(e.1) != same_bytes(layout) {
                return 0;
            }
            if writes { e.3.push(cands[i].kernel) } else { e.2.push(cands[i].kernel) }
            e.4 &= !writes && name == "x" && cands[i].x_plain;
        }
    }
    if convs < 2 || 2 * boundary.len() > convs {
        return 0;
    }
    // A tensor read from elsewhere must be complete before the chain's first read of it; one
    // the chain writes must be written there once, before anything reads it.
    for (b, _, reads, writes, _) in &boundary {
        let others = other.get(b).map_or(&[][..], |v| &v[..]);
        match (reads.iter().min(), &writes[..]) {
            (Some(&r), []) if others.iter().all(|&(k, w)| !w || k < r) => {}
            (None, &[w]) if others.iter().all(|&(k, writes)| !writes && k > w) => {}
            (Some(&r), &[w]) if w < r && others.iter().all(|&(k, writes)| !writes && k > w) => {}
            _ => return 0,
        }
    }
    // The chain's intermediates in the layout.
    for &i in chain {
        for &(_, b, _, layout) in &cands[i].operands {
            if in_place.contains(&b) {
                p.buffers[b.0 as usize].len = blocked_len(layout) as u64;
            }
        }
    }
    // Blocked copies of the boundary tensors, and the reorders; an image only first
    // convolutions read stays as it is.
    let mut copies: HashMap<BufId, BufId> = HashMap::new();
    for (b, layout, reads, writes, plain) in &boundary {
        if *plain {
            continue;
        }
        let src = &p.buffers[b.0 as usize];
        let copy = Buffer { name: format!("{}.nchwc", src.name), elem: ElemType::Scalar(ScalarType::F32), len: blocked_len(*layout) as u64, kind: BufferKind::Temp };
        let id = p.add_buffer(copy);
        copies.insert(*b, id);
        let [batch, channels, pixels] = [layout.0, layout.1, layout.2].map(|v| Expr::idx(v as i64));
        if let Some(&r) = reads.iter().min().filter(|_| writes.is_empty()) {
            let to = call::ToNchwc { x: Addr::at(*b, 0), y: Addr::at(id, 0), batch: batch.clone(), channels: channels.clone(), pixels: pixels.clone() };
            p.kernels[r].body.insert(0, Stmt::Call(to.into()));
        }
        if let Some(&w) = writes.first() {
            let from = call::FromNchwc { x: Addr::at(id, 0), y: Addr::at(*b, 0), batch, channels, pixels };
            p.kernels[w].body.push(Stmt::Call(from.into()));
        }
    }
    // The calls and the loop kernels.
    for &i in chain {
        let k = cands[i].kernel;
        if let Some(looped) = cands[i].looped.as_ref().filter(|l| l.elementwise) {
            loops::rewrite_elementwise(&mut p.kernels[k], looped, &copies);
            continue;
        }
        if let Some(looped) = &cands[i].looped {
            let blocked = cands[i].operands.iter().filter(|o| in_place.contains(&o.1)).map(|o| (o.1, o.3)).collect();
            loops::rewrite(&mut p.kernels[k], looped, &blocked);
            continue;
        }
        let Some(Stmt::Call(call)) = p.kernels[k].body.iter_mut().find(|s| matches!(s, Stmt::Call(Call::Conv2d(_) | Call::MaxPool2d(_)))) else { continue };
        for &(name, b, _, _) in &cands[i].operands {
            if let (Some(&copy), Some(OperandMut::Addr(a))) = (copies.get(&b), call.operand_mut(name)) {
                *a = Addr::at(copy, 0);
            }
        }
        // Unused addresses follow `y`, as the lowering passes them.
        if let Some(Operand::Addr(y)) = call.operand("y") {
            let y = y.clone();
            for &name in &cands[i].unused {
                if let Some(OperandMut::Addr(a)) = call.operand_mut(name) {
                    *a = y.clone();
                }
            }
        }
        match call {
            Call::Conv2d(c) => {
                // Plain weights (panel width 0) until `prepack` packs them; the input blocked
                // unless it is a boundary tensor left as planes.
                let x_blocked = boundary.iter().all(|e| e.0 != c.x.buf || !e.4);
                *call = c.clone().nchwc(Expr::idx(0), Expr::idx(i64::from(x_blocked))).into();
            }
            Call::MaxPool2d(m) => *call = m.clone().nchwc().into(),
            _ => {}
        }
    }
    chain.len()
}

#[cfg(test)]
mod tests;
