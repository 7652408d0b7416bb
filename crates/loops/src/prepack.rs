//! Constant right-hand matrices of `sgemm` calls packed ahead: `sgemm_packed`.
//!
//! A product against a weight matrix (MatMul, Gemm: `[tokens, k] · [k, n]`) has the weights as
//! `op(B)`, which the runtime copies into panels on every call. This pass packs each such
//! matrix once, into a new constant buffer in the panel layout the product reads in place
//! (`kiln_runtime::gemm::PackedLayout`), and rewrites the call to `sgemm_packed` (an `sgemm_fused`
//! call keeps its routine and gets the packed matrix and its layout). The layout is
//! the one the running CPU's kernel reads directly, so the pass is for code that runs in this
//! process (the JIT); under another layout the runtime still computes the same values, slowly.
//!
//! A call qualifies when its `B` is a constant `f32` buffer with bytes, at a constant offset, and
//! its sizes, leading dimension of `B` and transposition are constants with `m, n > 1` (a
//! matrix–vector product streams `B` without packing anyway). Calls sharing a matrix share its
//! packed buffer.
//!
//! The packed copies share one anonymous mapping, each at a 64-byte boundary (as the kernel's
//! own packing space is). Packing costs compile time: BERT-mini's 12.6 MB take 8–13 ms on one
//! thread of this project's 2-core EPYC machine, 6–9 ms on two, half of it the kernel providing
//! fresh pages (huge pages were faster when the system had them free, and stalled up to 40 ms
//! compacting memory when it did not).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
pub use kiln_runtime::gemm::PackedLayout;
use kiln_runtime::gemm::Transpose;
use kiln_runtime::pool;
use kiln_tir::{DType, Tensor, TensorData};
use memmap2::MmapOptions;

use crate::ir::*;

/// Rewrites the qualifying `sgemm` calls of every kernel of `p` and returns how many.
pub fn prepack(p: &mut Program, layout: PackedLayout) -> usize {
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
    /// Each matrix's source bytes, in packing order.
    sources: Vec<Bytes>,
    /// The first packed buffer's id (the others follow in order).
    first: usize,
    /// Calls rewritten.
    pub rewritten: usize,
}

/// Rewrites the qualifying calls of `p` to read packed matrices, appended as constant buffers
/// without bytes yet; `None` (and `p` unchanged) when no call qualifies.
pub fn prepack_deferred(p: &mut Program, layout: PackedLayout) -> Option<Deferred> {
    if layout.nr == 0 || layout.kc == 0 {
        return None;
    }
    // The matrices to pack, each once, in order of first use.
    let mut found = Found { layout, index: HashMap::new(), order: Vec::new() };
    for k in &p.kernels {
        visit(&k.body, &mut |f, args| {
            found.add(f, args, &p.buffers);
        });
    }
    let sources = found
        .order
        .iter()
        .map(|((b, ..), bytes)| match &p.buffers[b.0 as usize].kind {
            BufferKind::Const(Tensor { data: TensorData::Raw(raw), .. }) => raw.get(bytes.clone()).map(|_| raw.slice(bytes.clone())),
            _ => None,
        })
        .collect::<Option<Vec<Bytes>>>()?;
    if found.order.is_empty() {
        return None;
    }
    let first = p.buffers.len();
    for ((b, _, k, n, ..), _) in &found.order {
        let len = layout.len(*k, *n) as u64;
        let name = format!("{}.packed", p.buffers[b.0 as usize].name);
        p.buffers.push(Buffer { name, elem: ElemType::Scalar(ScalarType::F32), len, kind: BufferKind::Const(packed_tensor(len, Bytes::new())) });
    }
    let mut rewritten = 0;
    for k in &mut p.kernels {
        rewrite(&mut k.body, &mut |f, args| {
            let Some(key) = key(*f, args) else { return };
            let Some(&i) = found.index.get(&key) else { return };
            let packed = BufId((first + i) as u32);
            if *f == RuntimeFn::SgemmFused {
                set_packed_layout(args, packed, layout);
            } else if let Some(new) = packed_args(args, packed, layout) {
                *args = new;
                *f = RuntimeFn::SgemmPacked;
            } else {
                return;
            }
            rewritten += 1;
        });
    }
    Some(Deferred { found, sources, first, rewritten })
}

impl Deferred {
    /// The packed matrices' bytes, in buffer order; `None` when the memory for them cannot be
    /// mapped. They are packed in parallel on the entered thread pool, if any.
    pub fn pack(&self) -> Option<Vec<Bytes>> {
        self.found.pack(&self.sources)
    }

    /// Gives the packed buffers of `p` (the program [`prepack_deferred`] rewrote) their bytes.
    pub fn install(self, p: &mut Program, data: Vec<Bytes>) {
        for (i, bytes) in data.into_iter().enumerate() {
            if let Some(buf) = p.buffers.get_mut(self.first + i) {
                buf.kind = BufferKind::Const(packed_tensor(buf.len, bytes));
            }
        }
    }
}

/// A packed matrix of `len` floats as a constant.
fn packed_tensor(len: u64, data: Bytes) -> Tensor {
    Tensor { dtype: DType::F32, shape: vec![len], data: TensorData::Raw(data) }
}

/// A matrix as one product reads it: buffer, element offset, `k`, `n`, `ldb`, transposed.
type Key = (BufId, usize, usize, usize, usize, bool);

/// The matrix an `sgemm` or `sgemm_fused` call reads as `B`, when it is at a constant offset
/// with constant sizes, not packed yet, and the call is a matrix product (`m, n > 1`).
fn key(f: RuntimeFn, args: &[Arg]) -> Option<Key> {
    let (b, m, n, k, ldb, tb) = match (f, args) {
        (RuntimeFn::Sgemm, [_, b, _, m, n, k, _, ldb, _, _, tb, _, _]) => (b, m, n, k, ldb, tb),
        // Not packed yet: `nr` is 0.
        (RuntimeFn::SgemmFused, [_, b, _, _, _, m, n, k, _, ldb, _, _, tb, Arg::Value(Expr::Const(Scalar::Int(_, 0))), ..]) => (b, m, n, k, ldb, tb),
        _ => return None,
    };
    let Arg::Addr(b, offset) = b else { return None };
    let int = |e: &Expr| match e {
        Expr::Const(Scalar::Int(ScalarType::I64, v)) => usize::try_from(*v).ok(),
        _ => None,
    };
    let value = |a: &Arg| match a {
        Arg::Value(e) => int(e),
        Arg::Addr(..) => None,
    };
    let (m, n, k) = (value(m)?, value(n)?, value(k)?);
    (m > 1 && n > 1 && k > 0).then_some(())?;
    Some((*b, int(offset)?, k, n, value(ldb)?, value(tb)? != 0))
}

/// The `sgemm_packed` arguments replacing an `sgemm` call's.
fn packed_args(args: &[Arg], packed: BufId, layout: PackedLayout) -> Option<Vec<Arg>> {
    let [a, _, c, m, n, k, lda, _, ldc, ta, _, alpha, beta] = args else { return None };
    let size = |v: usize| Arg::Value(Expr::idx(v as i64));
    let packed = Arg::Addr(packed, Expr::idx(0));
    Some(vec![a.clone(), packed, c.clone(), m.clone(), n.clone(), k.clone(), lda.clone(), ldc.clone(), ta.clone(), size(layout.nr), size(layout.kc), alpha.clone(), beta.clone()])
}

/// Points an `sgemm_fused` call's `B` at its packed copy and sets the layout (`nr`, `kc`).
fn set_packed_layout(args: &mut [Arg], packed: BufId, layout: PackedLayout) {
    let size = |v: usize| Arg::Value(Expr::idx(v as i64));
    if let [_, b, _, _, _, _, _, _, _, _, _, _, _, nr, kc, ..] = args {
        *b = Arg::Addr(packed, Expr::idx(0));
        *nr = size(layout.nr);
        *kc = size(layout.kc);
    }
}

/// Runs `f` on every `sgemm` and `sgemm_fused` call in `stmts`.
fn visit(stmts: &[Stmt], f: &mut impl FnMut(RuntimeFn, &[Arg])) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => visit(body, f),
            Stmt::If { then, otherwise, .. } => {
                visit(then, f);
                visit(otherwise, f);
            }
            Stmt::Call(func @ (RuntimeFn::Sgemm | RuntimeFn::SgemmFused), args) => f(*func, args),
            _ => {}
        }
    }
}

/// Runs `f` on every `sgemm` and `sgemm_fused` call in `stmts`, which it may rewrite.
fn rewrite(stmts: &mut [Stmt], f: &mut impl FnMut(&mut RuntimeFn, &mut Vec<Arg>)) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => rewrite(body, f),
            Stmt::If { then, otherwise, .. } => {
                rewrite(then, f);
                rewrite(otherwise, f);
            }
            Stmt::Call(func @ (RuntimeFn::Sgemm | RuntimeFn::SgemmFused), args) => f(func, args),
            _ => {}
        }
    }
}

/// The matrices to pack.
struct Found {
    layout: PackedLayout,
    /// Each matrix's place in `order`.
    index: HashMap<Key, usize>,
    /// The matrices, with their bytes' range in their constant.
    order: Vec<(Key, std::ops::Range<usize>)>,
}

impl Found {
    /// Records the matrix of an `sgemm` call when it qualifies: `B` is an `f32` constant whose
    /// bytes cover it.
    fn add(&mut self, f: RuntimeFn, args: &[Arg], buffers: &[Buffer]) -> Option<()> {
        let key @ (b, offset, k, n, ldb, trans) = key(f, args)?;
        if self.index.contains_key(&key) {
            return Some(());
        }
        let buf = buffers.get(b.0 as usize)?;
        let BufferKind::Const(t) = &buf.kind else { return None };
        if buf.elem != ElemType::Scalar(ScalarType::F32) {
            return None;
        }
        let (rows, cols) = if trans { (n, k) } else { (k, n) };
        let span = (rows - 1).checked_mul(ldb)?.checked_add(cols)?;
        let start = offset.checked_mul(4)?;
        let bytes = start..start.checked_add(span.checked_mul(4)?)?;
        t.raw()?.get(bytes.clone())?;
        // Room for the bytes and their alignment in one mapping (`len` saturates).
        (self.layout.len(k, n) <= isize::MAX as usize / 8).then_some(())?;
        self.index.insert(key, self.order.len());
        self.order.push((key, bytes));
        Some(())
    }

    /// The packed matrices from their `sources`, in order; `None` when the memory for them
    /// cannot be mapped. The matrices are packed in parallel on the entered thread pool, if any.
    fn pack(&self, sources: &[Bytes]) -> Option<Vec<Bytes>> {
        let sizes: Vec<usize> = self.order.iter().map(|((_, _, k, n, _, _), _)| 4 * self.layout.len(*k, *n)).collect();
        let total = sizes.iter().try_fold(0usize, |t, s| t.checked_add(s.next_multiple_of(64)))?;
        let parts = pool::threads().min(sizes.len());
        // On one thread the mapping is populated up front: one call maps every page, where
        // first touches fault one at a time; on more, each thread's touches fault in parallel.
        let mut options = MmapOptions::new();
        if parts == 1 {
            options.populate();
        }
        let mut region = options.len(total).map_anon().ok()?;
        let mut rest: &mut [u8] = &mut region;
        let mut slots = Vec::with_capacity(sizes.len());
        for &size in &sizes {
            let (slot, tail) = std::mem::take(&mut rest).split_at_mut(size.next_multiple_of(64));
            slots.push(Mutex::new(&mut slot[..size]));
            rest = tail;
        }
        pool::for_each(parts, &|part| {
            for (i, ((_, _, k, n, ldb, trans), _)) in self.order.iter().enumerate().skip(part).step_by(parts) {
                let transpose = if *trans { Transpose::Yes } else { Transpose::No };
                let mut dst = slots[i].lock().unwrap_or_else(|e| e.into_inner());
                self.layout.pack(&sources[i], *k, *n, *ldb, transpose, &mut dst);
            }
        });
        drop(slots);
        let shared = Bytes::from_owner(region.make_read_only().ok()?);
        let mut at = 0;
        let packed = sizes.iter().map(|&size| {
            let data = shared.slice(at..at + size);
            at += size.next_multiple_of(64);
            data
        });
        Some(packed.collect())
    }
}

#[cfg(test)]
mod tests;
