//! Constant operands packed ahead: right-hand matrices of `sgemm` calls (`sgemm_packed`) and
//! convolution weights (`conv2d_packed`).
//!
//! A product against a weight matrix (MatMul, Gemm: `[tokens, k] · [k, n]`) has the weights as
//! `op(B)`, which the runtime copies into panels on every call. This pass packs each such
//! matrix once, into a new constant buffer in the panel layout the product reads in place
//! (`kiln_runtime::gemm::PackedLayout`), and rewrites the call to `sgemm_packed` (an `sgemm_fused`
//! call keeps its routine and gets the packed matrix and its layout). The layout is
//! the one the target's kernel reads directly ([`Layouts::for_target`]); under another layout
//! the runtime still computes the same values, slowly.
//!
//! A call qualifies when its `B` is a constant `f32` buffer with bytes, at a constant offset, and
//! its sizes, leading dimension of `B` and transposition are constants with `n > 1` (a
//! matrix–vector product `op(B)·x` streams `B` without packing anyway), and `m > 1` or the
//! layout's panels pad `n` by at most an eighth (a row vector times the matrix reads the packed
//! panels as one stream, `gemv.rs`, but reads their padding too). Calls sharing a matrix share
//! its packed buffer.
//!
//! A `conv2d` call likewise, when its weights are a constant at a constant offset, its sizes
//! are constants, and the running CPU's convolution kernel reads its weights in panels
//! (`kiln_runtime::conv::Conv2d::packed_width`: output channels in vector lanes,
//! `conv/channels.rs`); it becomes `conv2d_packed` with the panels' width. Other convolutions
//! read their weights in place already. A `conv2d_nchwc` call (`nchwc.rs`) with plain weights
//! gets them packed in the blocked routine's panels of 64 output channels.
//!
//! The packed copies share one anonymous mapping, each at a 64-byte boundary (as the kernel's
//! own packing space is). Packing costs compile time, about half of it the kernel providing
//! fresh pages (huge pages were faster when the system had them free, and stalled compacting
//! memory when it did not). They are faulted in as small pages, and once installed (after code
//! generation) a thread of their own moves them into huge pages
//! (`kiln_runtime::memory::huge_later`).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
pub use kiln_runtime::gemm::PackedLayout;
use kiln_runtime::conv::Conv2d;
use kiln_runtime::epilogue::Activation;
use kiln_runtime::gemm::{Isa, Transpose};
use kiln_runtime::window::Window;
use kiln_runtime::pool;
use kiln_tir::{DType, Tensor, TensorData};

use kiln_loops::call;
use kiln_loops::ir::*;

/// The layouts operands are packed in: those the kernels of the CPU that runs the code read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layouts {
    /// `sgemm`'s right-hand matrices.
    pub gemm: PackedLayout,
    /// Convolution weights: as this instruction set's kernels read them, when they read them
    /// packed.
    pub conv: Isa,
}

impl Layouts {
    /// The layouts the kernels of `target` read, or `None` when it has no runtime kernels.
    pub fn for_target(target: &kiln_target::Target) -> Option<Layouts> {
        crate::kernels(target).map(Layouts::for_isa)
    }

    /// The layouts the kernels of `isa` read.
    pub fn for_isa(isa: Isa) -> Layouts {
        Layouts { gemm: PackedLayout::for_isa(isa), conv: isa }
    }
}

/// Rewrites the qualifying `sgemm` and `conv2d` calls of every kernel of `p` and returns how many.
pub fn prepack(p: &mut Program, layout: Layouts) -> usize {
    let kernels = p.kernels.clone();
    let Some(deferred) = prepack_deferred(p, layout) else { return 0 };
    let rewritten = deferred.rewritten;
    match deferred.pack() {
        Some(data) => {
            deferred.install(p, data);
            rewritten
        }
        // No memory for the packed copies: the program as it was.
        None => {
            p.kernels = kernels;
            p.buffers.truncate(deferred.first);
            0
        }
    }
}

/// Packing planned by [`prepack_deferred`]: the calls already read packed buffers whose bytes
/// are still to come. [`pack`](Deferred::pack) computes them (it reads only the source
/// constants, so it can run while the program is compiled) and [`install`](Deferred::install)
/// puts them in place.
pub struct Deferred {
    found: Found,
    /// Each operand's source bytes, in packing order.
    sources: Vec<Bytes>,
    /// The first packed buffer's id (the others follow in order).
    first: usize,
    /// Calls rewritten.
    pub rewritten: usize,
}

/// Rewrites the qualifying calls of `p` to read packed operands, appended as constant buffers
/// without bytes yet; `None` (and `p` unchanged) when no call qualifies.
pub fn prepack_deferred(p: &mut Program, layout: Layouts) -> Option<Deferred> {
    // The operands to pack, each once, in order of first use.
    let mut found = Found { index: HashMap::new(), order: Vec::new() };
    for k in &p.kernels {
        visit(&k.body, &mut |call| {
            if let Some((key, job)) = job(call, layout) {
                found.add(key, job, &p.buffers);
            }
        });
    }
    let sources = found
        .order
        .iter()
        .map(|(key, _, bytes)| match &p.buffers[key.0.0 as usize].kind {
            BufferKind::Const(Tensor { data: TensorData::Raw(raw), .. }) => raw.get(bytes.clone()).map(|_| raw.slice(bytes.clone())),
            _ => None,
        })
        .collect::<Option<Vec<Bytes>>>()?;
    if found.order.is_empty() {
        return None;
    }
    let first = p.buffers.len();
    for ((b, ..), job, _) in &found.order {
        let len = job.len() as u64;
        let name = format!("{}.packed", p.buffers[b.0 as usize].name);
        p.buffers.push(Buffer { name, elem: ElemType::Scalar(ScalarType::F32), len, kind: BufferKind::Const(packed_tensor(len, Bytes::new())) });
    }
    let mut rewritten = 0;
    for k in &mut p.kernels {
        rewrite(&mut k.body, &mut |call| {
            let Some((key, job)) = job(call, layout) else { return };
            let Some(&i) = found.index.get(&key) else { return };
            let packed = Addr::at(BufId((first + i) as u32), 0);
            let size = |v: usize| Expr::idx(v as i64);
            *call = match (job, call.clone()) {
                // An `sgemm_fused` call keeps its routine and takes the layout.
                (Job::Matrix { .. }, Call::SgemmFused(g)) => call::SgemmFused { b: packed, nr: size(layout.gemm.nr), kc: size(layout.gemm.kc), ..*g }.into(),
                (Job::Matrix { .. }, Call::Sgemm(g)) => g.packed(packed, size(layout.gemm.nr), size(layout.gemm.kc)).into(),
                (Job::Conv { width, .. }, Call::Conv2d(c)) => c.packed(packed, size(width)).into(),
                // The blocked routine's panels: the packed weights and their width.
                (Job::Blocked { width, .. }, Call::Conv2dNchwc(c)) => call::Conv2dNchwc { w: packed, width: size(width), ..*c }.into(),
                _ => return,
            };
            rewritten += 1;
        });
    }
    Some(Deferred { found, sources, first, rewritten })
}

impl Deferred {
    /// The packed operands' bytes; `None` when the memory for them cannot be mapped. They are
    /// packed in parallel on the entered thread pool, if any.
    pub fn pack(&self) -> Option<Packed> {
        self.found.pack(&self.sources)
    }

    /// Gives the packed buffers of `p` (the program [`prepack_deferred`] rewrote) their bytes,
    /// then has a thread of its own move them into huge pages (`huge_later`). The caller
    /// installs once the code is compiled, so that the move does not take a core from it.
    pub fn install(self, p: &mut Program, packed: Packed) {
        for (i, bytes) in packed.parts.into_iter().enumerate() {
            if let Some(buf) = p.buffers.get_mut(self.first + i) {
                buf.kind = BufferKind::Const(packed_tensor(buf.len, bytes));
            }
        }
        kiln_runtime::memory::huge_later(packed.region);
    }
}

/// Packed operands: one read-only mapping, and a slice of it per packed buffer, in buffer order.
pub struct Packed {
    region: Bytes,
    parts: Vec<Bytes>,
}

/// A packed operand of `len` floats as a constant.
fn packed_tensor(len: u64, data: Bytes) -> Tensor {
    Tensor { dtype: DType::F32, shape: vec![len], data: TensorData::Raw(data) }
}

/// One operand to pack.
#[derive(Clone, Copy, Debug)]
enum Job {
    /// `op(B)` of a product: `k × n`, row stride `ldb`, transposed or not, in `layout`.
    Matrix { k: usize, n: usize, ldb: usize, trans: bool, layout: PackedLayout },
    /// A convolution's weights in panels of `width` output channels.
    Conv { conv: Conv2d, width: usize },
    /// A blocked convolution's weights (`kiln_runtime::nchwc::conv::pack_weights`), `width`
    /// their `packed_width`.
    Blocked { conv: Conv2d, width: usize },
}

impl Job {
    /// Floats of the packed operand (saturating).
    fn len(&self) -> usize {
        match *self {
            Job::Matrix { k, n, layout, .. } => layout.len(k, n),
            Job::Conv { conv, width } => conv.packed_len(width),
            Job::Blocked { conv, .. } => kiln_runtime::nchwc::conv::packed_len(&conv),
        }
    }

    /// Bytes of the source operand (saturating).
    fn source_len(&self) -> usize {
        match *self {
            Job::Matrix { k, n, ldb, trans, .. } => {
                let (rows, cols) = if trans { (n, k) } else { (k, n) };
                rows.saturating_sub(1).saturating_mul(ldb).saturating_add(cols).saturating_mul(4)
            }
            Job::Conv { conv, .. } | Job::Blocked { conv, .. } => conv.w_len().saturating_mul(4),
        }
    }

    /// Packs `src` into `dst`, [`len`](Self::len) floats' bytes at a 64-byte boundary.
    fn pack(&self, src: &[u8], dst: &mut [u8]) {
        match *self {
            Job::Matrix { k, n, ldb, trans, layout } => {
                let transpose = if trans { Transpose::Yes } else { Transpose::No };
                layout.pack(src, k, n, ldb, transpose, dst);
            }
            Job::Conv { conv, width } => {
                // SAFETY: any bytes are valid floats; the mapping's slots start at 64-byte
                // boundaries, so nothing is left unaligned before the floats.
                let (head, floats, _) = unsafe { dst.align_to_mut::<f32>() };
                debug_assert!(head.is_empty());
                conv.pack_weights(width, src, floats);
            }
            Job::Blocked { conv, .. } => {
                // SAFETY: as above.
                let (head, floats, _) = unsafe { dst.align_to_mut::<f32>() };
                debug_assert!(head.is_empty());
                kiln_runtime::nchwc::conv::pack_weights(&conv, src, floats);
            }
        }
    }
}

/// An operand as one call reads it: buffer, element offset, and the shape it is packed in.
type Key = (BufId, usize, Shape);

/// What identifies a packing besides the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// A matrix's `k`, `n`, row stride and transposition.
    Matrix([usize; 3], bool),
    /// A convolution's groups, output channels per group, steps and panel width.
    Conv([usize; 4]),
    /// The same for a blocked convolution's packing.
    Blocked([usize; 4]),
}

/// The operand a call reads that qualifies for packing under `layout`, with its key.
fn job(call: &Call, layout: Layouts) -> Option<(Key, Job)> {
    let int = |e: &Expr| match e {
        Expr::Const(Scalar::Int(ScalarType::I64, v)) => Some(*v),
        _ => None,
    };
    let size = |e: &Expr| int(e).and_then(|v| usize::try_from(v).ok());
    match call {
        Call::Sgemm(_) | Call::SgemmFused(_) => {
            let (b, m, n, k, ldb, trans_b) = match call {
                Call::Sgemm(g) => (&g.b, &g.m, &g.n, &g.k, &g.ldb, &g.trans_b),
                // A fused product not packed yet: `nr` is 0.
                Call::SgemmFused(g) if matches!(g.nr, Expr::Const(Scalar::Int(_, 0))) => (&g.b, &g.m, &g.n, &g.k, &g.ldb, &g.trans_b),
                _ => return None,
            };
            let gemm = layout.gemm;
            if gemm.nr == 0 || gemm.kc == 0 {
                return None;
            }
            let (m, n, k, ldb, trans) = (size(m)?, size(n)?, size(k)?, size(ldb)?, int(trans_b)? != 0);
            // A row vector times the matrix streams it either way, in panels when packed
            // (faster: one run of memory instead of four rows at once); unless the last panel's
            // padding would be more than an eighth of the matrix to read.
            let vector_ok = n.div_ceil(gemm.nr).saturating_mul(gemm.nr).saturating_mul(8) <= n.saturating_mul(9);
            ((m > 1 || vector_ok) && n > 1 && k > 0).then_some(())?;
            let key = (b.buf, usize::try_from(int(&b.index)?).ok()?, Shape::Matrix([k, n, ldb], trans));
            Some((key, Job::Matrix { k, n, ldb, trans, layout: gemm }))
        }
        Call::Conv2d(_) | Call::Conv2dNchwc(_) => {
            let (w, ints, blocked) = match call {
                Call::Conv2d(c) => (&c.w, c.ints(), false),
                Call::Conv2dNchwc(c) => {
                    // A blocked call's weights not packed yet: panel width 0.
                    if int(&c.width) != Some(0) {
                        return None;
                    }
                    (&c.w, c.ints(), true)
                }
                _ => return None,
            };
            let ints: Vec<i64> = ints.into_iter().map(int).collect::<Option<_>>()?;
            let counts = [ints[0], ints[1], ints[2], ints[3]].map(usize::try_from);
            let ([Ok(batch), Ok(channels), Ok(out_channels), Ok(groups)], Some(win)) = (counts, Window::from_args(ints[4..16].try_into().ok()?)) else {
                return None;
            };
            // The activation and the epilogue's operands do not change how weights are read.
            let conv = Conv2d { batch, channels, out_channels, groups, win, bias: false, residual: false, act: Activation::None };
            if blocked && !kiln_runtime::nchwc::conv::supports(&conv) {
                return None;
            }
            let width = if blocked { kiln_runtime::nchwc::conv::packed_width(&conv) } else { conv.packed_width(layout.conv)? };
            let steps = channels / groups * win.kh * win.kw;
            let shape = [groups, out_channels / groups, steps, width];
            let key = (w.buf, usize::try_from(int(&w.index)?).ok()?, if blocked { Shape::Blocked(shape) } else { Shape::Conv(shape) });
            Some((key, if blocked { Job::Blocked { conv, width } } else { Job::Conv { conv, width } }))
        }
        _ => None,
    }
}

/// Runs `f` on every `sgemm`, `sgemm_fused`, `conv2d` and `conv2d_nchwc` call in `stmts`.
fn visit(stmts: &[Stmt], f: &mut impl FnMut(&Call)) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => visit(body, f),
            Stmt::If { then, otherwise, .. } => {
                visit(then, f);
                visit(otherwise, f);
            }
            Stmt::Call(call @ (Call::Sgemm(_) | Call::SgemmFused(_) | Call::Conv2d(_) | Call::Conv2dNchwc(_))) => f(call),
            _ => {}
        }
    }
}

/// Runs `f` on every `sgemm`, `sgemm_fused`, `conv2d` and `conv2d_nchwc` call in `stmts`,
/// which it may rewrite.
fn rewrite(stmts: &mut [Stmt], f: &mut impl FnMut(&mut Call)) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => rewrite(body, f),
            Stmt::If { then, otherwise, .. } => {
                rewrite(then, f);
                rewrite(otherwise, f);
            }
            Stmt::Call(call @ (Call::Sgemm(_) | Call::SgemmFused(_) | Call::Conv2d(_) | Call::Conv2dNchwc(_))) => f(call),
            _ => {}
        }
    }
}

/// The operands to pack.
struct Found {
    /// Each operand's place in `order`.
    index: HashMap<Key, usize>,
    /// The operands, with their bytes' range in their constant.
    order: Vec<(Key, Job, std::ops::Range<usize>)>,
}

impl Found {
    /// Records an operand when it qualifies: an `f32` constant whose bytes cover it.
    fn add(&mut self, key: Key, job: Job, buffers: &[Buffer]) -> Option<()> {
        if self.index.contains_key(&key) {
            return Some(());
        }
        let (b, offset, ..) = key;
        let buf = buffers.get(b.0 as usize)?;
        let BufferKind::Const(t) = &buf.kind else { return None };
        if buf.elem != ElemType::Scalar(ScalarType::F32) {
            return None;
        }
        let start = offset.checked_mul(4)?;
        let bytes = start..start.checked_add(job.source_len())?;
        t.raw()?.get(bytes.clone())?;
        // Room for the bytes and their alignment in one mapping (`len` saturates).
        (job.len() <= isize::MAX as usize / 8).then_some(())?;
        self.index.insert(key, self.order.len());
        self.order.push((key, job, bytes));
        Some(())
    }

    /// The packed operands from their `sources`, in order; `None` when the memory for them
    /// cannot be mapped. The operands are packed in parallel on the entered thread pool, if any.
    fn pack(&self, sources: &[Bytes]) -> Option<Packed> {
        let sizes: Vec<usize> = self.order.iter().map(|(_, job, _)| 4 * job.len()).collect();
        let total = sizes.iter().try_fold(0usize, |t, s| t.checked_add(s.next_multiple_of(64)))?;
        let parts = pool::threads().min(sizes.len());
        // On one thread the mapping is populated up front: one call maps every page, where
        // first touches fault one at a time; on more, each thread's touches fault in parallel.
        let mut region = kiln_runtime::memory::map_anon(total, parts == 1, false).ok()?;
        let mut rest: &mut [u8] = &mut region;
        let mut slots = Vec::with_capacity(sizes.len());
        for &size in &sizes {
            let (slot, tail) = std::mem::take(&mut rest).split_at_mut(size.next_multiple_of(64));
            slots.push(Mutex::new(&mut slot[..size]));
            rest = tail;
        }
        pool::for_each(parts, &|part| {
            for (i, (_, job, _)) in self.order.iter().enumerate().skip(part).step_by(parts) {
                let mut dst = slots[i].lock().unwrap_or_else(|e| e.into_inner());
                job.pack(&sources[i], &mut dst);
                // The source's pages, when they are a mapped file's, are not read again here.
                kiln_tir::mapped::release(&sources[i]);
            }
        });
        drop(slots);
        let region = Bytes::from_owner(region.make_read_only().ok()?);
        let mut at = 0;
        let parts = sizes
            .iter()
            .map(|&size| {
                let data = region.slice(at..at + size);
                at += size.next_multiple_of(64);
                data
            })
            .collect();
        Some(Packed { region, parts })
    }
}

#[cfg(test)]
mod tests;
