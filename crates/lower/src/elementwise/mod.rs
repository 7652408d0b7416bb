//! Elementwise ops: one loop nest over the output shape per node, inputs read with numpy
//! broadcasting, each element computed by a typed scalar expression.
//!
//! Ops are data: `unary::unary_fn` and `activation::unary_fn` map a one-input op to a closure
//! building its element expression; the multi-input ops (`arith`, `logic`, `cast`, and
//! `activation`'s PRelu, SwiGLU and Clip) pick their operands and hand a closure to [`map_n`],
//! which builds the loop nest, loads and binds the operands, and stores the result.
//!
//! | file | ops |
//! | --- | --- |
//! | `unary.rs` | Neg Abs Sign Reciprocal Floor Ceil Round Sqrt Exp Log Tanh Erf, trigonometric and hyperbolic functions, Sigmoid IsNaN IsInf Not BitwiseNot |
//! | `activation.rs` | Relu LeakyRelu PRelu Elu Selu Celu HardSigmoid HardSwish Gelu Mish Softplus Softsign ThresholdedRelu Shrink Swish SwiGLU Clip |
//! | `arith.rs` | Add Sub Mul Div Mod Pow Max Min Sum Mean |
//! | `logic.rs` | And Or Xor BitwiseAnd BitwiseOr BitwiseXor BitShift Equal Less LessOrEqual Greater GreaterOrEqual Where |
//! | `cast.rs` | Cast CastLike BitCast |
//!
//! Half-precision tensors load as `f32` and round when stored, so f16/bf16 ops compute in `f32`
//! and round once per op, as numpy does for the ONNX reference outputs. The float8 and float4
//! formats do the same; the packed 4- and 2-bit integers compute as `i8` or `u8`.

pub(crate) mod activation;
pub(crate) mod arith;
pub(crate) mod cast;
pub(crate) mod fused;
pub(crate) mod logic;
mod unary;

pub(super) use activation::activation_expr;
pub(super) use cast::{CastOpts, convert, round_to_odd_f32};
use kiln_tir::NodeId;

use super::{LowerError, Lowerer, Operand};
use kiln_loops::builder::{broadcast_index, linear, strides};
use kiln_loops::ir::*;

/// Builds one element's expression from its operands (bound to variables); an `Err` is the
/// reason the op is unsupported for these operands.
pub(super) type ElemResult = Result<Expr, String>;

/// The element function of a one-input op, given the input's value type.
type UnaryFn = Box<dyn FnOnce(&mut Scope<'_>, Expr, ScalarType) -> ElemResult>;

/// Lowers `n` if it is a one-input math or logic op of `unary.rs`.
pub(crate) fn lower_unary(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let f = unary::unary_fn(&cx.node(n).op);
    one_input(cx, n, f)
}

/// Lowers `n` if it is a one-input activation of `activation.rs`.
pub(crate) fn lower_activation(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let f = activation::unary_fn(&cx.node(n).op);
    one_input(cx, n, f)
}

/// Lowers `n` with its element function `f`, if it has one.
fn one_input(cx: &mut Lowerer<'_>, n: NodeId, f: Option<UnaryFn>) -> Result<bool, LowerError> {
    let Some(f) = f else { return Ok(false) };
    let x = cx.required(n, 0)?;
    let ty = x.ty();
    map_n(cx, n, &[x], |s, a| f(s, a[0].clone(), ty))
}

/// The statements of one element of the loop nest, as they are being built.
pub(super) struct Scope<'k> {
    /// The kernel, for fresh variables.
    pub k: &'k mut Kernel,
    /// Statements before the store.
    pub stmts: Vec<Stmt>,
}

impl Scope<'_> {
    /// Binds `e` to a fresh `let` variable, so an expression used more than once is computed
    /// once. Variables and constants are returned as they are.
    pub fn bind(&mut self, e: Expr) -> Expr {
        if matches!(e, Expr::Var(_) | Expr::Const(_)) {
            return e;
        }
        match type_of(&e, &self.k.vars) {
            Some(ty) => {
                let v = self.k.var(ty);
                self.stmts.push(Stmt::Let(v, e));
                Expr::Var(v)
            }
            None => e,
        }
    }

    /// A fresh mutable local of type `ty` initialised to `init`.
    pub fn local(&mut self, ty: ScalarType, init: Expr) -> Var {
        let v = self.k.var(ty);
        self.stmts.push(Stmt::Local(v, init));
        v
    }
}

/// The type of `e` given the kernel's variable types; `None` for a load (its type is the
/// buffer's, which the kernel does not know).
pub(super) fn type_of(e: &Expr, vars: &[ScalarType]) -> Option<ScalarType> {
    match e {
        Expr::Const(c) => Some(c.ty()),
        Expr::Var(v) => vars.get(v.0 as usize).copied(),
        Expr::Load { .. } => None,
        Expr::Unary(UnOp::IsNan, _) | Expr::Cmp(..) => Some(ScalarType::Bool),
        Expr::Unary(_, a) | Expr::Binary(_, a, _) => type_of(a, vars),
        Expr::Select(_, a, _) => type_of(a, vars),
        Expr::Cast(t, _, _) | Expr::Bitcast(t, _) => Some(*t),
        Expr::Math(_, args) => type_of(args.first()?, vars),
    }
}

/// A constant of type `ty` (float constants round to `ty`).
pub(super) fn c(ty: ScalarType, v: f64) -> Expr {
    Expr::float(ty, v)
}

/// `e` converted to `ty`, or `e` itself if it has that type already.
pub(super) fn cast_to(e: Expr, from: ScalarType, to: ScalarType) -> Expr {
    if from == to { e } else { e.cast(to) }
}

/// An `Err` unless `ty` is a float type.
pub(super) fn need_float(ty: ScalarType) -> Result<(), String> {
    if ty.is_float() {
        Ok(())
    } else {
        Err(format!(
            "{} operands (the op is defined on floats)",
            ty.name()
        ))
    }
}

/// An `Err` unless `ty` is an integer type.
pub(super) fn need_int(ty: ScalarType) -> Result<(), String> {
    if ty.is_float() || ty == ScalarType::Bool {
        Err(format!(
            "{} operands (the op is defined on integers)",
            ty.name()
        ))
    } else {
        Ok(())
    }
}

/// An `Err` if `ty` is `bool` (arithmetic needs numbers).
pub(super) fn need_number(ty: ScalarType) -> Result<(), String> {
    if ty == ScalarType::Bool {
        Err("bool operands (the op is defined on numbers)".into())
    } else {
        Ok(())
    }
}

/// An `Err` unless every operand has the same value type; returns it.
pub(super) fn common_type(ops: &[Operand]) -> Result<ScalarType, String> {
    let ty = ops.first().map(Operand::ty).ok_or("no operands")?;
    match ops.iter().find(|o| o.ty() != ty) {
        Some(o) => Err(format!(
            "operand types differ ({} and {})",
            ty.name(),
            o.ty().name()
        )),
        None => Ok(ty),
    }
}

/// Every input of `n` (all required) and their common value type.
pub(super) fn operands(
    cx: &mut Lowerer<'_>,
    n: NodeId,
) -> Result<(Vec<Operand>, ScalarType), LowerError> {
    let count = cx.node(n).inputs.len();
    let ops = (0..count)
        .map(|i| cx.required(n, i))
        .collect::<Result<Vec<_>, _>>()?;
    let ty = common_type(&ops).map_err(|why| cx.unsupported(n, why))?;
    Ok((ops, ty))
}

/// The loop nest of an elementwise kernel: output dims with size-1 axes dropped and adjacent
/// axes merged where every operand either spans both or is broadcast along both; each
/// operand's dims over those loops (1 where it is broadcast), or `None` for a one-element
/// operand, which is always read at index 0.
#[derive(Debug, PartialEq)]
struct Nest {
    dims: Vec<u64>,
    operands: Vec<Option<Vec<u64>>>,
}

/// Plans the nest for `out`; `None` if an operand does not broadcast to `out` (numpy rules).
fn plan(out: &[u64], operands: &[&[u64]]) -> Option<Nest> {
    let rank = out.len();
    let mut padded = Vec::new();
    for d in operands {
        if d.iter().product::<u64>() == 1 {
            padded.push(None);
            continue;
        }
        let skip = rank.checked_sub(d.len())?;
        let p: Vec<u64> = std::iter::repeat_n(1, skip)
            .chain(d.iter().copied())
            .collect();
        if p.iter().zip(out).any(|(&a, &o)| a != o && a != 1) {
            return None;
        }
        padded.push(Some(p));
    }
    let mut nest = Nest {
        dims: Vec::new(),
        operands: padded
            .iter()
            .map(|p| p.as_ref().map(|_| Vec::new()))
            .collect(),
    };
    let mut last: Option<Vec<bool>> = None;
    for (axis, &o) in out.iter().enumerate() {
        if o == 1 {
            continue;
        }
        let spans: Vec<bool> = padded
            .iter()
            .map(|p| p.as_ref().is_some_and(|p| p[axis] == o))
            .collect();
        let merge = last.as_ref() == Some(&spans);
        for (dims, &span) in nest.operands.iter_mut().zip(&spans) {
            if let Some(dims) = dims {
                let d = if span { o } else { 1 };
                match dims.last_mut() {
                    Some(l) if merge => *l *= d,
                    _ => dims.push(d),
                }
            }
        }
        match nest.dims.last_mut() {
            Some(l) if merge => *l *= o,
            _ => nest.dims.push(o),
        }
        last = Some(spans);
    }
    Some(nest)
}

/// Lowers `n` to one kernel that computes output 0 element by element: `f` gets the operands'
/// elements (broadcast to the output's shape, bound to variables) and returns the output
/// element, of the output's value type. An unused output produces no kernel.
pub(super) fn map_n(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    operands: &[Operand],
    f: impl FnOnce(&mut Scope<'_>, &[Expr]) -> ElemResult,
) -> Result<bool, LowerError> {
    if cx.capture.is_some() {
        return fused::element(cx, n, operands, f);
    }
    let Some(out) = cx.output(n, 0)? else {
        return Ok(true);
    };
    let dims: Vec<&[u64]> = operands.iter().map(|o| o.dims.as_slice()).collect();
    let Some(nest) = plan(&out.dims, &dims) else {
        return Err(cx.unsupported(
            n,
            format!(
                "operand shapes {dims:?} do not broadcast to the output shape {:?}",
                out.dims
            ),
        ));
    };
    let mut k = cx.kernel(n);
    let mut failure = None;
    let out_strides = strides(&nest.dims);
    let body = k.nest(&nest.dims, |k, idx| {
        let mut s = Scope {
            k,
            stmts: Vec::new(),
        };
        let args: Vec<Expr> = operands
            .iter()
            .zip(&nest.operands)
            .map(|(o, d)| {
                let index = d.as_ref().map_or(Expr::idx(0), |d| broadcast_index(idx, d));
                let v = s.k.var(o.ty());
                s.stmts.push(Stmt::Let(v, Expr::load(o.buf, index)));
                Expr::Var(v)
            })
            .collect();
        match f(&mut s, &args) {
            Ok(value) => match type_of(&value, &s.k.vars) {
                Some(t) if t != out.ty() => {
                    failure = Some(format!(
                        "kiln bug: the element is {}, the output {}",
                        t.name(),
                        out.elem.name()
                    ))
                }
                _ => s.stmts.push(Stmt::Store {
                    buf: out.buf,
                    index: linear(idx, &out_strides),
                    value,
                }),
            },
            Err(why) => failure = Some(why),
        }
        s.stmts
    });
    if let Some(why) = failure {
        return Err(cx.unsupported(n, why));
    }
    k.body = body;
    cx.push(k);
    Ok(true)
}

#[cfg(test)]
mod tests;
