//! The pass on lowered graphs: which chains it rewrites, with which reorders, that the result
//! verifies, and that the interpreter computes the same values before and after (and after
//! `prepack` packs the blocked weights).

use kiln_tir::text::parse;

use super::*;
use kiln_loops::interp;
use kiln_lower::lower;
use crate::prepack::{Layouts, prepack};
use kiln_runtime::gemm::Isa;

/// `dense<f32[dims]: [...]>` with small distinct values.
fn dense(dims: &[u64], seed: u64) -> String {
    let n: u64 = dims.iter().product();
    let v: Vec<String> = (0..n).map(|i| format!("{}", ((i * 7 + seed * 13) % 23) as f32 / 16.0 - 0.5)).collect();
    format!("dense<f32{dims:?}: [{}]>", v.join(", "))
}

/// The output of `p` run by the interpreter on input 0 = `x`, as floats.
fn run(p: &Program, x: &[f32]) -> Vec<f32> {
    let mut memory: Vec<Vec<u8>> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(0) => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(p, &mut memory).expect("runs");
    let out = p.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("output");
    memory[out].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Every call of `p`, in order.
fn calls(p: &Program) -> Vec<RuntimeFn> {
    let mut out = Vec::new();
    for k in &p.kernels {
        for s in &k.body {
            if let Stmt::Call(c) = s {
                out.push(c.kind());
            }
        }
    }
    out
}

/// A residual network in small: a strided 7×7 stem with ReLU, a max pool, a bottleneck (1×1 to
/// 24 channels, 3×3, 1×1 back with the block's input added, ReLU), a strided 1×1 projection,
/// and a mean over the pixels that reads the last convolution's output.
fn resnet_like() -> String {
    format!(
        "graph @main(%0: f32[1, 3, 20, 20]) -> (f32[1, 32, 1, 1]) {{
  %1 = const {}
  %2 = const {}
  %3 = const {}
  %4 = const {}
  %5 = const {}
  %6 = const {}
  %7 = const dense<i64[2]: [2, 3]>
  %10 = tensor.fused_conv(%0, %1, %2) {{activation = \"relu\", kernel_shape = [7, 7], pads = [3, 3, 3, 3], strides = [2, 2]}} : f32[1, 32, 10, 10]
  %11 = tensor.max_pool(%10) {{kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]}} : f32[1, 32, 5, 5]
  %12 = tensor.fused_conv(%11, %3) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[1, 24, 5, 5]
  %13 = tensor.fused_conv(%12, %4) {{activation = \"relu\", kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 24, 5, 5]
  %14 = tensor.fused_conv(%13, %5, %2, %11) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[1, 32, 5, 5]
  %15 = tensor.conv(%14, %6) {{kernel_shape = [1, 1], strides = [2, 2]}} : f32[1, 32, 3, 3]
  %16 = tensor.reduce_mean(%15, %7) : f32[1, 32, 1, 1]
  return %16
}}",
        dense(&[32, 3, 7, 7], 1),
        dense(&[32], 2),
        dense(&[24, 32, 1, 1], 3),
        dense(&[24, 24, 3, 3], 4),
        dense(&[32, 24, 1, 1], 5),
        dense(&[32, 32, 1, 1], 6)
    )
}

#[test]
fn a_convolution_chain_takes_the_layout_and_its_loop_kernels_read_it() {
    let src = resnet_like();
    let plain = lower(&parse(&src).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    let mut blocked = plain.clone();
    assert_eq!(super::blocked(&mut blocked), 7, "five convolutions, the pool and the mean's loops");
    kiln_loops::verify::verify(&blocked).unwrap_or_else(|e| panic!("{e:?}"));
    let got = calls(&blocked);
    let count = |f: RuntimeFn| got.iter().filter(|&&g| g == f).count();
    assert_eq!((count(RuntimeFn::Conv2dNchwc), count(RuntimeFn::MaxPool2dNchwc), count(RuntimeFn::Conv2d), count(RuntimeFn::MaxPool2d)), (5, 1, 0, 0));
    assert_eq!((count(RuntimeFn::ToNchwc), count(RuntimeFn::FromNchwc)), (0, 0), "the image read as planes, the mean reads the blocked output");
    // The 24-channel intermediates hold two blocks of 16 channels.
    let narrow: Vec<usize> = (0..plain.buffers.len()).filter(|&i| plain.buffers[i].kind == BufferKind::Temp && plain.buffers[i].len == 24 * 25).collect();
    assert_eq!(narrow.len(), 2);
    assert!(narrow.iter().all(|&i| blocked.buffers[i].len == 32 * 25));
    let x: Vec<f32> = (0..3 * 400).map(|i| ((i * 5) % 17) as f32 / 8.0 - 1.0).collect();
    let want = run(&plain, &x);
    let close = |got: &[f32], what: &str| {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}: output {i}: {g} against {w}");
        }
    };
    close(&run(&blocked, &x), "blocked");
    // `prepack` packs the blocked weights in panels of 64; the values stay.
    let mut packed = blocked.clone();
    prepack(&mut packed, Layouts::for_isa(Isa::detected()));
    kiln_loops::verify::verify(&packed).unwrap_or_else(|e| panic!("{e:?}"));
    let widths: Vec<Option<i64>> = packed.kernels.iter().flat_map(|k| &k.body).filter_map(|s| match s {
        Stmt::Call(Call::Conv2dNchwc(c)) => Some(match c.width {
            Expr::Const(Scalar::Int(_, w)) => Some(w),
            _ => None,
        }),
        _ => None,
    }).collect();
    assert_eq!(widths, [Some(64); 5]);
    close(&run(&packed, &x), "blocked and packed");
}

#[test]
fn a_chain_on_a_wide_input_reorders_it() {
    // Four 1×1 and 3×3 convolutions (one depthwise) on a 20-channel input: blocked in, blocked out.
    let src = format!(
        "graph @main(%0: f32[1, 20, 6, 6]) -> (f32[1, 20, 6, 6]) {{\n  %1 = const {}\n  %2 = const {}\n  %3 = const {}\n  %8 = const {}\n  %4 = tensor.fused_conv(%0, %1) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[1, 20, 6, 6]\n  %5 = tensor.fused_conv(%4, %2) {{activation = \"relu\", group = 20, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 20, 6, 6]\n  %6 = tensor.conv(%5, %3) {{kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[1, 20, 6, 6]\n  %7 = tensor.fused_conv(%6, %1, %8, %0) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[1, 20, 6, 6]\n  return %7\n}}",
        dense(&[20, 20, 1, 1], 9),
        dense(&[20, 1, 3, 3], 10),
        dense(&[20, 20, 3, 3], 11),
        dense(&[20], 12)
    );
    let plain = lower(&parse(&src).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    let mut blocked = plain.clone();
    assert_eq!(super::blocked(&mut blocked), 4);
    kiln_loops::verify::verify(&blocked).unwrap_or_else(|e| panic!("{e:?}"));
    let got = calls(&blocked);
    assert_eq!(got.iter().filter(|&&f| f == RuntimeFn::ToNchwc).count(), 1, "the input, read by the first and the last convolution, reordered once");
    assert_eq!(got.iter().filter(|&&f| f == RuntimeFn::FromNchwc).count(), 1);
    let x: Vec<f32> = (0..20 * 36).map(|i| ((i * 3) % 19) as f32 / 8.0 - 1.0).collect();
    same_values_blocked_and_packed(&plain, &blocked, &x, "");
}

/// `blocked`, and `blocked` once `prepack` packed its weights, verify and compute what `plain`
/// does on input `x`.
fn same_values_blocked_and_packed(plain: &Program, blocked: &Program, x: &[f32], what: &str) {
    let want = run(plain, x);
    let mut packed = blocked.clone();
    prepack(&mut packed, Layouts::for_isa(Isa::detected()));
    kiln_loops::verify::verify(&packed).unwrap_or_else(|e| panic!("{e:?}"));
    for p in [blocked, &packed] {
        for (i, (g, w)) in run(p, x).iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{what} output {i}: {g} against {w}");
        }
    }
}

#[test]
fn a_lone_convolution_or_one_reorder_per_convolution_is_left_alone() {
    // One convolution between two other ops; two convolutions whose tensors all leave the
    // chain (each read by an Add).
    let lone = format!(
        "graph @main(%0: f32[1, 16, 6, 6]) -> (f32[1, 16, 6, 6]) {{\n  %1 = const {}\n  %2 = tensor.relu(%0) : f32[1, 16, 6, 6]\n  %3 = tensor.conv(%2, %1) {{kernel_shape = [1, 1]}} : f32[1, 16, 6, 6]\n  %4 = tensor.relu(%3) : f32[1, 16, 6, 6]\n  return %4\n}}",
        dense(&[16, 16, 1, 1], 7)
    );
    let split = format!(
        "graph @main(%0: f32[1, 16, 6, 6]) -> (f32[1, 16, 6, 6]) {{\n  %1 = const {}\n  %2 = tensor.conv(%0, %1) {{kernel_shape = [1, 1]}} : f32[1, 16, 6, 6]\n  %3 = tensor.add(%2, %0) : f32[1, 16, 6, 6]\n  %4 = tensor.conv(%3, %1) {{kernel_shape = [1, 1]}} : f32[1, 16, 6, 6]\n  %5 = tensor.add(%4, %3) : f32[1, 16, 6, 6]\n  return %5\n}}",
        dense(&[16, 16, 1, 1], 8)
    );
    for src in [lone, split] {
        let mut p = lower(&parse(&src).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
        let before = p.clone();
        assert_eq!(super::blocked(&mut p), 0, "{src}");
        assert_eq!(p, before);
    }
}

/// A squeeze-excitation block on `images` images of `c` channels: the mean over the pixels,
/// two 1×1 convolutions on it, a hard sigmoid, the product scaling the channels, a projection
/// back to 24 channels, and a Sigmoid on the result (a loop kernel writing the output).
fn squeeze_excitation(images: u64, c: u64) -> String {
    format!(
        "graph @main(%0: f32[{images}, 24, 6, 6]) -> (f32[{images}, 24, 6, 6]) {{
  %1 = const {}
  %2 = const {}
  %3 = const {}
  %4 = const {}
  %5 = const {}
  %6 = const dense<i64[2]: [-1, -2]>
  %10 = tensor.fused_conv(%0, %1) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[{images}, {c}, 6, 6]
  %11 = tensor.fused_conv(%10, %2) {{activation = \"relu\", group = {c}, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : f32[{images}, {c}, 6, 6]
  %12 = tensor.reduce_mean(%11, %6) : f32[{images}, {c}, 1, 1]
  %13 = tensor.fused_conv(%12, %3) {{activation = \"relu\", kernel_shape = [1, 1]}} : f32[{images}, 16, 1, 1]
  %14 = tensor.conv(%13, %4) {{kernel_shape = [1, 1]}} : f32[{images}, {c}, 1, 1]
  %15 = tensor.hard_sigmoid(%14) {{alpha = 0.16666667}} : f32[{images}, {c}, 1, 1]
  %16 = tensor.mul(%11, %15) : f32[{images}, {c}, 6, 6]
  %17 = tensor.conv(%16, %5) {{kernel_shape = [1, 1]}} : f32[{images}, 24, 6, 6]
  %18 = tensor.sigmoid(%17) : f32[{images}, 24, 6, 6]
  return %18
}}",
        dense(&[c, 24, 1, 1], 21),
        dense(&[c, 1, 3, 3], 22),
        dense(&[16, c, 1, 1], 23),
        dense(&[c, 16, 1, 1], 24),
        dense(&[24, c, 1, 1], 25)
    )
}

#[test]
fn a_squeeze_excitation_block_stays_blocked_through_its_loop_kernels() {
    // 40 channels are two blocks and a half. With two images of 48, the lowering merges the
    // images' and channels' loops of the product into one, which runs over whole blocks. (Two
    // images of 40 would split the chain there: a merged loop over a partial block has no
    // blocked form here.)
    for (images, c) in [(1, 40), (2, 48)] {
        let plain = lower(&parse(&squeeze_excitation(images, c)).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
        let mut blocked = plain.clone();
        let calls_in_chain = super::blocked(&mut blocked);
        kiln_loops::verify::verify(&blocked).unwrap_or_else(|e| panic!("{e:?}"));
        let got = calls(&blocked);
        let count = |f: RuntimeFn| got.iter().filter(|&&g| g == f).count();
        assert_eq!((count(RuntimeFn::Conv2dNchwc), count(RuntimeFn::Conv2d)), (5, 0), "{images}×{c}");
        // The input is reordered; the mean, the gate, the product and the sigmoid are loops on
        // blocked tensors, the sigmoid's (on the blocked tensor whole) reordered to the output.
        assert_eq!((count(RuntimeFn::ToNchwc), count(RuntimeFn::FromNchwc)), (1, 1), "{images}×{c}");
        assert_eq!(calls_in_chain, 5 + 4, "{images}×{c}");
        // The mean accumulates in its output, the lanes innermost: no scalar accumulator left.
        fn locals(stmts: &[Stmt]) -> usize {
            stmts.iter().map(|s| match s {
                Stmt::Local(..) => 1,
                Stmt::For { body, .. } => locals(body),
                _ => 0,
            }).sum()
        }
        assert_eq!(plain.kernels.iter().map(|k| locals(&k.body)).sum::<usize>(), 1, "{images}×{c}");
        assert_eq!(blocked.kernels.iter().map(|k| locals(&k.body)).sum::<usize>(), 0, "{images}×{c}");
        let x: Vec<f32> = (0..images as usize * 24 * 36).map(|i| ((i * 5) % 23) as f32 / 8.0 - 1.4).collect();
        same_values_blocked_and_packed(&plain, &blocked, &x, &format!("{images}×{c}"));
    }
}
