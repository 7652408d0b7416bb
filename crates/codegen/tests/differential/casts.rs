//! `Cast` between every pair of scalar types (wrapping, sign/zero extension, float → int
//! truncation with saturation and NaN → 0, int → float rounding) and `Bitcast` between every
//! pair of equal width.

use kiln_loops::*;

use crate::harness::{map_kernel, samples, Harness, TYPES};

#[test]
fn casts_between_every_pair_of_types() {
    for from in TYPES {
        let s = samples(from);
        let n = s.len() as u64;
        let mut h = Harness::new();
        let a = h.input_of(from, &s);
        for to in TYPES {
            let out = h.output(ElemType::Scalar(to), n);
            h.push(map_kernel(&format!("{}_to_{}", from.name(), to.name()), n, |_, i| {
                vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i).cast(to) }]
            }));
        }
        h.run().unwrap();
    }
}

#[test]
fn float_to_int_casts_saturate_around_every_bound() {
    // For each integer type, values just inside, at and beyond both ends of its range.
    let bounds: [(f64, f64); 8] = [
        (-128.0, 127.0),
        (-32768.0, 32767.0),
        (-2147483648.0, 2147483647.0),
        (i64::MIN as f64, i64::MAX as f64),
        (0.0, 255.0),
        (0.0, 65535.0),
        (0.0, 4294967295.0),
        (0.0, u64::MAX as f64),
    ];
    let mut xs = Vec::new();
    for (lo, hi) in bounds {
        for b in [lo, hi] {
            for d in [-1.5, -1.0, -0.5, -0.0, 0.5, 1.0, 1.5] {
                xs.push(b + d);
            }
            xs.push(b * (1.0 + 1e-7));
            xs.push(b * (1.0 - 1e-7));
        }
    }
    for from in [ScalarType::F32, ScalarType::F64] {
        let bits: Vec<u64> = xs.iter().map(|&x| if from == ScalarType::F32 { u64::from((x as f32).to_bits()) } else { x.to_bits() }).collect();
        let mut h = Harness::new();
        let a = h.input_of(from, &bits);
        let n = bits.len() as u64;
        for to in TYPES.into_iter().filter(|t| !t.is_float() && *t != ScalarType::Bool) {
            let out = h.output(ElemType::Scalar(to), n);
            h.push(map_kernel(&format!("{}_to_{}", from.name(), to.name()), n, |_, i| {
                vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i).cast(to) }]
            }));
        }
        h.run().unwrap();
    }
}

#[test]
fn bitcasts_between_types_of_equal_width() {
    for from in TYPES {
        let s = samples(from);
        let n = s.len() as u64;
        let mut h = Harness::new();
        let a = h.input_of(from, &s);
        for to in TYPES.into_iter().filter(|t| t.bytes() == from.bytes()) {
            let out = h.output(ElemType::Scalar(to), n);
            h.push(map_kernel(&format!("{}_as_{}", from.name(), to.name()), n, |_, i| {
                vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::Bitcast(to, Box::new(Expr::load(a, i))) }]
            }));
        }
        h.run().unwrap();
    }
}

#[test]
fn constants_of_every_type_are_materialized_exactly() {
    for t in TYPES {
        let s = samples(t);
        let mut h = Harness::new();
        let out = h.output(ElemType::Scalar(t), s.len() as u64);
        let mut k = Kernel::new(format!("{}_consts", t.name()));
        k.body = s.iter().enumerate().map(|(j, &c)| Stmt::Store { buf: out, index: Expr::idx(j as i64), value: crate::arith::constant(t, c) }).collect();
        h.push(k);
        h.run().unwrap();
    }
}
