//! Recurrent layers: RNN, GRU, LSTM.

use crate::dim::Dim;
use crate::op::RnnDirection;
use crate::types::TensorType;

use super::common::{Cx, Res, attr_err, mul, positive, set, tt, unify};

/// What distinguishes the three recurrent layers.
pub(super) struct Cell {
    /// Gates per direction (1 RNN, 3 GRU, 4 LSTM): W and R stack `gates * hidden` rows.
    pub gates: u64,
    /// Which way the sequence is walked.
    pub direction: RnnDirection,
    /// The `hidden_size` attribute.
    pub hidden_size: Option<i64>,
    /// 0: sequence-major tensors; 1: batch-major.
    pub layout: i64,
    /// Inputs the op takes at most.
    pub max_inputs: usize,
    /// Outputs the op has at most (Y, Y_h, and Y_c for LSTM).
    pub outputs: usize,
}

/// `Y` (`[seq, dirs, batch, hidden]`, or `[batch, seq, dirs, hidden]` with layout 1), then
/// `Y_h` and `Y_c` (`[dirs, batch, hidden]`, or `[batch, dirs, hidden]`).
pub(super) fn rnn(cx: &mut Cx<'_, '_>, c: Cell) -> Res<Vec<TensorType>> {
    cx.arity(3, c.max_inputs)?;
    let d = cx.check(0, set::FLOAT)?;
    for i in [1, 2, 3, 5, 6, 7] {
        cx.same(0, i)?;
    }
    cx.check_opt(4, set::I32)?;
    cx.rank_is(0, 3, "X")?;
    cx.rank_is(1, 3, "W")?;
    cx.rank_is(2, 3, "R")?;
    let (x, w, r) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
    let dirs = Dim::Known(match c.direction {
        RnnDirection::Forward | RnnDirection::Reverse => 1,
        RnnDirection::Bidirectional => 2,
    });
    let (seq, batch) = match c.layout {
        0 => (&x.shape[0], &x.shape[1]),
        1 => (&x.shape[1], &x.shape[0]),
        l => return Err(attr_err(format!("layout must be 0 or 1, found {l}"))),
    };
    let hidden = match c.hidden_size {
        Some(h) => unify(&r.shape[2], &Dim::Known(positive(h, "hidden_size")?), "R's last dim differs from hidden_size")?,
        None => r.shape[2].clone(),
    };
    let rows = mul(&hidden, &Dim::Known(c.gates))?;
    unify(&w.shape[0], &dirs, "W's first dim differs from the number of directions")?;
    unify(&r.shape[0], &dirs, "R's first dim differs from the number of directions")?;
    unify(&w.shape[1], &rows, "W's rows differ from gates x hidden_size")?;
    unify(&r.shape[1], &rows, "R's rows differ from gates x hidden_size")?;
    unify(&w.shape[2], &x.shape[2], "W's last dim differs from the input size")?;
    let (y, state) = if c.layout == 0 {
        (vec![seq.clone(), dirs.clone(), batch.clone(), hidden.clone()], vec![dirs, batch.clone(), hidden])
    } else {
        (vec![batch.clone(), seq.clone(), dirs.clone(), hidden.clone()], vec![batch.clone(), dirs, hidden])
    };
    let mut out = vec![tt(d, y)];
    out.extend((1..c.outputs).map(|_| tt(d, state.clone())));
    Ok(out)
}
