//! kiln's fused ops lowered, run in the interpreter and compared with the reference evaluator
//! (which computes them as the unfused ops they replace): FusedMatMul here, FusedConv in
//! `nn`'s tests with the same harness. Every activation, with and without the bias and the
//! residual addend, in `f32` (the `sgemm` path) and `f64` (the direct loop nest).

use kiln_tir::text::parse;
use kiln_tir::{DType, Tensor, TensorData};

use kiln_loops::interp::{self, InterpError};
use kiln_loops::ir::*;
use crate::lower;

/// Every activation of the fused ops, as attribute text (Clip's bounds and LeakyRelu's slope
/// included).
pub(crate) const ACTIVATIONS: [&str; 11] = [
    r#"activation = "none""#,
    r#"activation = "relu""#,
    r#"activation = "clip", alpha = -0.5, beta = 0.75"#,
    r#"activation = "leaky_relu", alpha = 0.1"#,
    r#"activation = "sigmoid""#,
    r#"activation = "tanh""#,
    r#"activation = "hard_swish""#,
    r#"activation = "gelu""#,
    r#"activation = "gelu_tanh""#,
    r#"activation = "quant_dequant_u8", alpha = 0.05, beta = 100.0"#,
    r#"activation = "quant_dequant_u16", alpha = 0.001, beta = 30000.0"#,
];

/// The element types the tests run: `f32` takes the `sgemm` path, `f64` the direct one.
pub(crate) const DTYPES: [&str; 2] = ["f32", "f64"];

/// Lowers `src` (a graph without parameters), verifies and runs it: the outputs as `f64`s,
/// or the interpreter's error.
pub(crate) fn run(src: &str) -> Result<Vec<Vec<f64>>, InterpError> {
    let g = parse(src).expect("the test graph parses");
    let program = lower(&g).expect("the test graph lowers");
    kiln_loops::verify::verify(&program).expect("the lowered program verifies");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory)?;
    let mut outputs = Vec::new();
    for i in 0..g.outputs().len() {
        let b = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).expect("output buffer");
        let bytes = &memory[b];
        let values = match program.buffers[b].elem {
            ElemType::Scalar(ScalarType::F32) => bytes.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap()))).collect(),
            ElemType::Scalar(ScalarType::F64) => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            other => panic!("decode {other:?}"),
        };
        outputs.push(values);
    }
    Ok(outputs)
}

/// A tensor type in the text form: `f32[2, 3]`.
pub(crate) fn ty(dt: &str, dims: &[u64]) -> String {
    format!("{dt}{dims:?}")
}

/// Deterministic values in [−3, 3), multiples of 1/8 so the products and their sums are exact
/// in `f32` whatever order `sgemm` adds them in; element 1 is NaN when `nan` is set (NaN must
/// come through every activation).
pub(crate) fn tensor(dt: &str, dims: &[u64], seed: u64, nan: bool) -> Tensor {
    let n = dims.iter().product::<u64>();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) % 48) as f64 / 8.0 - 3.0
        })
        .collect();
    if nan && n > 1 {
        v[1] = f64::NAN;
    }
    let (dtype, bytes): (DType, Vec<u8>) = match dt {
        "f32" => (
            DType::F32,
            v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        ),
        _ => (
            DType::F64,
            v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        ),
    };
    Tensor {
        dtype,
        shape: dims.to_vec(),
        data: TensorData::Raw(bytes.into()),
    }
}

/// A graph of one fused op (`op`, e.g. `fused_matmul`) with attributes `attrs` over the two
/// required inputs of dims `[a, b]` and the optional `bias` and `z` (absent ones are `_`),
/// with output dims `y`, and its inputs' values (`z` holds a NaN).
pub(crate) fn fused_graph(
    op: &str,
    dt: &str,
    [a, b]: [&[u64]; 2],
    bias: Option<&[u64]>,
    z: bool,
    y: &[u64],
    attrs: &str,
) -> (String, Vec<Tensor>) {
    let mut params = vec![ty(dt, a), ty(dt, b)];
    let mut inputs = vec![tensor(dt, a, 1, false), tensor(dt, b, 2, false)];
    let mut args = vec!["%0".to_string(), "%1".to_string()];
    match bias {
        Some(c) => {
            args.push(format!("%{}", params.len()));
            params.push(ty(dt, c));
            inputs.push(tensor(dt, c, 3, false));
        }
        None if z => args.push("_".into()),
        None => {}
    }
    if z {
        args.push(format!("%{}", params.len()));
        params.push(ty(dt, y));
        inputs.push(tensor(dt, y, 4, true));
    }
    let result = params.len();
    let params: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, t)| format!("%{i}: {t}"))
        .collect();
    let src = format!(
        "graph @main({}) -> ({yt}) {{\n  %{result} = tensor.{op}({}) {{{attrs}}} : {yt}\n  return %{result}\n}}",
        params.join(", "),
        args.join(", "),
        yt = ty(dt, y)
    );
    (src, inputs)
}

/// Lowers `src` (one fused op) to one kernel, verifies it, runs it on `inputs` and compares
/// the output with `kiln_eval` at the conformance tolerances.
pub(crate) fn check(src: &str, inputs: &[Tensor]) {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    kiln_loops::verify::verify(&program).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    assert_eq!(program.kernels.len(), 1, "one kernel\n{src}");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(i) => inputs[*i].raw().expect("input bytes").to_vec(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let want = kiln_eval::eval_graph(&g, inputs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let b = program
        .buffers
        .iter()
        .position(|b| b.kind == BufferKind::Output(0))
        .expect("output buffer");
    let t = g.ty(g.outputs()[0]);
    let got = Tensor {
        dtype: t.dtype,
        shape: t.known_dims().expect("static output"),
        data: TensorData::Raw(std::mem::take(&mut memory[b]).into()),
    };
    if let Err(e) = kiln_eval::compare::compare(&got, &want[0]) {
        panic!("{e}\n{src}");
    }
}

/// The runtime routines a lowered graph calls, in order.
pub(crate) fn calls(src: &str) -> Vec<RuntimeFn> {
    fn walk(stmts: &[Stmt], out: &mut Vec<RuntimeFn>) {
        for s in stmts {
            match s {
                Stmt::Call(c) => out.push(c.kind()),
                Stmt::For { body, .. } => walk(body, out),
                Stmt::If {
                    then, otherwise, ..
                } => {
                    walk(then, out);
                    walk(otherwise, out);
                }
                _ => {}
            }
        }
    }
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut out = Vec::new();
    for k in &program.kernels {
        walk(&k.body, &mut out);
    }
    out
}

/// (A dims, B dims as stored, transB, Y dims)
type MatCase = (&'static [u64], &'static [u64], u8, &'static [u64]);

const MATMUL_CASES: [MatCase; 8] = [
    // Batches broadcast on both sides: one sgemm per batch.
    (&[2, 3, 4, 5], &[3, 5, 6], 0, &[2, 3, 4, 6]),
    (&[2, 3, 4, 5], &[3, 6, 5], 1, &[2, 3, 4, 6]),
    (&[3, 4, 5], &[2, 1, 6, 5], 1, &[2, 3, 4, 6]),
    // One shared B: the batches of A stack into one tall product.
    (&[2, 4, 5], &[7, 5], 1, &[2, 4, 7]),
    (&[2, 4, 5], &[5, 7], 0, &[2, 4, 7]),
    // 1-D promotion: the bias runs along the last axis left, rows when B is a vector.
    (&[5], &[5, 6], 0, &[6]),
    (&[3, 5], &[5], 0, &[3]),
    (&[5], &[5], 0, &[]),
];

#[test]
fn fused_matmul_matches_the_unfused_ops() {
    for dt in DTYPES {
        for (a, b, trans_b, y) in MATMUL_CASES {
            for act in ACTIVATIONS {
                for (with_bias, z) in [(false, false), (true, false), (false, true), (true, true)] {
                    let bias = [*y.last().unwrap_or(&1)];
                    let attrs = format!("{act}, transB = {trans_b}");
                    let (src, inputs) = fused_graph(
                        "fused_matmul",
                        dt,
                        [a, b],
                        with_bias.then_some(&bias[..]),
                        z,
                        y,
                        &attrs,
                    );
                    check(&src, &inputs);
                }
            }
        }
    }
}

#[test]
fn unsupported_fused_shapes_and_types_are_errors() {
    let cases = [
        // A bias over the rows is not a bias over the last axis.
        (
            "f32[3, 4], %1: f32[4, 2], %2: f32[3]",
            "fused_matmul(%0, %1, %2)",
            "f32[3, 2]",
            "last axis",
        ),
        // The residual addend must have the output's shape, not just broadcast to it.
        (
            "f32[3, 4], %1: f32[4, 2], %2: f32[2]",
            "fused_matmul(%0, %1, _, %2)",
            "f32[3, 2]",
            "residual addend",
        ),
        (
            "i32[3, 4], %1: i32[4, 2]",
            "fused_matmul(%0, %1)",
            "i32[3, 2]",
            "floats",
        ),
        (
            "f32[1, 1, 3, 3], %1: f32[2, 1, 2, 2], %2: f32[2, 1, 1]",
            "fused_conv(%0, %1, _, %2)",
            "f32[1, 2, 2, 2]",
            "residual addend",
        ),
    ];
    for (params, call, y, why) in cases {
        let src = format!(
            "graph @main(%0: {params}) -> ({y}) {{\n  %9 = tensor.{call} : {y}\n  return %9\n}}"
        );
        let g = parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let err = lower(&g).expect_err(&src);
        assert!(err.to_string().contains(why), "{err}");
    }
}

#[test]
fn f32_products_fuse_their_epilogue_into_one_sgemm_or_call_it_once() {
    use RuntimeFn::{Epilogue, Sgemm, SgemmFused};
    // (case, bias, residual addend, activation index, the calls): one product (a shared B)
    // takes its epilogue with it; batched products, and a bias along rows (B a vector), are
    // followed by one epilogue over the whole output.
    let cases = [
        (MATMUL_CASES[3], false, false, 0, vec![Sgemm]),
        (MATMUL_CASES[3], true, false, 0, vec![SgemmFused]),
        (MATMUL_CASES[4], false, true, 0, vec![SgemmFused]),
        (MATMUL_CASES[5], true, false, 7, vec![SgemmFused]),
        (MATMUL_CASES[0], false, false, 7, vec![Sgemm, Epilogue]),
        (MATMUL_CASES[6], true, true, 2, vec![Sgemm, Epilogue]),
    ];
    for ((a, b, trans_b, y), with_bias, z, act, want) in cases {
        let bias = [*y.last().unwrap_or(&1)];
        let attrs = format!("{}, transB = {trans_b}", ACTIVATIONS[act]);
        let (src, _) = fused_graph("fused_matmul", "f32", [a, b], with_bias.then_some(&bias[..]), z, y, &attrs);
        assert_eq!(calls(&src), want, "{src}");
        let (src, _) = fused_graph("fused_matmul", "f64", [a, b], with_bias.then_some(&bias[..]), z, y, &attrs);
        assert_eq!(calls(&src), vec![], "{src}");
    }
}

/// The runtime `epilogue` against the loop IR's own expressions of the same epilogue (what
/// generated code computed element by element before the runtime routine, and still computes
/// for other float types), both run in the interpreter, on special values (NaN, ±inf, ±0,
/// huge, tiny, the activations' breakpoints) and a sweep, for every activation, with a bias
/// per column and the residual addend: bit for bit (NaN for NaN) for the piecewise
/// activations; for the transcendental ones (the runtime's vectorized `f32` functions against
/// `f64` math rounded) within 8 ulp plus the expressions' own error where `1 + erf` or
/// `1 + tanh` cancel (`6·10⁻⁸·|v|`, `v` the activation's argument).
#[test]
fn the_runtime_epilogue_is_the_loop_ir_expressions() {
    use kiln_tir::op::Activation;

    use crate::Operand;
    use crate::elementwise::Scope;
    use crate::linalg::{BiasIndex, Epilogue};

    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e30, -1e30, 1e-40, -3.0, 3.0, -0.5, 0.75, 6.0, 100.0, -100.0, 0.1, -8.5, 20.0];
    let mut xs: Vec<f32> = special.to_vec();
    xs.extend((-400..=400).map(|i| i as f32 / 37.0));
    let cols = 3u64;
    let n = (xs.len() as u64).div_ceil(cols) * cols;
    xs.resize(n as usize, 0.5);
    let bias: Vec<f32> = vec![0.0, -0.0, 0.25];
    let z: Vec<f32> = (0..n).map(|i| if i % 5 == 0 { special[(i / 5) as usize % special.len()] } else { 0.0 }).collect();
    let acts = [
        (Activation::None, 0.0, 0.0),
        (Activation::Relu, 0.0, 0.0),
        (Activation::Clip, -0.5, 0.75),
        (Activation::Clip, 0.0, 6.0),
        (Activation::Clip, -0.0, 0.0),
        (Activation::Clip, 2.0, -1.0),
        (Activation::LeakyRelu, 0.1, 0.0),
        (Activation::Sigmoid, 0.0, 0.0),
        (Activation::Tanh, 0.0, 0.0),
        (Activation::HardSwish, 0.0, 0.0),
        (Activation::Gelu, 0.0, 0.0),
        (Activation::GeluTanh, 0.0, 0.0),
        (Activation::Silu, 0.0, 0.0),
        (Activation::QuantDequantU8, 0.05, 100.0),
        (Activation::QuantDequantU8, 0.5, 0.0),
        (Activation::QuantDequantU16, 0.001, 30000.0),
    ];
    let f32t = ElemType::Scalar(ScalarType::F32);
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    for (act, alpha, beta) in acts {
        for residual in [false, true] {
            let mut p = Program::default();
            let buffer = |p: &mut Program, name: &str, len: u64, kind: BufferKind| p.add_buffer(Buffer { name: name.into(), elem: f32t, len, kind });
            let x = buffer(&mut p, "x", n, BufferKind::Input(0));
            let b = buffer(&mut p, "b", cols, BufferKind::Input(1));
            let zb = buffer(&mut p, "z", n, BufferKind::Input(2));
            let by_runtime = buffer(&mut p, "runtime", n, BufferKind::Output(0));
            let by_exprs = buffer(&mut p, "exprs", n, BufferKind::Output(1));
            let e = Epilogue { z: residual.then_some(zb), act, alpha, beta };
            let y = Operand { buf: by_runtime, dims: vec![n / cols, cols], elem: f32t };
            let mut k = Kernel::new("runtime");
            k.body = k.nest(&[n], |_, i| vec![Stmt::Store { buf: by_runtime, index: i[0].clone(), value: Expr::load(x, i[0].clone()) }]);
            k.body.extend(e.call(&y, Some((b, BiasIndex::PerColumn)), n / cols, cols));
            p.kernels.push(k);
            let mut k = Kernel::new("exprs");
            k.body = k.nest(&[n / cols, cols], |k, i| {
                let at = i[0].clone() * cols as i64 + i[1].clone();
                let mut s = Scope { k, stmts: Vec::new() };
                let v = Expr::load(x, at.clone()) + Expr::load(b, i[1].clone());
                let value = e.apply(&mut s, v, &at, ScalarType::F32).expect("an f32 activation");
                s.stmts.push(Stmt::Store { buf: by_exprs, index: at, value });
                s.stmts
            });
            p.kernels.push(k);
            kiln_loops::verify::verify(&p).unwrap_or_else(|e| panic!("{e:?}"));
            let mut memory = vec![bytes(&xs), bytes(&bias), bytes(&z), vec![0; 4 * n as usize], vec![0; 4 * n as usize]];
            interp::run(&p, &mut memory).unwrap_or_else(|e| panic!("{act:?}: {e}"));
            let floats = |m: &[u8]| -> Vec<f32> { m.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
            let (got, want) = (floats(&memory[3]), floats(&memory[4]));
            let exact = matches!(act, Activation::None | Activation::Relu | Activation::Clip | Activation::LeakyRelu | Activation::HardSwish | Activation::QuantDequantU8 | Activation::QuantDequantU16);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let v = xs[i] + bias[i % cols as usize] + if residual { z[i] } else { 0.0 };
                let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                let close = !exact && (g - w).abs() <= 8.0 * f32::EPSILON * w.abs() + 6e-8 * v.abs() + 1e-40;
                assert!(same || close, "{act:?} ({alpha}, {beta}), residual {residual}, element {i} ({v}): runtime {g}, expressions {w}");
            }
        }
    }
}

/// QLinearMatMul with constant scales takes the integer product with the output stage fused
/// (`qgemm_requantize`), per tensor and per column of B, batched, with kiln's `i32` bias per
/// column or without: byte for byte the definition (the `i32` sum plus the bias, then
/// `round(acc · (a_scale · b_scale / y_scale) + y_zero)` in `f64`, the scale's product in
/// `f32`, saturated).
#[test]
fn qlinear_matmul_requantizes_in_the_product() {
    let (batch, m, k, n) = (2usize, 5usize, 7usize, 19usize);
    let seq = |len: usize, seed: u64| -> Vec<i64> { (0..len as u64).map(|i| ((i * 37 + seed * 11) % 256) as i64 - 128).collect() };
    let list = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    let (a, b) = (seq(batch * m * k, 1), seq(k * n, 2));
    let bias: Vec<i64> = (0..n as i64).map(|j| j * 97 - 900).collect();
    for (per_column, with_bias) in [(false, false), (true, false), (true, true), (false, true)] {
        let b_scales: Vec<f32> = if per_column { (0..n).map(|j| 0.01 + 0.003 * j as f32).collect() } else { vec![0.02] };
        let (a_scale, y_scale, a_zero, b_zero, y_zero) = (0.05f32, 0.3f32, 3i64, -2i64, -7i64);
        let sb = b_scales.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ");
        let sb_ty = if per_column { format!("f32[{n}]") } else { "f32[]".into() };
        let src = format!(
            "graph @main() -> (i8[{batch}, {m}, {n}] \"y\") {{\n  %0 = const dense<i8[{batch}, {m}, {k}]: [{}]>\n  %1 = const dense<f32[]: [{a_scale:?}]>\n  %2 = const dense<i8[]: [{a_zero}]>\n  %3 = const dense<i8[{k}, {n}]: [{}]>\n  %4 = const dense<{sb_ty}: [{sb}]>\n  %5 = const dense<i8[]: [{b_zero}]>\n  %6 = const dense<f32[]: [{y_scale:?}]>\n  %7 = const dense<i8[]: [{y_zero}]>\n  %9 = const dense<i32[{n}]: [{}]>\n  %8 = tensor.qlinear_matmul(%0, %1, %2, %3, %4, %5, %6, %7{}) : i8[{batch}, {m}, {n}]\n  return %8\n}}\n",
            list(&a), list(&b), list(&bias), if with_bias { ", %9" } else { "" }
        );
        let g = parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let program = lower(&g).expect("the test graph lowers");
        kiln_loops::verify::verify(&program).expect("the lowered program verifies");
        let taken: Vec<RuntimeFn> = program.kernels.iter().flat_map(|k| k.body.iter()).filter_map(|s| if let Stmt::Call(c) = s { Some(c.kind()) } else { None }).collect();
        assert!(taken.contains(&RuntimeFn::QgemmRequantize) && !taken.contains(&RuntimeFn::Qgemm), "per column {per_column}, bias {with_bias}: {taken:?}");
        let mut memory: Vec<Vec<u8>> = program.buffers.iter().map(|b| match &b.kind {
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        }).collect();
        interp::run(&program, &mut memory).expect("the program runs");
        let out = program.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("output buffer");
        let mut want = Vec::new();
        for bi in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let acc: i64 = (0..k).map(|l| (a[(bi * m + i) * k + l] - a_zero) * (b[l * n + j] - b_zero)).sum::<i64>() + if with_bias { bias[j] } else { 0 };
                    let s = a_scale * b_scales[if per_column { j } else { 0 }] / y_scale;
                    let v = (acc as f64 * f64::from(s) + y_zero as f64).round_ties_even();
                    want.push((v as i8) as u8);
                }
            }
        }
        assert_eq!(memory[out], want, "per column {per_column}, bias {with_bias}");
    }
}

/// QLinearMatMul whose output scale is not a constant takes the product, then the output stage
/// element by element: kiln's `i32` bias per column joins the accumulator there too.
#[test]
fn qlinear_matmul_adds_its_bias_without_the_fused_stage() {
    let (m, k, n) = (3usize, 5usize, 4usize);
    let a: Vec<i64> = (0..(m * k) as i64).map(|i| (i * 29 % 200) - 100).collect();
    let b: Vec<i64> = (0..(k * n) as i64).map(|i| (i * 17 % 180) - 90).collect();
    let bias = [700i64, -1500, 30, 2900];
    let list = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    let src = format!(
        "graph @main(%9: f32[] \"y_scale\") -> (i8[{m}, {n}] \"y\") {{\n  %0 = const dense<i8[{m}, {k}]: [{}]>\n  %1 = const dense<f32[]: [0.05]>\n  %2 = const dense<i8[]: [1]>\n  %3 = const dense<i8[{k}, {n}]: [{}]>\n  %4 = const dense<f32[]: [0.02]>\n  %5 = const dense<i8[]: [-1]>\n  %7 = const dense<i8[]: [4]>\n  %10 = const dense<i32[{n}]: [{}]>\n  %8 = tensor.qlinear_matmul(%0, %1, %2, %3, %4, %5, %9, %7, %10) : i8[{m}, {n}]\n  return %8\n}}\n",
        list(&a), list(&b), list(&bias)
    );
    let g = parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = lower(&g).expect("the test graph lowers");
    kiln_loops::verify::verify(&program).expect("the lowered program verifies");
    let y_scale = 0.3f32;
    let mut memory: Vec<Vec<u8>> = program.buffers.iter().map(|buf| match &buf.kind {
        BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
        BufferKind::Input(0) => y_scale.to_le_bytes().to_vec(),
        _ => vec![0u8; buf.bytes() as usize],
    }).collect();
    interp::run(&program, &mut memory).expect("the program runs");
    let out = program.buffers.iter().position(|buf| buf.kind == BufferKind::Output(0)).expect("output buffer");
    let mut want = Vec::new();
    for i in 0..m {
        for j in 0..n {
            let acc: i64 = (0..k).map(|l| (a[i * k + l] - 1) * (b[l * n + j] + 1)).sum::<i64>() + bias[j];
            let s = f64::from(0.05f32 * 0.02f32 / y_scale);
            want.push(((acc as f64 * s + 4.0).round_ties_even() as i8) as u8);
        }
    }
    assert_eq!(memory[out], want);
}
