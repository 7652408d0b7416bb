//! kiln's lowering: tensor IR → loop IR.
//!
//! Each node becomes zero or more kernels. Op families live in their own files; `dispatch.rs`
//! names, for every op, the family that lowers it (or why none does) in one exhaustive match.
//! Reshape-like ops produce no kernel: their output aliases the input's buffer (a view).

#![deny(missing_docs)]

mod attention;
mod control;
pub mod copies;
mod dispatch;
mod elementwise;
mod linalg;
mod misc;
mod movement;
mod nn;
mod norm;
pub mod plain;
mod quant;
mod reduce;
mod rnn;
mod view;

use std::collections::HashMap;

use kiln_tir::{DType, Graph, Node, NodeId, Region, Tensor, ValueDef, ValueId};

use kiln_loops::builder::strides;
use kiln_loops::ir::*;

/// The largest buffer a program may hold, in bytes: far beyond any memory, but small enough that
/// element counts, byte sizes and offsets computed from a buffer's dims never overflow.
pub const MAX_BUFFER_BYTES: u64 = 1 << 48;

/// Why a graph could not be lowered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// kiln cannot compile this node yet.
    #[error("node \"{node}\" (tensor.{op}): unsupported: {reason}")]
    Unsupported {
        /// Node name.
        node: String,
        /// Op text name.
        op: &'static str,
        /// What is missing.
        reason: String,
    },
    /// A value would take more than [`MAX_BUFFER_BYTES`].
    #[error("value \"{value}\" of type {ty} is too large to compile (over 2^48 bytes)")]
    TooLarge {
        /// Value name.
        value: String,
        /// Its type.
        ty: String,
    },
    /// kiln has a bug (the model may be fine): an invariant of the lowering does not hold.
    #[error("node \"{node}\" (tensor.{op}): {reason}")]
    Internal {
        /// Node name.
        node: String,
        /// Op text name.
        op: &'static str,
        /// What went wrong, starting "kiln bug".
        reason: String,
    },
    /// A value's shape is not static: bind the model's symbolic dims first.
    #[error("value \"{value}\" has shape {ty}, which is not static; bind its symbols first")]
    NotStatic {
        /// Value name.
        value: String,
        /// Its type.
        ty: String,
    },
}

/// A tensor as a lowering sees it: its buffer, static dims and element type.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// The buffer holding the elements, row-major.
    pub buf: BufId,
    /// Static dims.
    pub dims: Vec<u64>,
    /// Element storage type.
    pub elem: ElemType,
}

impl Operand {
    /// Element count.
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major strides.
    pub fn strides(&self) -> Vec<i64> {
        strides(&self.dims)
    }

    /// The type of values loaded from it.
    pub fn ty(&self) -> ScalarType {
        self.elem.value_type()
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
}

/// The storage type kiln's code generator uses for a tensor-IR dtype, if it supports it.
pub fn elem_type(d: DType) -> Option<ElemType> {
    Some(match d {
        DType::Bool => ElemType::Scalar(ScalarType::Bool),
        DType::I8 => ElemType::Scalar(ScalarType::I8),
        DType::I16 => ElemType::Scalar(ScalarType::I16),
        DType::I32 => ElemType::Scalar(ScalarType::I32),
        DType::I64 => ElemType::Scalar(ScalarType::I64),
        DType::U8 => ElemType::Scalar(ScalarType::U8),
        DType::U16 => ElemType::Scalar(ScalarType::U16),
        DType::U32 => ElemType::Scalar(ScalarType::U32),
        DType::U64 => ElemType::Scalar(ScalarType::U64),
        DType::F32 => ElemType::Scalar(ScalarType::F32),
        DType::F64 => ElemType::Scalar(ScalarType::F64),
        DType::F16 => ElemType::F16,
        DType::BF16 => ElemType::BF16,
        DType::F8E4M3FN => ElemType::F8E4M3FN,
        DType::F8E4M3FNUZ => ElemType::F8E4M3FNUZ,
        DType::F8E5M2 => ElemType::F8E5M2,
        DType::F8E5M2FNUZ => ElemType::F8E5M2FNUZ,
        DType::F8E8M0 => ElemType::F8E8M0,
        DType::F4E2M1 => ElemType::F4E2M1,
        DType::I4 => ElemType::I4,
        DType::U4 => ElemType::U4,
        DType::I2 => ElemType::I2,
        DType::U2 => ElemType::U2,
        _ => return None,
    })
}

/// Lowering state for one graph.
pub struct Lowerer<'g> {
    /// The graph being lowered.
    pub g: &'g Graph,
    /// The program being built.
    pub program: Program,
    bufs: HashMap<ValueId, BufId>,
    /// Graph-output positions of each value that is a graph output.
    graph_outputs: HashMap<ValueId, Vec<usize>>,
    kernels_made: u32,
    /// Set while the body of a `fused_elementwise` lowers (see [`Capture`]).
    capture: Option<Capture>,
}

/// While a `fused_elementwise` body lowers, elementwise ops build element expressions inside
/// one loop nest instead of kernels: their results live in pseudo buffers (never added to the
/// program) that map to the expressions computing them.
pub(crate) struct Capture {
    /// The fused kernel, lent by the loop nest being built.
    pub kernel: Kernel,
    /// Statements of one element so far.
    pub stmts: Vec<Stmt>,
    /// The expression of each pseudo buffer.
    pub exprs: HashMap<BufId, Expr>,
    /// The loop variables over the output.
    pub idx: Vec<Expr>,
    /// The output's dims.
    pub dims: Vec<u64>,
    next: u32,
    /// Set when a body op wanted a kernel of its own; the body then lowers unfused.
    pub escaped: bool,
}

impl Capture {
    /// A capture building into `kernel` at loop variables `idx` over `dims`.
    pub fn new(kernel: Kernel, idx: Vec<Expr>, dims: Vec<u64>) -> Capture {
        Capture { kernel, stmts: Vec::new(), exprs: HashMap::new(), idx, dims, next: 0, escaped: false }
    }
}

/// Lowers a whole graph. Every value's shape must be static.
pub fn lower(g: &Graph) -> Result<Program, LowerError> {
    let mut cx = Lowerer { g, program: Program::default(), bufs: HashMap::new(), graph_outputs: HashMap::new(), kernels_made: 0, capture: None };
    for (i, &v) in g.outputs().iter().enumerate() {
        cx.graph_outputs.entry(v).or_default().push(i);
    }
    for (i, &v) in g.inputs().iter().enumerate() {
        let (dims, elem) = cx.static_type(v)?;
        let buf = cx.program.add_buffer(Buffer { name: g.value(v).name.clone(), elem, len: dims.iter().product(), kind: BufferKind::Input(i) });
        cx.bufs.insert(v, buf);
    }
    for &n in &g.body.nodes {
        cx.lower_node(n)?;
    }
    cx.finish_outputs()?;
    crate::copies::copy_calls(&mut cx.program);
    Ok(cx.program)
}

impl<'g> Lowerer<'g> {
    /// Graph outputs whose value does not live in its output buffer (an input, a constant, a
    /// view, or a value listed twice) are copied there.
    fn finish_outputs(&mut self) -> Result<(), LowerError> {
        let outputs: Vec<ValueId> = self.g.outputs().to_vec();
        for (i, v) in outputs.into_iter().enumerate() {
            let src = self.value(v)?;
            if self.program.buffer(src.buf).kind == BufferKind::Output(i) {
                continue;
            }
            let dst = self.program.add_buffer(Buffer { name: self.g.value(v).name.clone(), elem: src.elem, len: src.numel(), kind: BufferKind::Output(i) });
            let mut k = Kernel::new(format!("copy_output_{i}"));
            let body = k.nest(&[src.numel()], |_, idx| vec![Stmt::Store { buf: dst, index: idx[0].clone(), value: Expr::load(src.buf, idx[0].clone()) }]);
            k.body = body;
            self.program.kernels.push(k);
        }
        Ok(())
    }

    /// The node record.
    pub fn node(&self, n: NodeId) -> &'g Node {
        self.g.node(n)
    }

    /// An "unsupported" error for `n`.
    pub fn unsupported(&self, n: NodeId, reason: impl Into<String>) -> LowerError {
        let node = self.g.node(n);
        LowerError::Unsupported { node: node.name.clone(), op: node.op.kind().text_name(), reason: reason.into() }
    }

    fn static_type(&self, v: ValueId) -> Result<(Vec<u64>, ElemType), LowerError> {
        let val = self.g.value(v);
        let dims = val.ty.known_dims().ok_or_else(|| LowerError::NotStatic { value: val.name.clone(), ty: val.ty.to_string() })?;
        let elem = elem_type(val.ty.dtype).ok_or_else(|| LowerError::Unsupported { node: val.name.clone(), op: "value", reason: format!("element type {}", val.ty.dtype) })?;
        let bits = dims.iter().try_fold(u64::from(elem.bits()), |acc, &d| acc.checked_mul(d));
        if bits.is_none_or(|b| b.div_ceil(8) > MAX_BUFFER_BYTES) {
            return Err(LowerError::TooLarge { value: val.name.clone(), ty: val.ty.to_string() });
        }
        Ok((dims, elem))
    }

    /// The operand holding value `v` (constants get a buffer on first use).
    pub fn value(&mut self, v: ValueId) -> Result<Operand, LowerError> {
        let (dims, elem) = self.static_type(v)?;
        let buf = match self.bufs.get(&v) {
            Some(&b) => b,
            None => match &self.g.value(v).def {
                ValueDef::Const(t) => {
                    let b = self.program.add_buffer(Buffer { name: self.g.value(v).name.clone(), elem, len: dims.iter().product(), kind: BufferKind::Const(t.clone()) });
                    self.bufs.insert(v, b);
                    b
                }
                _ => {
                    return Err(LowerError::Unsupported { node: self.g.value(v).name.clone(), op: "value", reason: "used before it is computed".into() });
                }
            },
        };
        Ok(Operand { buf, dims, elem })
    }

    /// Input `i` of node `n`, or `None` if omitted.
    pub fn input(&mut self, n: NodeId, i: usize) -> Result<Option<Operand>, LowerError> {
        match self.node(n).inputs.get(i).copied().flatten() {
            Some(v) => self.value(v).map(Some),
            None => Ok(None),
        }
    }

    /// Input `i` of node `n`, which must be present.
    pub fn required(&mut self, n: NodeId, i: usize) -> Result<Operand, LowerError> {
        self.input(n, i)?.ok_or_else(|| self.unsupported(n, format!("input {i} is missing")))
    }

    /// The constant behind input `i` of node `n`, if it is one.
    pub fn const_input(&self, n: NodeId, i: usize) -> Option<&'g Tensor> {
        let v = self.node(n).inputs.get(i).copied().flatten()?;
        self.g.const_value(v)
    }

    /// The buffer for output `i` of node `n`: the graph's output buffer when the value is the
    /// first graph output it appears as, else a new intermediate. `None` if the output is unused.
    pub fn output(&mut self, n: NodeId, i: usize) -> Result<Option<Operand>, LowerError> {
        let Some(v) = self.node(n).outputs.get(i).copied().flatten() else {
            return Ok(None);
        };
        let (dims, elem) = self.static_type(v)?;
        if let Some(cap) = self.capture.as_mut() {
            let buf = BufId(u32::MAX - cap.next);
            cap.next += 1;
            self.bufs.insert(v, buf);
            return Ok(Some(Operand { buf, dims, elem }));
        }
        let kind = match self.graph_outputs.get(&v) {
            Some(pos) => BufferKind::Output(pos[0]),
            None => BufferKind::Temp,
        };
        let buf = self.program.add_buffer(Buffer { name: self.g.value(v).name.clone(), elem, len: dims.iter().product(), kind });
        self.bufs.insert(v, buf);
        Ok(Some(Operand { buf, dims, elem }))
    }

    /// The element type output `i` of node `n` will have, without giving it a buffer (`None`
    /// when the output is unused).
    pub fn output_elem(&self, n: NodeId, i: usize) -> Result<Option<ElemType>, LowerError> {
        match self.node(n).outputs.get(i).copied().flatten() {
            Some(v) => Ok(Some(self.static_type(v)?.1)),
            None => Ok(None),
        }
    }

    /// Output `i` of node `n`, which must be present (an unused required output still gets a buffer).
    pub fn required_output(&mut self, n: NodeId, i: usize) -> Result<Operand, LowerError> {
        self.output(n, i)?.ok_or_else(|| self.unsupported(n, format!("output {i} is unused")))
    }

    /// Makes output `i` of `n` a view of `input`: same elements, no kernel.
    pub fn alias_output(&mut self, n: NodeId, i: usize, input: &Operand) {
        if let Some(v) = self.node(n).outputs.get(i).copied().flatten() {
            self.bufs.insert(v, input.buf);
        }
    }

    /// Makes value `v` live in `buf`: how a control-flow op hands a region parameter the
    /// buffer it fills (an iteration number, a loop-carried state, a scanned slice).
    pub fn bind(&mut self, v: ValueId, buf: BufId) {
        self.bufs.insert(v, buf);
    }

    /// Lowers the nodes of a nested region (its parameters bound first with [`Self::bind`])
    /// and returns their kernels, taken out of the program for the caller to place: guarded
    /// by a condition, or spliced into a loop. Results are the buffers of `region.results`.
    pub fn lower_region(&mut self, region: &Region) -> Result<Vec<Kernel>, LowerError> {
        let start = self.program.kernels.len();
        for &n in &region.nodes {
            self.lower_node(n)?;
        }
        Ok(self.program.kernels.split_off(start))
    }

    /// A new kernel named after node `n`'s op.
    pub fn kernel(&mut self, n: NodeId) -> Kernel {
        self.kernels_made += 1;
        let mut k = Kernel::new(format!("{}_{}", self.node(n).op.kind().text_name(), self.kernels_made));
        k.source = self.node(n).name.clone();
        k
    }

    /// Appends a finished kernel.
    pub fn push(&mut self, k: Kernel) {
        match self.capture.as_mut() {
            Some(cap) => cap.escaped = true,
            None => self.program.kernels.push(k),
        }
    }

    /// Registers a run-time error message for node `n` and returns its code.
    pub fn error(&mut self, n: NodeId, message: impl std::fmt::Display) -> u32 {
        let node = self.node(n);
        let text = format!("node \"{}\" (tensor.{}): {message}", node.name, node.op.kind().text_name());
        self.program.add_error(text)
    }
}
