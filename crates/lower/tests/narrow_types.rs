//! Cast, QuantizeLinear and DequantizeLinear into and out of the narrow types (float8, float4
//! e2m1, the 4- and 2-bit integers), lowered and run in the interpreter, against the reference
//! evaluator byte for byte, on sweeps of values around every rounding boundary.

use kiln_loops::interp;
use kiln_lower::lower;
use kiln_loops::BufferKind;
use kiln_tir::text::parse;
use kiln_tir::{DType, Tensor, TensorData};

const FLOAT8: [&str; 4] = ["f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz"];
const NARROW_FLOATS: [&str; 6] = ["f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f4e2m1"];
const PACKED_INTS: [&str; 4] = ["i4", "u4", "i2", "u2"];

fn tensor(dtype: DType, len: u64, bytes: Vec<u8>) -> Tensor {
    Tensor { dtype, shape: vec![len], data: TensorData::Raw(bytes.into()) }
}

/// `f32` bit patterns around every rounding boundary into 8 bits or fewer: every upper half
/// with lower halves making ties, just-above-ties and sticky bits.
fn f32_sweep() -> Tensor {
    let bits: Vec<u32> = (0..=0xffffu32).flat_map(|hi| [0u32, 1, 0x8000, 0xffff].map(move |lo| (hi << 16) | lo)).collect();
    tensor(DType::F32, bits.len() as u64, bits.iter().flat_map(|b| b.to_le_bytes()).collect())
}

/// `f64` bit patterns with every sign, exponent and top four mantissa bits, each with a low bit
/// that `f32` cannot hold (so rounding through `f32` would round twice), a half-way bit, or
/// nothing.
fn f64_sweep() -> Tensor {
    let bits: Vec<u64> = (0..=0xffffu64).flat_map(|hi| [0u64, 1, 1 << 47, (1 << 47) | 1].map(move |lo| (hi << 48) | lo)).collect();
    tensor(DType::F64, bits.len() as u64, bits.iter().flat_map(|b| b.to_le_bytes()).collect())
}

/// Every code of a one-byte type.
fn every_byte(dtype: DType) -> Tensor {
    tensor(dtype, 256, (0..=255).collect())
}

/// Runs graph `src` on `inputs` in the interpreter and in the evaluator and asserts output 0
/// has the same bytes.
fn agree(src: &str, inputs: &[Tensor]) {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(i) => inputs[*i].raw().expect("input bytes").to_vec(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let out = program.buffers.iter().position(|b| b.kind == BufferKind::Output(0)).expect("an output buffer");
    let want = kiln_eval::eval_graph(&g, inputs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let want = want[0].raw().expect("evaluated bytes");
    let got = &memory[out];
    if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
        let width = (want.len() / got.len().max(1)).max(1);
        panic!("byte {at}: interpreter {:#04x}, evaluator {:#04x} (input element about {})\n{src}", got[at], want[at], at / width);
    }
    assert_eq!(got.len(), want.len(), "{src}");
}

/// A graph casting its input (`from[len]`) to `to` with `attrs` (more than `to`).
fn cast(from: &str, to: &str, len: u64, attrs: &str) -> String {
    format!("graph @main(%0: {from}[{len}]) -> ({to}[{len}]) {{\n  %1 = tensor.cast(%0) {{{attrs}to = {to}}} : {to}[{len}]\n  return %1\n}}")
}

#[test]
fn f32_rounds_into_every_narrow_float_as_the_evaluator_does() {
    let x = f32_sweep();
    let n = x.numel().unwrap_or(0);
    for to in FLOAT8 {
        agree(&cast("f32", to, n, ""), std::slice::from_ref(&x));
        agree(&cast("f32", to, n, "saturate = 0, "), std::slice::from_ref(&x));
    }
    agree(&cast("f32", "f4e2m1", n, ""), std::slice::from_ref(&x));
    for mode in ["up", "down", "nearest"] {
        for saturate in [0, 1] {
            agree(&cast("f32", "f8e8m0", n, &format!("round_mode = \"{mode}\", saturate = {saturate}, ")), std::slice::from_ref(&x));
        }
    }
}

#[test]
fn f64_and_f16_round_once_into_narrow_floats() {
    let x = f64_sweep();
    let n = x.numel().unwrap_or(0);
    for to in NARROW_FLOATS {
        agree(&cast("f64", to, n, ""), std::slice::from_ref(&x));
    }
    agree(&cast("f64", "f8e5m2", n, "saturate = 0, "), std::slice::from_ref(&x));
    let halves = tensor(DType::F16, 65536, (0..=0xffffu16).flat_map(|h| h.to_le_bytes()).collect());
    for to in NARROW_FLOATS {
        agree(&cast("f16", to, 65536, ""), std::slice::from_ref(&halves));
        agree(&cast("f16", to, 65536, "saturate = 0, "), std::slice::from_ref(&halves));
    }
}

#[test]
fn every_narrow_float_code_converts_to_every_float() {
    for from in NARROW_FLOATS {
        let codes = if from == "f4e2m1" { tensor(DType::F4E2M1, 16, (0..8).map(|i| (2 * i) | ((2 * i + 1) << 4)).collect()) } else { every_byte(DType::from_name(from).unwrap_or(DType::U8)) };
        let n = codes.numel().unwrap_or(0);
        for to in NARROW_FLOATS.into_iter().chain(["f16", "bf16", "f32", "f64"]).filter(|&t| t != from) {
            agree(&cast(from, to, n, ""), std::slice::from_ref(&codes));
            agree(&cast(from, to, n, "saturate = 0, "), std::slice::from_ref(&codes));
        }
    }
}

#[test]
fn packed_integers_truncate_and_wrap() {
    let x = f32_sweep();
    let n = x.numel().unwrap_or(0);
    let ints: Vec<i32> = (-300..300).chain([i32::MIN, i32::MAX]).collect();
    let ints = tensor(DType::I32, ints.len() as u64, ints.iter().flat_map(|v| v.to_le_bytes()).collect());
    for to in PACKED_INTS {
        agree(&cast("f32", to, n, ""), std::slice::from_ref(&x));
        agree(&cast("i32", to, 602, ""), std::slice::from_ref(&ints));
        // And back, from every code in every position of a byte.
        let dtype = DType::from_name(to).unwrap_or(DType::U8);
        let len = 256 * 8 / u64::from(dtype.bits());
        let codes = tensor(dtype, len, (0..=255).collect());
        for back in ["i8", "u8", "i32", "f32", "f16", "f8e4m3fn", "i4", "u2"].into_iter().filter(|&b| b != to) {
            agree(&cast(to, back, len, ""), std::slice::from_ref(&codes));
        }
    }
}

#[test]
fn quantize_and_dequantize_per_axis_and_blocked() {
    // 4 × 6 values spread over several scales, per-row scales and zero points, and blocks of 4
    // along the columns.
    let values: Vec<f32> = (0..24).map(|i| (i as f32 - 11.3) * 7.7 * if i % 5 == 0 { 40.0 } else { 1.0 }).collect();
    let x = tensor(DType::F32, 24, values.iter().flat_map(|v| v.to_le_bytes()).collect());
    let x = Tensor { shape: vec![4, 6], ..x };
    for to in ["i8", "u8", "i16", "u16", "i4", "u4", "i2", "u2"] {
        let zero = if to.starts_with('u') { "1, 0, 2, 3" } else { "-1, 0, 1, 1" };
        let per_axis = format!(
            "graph @main(%0: f32[4, 6]) -> ({to}[4, 6]) {{\n  %1 = const dense<f32[4]: [0.5, 3.0, 10.0, 0.03]>\n  %2 = const dense<{to}[4]: [{zero}]>\n  %3 = tensor.quantize_linear(%0, %1, %2) {{axis = 0}} : {to}[4, 6]\n  return %3\n}}"
        );
        agree(&per_axis, std::slice::from_ref(&x));
        let blocked = format!(
            "graph @main(%0: f32[4, 6]) -> ({to}[4, 6]) {{\n  %1 = const dense<f32[4, 2]: [0.5, 3.0, 10.0, 0.03, 1.0, 2.0, 4.0, 8.0]>\n  %2 = const dense<{to}[4, 2]: [{zero}, {zero}]>\n  %3 = tensor.quantize_linear(%0, %1, %2) {{axis = 1, block_size = 4}} : {to}[4, 6]\n  return %3\n}}"
        );
        agree(&blocked, std::slice::from_ref(&x));
        let codes = tensor(DType::from_name(to).unwrap_or(DType::U8), 24, (0..DType::from_name(to).map_or(24, |d| d.storage_bytes(24).unwrap_or(24))).map(|i| (i * 37 + 11) as u8).collect());
        let codes = Tensor { shape: vec![4, 6], ..codes };
        for out in ["f32", "f16", "bf16"] {
            let dequant = format!(
                "graph @main(%0: {to}[4, 6]) -> ({out}[4, 6]) {{\n  %1 = const dense<f32[4, 2]: [0.5, 3.0, 10.0, 0.03, 1.0, 2.0, 4.0, 8.0]>\n  %2 = const dense<{to}[4, 2]: [{zero}, {zero}]>\n  %3 = tensor.dequantize_linear(%0, %1, %2) {{axis = 1, block_size = 4, output_dtype = {out}}} : {out}[4, 6]\n  return %3\n}}"
            );
            agree(&dequant, std::slice::from_ref(&codes));
        }
    }
    for to in NARROW_FLOATS {
        for saturate in [0, 1] {
            let src = format!(
                "graph @main(%0: f32[4, 6]) -> ({to}[4, 6]) {{\n  %1 = const dense<f32[4]: [0.5, 3.0, 10.0, 0.03]>\n  %2 = tensor.quantize_linear(%0, %1) {{axis = 0, output_dtype = {to}, saturate = {saturate}}} : {to}[4, 6]\n  return %2\n}}"
            );
            agree(&src, std::slice::from_ref(&x));
        }
    }
}

/// Quotients stay finite here: the evaluator quantizes an infinite quotient to the bottom of
/// the range, the ONNX reference (and kiln) to the top.
#[test]
fn quantize_in_half_precision_rounds_the_quotient_first() {
    let halves = tensor(DType::F16, 4096, (0..4096u16).flat_map(|i| ((i * 7 + 3) | (i & 1) << 15).to_le_bytes()).collect());
    let src = "graph @main(%0: f16[4096]) -> (i8[4096]) {\n  %1 = const dense<f16[]: [0x34cd]>\n  %2 = const dense<i8[]: [3]>\n  %3 = tensor.quantize_linear(%0, %1, %2) : i8[4096]\n  return %3\n}";
    agree(src, std::slice::from_ref(&halves));
    let finite: Vec<u8> = f32_sweep().raw().unwrap_or_default().chunks_exact(4).filter(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).abs() < 20000.0).flatten().copied().collect();
    let n = finite.len() as u64 / 4;
    let x = tensor(DType::F32, n, finite);
    let src = format!("graph @main(%0: f32[{n}]) -> (u8[{n}]) {{\n  %1 = const dense<f32[]: [0.37]>\n  %2 = tensor.quantize_linear(%0, %1) {{precision = 16}} : u8[{n}]\n  return %2\n}}");
    agree(&src, std::slice::from_ref(&x));
}
