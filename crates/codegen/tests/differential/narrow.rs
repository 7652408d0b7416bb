//! The narrow storage types: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4 e2m1 and
//! the packed 4- and 2-bit integers. Every code of each type loads alike in both; a sweep of
//! `f32` values around every rounding boundary stores alike; stores into packed buffers leave
//! the neighbouring elements of their byte alone, in any order.

use kiln_loops::*;

use crate::harness::{from_bytes, map_kernel, samples, Harness};

const FLOATS: [ElemType; 6] = [ElemType::F8E4M3FN, ElemType::F8E4M3FNUZ, ElemType::F8E5M2, ElemType::F8E5M2FNUZ, ElemType::F8E8M0, ElemType::F4E2M1];
const INTS: [ElemType; 4] = [ElemType::I4, ElemType::U4, ElemType::I2, ElemType::U2];

/// Every code of `elem`, then every code again but one, so the length is odd and the codes
/// sit at both positions of a byte.
fn every_code(elem: ElemType) -> Vec<u64> {
    let n = 1u64 << elem.bits();
    (0..n).chain(1..n).collect()
}

/// The `f32` value at element `i` of an `f32` buffer's bytes.
fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
}

#[test]
fn every_code_loads_and_copies_alike() {
    for elem in FLOATS.into_iter().chain(INTS) {
        let codes = every_code(elem);
        let n = codes.len() as u64;
        let mut h = Harness::new();
        let a = h.input(elem, &codes);
        let widened = h.output(ElemType::Scalar(elem.value_type()), n);
        let copied = h.output(elem, n);
        // The copy is written back to front, so read-modify-writes meet half-written bytes.
        h.push(map_kernel("narrow_load", n, |_, i| {
            vec![
                Stmt::Store { buf: widened, index: i.clone(), value: Expr::load(a, i.clone()) },
                Stmt::Store { buf: copied, index: Expr::idx(n as i64 - 1) - i.clone(), value: Expr::load(a, i) },
            ]
        }));
        h.run().unwrap();

        // What the interpreter computes: a copy keeps every code (e5m2's NaNs become its one
        // quiet NaN of their sign).
        let memory = h.interpreted();
        let back: Vec<u64> = from_bytes(elem, &memory[copied.0 as usize]).into_iter().take(n as usize).rev().collect();
        for (&code, &got) in codes.iter().zip(&back) {
            let nan_e5m2 = elem == ElemType::F8E5M2 && code & 0x7f > 0x7c;
            if nan_e5m2 {
                assert_eq!(got, (code & 0x80) | 0x7e, "{} NaN {code:#x}", elem.name());
            } else {
                assert_eq!(got, code, "{} code {code:#x} is copied as {got:#x}", elem.name());
            }
        }
    }
}

#[test]
fn narrow_codes_decode_to_their_values() {
    let value = |elem: ElemType, code: u64| {
        let mut h = Harness::new();
        let a = h.input(elem, &[code]);
        let out = h.output(ElemType::Scalar(ScalarType::F32), 1);
        h.push(map_kernel("decode", 1, |_, i| vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i) }]));
        h.run().unwrap();
        f32_at(&h.interpreted()[out.0 as usize], 0)
    };
    assert_eq!(value(ElemType::F8E4M3FN, 0x7e), 448.0);
    assert_eq!(value(ElemType::F8E4M3FN, 0x01), 2f32.powi(-9));
    assert!(value(ElemType::F8E4M3FN, 0xff).is_nan());
    assert_eq!(value(ElemType::F8E4M3FNUZ, 0x7f), 240.0);
    assert!(value(ElemType::F8E4M3FNUZ, 0x80).is_nan());
    assert_eq!(value(ElemType::F8E5M2, 0x7c), f32::INFINITY);
    assert_eq!(value(ElemType::F8E5M2, 0xfb), -57344.0);
    assert_eq!(value(ElemType::F8E5M2FNUZ, 0x01), 2f32.powi(-17));
    assert_eq!(value(ElemType::F8E8M0, 127), 1.0);
    assert_eq!(value(ElemType::F8E8M0, 0), 2f32.powi(-127));
    assert!(value(ElemType::F8E8M0, 0xff).is_nan());
    assert_eq!(value(ElemType::F4E2M1, 0x7), 6.0);
    assert_eq!(value(ElemType::F4E2M1, 0x9), -0.5);
    assert_eq!(value(ElemType::F4E2M1, 0x8).to_bits(), (-0.0f32).to_bits());
}

/// `f32` bit patterns around every boundary that matters to rounding into 8 bits or fewer:
/// every upper half with lower halves that make ties, just-above-ties and sticky bits.
fn f32_sweep() -> Vec<u64> {
    let mut v: Vec<u64> = (0..=0xffffu64).flat_map(|hi| [0u64, 1, 0x8000, 0xffff].map(move |lo| (hi << 16) | lo)).collect();
    v.extend(samples(ScalarType::F32));
    v
}

#[test]
fn f32_values_store_alike_into_every_narrow_float() {
    let values = f32_sweep();
    let n = values.len() as u64;
    for elem in FLOATS {
        let mut h = Harness::new();
        let a = h.input_of(ScalarType::F32, &values);
        let out = h.output(elem, n);
        h.push(map_kernel("narrow_store", n, |_, i| vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i) }]));
        h.run().unwrap();
    }
}

#[test]
fn integer_stores_keep_the_low_bits() {
    let bytes: Vec<u64> = (0..=255).collect();
    for elem in INTS {
        let t = elem.value_type();
        let mut h = Harness::new();
        let a = h.input_of(t, &bytes);
        let out = h.output(elem, 256);
        h.push(map_kernel("wrap", 256, |_, i| vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i) }]));
        h.run().unwrap();
        let got = from_bytes(elem, &h.interpreted()[out.0 as usize]);
        let mask = (1u64 << elem.bits()) - 1;
        assert!(got.iter().zip(&bytes).all(|(&g, &b)| g == b & mask), "{}", elem.name());
    }
}

#[test]
fn packed_stores_leave_their_neighbours_alone() {
    for elem in [ElemType::I4, ElemType::U2, ElemType::F4E2M1] {
        let n = 11u64;
        let t = elem.value_type();
        let mut h = Harness::new();
        let source: Vec<u64> = if t == ScalarType::F32 { (0..n).map(|i| u64::from((i as f32 - 5.0).to_bits())).collect() } else { (0..n).collect() };
        let a = h.input_of(t, &source);
        // Outputs start as the byte 0x5a; only every third element is written, back to front.
        let out = h.output(elem, n);
        let thirds = n.div_ceil(3);
        h.push(map_kernel("sparse_store", thirds, |_, i| {
            let at = Expr::idx(3 * (thirds as i64 - 1)) - i * 3;
            vec![Stmt::Store { buf: out, index: at.clone(), value: Expr::load(a, at) }]
        }));
        h.run().unwrap();
        let got = from_bytes(elem, &h.interpreted()[out.0 as usize]);
        let initial = from_bytes(elem, &[0x5a]);
        for (i, &g) in got.iter().enumerate().take(n as usize) {
            if i % 3 != 0 {
                assert_eq!(g, initial[i % initial.len()], "{} element {i} was overwritten", elem.name());
            }
        }
    }
}
