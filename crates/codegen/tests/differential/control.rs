//! Loops, lets, mutable locals, conditionals, checks, and several kernels in sequence.

use kiln_loops::builder::{linear, strides};
use kiln_loops::*;
use kiln_testkit::Rng;

use crate::harness::{map_kernel, Harness};

fn f32_data(n: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| u64::from(((r.next_u64() % 20001) as f32 / 1000.0 - 10.0).to_bits())).collect()
}

#[test]
fn four_deep_nest_transposes() {
    // out[d, b, a, c] = in[a, b, c, d] over 3×4×5×6.
    let dims = [3u64, 4, 5, 6];
    let n: u64 = dims.iter().product();
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::F32, &f32_data(n as usize, 1));
    let out = h.output(ElemType::Scalar(ScalarType::F32), n);
    let mut k = Kernel::new("transpose");
    let in_strides = strides(&dims);
    let out_strides = strides(&[dims[3], dims[1], dims[0], dims[2]]);
    k.body = k.nest(&dims, |_, i| {
        let src = linear(i, &in_strides);
        let dst = linear(&[i[3].clone(), i[1].clone(), i[0].clone(), i[2].clone()], &out_strides);
        vec![Stmt::Store { buf: out, index: dst, value: Expr::load(a, src) }]
    });
    h.push(k);
    h.run().unwrap();
}

#[test]
fn reductions_with_mutable_locals() {
    // Row sums and row maxima of a 7×33 matrix, and a running prefix sum in i32.
    let (rows, cols) = (7u64, 33u64);
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::F32, &f32_data((rows * cols) as usize, 2));
    let sums = h.output(ElemType::Scalar(ScalarType::F32), rows);
    let maxes = h.output(ElemType::Scalar(ScalarType::F32), rows);
    let prefix = h.output(ElemType::Scalar(ScalarType::I32), rows * cols);
    let mut k = Kernel::new("reduce");
    let acc = k.var(ScalarType::F32);
    let best = k.var(ScalarType::F32);
    let run = k.var(ScalarType::I32);
    let x = k.var(ScalarType::F32);
    let r = k.var(ScalarType::I64);
    let c = k.var(ScalarType::I64);
    k.body = vec![
        Stmt::Local(run, Expr::int(ScalarType::I32, 0)),
        Stmt::For {
            var: r,
            extent: rows,
            body: vec![
                Stmt::Local(acc, Expr::f32(0.0)),
                Stmt::Local(best, Expr::f32(f32::NEG_INFINITY)),
                Stmt::For {
                    var: c,
                    extent: cols,
                    body: vec![
                        Stmt::Let(x, Expr::load(a, Expr::Var(r) * cols as i64 + Expr::Var(c))),
                        Stmt::Assign(acc, Expr::Var(acc).bin(BinOp::Add, Expr::Var(x))),
                        Stmt::Assign(best, Expr::Var(best).max(Expr::Var(x))),
                        Stmt::Assign(run, Expr::Var(run).bin(BinOp::Add, Expr::Var(x).cast(ScalarType::I32))),
                        Stmt::Store { buf: prefix, index: Expr::Var(r) * cols as i64 + Expr::Var(c), value: Expr::Var(run) },
                    ],
                },
                Stmt::Store { buf: sums, index: Expr::Var(r), value: Expr::Var(acc) },
                Stmt::Store { buf: maxes, index: Expr::Var(r), value: Expr::Var(best) },
            ],
        },
    ];
    h.push(k);
    h.run().unwrap();
}

#[test]
fn conditionals_and_degenerate_loops() {
    let n = 40u64;
    let mut h = Harness::new();
    let a = h.input_of(ScalarType::I32, &(0..n).map(|i| (i * 7919) % 23).collect::<Vec<_>>());
    let out = h.output(ElemType::Scalar(ScalarType::I32), n);
    let never = h.output(ElemType::Scalar(ScalarType::I32), 1);
    let once = h.output(ElemType::Scalar(ScalarType::I64), 1);
    let t = ScalarType::I32;
    let mut k = Kernel::new("branches");
    let z = k.var(ScalarType::I64);
    let o = k.var(ScalarType::I64);
    let mut body = k.nest(&[n], |_, i| {
        let x = Expr::load(a, i[0].clone());
        vec![Stmt::If {
            cond: x.clone().cmp(CmpOp::Lt, Expr::int(t, 8)),
            then: vec![Stmt::Store { buf: out, index: i[0].clone(), value: x.clone().bin(BinOp::Mul, Expr::int(t, -3)) }],
            otherwise: vec![Stmt::If {
                cond: x.clone().cmp(CmpOp::Ge, Expr::int(t, 16)),
                then: vec![Stmt::Store { buf: out, index: i[0].clone(), value: x.clone() }],
                otherwise: vec![],
            }],
        }]
    });
    body.push(Stmt::For { var: z, extent: 0, body: vec![Stmt::Store { buf: never, index: Expr::idx(0), value: Expr::int(t, 1) }] });
    body.push(Stmt::For { var: o, extent: 1, body: vec![Stmt::Store { buf: once, index: Expr::Var(o), value: Expr::Var(o) + 41 }] });
    k.body = body;
    h.push(k);
    h.run().unwrap();
}

#[test]
fn assigning_the_loop_variable_does_not_change_the_trip_count() {
    let mut h = Harness::new();
    let out = h.output(ElemType::Scalar(ScalarType::I64), 10);
    let mut k = Kernel::new("reassign");
    let i = k.var(ScalarType::I64);
    k.body = vec![Stmt::For {
        var: i,
        extent: 5,
        body: vec![
            Stmt::Store { buf: out, index: Expr::Var(i), value: Expr::Var(i) },
            Stmt::Assign(i, Expr::Var(i) + 5),
            Stmt::Store { buf: out, index: Expr::Var(i), value: Expr::Var(i) * 2 },
        ],
    }];
    h.push(k);
    h.run().unwrap();
}

#[test]
fn a_failing_check_stops_the_run_with_its_code() {
    // Kernel 0 writes a temp, kernel 1 copies it out but checks each element is below 50,
    // failing part way; kernel 2 never runs.
    let n = 64u64;
    let mut h = Harness::new();
    let first = h.p.add_error("first".into());
    let code = h.p.add_error("value out of range".into());
    let a = h.input_of(ScalarType::I64, &(0..n).collect::<Vec<_>>());
    let tmp = h.temp(ElemType::Scalar(ScalarType::I64), n);
    let out = h.output(ElemType::Scalar(ScalarType::I64), n);
    let after = h.output(ElemType::Scalar(ScalarType::I64), 1);
    h.push(map_kernel("fill", n, |_, i| {
        vec![
            Stmt::Check { cond: i.clone().cmp(CmpOp::Lt, Expr::idx(n as i64)), error: first },
            Stmt::Store { buf: tmp, index: i.clone(), value: Expr::load(a, i) * 2 },
        ]
    }));
    h.push(map_kernel("copy_checked", n, |_, i| {
        let x = Expr::load(tmp, i.clone());
        vec![Stmt::Check { cond: x.clone().cmp(CmpOp::Lt, Expr::idx(50)), error: code }, Stmt::Store { buf: out, index: i, value: x }]
    }));
    h.push(map_kernel("never", 1, |_, i| vec![Stmt::Store { buf: after, index: i, value: Expr::idx(7) }]));
    assert_eq!(h.run(), Err(code));
}

#[test]
fn passing_checks_and_let_chains() {
    let mut h = Harness::new();
    let code = h.p.add_error("never".into());
    let a = h.input_of(ScalarType::U16, &(0..100).map(|i| i * 655).collect::<Vec<_>>());
    let out = h.output(ElemType::Scalar(ScalarType::U64), 100);
    h.push(map_kernel("lets", 100, |k, i| {
        let x = k.var(ScalarType::U16);
        let y = k.var(ScalarType::U64);
        vec![
            Stmt::Let(x, Expr::load(a, i.clone())),
            Stmt::Check { cond: Expr::Var(x).cmp(CmpOp::Le, Expr::int(ScalarType::U16, 65535)), error: code },
            Stmt::Let(y, Expr::Var(x).cast(ScalarType::U64).bin(BinOp::Mul, Expr::int(ScalarType::U64, 0x1_0001))),
            Stmt::Store { buf: out, index: i, value: Expr::Var(y).bin(BinOp::Shr, Expr::int(ScalarType::U64, 3)) },
        ]
    }));
    assert_eq!(h.run(), Ok(()));
}
