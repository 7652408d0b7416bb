//! The row term of an integer convolution with constant weights, folded into its bias.
//!
//! The runtime's integer product computes `Σ_k (a − za)(b − zb)` from byte products and
//! subtracts a row term `zb'·Σ_k a'` (`kiln_runtime::qgemm`, `zb'` being B's zero point moved
//! as `B` is: less 128 for `u8`), for which it sums every row of `A` on every call unless `zb'`
//! is 0. A convolution's `A` is its weights. When they, their zero points, X's zero point and
//! the bias are constants, the term is folded here once:
//!
//! `Σ_k (w − zw)(x − zx) = Σ_k (w − zw)(x − s) − (zx − s)·Σ_k (w − zw)`,
//!
//! with `s` the zero point at which `zb'` is 0 (128 for `u8` X, 0 for `i8`): the product runs
//! with X's zero point `s` and the second term joins the bias. It is computed in wrapping
//! `i32`, as the product is, so the results are the same bits.
//!
//! Signed weights stay signed, which the product flips into a copy on each call: flipping them
//! here measured 0.8 ms more compile time on mobilenet_v2_qdq's 3.4 MB of weights (fresh pages)
//! for 1–2 % of its run.

use bytes::Bytes;
use kiln_loops::call;
use kiln_loops::ir::*;
use kiln_tir::{DType, Tensor, TensorData};

use crate::Lowerer;

/// The operands the product takes instead.
pub(super) struct Folded {
    /// X's zero point, one element of X's type at which the row term vanishes.
    pub zb: call::Addr,
    /// The bias with the row term folded in, `m` elements of `i32`.
    pub bias: BufId,
}

/// The elements of constant buffer `buf` as integers.
fn ints(cx: &Lowerer<'_>, buf: BufId) -> Option<Vec<i64>> {
    match &cx.program.buffers.get(buf.0 as usize)?.kind {
        BufferKind::Const(t) => t.to_i64s(),
        _ => None,
    }
}

fn constant(cx: &mut Lowerer<'_>, name: String, dtype: DType, elem: ScalarType, bytes: Vec<u8>, len: u64) -> BufId {
    let t = Tensor { dtype, shape: vec![len], data: TensorData::Raw(Bytes::from(bytes)) };
    cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(elem), len, kind: BufferKind::Const(t) })
}

/// The folded operands of the product of `m × depth` weights `w` (signed when `w_signed`)
/// with zero points `za` (`a_zeros` of them, 0 for none), X's zero point `zb` (`b_zeros`: 0
/// or 1) and the bias (`m` elements, or none); `None` when one of them is not a constant.
#[allow(clippy::too_many_arguments)]
pub(super) fn fold(cx: &mut Lowerer<'_>, name: &str, (w, w_signed): (BufId, bool), (m, depth): (u64, u64), (za, a_zeros): (&call::Addr, u64), (zb, b_zeros): (&call::Addr, u64), x_signed: bool, bias: Option<BufId>) -> Option<Folded> {
    // A clone shares the bytes.
    let BufferKind::Const(t) = cx.program.buffers.get(w.0 as usize)?.kind.clone() else { return None };
    let weights = t.raw()?;
    if weights.len() as u64 != m.checked_mul(depth)? || depth == 0 || t.dtype.bits() != 8 {
        return None;
    }
    let zero_points = |cx: &Lowerer<'_>, z: &call::Addr, count: u64| -> Option<Vec<i64>> {
        if count == 0 {
            return Some(vec![0]);
        }
        let v = ints(cx, z.buf)?;
        let Expr::Const(Scalar::Int(_, 0)) = z.index else { return None };
        (v.len() as u64 >= count).then(|| v[..count as usize].to_vec())
    };
    let za_values = zero_points(cx, za, a_zeros)?;
    let zb_value = *zero_points(cx, zb, b_zeros)?.first()?;
    let bias_values = match bias {
        Some(b) => ints(cx, b).filter(|v| v.len() as u64 == m)?,
        None => vec![0; m as usize],
    };
    let shift = if x_signed { 0 } else { 128 };
    let moved = (zb_value - shift) as i32;
    if moved == 0 {
        return None;
    }
    let za_of = |i: usize| za_values[if za_values.len() == 1 { 0 } else { i }] as i32;
    // A row's sum, exact in `i32` (`depth` is far below 2^23).
    let row_sum = |row: &[u8]| -> i32 { if w_signed { row.iter().map(|&b| i32::from(b as i8)).sum() } else { row.iter().map(|&b| i32::from(b)).sum() } };
    let folded: Vec<u8> = weights
        .chunks_exact(depth as usize)
        .enumerate()
        .flat_map(|(i, row)| {
            let sum = row_sum(row).wrapping_sub(za_of(i).wrapping_mul(depth as i32));
            (bias_values[i] as i32).wrapping_sub(moved.wrapping_mul(sum)).to_le_bytes()
        })
        .collect();
    let bias = constant(cx, format!("{name}_folded_bias"), DType::I32, ScalarType::I32, folded, m);
    let (dtype, elem) = if x_signed { (DType::I8, ScalarType::I8) } else { (DType::U8, ScalarType::U8) };
    let zb = constant(cx, format!("{name}_moved_zero"), dtype, elem, vec![shift as u8], 1);
    Some(Folded { zb: call::Addr::at(zb, 0), bias })
}
