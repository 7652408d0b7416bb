//! Ops whose output has the input's elements in the same order: Reshape, Flatten, Squeeze,
//! Unsqueeze, Identity, and Dropout when it drops nothing. They lower to no kernel; the output
//! is a view of the input's buffer.

use kiln_tir::{DType, NodeId, Op};

use super::{LowerError, Lowerer};
use kiln_loops::ir::{BinOp, CmpOp, Expr, Stmt, UnOp};

/// Lowers `n` if it is a view op.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    match &cx.node(n).op {
        Op::Reshape(_) | Op::Flatten(_) | Op::Squeeze(_) | Op::Unsqueeze(_) | Op::Identity(_) => {}
        Op::Dropout(_) => return dropout(cx, n).map(|()| true),
        _ => return Ok(false),
    }
    let input = cx.required(n, 0)?;
    cx.alias_output(n, 0, &input);
    Ok(true)
}

/// A scalar input of Dropout: absent, a constant, or only known at run time.
enum Scalar {
    Absent,
    Known(f64),
    Runtime(super::Operand),
}

fn scalar_input(cx: &mut Lowerer<'_>, n: NodeId, i: usize) -> Result<Scalar, LowerError> {
    let Some(op) = cx.input(n, i)? else { return Ok(Scalar::Absent) };
    let Some(t) = cx.const_input(n, i) else { return Ok(Scalar::Runtime(op)) };
    let raw = t.raw().unwrap_or_default();
    let value = match t.dtype {
        DType::F32 => raw.get(..4).map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        DType::F64 => raw.get(..8).map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
        _ => t.to_i64s().and_then(|v| v.first().map(|&x| x as f64)),
    };
    value.map(Scalar::Known).ok_or_else(|| cx.unsupported(n, format!("input {i} of type {}", t.dtype)))
}

/// Dropout is the identity, with an all-true mask, at inference (`training_mode` absent or
/// false) and when the ratio is 0. Dropping at random is unsupported: kiln does not reproduce
/// ONNX's random streams. When the mode or ratio is only known at run time, a check stops a
/// run that would have to drop at random.
fn dropout(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let training = scalar_input(cx, n, 2)?;
    let ratio = scalar_input(cx, n, 1)?;
    let random = "training-mode dropout with a non-zero ratio draws random values, which kiln does not reproduce";
    let mut k = cx.kernel(n);
    let mut body = Vec::new();
    // The condition under which the node is the identity, when it is not known now.
    let identity: Option<Expr> = match (&training, &ratio) {
        (Scalar::Absent, _) | (Scalar::Known(0.0), _) => None,
        (_, Scalar::Known(r)) if *r == 0.0 => None,
        (Scalar::Known(_), Scalar::Known(_) | Scalar::Absent) => return Err(cx.unsupported(n, random)),
        (t, r) => {
            let off = match t {
                Scalar::Runtime(op) => Expr::load(op.buf, Expr::idx(0)).un(UnOp::Not),
                _ => Expr::Const(kiln_loops::ir::Scalar::Bool(false)),
            };
            let zero = match r {
                Scalar::Runtime(op) => Expr::load(op.buf, Expr::idx(0)).cmp(CmpOp::Eq, Expr::float(op.ty(), 0.0)),
                _ => Expr::Const(kiln_loops::ir::Scalar::Bool(false)),
            };
            Some(off.bin(BinOp::Or, zero))
        }
    };
    if let Some(cond) = identity {
        let error = cx.error(n, random);
        body.push(Stmt::Check { cond, error });
    }
    let input = cx.required(n, 0)?;
    cx.alias_output(n, 0, &input);
    if let Some(mask) = cx.output(n, 1)? {
        body.extend(k.nest(&[mask.numel()], |_, idx| vec![Stmt::Store { buf: mask.buf, index: idx[0].clone(), value: Expr::Const(kiln_loops::ir::Scalar::Bool(true)) }]));
    }
    if !body.is_empty() {
        k.body = body;
        cx.push(k);
    }
    Ok(())
}
