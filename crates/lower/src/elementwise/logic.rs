//! Logic, bits and comparisons: And, Or, Xor, BitwiseAnd/Or/Xor, BitShift, Equal, Less,
//! LessOrEqual, Greater, GreaterOrEqual, and Where.

use kiln_tir::op::ShiftDirection;
use kiln_tir::{NodeId, Op};

use super::{c, common_type, map_n, need_int, operands};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer};

/// Lowers `n` if it is a logic, bitwise or comparison op.
pub(crate) fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let (op, operand): (BinOp, Operands) = match &cx.node(n).op {
        Op::And(_) => (BinOp::And, Operands::Bool),
        Op::Or(_) => (BinOp::Or, Operands::Bool),
        Op::Xor(_) => (BinOp::Xor, Operands::Bool),
        Op::BitwiseAnd(_) => (BinOp::And, Operands::Int),
        Op::BitwiseOr(_) => (BinOp::Or, Operands::Int),
        Op::BitwiseXor(_) => (BinOp::Xor, Operands::Int),
        Op::Equal(_) => return compare(cx, n, CmpOp::Eq),
        Op::Less(_) => return compare(cx, n, CmpOp::Lt),
        Op::LessOrEqual(_) => return compare(cx, n, CmpOp::Le),
        Op::Greater(_) => return compare(cx, n, CmpOp::Gt),
        Op::GreaterOrEqual(_) => return compare(cx, n, CmpOp::Ge),
        Op::BitShift(a) => return shift(cx, n, a.direction == ShiftDirection::Left),
        Op::Where(_) => return select(cx, n),
        _ => return Ok(false),
    };
    let (ops, ty) = operands(cx, n)?;
    map_n(cx, n, &ops, |_, a| {
        match operand {
            Operands::Bool if ty != ScalarType::Bool => return Err(format!("{} operands (the op is defined on bool)", ty.name())),
            Operands::Int => need_int(ty)?,
            Operands::Bool => {}
        }
        Ok(a[0].clone().bin(op, a[1].clone()))
    })
}

/// Which operand types a bitwise op takes.
#[derive(Clone, Copy)]
enum Operands {
    /// Truth values (the logical ops).
    Bool,
    /// Integers (the bitwise ops).
    Int,
}

/// a op b as a bool, for operands of any one type.
fn compare(cx: &mut Lowerer<'_>, n: NodeId, op: CmpOp) -> Result<bool, LowerError> {
    let (ops, _) = operands(cx, n)?;
    map_n(cx, n, &ops, |_, a| Ok(a[0].clone().cmp(op, a[1].clone())))
}

/// a << b or a >> b (arithmetic for signed a). A shift by a negative amount or by the width or
/// more gives 0, or −1 for a right shift of a negative value (the ONNX reference).
fn shift(cx: &mut Lowerer<'_>, n: NodeId, left: bool) -> Result<bool, LowerError> {
    let (ops, ty) = operands(cx, n)?;
    map_n(cx, n, &ops, |_, args| {
        need_int(ty)?;
        let (a, b) = (args[0].clone(), args[1].clone());
        let width = f64::from(8 * ty.bytes());
        let in_range = b.clone().cmp(CmpOp::Ge, c(ty, 0.0)).bin(BinOp::And, b.clone().cmp(CmpOp::Lt, c(ty, width)));
        let shifted = a.clone().bin(if left { BinOp::Shl } else { BinOp::Shr }, b);
        let overflow = if !left && ty.is_signed_int() { a.cmp(CmpOp::Lt, c(ty, 0.0)).select(c(ty, -1.0), c(ty, 0.0)) } else { c(ty, 0.0) };
        Ok(in_range.select(shifted, overflow))
    })
}

/// cond ? x : y, all three broadcast.
fn select(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let cond = cx.required(n, 0)?;
    let branches = [cx.required(n, 1)?, cx.required(n, 2)?];
    common_type(&branches).map_err(|why| cx.unsupported(n, why))?;
    if cond.ty() != ScalarType::Bool {
        return Err(cx.unsupported(n, format!("{} condition", cond.ty().name())));
    }
    let [x, y] = branches;
    map_n(cx, n, &[cond, x, y], |_, a| Ok(a[0].clone().select(a[1].clone(), a[2].clone())))
}
