//! The extraction cost model, in one place.
//!
//! The cost of a term is the sum over its op nodes of
//!
//! ```text
//! KERNEL + bytes written + bytes read + FLOPs / FLOPS_PER_BYTE
//! ```
//!
//! - `KERNEL` stands for what a separate kernel costs beyond its traffic: a pass over memory
//!   started cold, a loop nest's set-up, a buffer in the arena. It is what makes one fused
//!   kernel beat the chain it replaces even when the bytes are equal.
//! - Bytes are each operand's and the result's storage; an intermediate that fusion removes
//!   stops being written and read again.
//! - FLOPs count multiply-adds as two for products (MatMul, Gemm, Conv and their fused forms)
//!   and one per output element otherwise (four for Div, Sqrt and Reciprocal, which run at a
//!   quarter of a multiply's throughput); at ~100 GFLOP/s against ~30-100 GB/s, eight FLOPs
//!   weigh about one byte.
//! - Views (Reshape, Squeeze, Unsqueeze, Flatten, Identity) move nothing and cost 1.
//!
//! Leaves (inputs, constants) cost nothing. egg's extraction sums over the tree, so a shared
//! subterm counts once per use; `extract.rs` then improves its choice so that each class
//! reachable in the emitted graph counts once, and rebuilding emits each chosen class once.

use egg::{CostFunction, Id, Language};
use rustc_hash::FxHashMap;
use kiln_tir::OpKind;

use crate::analysis::Egraph;
use crate::lang::{ENode, Head};

/// Fixed cost of one kernel, in bytes-equivalent.
pub const KERNEL: f64 = 4096.0;
/// FLOPs that weigh as much as one byte moved.
pub const FLOPS_PER_BYTE: f64 = 8.0;
/// Size assumed for a tensor whose shape is symbolic.
const UNKNOWN_BYTES: f64 = 16384.0;

/// The cost model over an e-graph.
pub struct CostModel<'a> {
    eg: &'a Egraph,
    /// [`own`](Self::own) of each node asked so far: extraction asks for every node's cost on
    /// each of its passes until the costs settle.
    own: FxHashMap<ENode, f64>,
}

impl<'a> CostModel<'a> {
    /// The model for `eg` (which must be clean: rebuilt after the last union).
    pub fn new(eg: &'a Egraph) -> Self {
        CostModel { eg, own: FxHashMap::default() }
    }

    fn bytes(&self, id: Id) -> f64 {
        let Some(t) = &self.eg[id].data.ty else {
            return 0.0;
        };
        match t.numel().and_then(|n| t.dtype.storage_bytes(n)) {
            Some(b) => b as f64,
            None => UNKNOWN_BYTES,
        }
    }

    fn numel(&self, id: Id) -> f64 {
        self.eg[id]
            .data
            .ty
            .as_ref()
            .and_then(|t| t.numel())
            .map_or(UNKNOWN_BYTES / 4.0, |n| n as f64)
    }

    /// The cost of `node` itself, without its arguments.
    pub fn own(&self, node: &ENode) -> f64 {
        let Head::Op(kind, _) = node.head else {
            return 0.0;
        };
        if matches!(
            kind,
            OpKind::Reshape
                | OpKind::Squeeze
                | OpKind::Unsqueeze
                | OpKind::Flatten
                | OpKind::Identity
        ) {
            return 1.0;
        }
        let Some(class) = self.eg.lookup(node.clone()) else {
            return f64::INFINITY;
        };
        let written = self.bytes(class);
        let read: f64 = node.args.iter().map(|&a| self.bytes(a)).sum();
        let out = self.numel(class);
        let flops = match kind {
            OpKind::MatMul | OpKind::Gemm | OpKind::FusedMatMul => {
                let k = node
                    .args
                    .first()
                    .and_then(|&a| self.eg[a].data.ty.as_ref())
                    .and_then(|t| t.known_dims())
                    .and_then(|d| d.last().copied())
                    .unwrap_or(1);
                2.0 * out * k as f64
            }
            OpKind::Conv | OpKind::FusedConv => {
                let w = node.args.get(1).map_or(1.0, |&w| self.numel(w));
                let m = node
                    .args
                    .get(1)
                    .and_then(|&w| self.eg[w].data.ty.as_ref())
                    .and_then(|t| t.known_dims())
                    .and_then(|d| d.first().copied())
                    .unwrap_or(1)
                    .max(1);
                2.0 * out * w / m as f64
            }
            // Division and roots take several times a multiply's throughput.
            OpKind::Div | OpKind::Sqrt | OpKind::Reciprocal => 4.0 * out,
            _ => out,
        };
        KERNEL + written + read + flops / FLOPS_PER_BYTE
    }
}

impl CostFunction<ENode> for CostModel<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, node: &ENode, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = match self.own.get(node) {
            Some(&c) => c,
            None => {
                let c = self.own(node);
                self.own.insert(node.clone(), c);
                c
            }
        };
        node.fold(own, |acc, a| acc + costs(a))
    }
}
