//! Loads and stores of every element type, including half-precision conversion over every
//! binary16 and bfloat16 bit pattern and over f32 values around every rounding boundary.

use kiln_loops::*;

use crate::harness::{map_kernel, samples, Harness, TYPES};

#[test]
fn every_scalar_type_round_trips_through_memory() {
    for t in TYPES {
        let s = samples(t);
        let n = s.len() as u64;
        let mut h = Harness::new();
        let a = h.input_of(t, &s);
        let out = h.output(ElemType::Scalar(t), n);
        // Reversed, so the index arithmetic is exercised too.
        h.push(map_kernel("reverse", n, |_, i| {
            vec![Stmt::Store { buf: out, index: Expr::idx(n as i64 - 1) - i.clone(), value: Expr::load(a, i) }]
        }));
        h.run().unwrap();
    }
}

#[test]
fn bools_load_any_nonzero_byte_as_true_and_store_one() {
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::Bool, &[0, 1, 2, 0x80, 0xff]);
    let out = h.output(ElemType::Scalar(ScalarType::Bool), 5);
    let ints = h.output(ElemType::Scalar(ScalarType::I32), 5);
    h.push(map_kernel("bools", 5, |_, i| {
        vec![
            Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i.clone()) },
            Stmt::Store { buf: ints, index: i.clone(), value: Expr::load(a, i).cast(ScalarType::I32) },
        ]
    }));
    h.run().unwrap();
}

fn all_halves() -> Vec<u64> {
    (0..=0xffffu64).collect()
}

/// f32 bit patterns around every boundary that matters to rounding into 16 bits: each upper
/// half with a range of lower halves (ties, just below and above ties, sticky bits).
fn f32_rounding_cases() -> Vec<u64> {
    let lows = [0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x5fff, 0x7fff, 0x8000, 0x8001, 0xa000, 0xffff];
    (0..=0xffffu64).flat_map(|hi| lows.iter().map(move |&lo| (hi << 16) | lo)).collect()
}

#[test]
fn f16_loads_and_stores_match_for_every_bit_pattern() {
    let halves = all_halves();
    let n = halves.len() as u64;
    let mut h = Harness::new();
    let a = h.input(ElemType::F16, &halves);
    let widened = h.output(ElemType::Scalar(ScalarType::F32), n);
    let copied = h.output(ElemType::F16, n);
    h.push(map_kernel("f16_load", n, |_, i| {
        vec![
            Stmt::Store { buf: widened, index: i.clone(), value: Expr::load(a, i.clone()) },
            Stmt::Store { buf: copied, index: i.clone(), value: Expr::load(a, i) },
        ]
    }));
    h.run().unwrap();
}

#[test]
fn bf16_loads_and_stores_match_for_every_bit_pattern() {
    let halves = all_halves();
    let n = halves.len() as u64;
    let mut h = Harness::new();
    let a = h.input(ElemType::BF16, &halves);
    let widened = h.output(ElemType::Scalar(ScalarType::F32), n);
    let copied = h.output(ElemType::BF16, n);
    h.push(map_kernel("bf16_load", n, |_, i| {
        vec![
            Stmt::Store { buf: widened, index: i.clone(), value: Expr::load(a, i.clone()) },
            Stmt::Store { buf: copied, index: i.clone(), value: Expr::load(a, i) },
        ]
    }));
    h.run().unwrap();
}

#[test]
fn f32_to_half_stores_round_to_nearest_even() {
    let mut xs = f32_rounding_cases();
    xs.extend(samples(ScalarType::F32));
    let n = xs.len() as u64;
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::F32, &xs);
    let f16 = h.output(ElemType::F16, n);
    let bf16 = h.output(ElemType::BF16, n);
    h.push(map_kernel("narrow", n, |_, i| {
        vec![
            Stmt::Store { buf: f16, index: i.clone(), value: Expr::load(a, i.clone()) },
            Stmt::Store { buf: bf16, index: i.clone(), value: Expr::load(a, i) },
        ]
    }));
    h.run().unwrap();
}

#[test]
fn half_buffers_compute_in_f32() {
    // f16 · bf16 + 1, stored as f16: loads widen, arithmetic is f32, the store rounds.
    let xs: Vec<u64> = (0..4096u64).map(|i| i * 16 + 3).collect();
    let n = xs.len() as u64;
    let mut h = Harness::new();
    let a = h.input(ElemType::F16, &xs);
    let b = h.input(ElemType::BF16, &xs);
    let out = h.output(ElemType::F16, n);
    h.push(map_kernel("mixed", n, |_, i| {
        let v = Expr::load(a, i.clone()).bin(BinOp::Mul, Expr::load(b, i.clone())).bin(BinOp::Add, Expr::f32(1.0));
        vec![Stmt::Store { buf: out, index: i, value: v }]
    }));
    h.run().unwrap();
}
