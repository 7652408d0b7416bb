//! Round trips of programs built in code, error positions and messages, and a small fuzz that
//! checks the parser never panics.

use kiln_testkit::Rng;
use kiln_tir::{DType, Tensor, TensorData};

use super::{parse, print};
use crate::ir::*;

/// A program that uses every statement, every expression form and every buffer kind.
fn everything() -> Program {
    let mut p = Program::default();
    let x = p.add_buffer(Buffer { name: "in\"put\u{1}é".into(), elem: ElemType::Scalar(ScalarType::F32), len: 64, kind: BufferKind::Input(0) });
    let w = p.add_buffer(Buffer { name: "w".into(), elem: ElemType::F16, len: 8, kind: BufferKind::Const(Tensor { dtype: DType::F16, shape: vec![8], data: TensorData::Absent }) });
    let t = p.add_buffer(Buffer { name: "t".into(), elem: ElemType::Scalar(ScalarType::I32), len: 64, kind: BufferKind::Temp });
    let y = p.add_buffer(Buffer { name: "y".into(), elem: ElemType::BF16, len: 64, kind: BufferKind::Output(0) });
    let code = p.add_error("node \"g\" (tensor.gather): index out of range\n".into());

    let mut k = Kernel::new("everything_1");
    k.source = "node_Conv_1 + \"relu\"".into();
    let acc = k.var(ScalarType::F32);
    let i = k.var(ScalarType::I64);
    let j = k.var(ScalarType::I64);
    let l = k.var(ScalarType::F64);
    let inner = vec![
        Stmt::Let(l, Expr::load(x, Expr::from(i) * 8 + Expr::from(j)).cast(ScalarType::F64).math(MathFn::Exp)),
        Stmt::Check { cond: Expr::from(j).cmp(CmpOp::Lt, Expr::idx(8)), error: code },
        Stmt::Assign(
            acc,
            Expr::from(acc).bin(BinOp::Add, Expr::Math(MathFn::Pow, vec![Expr::load(w, j.into()), Expr::f32(0.5)])).max(Expr::Const(Scalar::F32(f32::from_bits(0x7fc0_0001)))),
        ),
        Stmt::If {
            cond: Expr::from(l).un(UnOp::IsNan).bin(BinOp::Or, Expr::Const(Scalar::Bool(false))),
            then: vec![Stmt::Store { buf: t, index: Expr::from(i) * 8 + Expr::from(j), value: Expr::Bitcast(ScalarType::I32, Box::new(Expr::f32(-0.0))) }],
            otherwise: vec![Stmt::Store {
                buf: t,
                index: Expr::from(i) * 8 + Expr::from(j),
                value: Expr::Const(Scalar::Int(ScalarType::I32, -3)).bin(BinOp::Shl, Expr::Const(Scalar::Int(ScalarType::I32, 2))),
            }],
        },
        Stmt::If { cond: Expr::Const(Scalar::Bool(true)), then: vec![], otherwise: vec![] },
    ];
    k.body = vec![
        Stmt::Local(acc, Expr::Const(Scalar::F32(f32::NEG_INFINITY))),
        Stmt::For { var: i, extent: 8, body: vec![Stmt::For { var: j, extent: 8, body: inner }] },
        Stmt::Store { buf: y, index: Expr::idx(0), value: Expr::from(acc).cmp(CmpOp::Ge, Expr::f32(1e-5)).select(Expr::from(acc), Expr::f32(f32::NAN)) },
        call(RuntimeFn::Sgemm, &[(x, 0), (x, 0), (y, 0)], &[1, 1, 1, 1, 1, 1, 0, 0], &[1.0, 0.0]),
        call(RuntimeFn::DwConv2d, &[(x, 0), (x, 8), (y, 0)], &[2, 2, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1], &[]),
        call(RuntimeFn::Epilogue, &[(y, 0), (x, 2), (y, 0)], &[2, 4, 1, 2, 0, 2], &[-0.5, 6.0]),
        call(RuntimeFn::Im2col, &[(x, 4), (y, 0)], &[1, 3, 3, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1], &[]),
        call(RuntimeFn::MaxPool2d, &[(x, 5), (y, 0)], &[1, 3, 3, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1], &[]),
        Stmt::Call(crate::call::Softmax { x: Addr::at(y, 0), rows: Expr::idx(2), cols: Expr::idx(2) }.into()),
        Stmt::Call(crate::call::Copy { dst: Addr::at(y, 1), src: Addr::at(x, 3), n: Expr::idx(2) }.into()),
    ];
    p.kernels.push(k);
    let mut odd = Kernel::new("not an identifier");
    odd.var(ScalarType::U8);
    let v = odd.var(ScalarType::F32);
    odd.body = vec![Stmt::For { var: v, extent: 0, body: vec![] }];
    p.kernels.push(odd);
    p
}

fn round_trip(p: &Program) -> String {
    let text = print(p);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&back), text);
    text
}

#[test]
fn a_program_round_trips_exactly() {
    let p = everything();
    let text = round_trip(&p);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    // Everything survives; NaN constants are not equal to themselves, so compare the Debug
    // forms (the printed text already compared their bits).
    assert_eq!(format!("{back:?}"), format!("{p:?}"), "{text}");
    assert!(text.contains("0x7fc00001_f32"), "{text}");
    assert!(text.contains("kernel \"not an identifier\" vars($0: u8) {"), "{text}");
    assert!(text.contains("loop.for $1: f32 in 0..0 {"), "{text}");
    assert!(text.contains("loop.call dwconv2d(x: addr @0[0i64], w: addr @0[8i64], y: addr @3[0i64], planes: 2i64, channels: 2i64, ih: 4i64, "), "{text}");
    assert!(text.contains("loop.call maxpool2d(x: addr @0[5i64], y: addr @3[0i64], planes: 1i64, ih: 3i64, iw: 3i64, oh: 2i64, "), "{text}");
    assert!(text.contains("loop.call im2col(x: addr @0[4i64], col: addr @3[0i64], channels: 1i64, ih: 3i64, iw: 3i64, oh: 2i64, "), "{text}");
    assert!(text.contains("loop.call epilogue(y: addr @3[0i64], b: addr @0[2i64], z: addr @3[0i64], rows: 2i64, cols: 4i64, bias_mode: 1i64, period: 2i64, residual: 0i64, act: 2i64, alpha: -0.5f32, beta: 6.0f32)"), "{text}");
    assert!(text.contains("buffer @1 \"w\" : f16[8] const bytes 16\n"), "{text}");
    assert!(text.contains("kernel everything_1 loc(\"node_Conv_1 + \\\"relu\\\"\") {"), "{text}");
}

#[test]
fn const_buffers_parse_without_bytes() {
    let mut p = Program::default();
    p.add_buffer(Buffer { name: "c".into(), elem: ElemType::Scalar(ScalarType::I64), len: 6, kind: BufferKind::Const(Tensor::from_i64s(&[2, 3], &[1, 2, 3, 4, 5, 6])) });
    let back = parse(&round_trip(&p)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.buffers[0].kind, BufferKind::Const(Tensor { dtype: DType::I64, shape: vec![6], data: TensorData::Absent }));
}

#[test]
fn narrow_storage_types_round_trip() {
    let mut p = Program::default();
    let mut k = Kernel::new("copy");
    let i = k.var(ScalarType::I64);
    for (n, elem) in ElemType::NARROW.into_iter().enumerate() {
        let dtype = DType::from_name(elem.name()).unwrap_or_else(|| panic!("no dtype named {}", elem.name()));
        let c = p.add_buffer(Buffer { name: format!("c{n}"), elem, len: 5, kind: BufferKind::Const(Tensor { dtype, shape: vec![5], data: TensorData::Absent }) });
        let out = p.add_buffer(Buffer { name: format!("y{n}"), elem, len: 5, kind: BufferKind::Output(n) });
        k.body.push(Stmt::For { var: i, extent: 5, body: vec![Stmt::Store { buf: out, index: i.into(), value: Expr::load(c, i.into()) }] });
    }
    p.kernels.push(k);
    let text = round_trip(&p);
    // Five elements: 5 bytes of float8, 3 of 4-bit types (packed, padded), 2 of 2-bit ones.
    for line in ["\"c2\" : f8e4m3fn[5] const bytes 5", "\"c6\" : f8e8m0[5] const bytes 5", "\"c7\" : f4e2m1[5] const bytes 3", "\"c8\" : i4[5] const bytes 3", "\"c11\" : u2[5] const bytes 2"] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert_eq!(error_of("buffer @0 \"x\" : u4[5] const bytes 5"), "line 1, column 35: a `u4[5]` const holds 3 bytes, not 5");
}

#[test]
fn empty_program_is_empty_text() {
    assert_eq!(print(&Program::default()), "");
    assert_eq!(parse("  // nothing\n"), Ok(Program::default()));
}

/// A call of `f` with the addresses `addrs` (buffer, constant index), then the values `ints`
/// (`i64`) and `floats`, in its signature's order.
fn call(f: RuntimeFn, addrs: &[(BufId, i64)], ints: &[i64], floats: &[f32]) -> Stmt {
    let args = addrs.iter().map(|&(b, i)| Arg::Addr(Addr::at(b, i))).chain(ints.iter().map(|&v| Arg::Value(Expr::idx(v)))).chain(floats.iter().map(|&v| Arg::Value(Expr::f32(v))));
    Stmt::Call(Call::from_operands(f, args.collect()).unwrap())
}

fn error_of(src: &str) -> String {
    match parse(src) {
        Ok(p) => panic!("parsed:\n{}", print(&p)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_name_their_position() {
    let cases = [
        ("buffer @1 \"x\" : f32[4] temp", "line 1, column 8: buffers are numbered in order: expected `@0`, found `@1`"),
        ("buffer @0 \"x\" : f32[4] const bytes 12", "line 1, column 36: a `f32[4]` const holds 16 bytes, not 12"),
        ("buffer @0 \"x\" : f31[4] temp", "line 1, column 17: unknown element type `f31`"),
        ("error 1 \"x\"", "line 1, column 7: errors are numbered in order: expected 0, found 1"),
        ("kernel k {\n  loop.store @0[$1] = 1.0f32\n}", "line 2, column 17: undefined variable $1"),
        ("kernel k {\n  loop.let $1: f32 = 1.0f32\n}", "line 1, column 8: variable $0 is never declared; a kernel's variables are numbered from $0 without gaps"),
        ("kernel k {\n  loop.let $0: f32 = 1.0f32\n  loop.let $0: i64 = 1i64\n}", "line 3, column 12: $0 is declared `i64` here but `f32` at line 2, column 12"),
        ("kernel k {\n  loop.for $0 in 1..4 {\n  }\n}", "line 2, column 18: expected `0` (loops count from zero), found `1`"),
        ("kernel k {\n  loop.store @0[0i64] = foo(1i64)\n}", "line 2, column 25: unknown function `foo`"),
        ("kernel k {\n  loop.store @0[0i64] = add(1i64)\n}", "line 2, column 25: `add` takes 2 arguments, not 1"),
        ("kernel k {\n  loop.store @0[0] = 1i64\n}", "line 2, column 17: constant `0` needs a type suffix, as in `7i64` or `1.0f32`"),
        ("kernel k {\n  loop.frob\n}", "line 2, column 3: unknown statement `loop.frob`"),
        ("kernel k {\n  loop.call dgemm()\n}", "line 2, column 13: unknown runtime routine `dgemm`"),
        ("kernel k {\n  loop.call softmax(x: addr @0[0i64], rows: 1i64)\n}", "line 2, column 49: softmax is missing operand `cols`"),
        ("kernel k {\n  loop.call softmax(x: addr @0[0i64], cols: 1i64, rows: 1i64)\n}", "line 2, column 39: softmax operand 2 is `rows`, not `cols`"),
        ("kernel k {\n  loop.call softmax(x: 1i64, rows: 1i64, cols: 1i64)\n}", "line 2, column 24: softmax operand `x` must be a buffer address"),
        ("kernel k {\n  loop.call softmax(x: addr @0[0i64], rows: addr @0[0i64], cols: 1i64)\n}", "line 2, column 45: softmax operand `rows` must be a value"),
        ("kernel k {\n  loop.call softmax(x: addr @0[0i64], rows: 1i64, cols: 1i64, n: 1i64)\n}", "line 2, column 61: softmax takes 3 operands, not more"),
        ("kernel k {\n  loop.store @0[0i64] = \"s\n}", "line 2, column 25: unterminated string"),
        ("kernel k {", "line 1, column 11: expected a statement or `}`, found end of input"),
        ("bogus", "line 1, column 1: expected `buffer`, `error` or `kernel`, found `bogus`"),
    ];
    for (src, want) in cases {
        assert_eq!(error_of(src), want, "{src}");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep_expr = format!("kernel k {{\n  loop.store @0[0i64] = {}1.0f32{}\n}}", "neg(".repeat(10_000), ")".repeat(10_000));
    assert!(error_of(&deep_expr).contains("nested too deeply"));
    let deep_block = format!("kernel k {{\n{}{}}}", "loop.if true {\n".repeat(10_000), "}\n".repeat(10_000));
    assert!(error_of(&deep_block).contains("nested too deeply"));
}

/// If a mutated text parses, its print must itself round-trip, and the verifier must cope
/// with whatever it describes.
fn check_no_panic(src: &str) {
    if let Ok(p) = parse(src) {
        round_trip(&p);
        let _ = crate::verify::verify(&p);
    }
}

#[test]
fn garbage_never_panics() {
    let text = print(&everything()) + "// trailing comment\n";
    check_no_panic(&text);
    for (i, _) in text.char_indices() {
        check_no_panic(&text[..i]);
    }
    let extra = "$ @ $4294967296 0x _ -inf_ nan_f64 0..0 .. ( ) { } [ ] < > , : = \" \\u{41} // 1e 1.5e+3f64 -0x1_f32 99999999999999999999 kernel vars loop.for else";
    let chars: Vec<char> = text.chars().collect();
    let pool: Vec<char> = extra.chars().chain(chars.iter().copied()).collect();
    let words: Vec<&str> = extra.split(' ').chain(text.split_whitespace()).collect();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for _ in 0..4000 {
        let mut mutated = chars.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(mutated.len());
            match rng.below(3) {
                0 => {
                    mutated.remove(at);
                }
                1 => mutated.insert(at, pool[rng.below(pool.len())]),
                _ => mutated[at] = pool[rng.below(pool.len())],
            }
        }
        check_no_panic(&mutated.iter().collect::<String>());
    }
    // Whole-token swaps reach deeper into the grammar than character edits.
    let tokens: Vec<&str> = text.split_whitespace().collect();
    for _ in 0..2000 {
        let mut mutated = tokens.clone();
        let at = rng.below(mutated.len());
        mutated[at] = words[rng.below(words.len())];
        check_no_panic(&mutated.join(" "));
    }
}
