//! Innermost loops that run four iterations at a time: every length around the vector width
//! (the scalar tail), narrow integers widened and narrowed again, in-place updates, and loops
//! that must stay scalar because a lane would read another lane's store.

use kiln_codegen::{clif_text, CodegenOptions};
use kiln_loops::*;
use kiln_target::Target;

use crate::harness::{int_bits, map_kernel, samples, Harness};

const LENGTHS: [u64; 7] = [1, 3, 4, 5, 8, 13, 64];

/// Whether the generated code of `p` for this machine uses 128-bit vectors.
fn vectorized(p: &Program) -> bool {
    let text = clif_text(p, &Target::host(), &CodegenOptions::default()).expect("compiles");
    ["f32x4", "i32x4", "i16x8", "i8x16", "i64x2"].iter().any(|v| text.contains(v))
}

/// `samples(t)` repeated to `n` elements.
fn cycle(t: ScalarType, n: u64) -> Vec<u64> {
    samples(t).into_iter().cycle().take(n as usize).collect()
}

/// Quantization as lowering writes it: `clamp(round(x / s) + zp, -128, 127)` to i8, then back.
#[test]
fn quantize_and_dequantize_at_every_length() {
    for n in LENGTHS {
        let mut h = Harness::new();
        let x = h.input_of(ScalarType::F32, &cycle(ScalarType::F32, n));
        let scale = h.input_of(ScalarType::F32, &[u64::from(0.37f32.to_bits())]);
        let zp = h.input_of(ScalarType::I8, &[int_bits(ScalarType::I8, -3)]);
        let q = h.output(ElemType::Scalar(ScalarType::I8), n);
        let d = h.output(ElemType::Scalar(ScalarType::F32), n);
        h.push(map_kernel("quantize", n, |_, i| {
            let v = Expr::load(x, i.clone()).bin(BinOp::Div, Expr::load(scale, Expr::idx(0))).un(UnOp::Round).bin(BinOp::Add, Expr::load(zp, Expr::idx(0)).cast(ScalarType::F32));
            let v = v.clone().cmp(CmpOp::Ge, Expr::f32(-128.0)).select(v, Expr::f32(-128.0));
            let v = v.clone().cmp(CmpOp::Gt, Expr::f32(127.0)).select(Expr::f32(127.0), v);
            vec![Stmt::Store { buf: q, index: i, value: v.cast(ScalarType::I8) }]
        }));
        h.push(map_kernel("dequantize", n, |_, i| {
            let c = Expr::load(q, i.clone()).cast(ScalarType::F32).bin(BinOp::Sub, Expr::load(zp, Expr::idx(0)).cast(ScalarType::F32));
            vec![Stmt::Store { buf: d, index: i, value: c.bin(BinOp::Mul, Expr::load(scale, Expr::idx(0))) }]
        }));
        if n >= 4 {
            assert!(vectorized(&h.p), "length {n}");
        }
        h.run().unwrap();
    }
}

/// Conversions of clamped values, which vector code truncates without saturating when the
/// clamp keeps NaN out and the bounds inside the target's range: the two forms of each side
/// (`lo < v ? v : lo` and `v ≥ lo ? v : lo`; `v < hi ? v : hi` and `v > hi ? hi : v`), through
/// lets and inline, to `u8` from a lower bound of 0 (where `−0` and `+0` differ as floats) and
/// to `i8`/`i16`; and clamps that do not qualify: bounds past the target's range, a one-sided
/// clamp that lets NaN through, bounds at fractions.
#[test]
fn clamped_conversions_match_the_interpreter() {
    let n = samples(ScalarType::F32).len() as u64 + 3;
    let mut h = Harness::new();
    let x = h.input_of(ScalarType::F32, &cycle(ScalarType::F32, n));
    let cases: [(ScalarType, f32, f32, bool); 7] = [
        (ScalarType::U8, 0.0, 255.0, true),
        (ScalarType::I8, -128.0, 127.0, false),
        (ScalarType::I16, -32768.0, 32767.0, true),
        (ScalarType::I8, -200.0, 200.0, true),
        (ScalarType::U8, -0.75, 255.75, false),
        (ScalarType::I32, -3.0e9, 3.0e9, true),
        (ScalarType::U16, 0.5, 65535.0, false),
    ];
    for (c, &(to, lo, hi, lt)) in cases.iter().enumerate() {
        for through_lets in [false, true] {
            let out = h.output(ElemType::Scalar(to), n);
            h.push(map_kernel(&format!("clamp{c}_{through_lets}"), n, |k, i| {
                let mut stmts = Vec::new();
                let mut bind = |k: &mut Kernel, e: Expr| {
                    if !through_lets {
                        return e;
                    }
                    let v = k.var(ScalarType::F32);
                    stmts.push(Stmt::Let(v, e));
                    Expr::Var(v)
                };
                let v = bind(k, Expr::load(x, i.clone()).bin(BinOp::Mul, Expr::f32(1.5)));
                let (lo, hi) = (Expr::f32(lo), Expr::f32(hi));
                let above = if lt { lo.clone().cmp(CmpOp::Lt, v.clone()).select(v, lo) } else { v.clone().cmp(CmpOp::Ge, lo.clone()).select(v, lo) };
                let above = bind(k, above);
                let both = if lt { above.clone().cmp(CmpOp::Lt, hi.clone()).select(above, hi) } else { above.clone().cmp(CmpOp::Gt, hi.clone()).select(hi, above) };
                stmts.push(Stmt::Store { buf: out, index: i, value: both.cast(to) });
                stmts
            }));
        }
        // Only the upper side: NaN passes through the `gt` form and must still convert to 0.
        let out = h.output(ElemType::Scalar(to), n);
        h.push(map_kernel(&format!("upper{c}"), n, |_, i| {
            let v = Expr::load(x, i.clone());
            vec![Stmt::Store { buf: out, index: i, value: v.clone().cmp(CmpOp::Gt, Expr::f32(hi)).select(Expr::f32(hi), v).cast(to) }]
        }));
    }
    assert!(vectorized(&h.p));
    if cfg!(target_arch = "x86_64") {
        let text = clif_text(&h.p, &Target::host(), &CodegenOptions::default()).expect("compiles");
        assert!(text.contains("x86_cvtt2dq"), "no clamped conversion took the plain truncation");
    }
    h.run().unwrap();
}

/// Every cast between the types with vector lanes, and back, at a length with a tail.
#[test]
fn casts_between_lane_types() {
    let types = [ScalarType::Bool, ScalarType::I8, ScalarType::U8, ScalarType::I16, ScalarType::U16, ScalarType::I32, ScalarType::F32];
    for from in types {
        let n = samples(from).len() as u64 + 3;
        let mut h = Harness::new();
        let x = h.input_of(from, &cycle(from, n));
        for to in types {
            let out = h.output(ElemType::Scalar(to), n);
            h.push(map_kernel(&format!("{}_to_{}", from.name(), to.name()), n, |_, i| vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(x, i).cast(to) }]));
        }
        assert!(vectorized(&h.p));
        h.run().unwrap();
    }
}

/// Wrapping arithmetic on narrow integers, min/max and comparisons feeding selects.
#[test]
fn narrow_integer_arithmetic_wraps_per_lane() {
    for t in [ScalarType::I8, ScalarType::U8, ScalarType::I16, ScalarType::U16, ScalarType::I32, ScalarType::U32] {
        let s = samples(t);
        let (xs, ys): (Vec<u64>, Vec<u64>) = s.iter().flat_map(|&x| s.iter().map(move |&y| (x, y))).unzip();
        let n = xs.len() as u64;
        let mut h = Harness::new();
        let a = h.input_of(t, &xs);
        let b = h.input_of(t, &ys);
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Min, BinOp::Max, BinOp::And, BinOp::Xor] {
            let out = h.output(ElemType::Scalar(t), n);
            h.push(map_kernel(&format!("{op:?}"), n, |_, i| vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i.clone()).bin(op, Expr::load(b, i)) }]));
        }
        for op in [CmpOp::Lt, CmpOp::Ge, CmpOp::Ne] {
            let out = h.output(ElemType::Scalar(t), n);
            h.push(map_kernel(&format!("{op:?}"), n, |_, i| {
                let (x, y) = (Expr::load(a, i.clone()), Expr::load(b, i.clone()));
                vec![Stmt::Store { buf: out, index: i, value: x.clone().cmp(op, y.clone()).select(x.un(UnOp::Neg), y.un(UnOp::Abs)) }]
            }));
        }
        assert!(vectorized(&h.p), "{} n={n}", t.name());
        h.run().unwrap();
    }
}

/// An in-place update (`a[i] = f(a[i])`) vectorizes; a recurrence (`a[i + 1] = f(a[i])`) and a
/// read of a stored element at a fixed index stay scalar, and all three compute what the
/// interpreter does.
#[test]
fn loops_reading_other_lanes_stores_stay_scalar() {
    let n = 13;
    let data = cycle(ScalarType::F32, n + 1);

    let mut h = Harness::new();
    let a = h.input_of(ScalarType::F32, &data);
    h.push(map_kernel("in_place", n, |_, i| vec![Stmt::Store { buf: a, index: i.clone(), value: Expr::load(a, i).bin(BinOp::Mul, Expr::f32(3.0)) }]));
    assert!(vectorized(&h.p));
    h.run().unwrap();

    for (name, read) in [("recurrence", None), ("fixed", Some(0))] {
        let mut h = Harness::new();
        let a = h.input_of(ScalarType::F32, &data);
        h.push(map_kernel(name, n, |_, i| {
            let from = read.map_or(i.clone(), Expr::idx);
            vec![Stmt::Store { buf: a, index: i + 1, value: Expr::load(a, from).bin(BinOp::Add, Expr::f32(1.0)) }]
        }));
        assert!(!vectorized(&h.p), "{name}");
        h.run().unwrap();
    }
}


/// `acc = max(acc, x[i])` and `min` over rows of every length around the vector width, with
/// the samples' NaNs and signed zeros, beside a store in the same loop; a running maximum that
/// the body also stores stays scalar.
#[test]
fn max_and_min_reductions_vectorize() {
    for t in [ScalarType::F32, ScalarType::I8, ScalarType::U16, ScalarType::I32, ScalarType::U32] {
        for n in LENGTHS {
            let mut h = Harness::new();
            let data = cycle(t, n + 3);
            let x = h.input_of(t, &data[3..]);
            let copy = h.output(ElemType::Scalar(t), n);
            let out = h.output(ElemType::Scalar(t), 2);
            let mut k = Kernel::new("reduce");
            let (i, hi, lo) = (k.var(ScalarType::I64), k.var(t), k.var(t));
            let init = |k: usize| if t == ScalarType::F32 { Expr::Const(Scalar::F32(f32::from_bits(data[k] as u32))) } else { Expr::int(t, data[k] as i64) };
            k.body = vec![
                Stmt::Local(hi, init(0)),
                Stmt::Local(lo, init(1)),
                Stmt::For {
                    var: i,
                    extent: n,
                    body: vec![
                        Stmt::Assign(hi, Expr::Var(hi).bin(BinOp::Max, Expr::load(x, Expr::Var(i)))),
                        Stmt::Store { buf: copy, index: Expr::Var(i), value: Expr::load(x, Expr::Var(i)) },
                        Stmt::Assign(lo, Expr::load(x, Expr::Var(i)).bin(BinOp::Min, Expr::Var(lo))),
                    ],
                },
                Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::Var(hi) },
                Stmt::Store { buf: out, index: Expr::idx(1), value: Expr::Var(lo) },
            ];
            h.push(k);
            if n >= 4 {
                assert!(vectorized(&h.p), "{} n={n}", t.name());
            }
            h.run().unwrap();
        }
    }
    let n = 13;
    let mut h = Harness::new();
    let x = h.input_of(ScalarType::F32, &cycle(ScalarType::F32, n));
    let running = h.output(ElemType::Scalar(ScalarType::F32), n);
    let mut k = Kernel::new("running_max");
    let (i, acc) = (k.var(ScalarType::I64), k.var(ScalarType::F32));
    k.body = vec![
        Stmt::Local(acc, Expr::f32(f32::NEG_INFINITY)),
        Stmt::For {
            var: i,
            extent: n,
            body: vec![
                Stmt::Assign(acc, Expr::Var(acc).bin(BinOp::Max, Expr::load(x, Expr::Var(i)))),
                Stmt::Store { buf: running, index: Expr::Var(i), value: Expr::Var(acc) },
            ],
        },
    ];
    h.push(k);
    assert!(!vectorized(&h.p));
    h.run().unwrap();
}

/// A loop that stores a buffer and reduces a fixed element of it reads an element a later
/// iteration stores: it stays scalar.
#[test]
fn a_reduction_over_a_stored_element_stays_scalar() {
    let n = 8;
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::F32, &(0..n).map(|i| u64::from((10.0 - i as f32).to_bits())).collect::<Vec<_>>());
    let x = h.input_of(ScalarType::F32, &(0..n).map(|i| u64::from((i as f32).to_bits())).collect::<Vec<_>>());
    let out = h.output(ElemType::Scalar(ScalarType::F32), 1);
    let mut k = Kernel::new("fixed");
    let (i, m) = (k.var(ScalarType::I64), k.var(ScalarType::F32));
    k.body = vec![
        Stmt::Local(m, Expr::f32(f32::NEG_INFINITY)),
        Stmt::For {
            var: i,
            extent: n,
            body: vec![Stmt::Store { buf: a, index: Expr::Var(i), value: Expr::load(x, Expr::Var(i)) }, Stmt::Assign(m, Expr::Var(m).bin(BinOp::Max, Expr::load(a, Expr::idx(3))))],
        },
        Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::Var(m) },
    ];
    h.push(k);
    assert!(!vectorized(&h.p));
    h.run().unwrap();
}

/// Sums over pixels with the lanes innermost, as the blocked layout writes a channel
/// reduction: `out[b·w + l] += x[b, y, x, l]` under loops over `y` and `x`, with a let between
/// the lane and the index. Whole vectors of at most eight stay in registers across the pixel
/// loops (their loads of `out` move out of the loops: one per vector before them, and the
/// input's one per vector and pixel inside); other widths keep the vector loop. The sums are
/// the interpreter's, bit for bit, NaNs and infinities included.
#[test]
fn sums_under_pixel_loops_keep_their_lanes_in_registers() {
    let (blocks, rows, cols) = (3u64, 2u64, 5u64);
    for (w, held) in [(4, true), (16, true), (32, true), (36, false), (6, false)] {
        let mut h = Harness::new();
        let x = h.input_of(ScalarType::F32, &cycle(ScalarType::F32, blocks * rows * cols * w));
        let out = h.output(ElemType::Scalar(ScalarType::F32), blocks * w);
        let mut k = Kernel::new("pixel_sums");
        let (b, y, xx, l, at) = (k.var(ScalarType::I64), k.var(ScalarType::I64), k.var(ScalarType::I64), k.var(ScalarType::I64), k.var(ScalarType::I64));
        let (l0, acc) = (k.var(ScalarType::I64), k.var(ScalarType::F32));
        let index = Expr::Var(at);
        let pixel = ((Expr::Var(b) * Expr::idx((rows * cols) as i64) + Expr::Var(y) * Expr::idx(cols as i64) + Expr::Var(xx)) * Expr::idx(w as i64)) + Expr::Var(l);
        k.body = vec![Stmt::For {
            var: b,
            extent: blocks,
            body: vec![
                Stmt::For { var: l0, extent: w, body: vec![Stmt::Store { buf: out, index: Expr::Var(b) * Expr::idx(w as i64) + Expr::Var(l0), value: Expr::f32(0.5) }] },
                Stmt::For {
                    var: y,
                    extent: rows,
                    body: vec![Stmt::For {
                        var: xx,
                        extent: cols,
                        body: vec![Stmt::For {
                            var: l,
                            extent: w,
                            body: vec![
                                Stmt::Let(at, Expr::Var(b) * Expr::idx(w as i64) + Expr::Var(l)),
                                Stmt::Let(acc, Expr::load(out, index.clone())),
                                Stmt::Store { buf: out, index: index.clone(), value: Expr::Var(acc).bin(BinOp::Add, Expr::load(x, pixel)) },
                            ],
                        }],
                    }],
                },
            ],
        }];
        h.push(k);
        let text = clif_text(&h.p, &Target::host(), &CodegenOptions::default()).expect("compiles");
        let vector_loads = text.matches("load.f32x4").count() as u64;
        assert!(vectorized(&h.p), "width {w}");
        assert_eq!(vector_loads >= w / 2, held, "width {w}: {vector_loads} vector loads");
        h.run().unwrap();
    }
}
