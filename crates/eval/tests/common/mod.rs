//! Helpers shared by the evaluator's tests: building tensors, running one op, reading results.
#![allow(dead_code)]

use bytes::Bytes;
use kiln_eval::{EvalError, eval_op};
use kiln_tir::{DType, Op, Tensor, TensorData};

/// An f32 tensor.
pub fn f32t(shape: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32s(shape, v)
}

/// An i64 tensor.
pub fn i64t(shape: &[u64], v: &[i64]) -> Tensor {
    Tensor::from_i64s(shape, v)
}

/// A tensor of `dtype` from raw little-endian bytes.
pub fn raw(dtype: DType, shape: &[u64], bytes: Vec<u8>) -> Tensor {
    Tensor { dtype, shape: shape.to_vec(), data: TensorData::Raw(Bytes::from(bytes)) }
}

/// A bool tensor.
pub fn boolt(shape: &[u64], v: &[bool]) -> Tensor {
    raw(DType::Bool, shape, v.iter().map(|&b| u8::from(b)).collect())
}

/// An i32 tensor.
pub fn i32t(shape: &[u64], v: &[i32]) -> Tensor {
    raw(DType::I32, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// A u8 tensor.
pub fn u8t(shape: &[u64], v: &[u8]) -> Tensor {
    raw(DType::U8, shape, v.to_vec())
}

/// An f64 tensor.
pub fn f64t(shape: &[u64], v: &[f64]) -> Tensor {
    raw(DType::F64, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// Runs `op` on present inputs and returns all `n` outputs.
pub fn run_n(op: Op, inputs: &[&Tensor], n: usize) -> Vec<Tensor> {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    eval_op(&op, &ins, n).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `op` and returns its single output.
pub fn run(op: Op, inputs: &[&Tensor]) -> Tensor {
    run_n(op, inputs, 1).remove(0)
}

/// Runs `op` with optional inputs and returns its single output.
pub fn run_opt(op: Op, inputs: &[Option<&Tensor>]) -> Tensor {
    eval_op(&op, inputs, 1).unwrap_or_else(|e| panic!("{e}")).remove(0)
}

/// Runs `op` expecting an error.
pub fn run_err(op: Op, inputs: &[&Tensor]) -> EvalError {
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    match eval_op(&op, &ins, 1) {
        Ok(out) => panic!("expected an error, got {out:?}"),
        Err(e) => e,
    }
}

fn bytes(t: &Tensor) -> &[u8] {
    t.raw().expect("raw tensor")
}

/// The elements of an f32 tensor.
pub fn f32s(t: &Tensor) -> Vec<f32> {
    assert_eq!(t.dtype, DType::F32, "{t:?}");
    bytes(t).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The elements of an f64 tensor.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    assert_eq!(t.dtype, DType::F64, "{t:?}");
    bytes(t).chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The elements of an integer or bool tensor.
pub fn ints(t: &Tensor) -> Vec<i64> {
    t.to_i64s().unwrap_or_else(|| panic!("not an integer tensor: {t:?}"))
}

/// The elements of a bool tensor.
pub fn bools(t: &Tensor) -> Vec<bool> {
    assert_eq!(t.dtype, DType::Bool);
    bytes(t).iter().map(|&b| b != 0).collect()
}

/// Asserts elementwise closeness (NaN equals NaN).
pub fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let ok = a == e || (a.is_nan() && e.is_nan()) || (a - e).abs() <= tol * (1.0 + e.abs());
        assert!(ok, "element {i}: got {a}, want {e}\n got {actual:?}\nwant {expected:?}");
    }
}

/// A deterministic pseudo-random sequence in [-1, 1).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
