//! Tensor comparison with the conformance suite's rules, shared by tests, the `kiln
//! conformance` command and the model checks.

use kiln_tir::op::{Cast, Op};
use kiln_tir::{DType, Tensor, TensorData};

/// Relative tolerance of the conformance comparison.
pub const RTOL: f64 = 1e-3;
/// Absolute tolerance of the conformance comparison.
pub const ATOL: f64 = 1e-7;

/// The elements of a numeric tensor as `f64`, decoded by the evaluator's Cast.
pub fn to_f64s(t: &Tensor) -> Result<Vec<f64>, String> {
    let op = Op::Cast(Cast { to: DType::F64, ..Cast::default() });
    let out = crate::eval_op(&op, &[Some(t)], 1).map_err(|e| e.to_string())?;
    let raw = out[0].raw().ok_or("no data")?;
    Ok(raw.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
}

/// Compares `got` with `want`: same dtype and shape; floats within `atol + rtol·|want|` (NaN
/// equals NaN); every other type exactly. The error names the first differing element.
pub fn compare_within(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype != want.dtype || got.shape != want.shape {
        return Err(format!("got {}{:?}, want {}{:?}", got.dtype, got.shape, want.dtype, want.shape));
    }
    if !want.dtype.is_float() {
        return match (&got.data, &want.data) {
            (TensorData::Strings(g), TensorData::Strings(w)) if g == w => Ok(()),
            (TensorData::Raw(g), TensorData::Raw(w)) if g == w => Ok(()),
            _ => Err(format!("{} elements differ", want.dtype)),
        };
    }
    let (g, w) = (to_f64s(got)?, to_f64s(want)?);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= atol + rtol * b.abs();
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

/// [`compare_within`] at the conformance tolerances.
pub fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    compare_within(got, want, RTOL, ATOL)
}
