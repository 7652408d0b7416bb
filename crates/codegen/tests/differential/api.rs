//! The API around the generated code: errors instead of panics on malformed programs, the CLIF
//! dump, compile statistics, and concurrent runs of one compiled program.

use kiln_codegen::{clif_text, compile_jit, CodegenError};
use kiln_loops::*;

use crate::harness::map_kernel;

fn f32_buffer(p: &mut Program, len: u64, kind: BufferKind) -> BufId {
    p.add_buffer(Buffer { name: "x".into(), elem: ElemType::Scalar(ScalarType::F32), len, kind })
}

/// A program with one input and one output of four f32s and the kernel `body` builds.
fn program(body: impl FnOnce(&mut Kernel, BufId, BufId) -> Vec<Stmt>) -> Program {
    let mut p = Program::default();
    let a = f32_buffer(&mut p, 4, BufferKind::Input(0));
    let out = f32_buffer(&mut p, 4, BufferKind::Output(0));
    let mut k = Kernel::new("bad");
    k.body = body(&mut k, a, out);
    p.kernels.push(k);
    p
}

fn assert_invalid(p: &Program, needle: &str) {
    match compile_jit(p) {
        Err(e @ (CodegenError::Invalid { .. } | CodegenError::Unsupported { .. })) => {
            assert!(e.to_string().contains(needle), "error `{e}` does not mention `{needle}`")
        }
        Err(e) => panic!("unexpected error kind: {e}"),
        Ok(_) => panic!("a malformed program compiled"),
    }
}

#[test]
fn malformed_programs_are_errors_not_panics() {
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: BufId(9), index: Expr::idx(0), value: Expr::load(out, Expr::idx(0)) }]), "@9");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::Var(Var(3)) }]), "$3");
    assert_invalid(&program(|_, a, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::load(a, Expr::idx(0)).bin(BinOp::Add, Expr::float(ScalarType::F64, 1.0)) }]), "f64");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::int(ScalarType::I32, 1) }]), "i32");
    assert_invalid(&program(|_, a, out| vec![Stmt::Store { buf: out, index: Expr::f32(0.0), value: Expr::load(a, Expr::idx(0)) }]), "index");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::int(ScalarType::I32, 1).un(UnOp::Floor).cast(ScalarType::F32) }]), "Floor");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::f32(1.0).bin(BinOp::Shl, Expr::f32(1.0)) }]), "Shl");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::Bitcast(ScalarType::F32, Box::new(Expr::idx(1))) }]), "width");
    assert_invalid(&program(|_, _, out| vec![Stmt::Store { buf: out, index: Expr::idx(0), value: Expr::Math(MathFn::Pow, vec![Expr::f32(1.0)]) }]), "Pow");
    assert_invalid(&program(|_, _, _| vec![Stmt::Check { cond: Expr::idx(1), error: 0 }]), "bool");
    assert_invalid(&program(|k, _, _| {
        let v = k.var(ScalarType::I32);
        vec![Stmt::For { var: v, extent: 3, body: vec![] }]
    }), "loop variable");
    // The IR's types give every call its operands; their types and buffers are checked.
    let softmax = |x: BufId, rows: Expr, cols: Expr| vec![Stmt::Call(call::Softmax { x: Addr::at(x, 0), rows, cols }.into())];
    assert_invalid(&program(|_, _, out| softmax(out, Expr::f32(1.0), Expr::idx(4))), "softmax operand `rows` of type f32");
    assert_invalid(&program(|_, _, out| softmax(out, Expr::idx(1), Expr::Const(Scalar::Bool(true)))), "softmax operand `cols` of type bool");
    assert_invalid(&program(|_, _, _| softmax(BufId(9), Expr::idx(1), Expr::idx(4))), "@9");
    assert_invalid(&program(|_, a, out| vec![Stmt::Call(call::Copy { dst: Addr::at(out, 0), src: Addr::at(a, 0), n: Expr::f32(4.0) }.into())]), "copy count");
    assert_invalid(&program(|k, _, _| {
        let v = k.var(ScalarType::U8);
        vec![Stmt::Let(v, Expr::f32(1.0))]
    }), "u8");
}

#[test]
fn clif_text_shows_every_function() {
    let mut p = program(|k, a, out| {
        k.nest(&[4], |_, i| vec![Stmt::Store { buf: out, index: i[0].clone(), value: Expr::load(a, i[0].clone()).math(MathFn::Exp) }])
    });
    p.kernels.push(map_kernel("second", 2, |_, _| vec![]));
    let text = clif_text(&p, &kiln_target::Target::host(), &kiln_codegen::CodegenOptions::default()).unwrap();
    assert!(text.contains("; bad\nfunction %kiln_k0_bad(i64) -> i32"), "{text}");
    assert!(text.contains("; second\nfunction %kiln_k1_second"), "{text}");
}

/// `a → t → out` through two copies of one kernel (`x * 3 + 1`), then a third whose input and
/// output are one buffer.
fn repeated_kernels() -> (Program, [BufId; 3]) {
    let mut p = Program::default();
    let n = 64;
    let a = f32_buffer(&mut p, n, BufferKind::Input(0));
    let t = f32_buffer(&mut p, n, BufferKind::Temp);
    let out = f32_buffer(&mut p, n, BufferKind::Output(0));
    let affine = |name: &str, src: BufId, dst: BufId| map_kernel(name, n, |_, i| vec![Stmt::Store { buf: dst, index: i.clone(), value: Expr::load(src, i).bin(BinOp::Mul, Expr::f32(3.0)).bin(BinOp::Add, Expr::f32(1.0)) }]);
    p.kernels.push(affine("first", a, t));
    p.kernels.push(affine("second", t, out));
    p.kernels.push(affine("in_place", out, out));
    (p, [a, t, out])
}

#[test]
fn kernels_with_the_same_code_share_a_function() {
    let (p, _) = repeated_kernels();
    let jit = compile_jit(&p).unwrap();
    let stats = jit.kernel_stats();
    assert_eq!(stats.iter().map(|s| s.shares).collect::<Vec<_>>(), vec![None, Some(0), None]);
    assert_eq!(stats[1].symbol, stats[0].symbol);
    let text = clif_text(&p, &kiln_target::Target::host(), &kiln_codegen::CodegenOptions::default()).unwrap();
    assert!(text.contains("; second: the code of first\n"), "{text}");
    assert_eq!(text.matches("\nfunction ").count() + usize::from(text.starts_with("function ")), 2, "{text}");

    // Each copy reads and writes its own buffers.
    let mut input: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 3.0).collect();
    let (mut temp, mut output) = (vec![0f32; 64], vec![0f32; 64]);
    let table = [input.as_mut_ptr().cast::<u8>(), temp.as_mut_ptr().cast::<u8>(), output.as_mut_ptr().cast::<u8>()];
    // SAFETY: the three buffers are live, 64 elements each, and distinct.
    unsafe { jit.run(&table) }.unwrap();
    for (i, (&x, (&t, &o))) in input.iter().zip(temp.iter().zip(&output)).enumerate() {
        let twice = (x * 3.0 + 1.0) * 3.0 + 1.0;
        assert_eq!((t, o), (x * 3.0 + 1.0, twice * 3.0 + 1.0), "element {i}");
    }
}

#[test]
fn compile_statistics_are_recorded() {
    let p = program(|_, a, out| vec![Stmt::Store { buf: out, index: Expr::idx(1), value: Expr::load(a, Expr::idx(2)) }]);
    let jit = compile_jit(&p).unwrap();
    assert_eq!(jit.kernel_count(), 1);
    assert_eq!(jit.buffer_count(), 2);
    let stats = &jit.kernel_stats()[0];
    assert_eq!((stats.name.as_str(), stats.symbol.as_str()), ("bad", "kiln_k0_bad"));
    assert!(stats.clif_insts > 0 && stats.compile_time <= jit.compile_time());
}

#[test]
fn one_program_runs_on_many_threads_at_once() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<kiln_codegen::JitProgram>();

    let mut p = Program::default();
    let n = 10_000u64;
    let a = f32_buffer(&mut p, n, BufferKind::Input(0));
    let out = f32_buffer(&mut p, n, BufferKind::Output(0));
    p.kernels.push(map_kernel("scale", n, |_, i| {
        vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i).bin(BinOp::Mul, Expr::f32(3.0)) }]
    }));
    let jit = compile_jit(&p).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let jit = &jit;
            s.spawn(move || {
                for round in 0..20 {
                    let mut input: Vec<f32> = (0..n).map(|i| (i + t * 1000 + round) as f32).collect();
                    let mut output = vec![0f32; n as usize];
                    let table = [input.as_mut_ptr().cast::<u8>(), output.as_mut_ptr().cast::<u8>()];
                    // SAFETY: both buffers are live and n elements long; this thread owns them.
                    unsafe { jit.run(&table) }.unwrap();
                    assert!(output.iter().zip(&input).all(|(o, i)| *o == i * 3.0));
                }
            });
        }
    });
}

#[test]
fn an_empty_program_runs() {
    let jit = compile_jit(&Program::default()).unwrap();
    // SAFETY: no buffers, no kernels.
    assert_eq!(unsafe { jit.run(&[]) }, Ok(()));
}


#[test]
fn buffers_need_alignment_only_for_typed_routines() {
    let mut p = Program::default();
    let weights = f32_buffer(&mut p, 64, BufferKind::Temp);
    let table = f32_buffer(&mut p, 64, BufferKind::Temp);
    let loaded = f32_buffer(&mut p, 64, BufferKind::Temp);
    let out = f32_buffer(&mut p, 64, BufferKind::Output(0));
    let i = Expr::idx;
    let mut k = Kernel::new("mixed");
    let gemm = call::Sgemm { a: Addr::at(out, 0), b: Addr::at(weights, 0), c: Addr::at(out, 0), m: i(1), n: i(8), k: i(8), lda: i(8), ldb: i(8), ldc: i(8), trans_a: i(0), trans_b: i(0), alpha: Expr::f32(1.0), beta: Expr::f32(0.0) };
    let copy = call::Copy { dst: Addr::at(out, 8), src: Addr::at(table, 4), n: i(8) };
    k.body = vec![Stmt::Call(copy.into()), Stmt::Store { buf: out, index: i(0), value: Expr::load(loaded, i(3)) }, Stmt::Call(gemm.into())];
    p.kernels.push(k);
    // The product reads `f32` slices; the copy moves bytes; a load reads at any address.
    assert_eq!(kiln_codegen::call_alignment(&p), vec![4, 1, 1, 4]);
}
