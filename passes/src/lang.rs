//! The e-graph language: one e-node per tensor-IR op application, plus leaves.
//!
//! An op's attributes are interned in [`Ops`] so that e-nodes stay small, hashable and
//! totally ordered (attributes hold floats, which are neither). Patterns name an op by its
//! text name (`(matmul ?a ?b)`) and match it with any attributes; a rule's applier reads the
//! attributes of the e-node it matched.

use std::collections::HashMap;
use std::fmt;

use egg::{FromOp, Id, Language};
use kiln_tir::{Op, OpKind};

/// Attribute index of a pattern node: matches an op of its kind with any attributes.
pub const ANY_ATTRS: u32 = u32::MAX;

/// What an e-node applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Head {
    /// An omitted optional input (`none` in patterns).
    Absent,
    /// A graph input, a constant or an output of a node the optimizer does not look into,
    /// by index into the analysis's leaf table.
    Leaf(u32),
    /// An op; the `u32` indexes [`Ops`], or is [`ANY_ATTRS`] in a pattern.
    Op(OpKind, u32),
}

/// An e-node: a head applied to e-classes. Trailing omitted inputs are dropped, so `Conv`
/// without a bias has two children.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ENode {
    /// What is applied.
    pub head: Head,
    /// Inputs by position.
    pub args: Vec<Id>,
}

/// The part of a head that patterns match on: the op kind without attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Discriminant {
    /// [`Head::Absent`].
    Absent,
    /// [`Head::Leaf`].
    Leaf(u32),
    /// [`Head::Op`] of this kind.
    Op(OpKind),
}

impl ENode {
    /// The op kind, for op nodes.
    pub fn kind(&self) -> Option<OpKind> {
        match self.head {
            Head::Op(k, _) => Some(k),
            _ => None,
        }
    }
}

impl Language for ENode {
    type Discriminant = Discriminant;

    fn discriminant(&self) -> Discriminant {
        match self.head {
            Head::Absent => Discriminant::Absent,
            Head::Leaf(i) => Discriminant::Leaf(i),
            Head::Op(k, _) => Discriminant::Op(k),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        let heads = match (self.head, other.head) {
            (Head::Op(k, a), Head::Op(l, b)) => {
                k == l && (a == b || a == ANY_ATTRS || b == ANY_ATTRS)
            }
            (a, b) => a == b,
        };
        heads && self.args.len() == other.args.len()
    }

    fn children(&self) -> &[Id] {
        &self.args
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.args
    }
}

impl fmt::Display for ENode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.head {
            Head::Absent => f.write_str("none"),
            Head::Leaf(i) => write!(f, "leaf{i}"),
            Head::Op(k, _) => f.write_str(k.text_name()),
        }
    }
}

/// Why a pattern atom is not an op.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a tensor-IR op name or `none`")]
pub struct UnknownOp(String);

impl FromOp for ENode {
    type Error = UnknownOp;

    fn from_op(op: &str, args: Vec<Id>) -> Result<Self, UnknownOp> {
        let head = match op {
            "none" if args.is_empty() => Head::Absent,
            _ => Head::Op(
                OpKind::from_text_name(op).ok_or_else(|| UnknownOp(op.to_string()))?,
                ANY_ATTRS,
            ),
        };
        Ok(ENode { head, args })
    }
}

/// Interned ops: equal ops (kind and attributes) share one index.
#[derive(Debug, Default)]
pub struct Ops {
    ops: Vec<Op>,
    index: HashMap<(String, Vec<u8>), u32>,
}

impl Ops {
    /// The index of `op`, adding it on first sight. Two ops are the same when their debug
    /// forms are, which spell every attribute (floats by their shortest round-trip digits)
    /// except a tensor's data, and their tensor attributes hold the same data.
    pub fn intern(&mut self, op: Op) -> u32 {
        let mut data = Vec::new();
        for (_, value) in op.attrs() {
            if let kiln_tir::op::AttrValue::Tensor(t) = value {
                match &t.data {
                    kiln_tir::TensorData::Raw(b) => data.extend_from_slice(b),
                    kiln_tir::TensorData::Strings(list) => list.iter().for_each(|s| {
                        data.extend_from_slice(&(s.len() as u64).to_le_bytes());
                        data.extend_from_slice(s);
                    }),
                    kiln_tir::TensorData::Absent => {}
                }
                data.push(0xff);
            }
        }
        let key = (format!("{op:?}"), data);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.ops.len() as u32;
        self.ops.push(op);
        self.index.insert(key, i);
        i
    }

    /// The op at `i`. Panics on an index this table did not hand out, which is a kiln bug.
    pub fn get(&self, i: u32) -> &Op {
        &self.ops[i as usize]
    }
}
