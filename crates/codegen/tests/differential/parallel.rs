//! Loops split over the thread pool: the outlined parts compute what the interpreter computes,
//! on 1 to 3 threads, and a failed check reports the status running in order reports.

use kiln_loops::interp::{self, InterpError};
use kiln_loops::*;
use kiln_testkit::Rng;

use crate::harness::Harness;

fn f32_bits(n: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| u64::from(((r.next_u64() % 2001) as f32 / 250.0 - 4.0).to_bits())).collect()
}

/// The number of functions the code generator outlines for `p`, from its CLIF listing.
fn outlined(p: &Program) -> usize {
    kiln_codegen::clif_text(p, &kiln_target::Target::host(), &kiln_codegen::CodegenOptions::default()).expect("translates").lines().filter(|l| l.starts_with("; ") && l.ends_with("in parallel")).count()
}

#[test]
fn elementwise_nests_and_row_reductions_split_over_threads() {
    let (rows, cols) = (96u64, 700u64);
    let mut h = Harness::new();
    let x = h.input_of(ScalarType::F32, &f32_bits((rows * cols) as usize, 11));
    let y = h.output(ElemType::Scalar(ScalarType::F32), rows * cols);
    let sums = h.output(ElemType::Scalar(ScalarType::F32), rows);
    // y = exp(x) / 2 through a batch loop of one iteration; sums[r] = Σ_c x[r, c] in order.
    let mut k = Kernel::new("map");
    k.body = k.nest(&[1, rows, cols], |_, i| {
        let at = (i[0].clone() * Expr::idx(rows as i64) + i[1].clone()) * Expr::idx(cols as i64) + i[2].clone();
        vec![Stmt::Store { buf: y, index: at.clone(), value: Expr::Math(MathFn::Exp, vec![Expr::load(x, at)]).bin(BinOp::Mul, Expr::f32(0.5)) }]
    });
    h.push(k);
    let mut k = Kernel::new("row_sums");
    let r = k.var(ScalarType::I64);
    let c = k.var(ScalarType::I64);
    let acc = k.var(ScalarType::F32);
    let at = Expr::Var(r) * Expr::idx(cols as i64) + Expr::Var(c);
    k.body = vec![Stmt::For {
        var: r,
        extent: rows,
        body: vec![
            Stmt::Local(acc, Expr::f32(0.0)),
            Stmt::For { var: c, extent: cols, body: vec![Stmt::Assign(acc, Expr::Var(acc).bin(BinOp::Add, Expr::load(x, at)))] },
            Stmt::Store { buf: sums, index: Expr::Var(r), value: Expr::Var(acc) },
        ],
    }];
    h.push(k);
    assert_eq!(outlined(&h.p), 2, "both loops are split");
    for threads in [1, 2, 3] {
        h.run_on(threads).unwrap();
    }
}

#[test]
fn row_copies_split_over_threads() {
    // The rows of a [64, 1000] matrix copied in reverse order, one `copy` call per row.
    let (rows, cols) = (64i64, 1000i64);
    let mut h = Harness::new();
    let x = h.input_of(ScalarType::F32, &f32_bits((rows * cols) as usize, 12));
    let y = h.output(ElemType::Scalar(ScalarType::F32), (rows * cols) as u64);
    let mut k = Kernel::new("reverse_rows");
    k.body = k.nest(&[rows as u64], |_, i| {
        let from = (Expr::idx(rows - 1) - i[0].clone()) * Expr::idx(cols);
        vec![Stmt::Call(call::Copy { dst: Addr::new(y, i[0].clone() * Expr::idx(cols)), src: Addr::new(x, from), n: Expr::idx(cols) }.into())]
    });
    h.push(k);
    assert_eq!(outlined(&h.p), 1);
    for threads in [1, 2, 3] {
        h.run_on(threads).unwrap();
    }
}

#[test]
fn a_failed_check_in_a_split_loop_reports_the_first_failure() {
    // y[i] = x[idx[i]] with idx checked: iterations 20_000 (error 1) and 50_000 (error 0) fail,
    // so running in order stops at the first with error 1.
    let n = 60_000u64;
    let mut p = Program::default();
    let buf = |elem, len, kind| Buffer { name: String::new(), elem: ElemType::Scalar(elem), len, kind };
    let x = p.add_buffer(buf(ScalarType::F32, 16, BufferKind::Input(0)));
    let idx = p.add_buffer(buf(ScalarType::I64, n, BufferKind::Input(1)));
    let y = p.add_buffer(buf(ScalarType::F32, n, BufferKind::Output(0)));
    p.errors = vec!["negative index".into(), "index past the end".into()];
    let mut k = Kernel::new("gather");
    k.body = k.nest(&[n], |k, i| {
        let j = k.var(ScalarType::I64);
        vec![
            Stmt::Let(j, Expr::load(idx, i[0].clone())),
            Stmt::Check { cond: Expr::Var(j).cmp(CmpOp::Ge, Expr::idx(0)), error: 0 },
            Stmt::Check { cond: Expr::Var(j).cmp(CmpOp::Lt, Expr::idx(16)), error: 1 },
            Stmt::Store { buf: y, index: i[0].clone(), value: Expr::load(x, Expr::Var(j)) },
        ]
    });
    p.kernels.push(k);
    assert_eq!(outlined(&p), 1);
    let indices: Vec<i64> = (0..n as i64).map(|i| match i {
        20_000 => 99,
        50_000 => -1,
        i => i % 16,
    }).collect();
    let mut memory = vec![vec![0u8; 64], indices.iter().flat_map(|v| v.to_le_bytes()).collect(), vec![0u8; 4 * n as usize]];
    let want = match interp::run(&p, &mut memory) {
        Err(InterpError::Check { code, .. }) => code,
        other => panic!("the interpreter should fail a check: {other:?}"),
    };
    assert_eq!(want, 1);
    let jit = kiln_codegen::compile_jit(&p).expect("compiles");
    for threads in [1, 2, 3] {
        let mut x_mem = vec![0f32; 16];
        let mut idx_mem = indices.clone();
        let mut y_mem = vec![0f32; n as usize];
        let table = [x_mem.as_mut_ptr().cast::<u8>(), idx_mem.as_mut_ptr().cast::<u8>(), y_mem.as_mut_ptr().cast::<u8>()];
        let pool = kiln_runtime::pool::Pool::new(threads).expect("threads");
        // SAFETY: one live buffer of the declared size per buffer; the checks guard the loads.
        let got = pool.enter(|| unsafe { jit.run(&table) });
        assert_eq!(got, Err(want), "{threads} threads");
    }
}
