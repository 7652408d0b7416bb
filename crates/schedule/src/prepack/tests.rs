//! The pass on lowered graphs: which products it rewrites, that they share packed matrices,
//! and that the interpreter computes the same bits before and after.

use kiln_tir::text::parse;

use super::*;
use kiln_loops::interp;
use kiln_lower::lower;

/// `dense<f32[dims]: [...]>` with small distinct values.
fn dense(dims: &[u64], seed: u64) -> String {
    let n: u64 = dims.iter().product();
    let v: Vec<String> = (0..n).map(|i| format!("{}", ((i * 7 + seed * 13) % 23) as f32 / 8.0 - 1.0)).collect();
    format!("dense<f32{dims:?}: [{}]>", v.join(", "))
}

/// The program of `src`, and how many calls the pass rewrote with layout `(nr, kc)`.
fn lowered(src: &str, layout: Layouts) -> (Program, Program, usize) {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let plain = lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut packed = plain.clone();
    let n = prepack(&mut packed, layout);
    kiln_loops::verify::verify(&packed).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    (plain, packed, n)
}

/// The output bytes of `p` run by the interpreter on input 0 = `x`.
fn run(p: &Program, x: &[u8]) -> Vec<u8> {
    let mut memory: Vec<Vec<u8>> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(0) => x.to_vec(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(p, &mut memory).expect("runs");
    let out = p.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("output");
    std::mem::take(&mut memory[out])
}

fn calls(p: &Program) -> Vec<RuntimeFn> {
    fn walk(stmts: &[Stmt], out: &mut Vec<RuntimeFn>) {
        for s in stmts {
            match s {
                Stmt::Call(c) => out.push(c.kind()),
                Stmt::For { body, .. } => walk(body, out),
                Stmt::If { then, otherwise, .. } => {
                    walk(then, out);
                    walk(otherwise, out);
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for k in &p.kernels {
        walk(&k.body, &mut out);
    }
    out
}

fn input(len: usize) -> Vec<u8> {
    (0..len).flat_map(|i| (((i * 5) % 17) as f32 / 4.0 - 2.0).to_le_bytes()).collect()
}

#[test]
fn weight_products_read_packed_matrices_with_the_same_results() {
    // Two products share W; Gemm reads V transposed; every layout, the detected one included.
    let src = format!(
        "graph @main(%0: f32[5, 40]) -> (f32[5, 30]) {{\n  %1 = const {}\n  %2 = const {}\n  %3 = const {}\n  %4 = tensor.matmul(%0, %1) : f32[5, 70]\n  %5 = tensor.relu(%4) : f32[5, 70]\n  %6 = tensor.matmul(%5, %3) : f32[5, 40]\n  %7 = tensor.add(%6, %0) : f32[5, 40]\n  %8 = tensor.matmul(%7, %1) : f32[5, 70]\n  %9 = tensor.gemm(%8, %2) {{transB = 1}} : f32[5, 30]\n  return %9\n}}",
        dense(&[40, 70], 1),
        dense(&[30, 70], 2),
        dense(&[70, 40], 3)
    );
    for layout in [Layouts::for_isa(Isa::detected()), Layouts { gemm: PackedLayout { nr: 16, kc: 8 }, conv: Isa::Portable }, Layouts { gemm: PackedLayout { nr: 3, kc: 100 }, conv: Isa::detected() }] {
        let (plain, packed, n) = lowered(&src, layout);
        assert_eq!(n, 4, "every product has a constant B");
        assert_eq!(calls(&packed).iter().filter(|&&f| f == RuntimeFn::SgemmPacked).count(), 4);
        assert_eq!(packed.buffers.len(), plain.buffers.len() + 3, "one packed matrix per constant");
        let x = input(5 * 40);
        assert_eq!(run(&plain, &x), run(&packed, &x), "{layout:?}");
    }
}

#[test]
fn vectors_inputs_and_moving_offsets_are_left_alone() {
    // m = 1 against 8 columns (the panels would be mostly padding), B a graph input, B at an
    // offset that moves with the batch.
    let src = format!(
        "graph @main(%0: f32[1, 40], %1: f32[40, 8], %2: f32[2, 3, 8]) -> (f32[2, 3, 5]) {{\n  %3 = const {}\n  %4 = const {}\n  %5 = tensor.matmul(%0, %3) : f32[1, 8]\n  %6 = tensor.matmul(%0, %1) : f32[1, 8]\n  %7 = tensor.add(%5, %6) : f32[1, 8]\n  %8 = tensor.add(%2, %7) : f32[2, 3, 8]\n  %9 = tensor.matmul(%8, %4) : f32[2, 3, 5]\n  return %9\n}}",
        dense(&[40, 8], 4),
        dense(&[2, 8, 5], 5)
    );
    let (_, packed, n) = lowered(&src, Layouts::for_isa(Isa::detected()));
    assert_eq!(n, 0);
    assert!(!calls(&packed).contains(&RuntimeFn::SgemmPacked));
}

#[test]
fn a_row_vector_times_a_wide_matrix_is_packed_with_the_same_results() {
    // 1 × 40 times 40 × 376, plain and with bias and ReLU: 376 columns are 8 panels of 48 with
    // 8 columns of padding. The values are multiples of 1/64 whose sums are exact in any order,
    // so the panels' order of summation gives the same bits.
    let src = format!(
        "graph @main(%0: f32[1, 40]) -> (f32[1, 376]) {{\n  %1 = const {}\n  %2 = const {}\n  %3 = tensor.matmul(%0, %1) : f32[1, 376]\n  %4 = tensor.fused_matmul(%0, %1, %2, %3) {{activation = \"relu\"}} : f32[1, 376]\n  return %4\n}}",
        dense(&[40, 376], 3),
        dense(&[376], 4)
    );
    let narrow = Layouts { gemm: PackedLayout { nr: 376 * 2, kc: 8 }, conv: Isa::Portable };
    for layout in [Layouts::for_isa(Isa::detected()), Layouts { gemm: PackedLayout { nr: 16, kc: 8 }, conv: Isa::Portable }, Layouts { gemm: PackedLayout { nr: 3, kc: 100 }, conv: Isa::detected() }, narrow] {
        let (plain, packed, n) = lowered(&src, layout);
        let x = input(40);
        if layout == narrow {
            assert_eq!(n, 0, "a panel twice as wide as the matrix is not worth reading");
            continue;
        }
        assert_eq!(n, 2, "{layout:?}");
        assert_eq!(packed.buffers.len(), plain.buffers.len() + 1, "one packed matrix");
        assert_eq!(run(&plain, &x), run(&packed, &x), "{layout:?}");
    }
}

#[test]
fn fused_products_keep_their_epilogue_and_read_the_packed_matrix() {
    // A fused product with bias, addend and GELU, and one transposed with Clip, sharing W with
    // a plain product; then the same bits under every layout.
    let src = format!(
        "graph @main(%0: f32[6, 40]) -> (f32[6, 30]) {{\n  %1 = const {}\n  %2 = const {}\n  %3 = const {}\n  %4 = const {}\n  %5 = tensor.matmul(%0, %1) : f32[6, 70]\n  %6 = tensor.fused_matmul(%0, %1, %2, %5) {{activation = \"gelu\"}} : f32[6, 70]\n  %7 = tensor.fused_matmul(%6, %3, %4) {{activation = \"clip\", alpha = -0.5, beta = 0.75, transB = 1}} : f32[6, 30]\n  return %7\n}}",
        dense(&[40, 70], 6),
        dense(&[70], 7),
        dense(&[30, 70], 8),
        dense(&[30], 9)
    );
    for layout in [Layouts::for_isa(Isa::detected()), Layouts { gemm: PackedLayout { nr: 16, kc: 8 }, conv: Isa::Portable }, Layouts { gemm: PackedLayout { nr: 3, kc: 100 }, conv: Isa::detected() }] {
        let (plain, packed, n) = lowered(&src, layout);
        assert_eq!(calls(&plain), [RuntimeFn::Sgemm, RuntimeFn::SgemmFused, RuntimeFn::SgemmFused]);
        assert_eq!(n, 3);
        assert_eq!(calls(&packed), [RuntimeFn::SgemmPacked, RuntimeFn::SgemmFused, RuntimeFn::SgemmFused]);
        assert_eq!(packed.buffers.len(), plain.buffers.len() + 2, "one packed matrix per constant");
        let x = input(6 * 40);
        assert_eq!(run(&plain, &x), run(&packed, &x), "{layout:?}");
        // Packed a second time, nothing changes: the fused calls carry their layout.
        let mut again = packed.clone();
        assert_eq!(prepack(&mut again, layout), 0);
    }
}

#[test]
fn convolution_weights_are_packed_for_the_channels_kernel_with_the_same_results() {
    // Two 3×3 convolutions the channels kernel computes (one grouped, fused with an addend and
    // ReLU), and a 1×1 one that reads its weights in place; W1 serves two calls.
    let src = format!(
        "graph @main(%0: f32[1, 8, 10, 10]) -> (f32[1, 128, 10, 10]) {{\n  %1 = const {}\n  %2 = const {}\n  %3 = const {}\n  %4 = const {}\n  %5 = const {}\n  %6 = tensor.conv(%0, %1, %2) {{kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 64, 10, 10]\n  %7 = tensor.conv(%0, %1) {{kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 64, 10, 10]\n  %8 = tensor.add(%6, %7) : f32[1, 64, 10, 10]\n  %9 = tensor.conv(%8, %5) {{kernel_shape = [1, 1]}} : f32[1, 128, 10, 10]\n  %10 = tensor.fused_conv(%8, %3, %4, %9) {{activation = \"relu\", group = 2, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 128, 10, 10]\n  return %10\n}}",
        dense(&[64, 8, 3, 3], 10),
        dense(&[64], 11),
        dense(&[128, 32, 3, 3], 12),
        dense(&[128], 13),
        dense(&[128, 64, 1, 1], 14)
    );
    let channels_kernel = matches!(Isa::detected(), Isa::Avx2 | Isa::Avx512);
    for (layout, packs) in [(Layouts::for_isa(Isa::detected()), channels_kernel), (Layouts { gemm: PackedLayout::detected(), conv: Isa::Portable }, false)] {
        let (plain, packed, _) = lowered(&src, layout);
        let count = |p: &Program, f: RuntimeFn| calls(p).iter().filter(|&&g| g == f).count();
        assert_eq!(count(&plain, RuntimeFn::Conv2d), 4);
        let want = if packs { 3 } else { 0 };
        assert_eq!(count(&packed, RuntimeFn::Conv2dPacked), want, "{layout:?}");
        assert_eq!(count(&packed, RuntimeFn::Conv2d), 4 - want, "{layout:?}");
        assert_eq!(packed.buffers.len(), plain.buffers.len() + if packs { 2 } else { 0 }, "one packed copy per weight tensor");
        let x = input(8 * 10 * 10);
        assert_eq!(run(&plain, &x), run(&packed, &x), "{layout:?}");
        let mut again = packed.clone();
        assert_eq!(prepack(&mut again, layout), 0, "packed calls are not packed again");
    }
}
