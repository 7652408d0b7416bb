//! Measures JIT compile time: 150 kernels of 4-deep loop nests (`a·b + c` with broadcast
//! index arithmetic) in one program.
//!
//! `cargo run --release -p kiln-codegen --example compile_time`

use kiln_codegen::compile_jit;
use kiln_loops::*;

fn f32_buffer(p: &mut Program, len: u64, kind: BufferKind) -> BufId {
    p.add_buffer(Buffer { name: "x".into(), elem: ElemType::Scalar(ScalarType::F32), len, kind })
}

fn main() {
    let dims = [2u64, 16, 28, 28];
    let n: u64 = dims.iter().product();
    let mut p = Program::default();
    let a = f32_buffer(&mut p, n, BufferKind::Input(0));
    let b = f32_buffer(&mut p, 16, BufferKind::Input(1));
    let c = f32_buffer(&mut p, n, BufferKind::Input(2));
    let out = f32_buffer(&mut p, n, BufferKind::Output(0));
    for j in 0..150 {
        let mut k = Kernel::new(format!("fma_{j}"));
        let st = kiln_loops::builder::strides(&dims);
        k.body = k.nest(&dims, |_, i| {
            let flat = kiln_loops::builder::linear(i, &st);
            let bi = kiln_loops::builder::broadcast_index(i, &[16, 1, 1]);
            let v = Expr::load(a, flat.clone()).bin(BinOp::Mul, Expr::load(b, bi)).bin(BinOp::Add, Expr::load(c, flat.clone()));
            vec![Stmt::Store { buf: out, index: flat, value: v }]
        });
        p.kernels.push(k);
    }
    let jit = compile_jit(&p).unwrap();
    let per: Vec<f64> = jit.kernel_stats().iter().map(|s| s.compile_time.as_secs_f64() * 1e6).collect();
    let mut sorted = per.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "150 kernels, 4-deep nests: total {:.2} ms, per kernel median {:.1} µs, min {:.1} µs, max {:.1} µs, {} CLIF insts each",
        jit.compile_time().as_secs_f64() * 1e3,
        sorted[75],
        sorted[0],
        sorted[149],
        jit.kernel_stats()[0].clif_insts
    );
}
