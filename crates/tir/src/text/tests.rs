//! Unit tests of the text form: round trips of built graphs, exact elements, error positions
//! and messages, and a small fuzz that checks the parser never panics.

use bytes::Bytes;
use kiln_testkit::Rng;

use super::{parse, print};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::graph::{Graph, Region, ValueDef, ValueId};
use crate::op::{self, AttrValue, Op, OpKind};
use crate::tensor::{Tensor, TensorData};
use crate::types::TensorType;

fn f32s(dims: &[u64]) -> TensorType {
    TensorType::known(DType::F32, dims)
}

/// Adds a node with one output to the top region and returns the output.
fn push(g: &mut Graph, op: Op, name: &str, inputs: &[ValueId], ty: TensorType) -> ValueId {
    let n = g.add_node(op, name, inputs.iter().map(|&v| Some(v)).collect(), vec![Some((ty, String::new()))], Vec::new());
    g.body.nodes.push(n);
    g.node(n).outputs[0].unwrap_or(ValueId(u32::MAX))
}

fn add_const(g: &mut Graph, name: &str, t: Tensor) -> ValueId {
    let v = g.add_value(t.ty(), name, ValueDef::Const(t));
    g.body.consts.push(v);
    v
}

/// print → parse → print must be the identity on text.
#[track_caller]
fn round_trip(g: &Graph) -> String {
    let text = print(g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print(&back), text);
    text
}

/// A conv → relu → pool → gemm chain with `layers` conv layers, one weight each.
fn conv_chain(layers: usize) -> Graph {
    let mut g = Graph::default();
    let x = g.add_value(TensorType { dtype: DType::F32, shape: vec![Dim::sym("batch"), 64u64.into(), 56u64.into(), 56u64.into()] }, "input", ValueDef::Param);
    g.body.params.push(x);
    let ty = g.ty(x).clone();
    let mut cur = x;
    for i in 0..layers {
        let w = Tensor { dtype: DType::F32, shape: vec![64, 64, 3, 3], data: TensorData::Absent };
        let w = add_const(&mut g, &format!("layer{i}.weight"), w);
        let b = add_const(&mut g, &format!("layer{i}.bias"), Tensor { dtype: DType::F32, shape: vec![64], data: TensorData::Absent });
        let conv = Op::Conv(op::Conv { pads: vec![1, 1, 1, 1], kernel_shape: vec![3, 3], ..Default::default() });
        cur = push(&mut g, conv, &format!("/layer{i}/Conv"), &[cur, w, b], ty.clone());
        cur = push(&mut g, Op::Relu(op::Relu {}), &format!("/layer{i}/Relu"), &[cur], ty.clone());
    }
    g.values[cur.index()].name = "output".into();
    g.body.results.push(cur);
    g
}

#[test]
fn conv_chain_round_trips() {
    let text = round_trip(&conv_chain(2));
    let expected = r#"graph @main(%0: f32[batch, 64, 56, 56] "input") -> (f32[batch, 64, 56, 56] "output") {
  %1 = weight "layer0.weight" : f32[64, 64, 3, 3] bytes 147456
  %2 = weight "layer0.bias" : f32[64] bytes 256
  %3 = weight "layer1.weight" : f32[64, 64, 3, 3] bytes 147456
  %4 = weight "layer1.bias" : f32[64] bytes 256
  %5 = tensor.conv(%0, %1, %2) {kernel_shape = [3, 3], pads = [1, 1, 1, 1]} : f32[batch, 64, 56, 56] loc("/layer0/Conv")
  %6 = tensor.relu(%5) : f32[batch, 64, 56, 56] loc("/layer0/Relu")
  %7 = tensor.conv(%6, %3, %4) {kernel_shape = [3, 3], pads = [1, 1, 1, 1]} : f32[batch, 64, 56, 56] loc("/layer1/Conv")
  %8 = tensor.relu(%7) : f32[batch, 64, 56, 56] loc("/layer1/Relu")
  return %8
}
"#;
    assert_eq!(text, expected);
}

#[test]
fn inline_constants_are_exact() {
    let mut g = Graph::default();
    let floats = [0.1f32, -0.0, 1e-5, f32::MAX, f32::MIN_POSITIVE / 4.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    add_const(&mut g, "", Tensor::from_f32s(&[8], &floats));
    let odd_nans: Vec<u8> = [0x7fc0_0001u32, 0xffc0_0000].iter().flat_map(|b| b.to_le_bytes()).collect();
    add_const(&mut g, "", Tensor { dtype: DType::F32, shape: vec![2], data: TensorData::Raw(Bytes::from(odd_nans)) });
    add_const(&mut g, "", Tensor::from_i64s(&[2], &[i64::MIN, i64::MAX]));
    let f64s: Vec<u8> = [0.1f64, 1e300].iter().flat_map(|f| f.to_le_bytes()).collect();
    add_const(&mut g, "", Tensor { dtype: DType::F64, shape: vec![2], data: TensorData::Raw(Bytes::from(f64s)) });
    add_const(&mut g, "", Tensor { dtype: DType::F16, shape: vec![2], data: TensorData::Raw(Bytes::from_static(&[0x00, 0x3c, 0xff, 0x7f])) });
    add_const(&mut g, "", Tensor { dtype: DType::I4, shape: vec![3], data: TensorData::Raw(Bytes::from_static(&[0x8f, 0x07])) });
    add_const(&mut g, "", Tensor { dtype: DType::Bool, shape: vec![3], data: TensorData::Raw(Bytes::from_static(&[1, 0, 1])) });
    add_const(&mut g, "", Tensor { dtype: DType::C64, shape: vec![1], data: TensorData::Raw(Bytes::from_static(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0])) });
    let strings = vec![Bytes::from_static(b"a\"b"), Bytes::from_static(b"\xff\n")];
    add_const(&mut g, "", Tensor { dtype: DType::String, shape: vec![2], data: TensorData::Strings(strings) });
    add_const(&mut g, "", Tensor::from_f32s(&[], &[1.5]));
    add_const(&mut g, "", Tensor::from_f32s(&[0, 3], &[]));
    let text = round_trip(&g);
    for line in [
        "%0 = const dense<f32[8]: [0.1, -0.0, 1e-5, 3.4028235e38, 2.938736e-39, nan, inf, -inf]>",
        "%1 = const dense<f32[2]: [0x7fc00001, 0xffc00000]>",
        "%2 = const dense<i64[2]: [-9223372036854775808, 9223372036854775807]>",
        "%3 = const dense<f64[2]: [0.1, 1e300]>",
        "%4 = const dense<f16[2]: [0x3c00, 0x7fff]>",
        "%5 = const dense<i4[3]: [-1, -8, 7]>",
        "%6 = const dense<bool[3]: [true, false, true]>",
        "%7 = const dense<c64[1]: [(1.0, -2.0)]>",
        r#"%8 = const dense<string[2]: ["a\"b", "\xff\n"]>"#,
        "%9 = const dense<f32[]: [1.5]>",
        "%10 = const dense<f32[0, 3]: []>",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    // Inline constants come back bit for bit.
    let back = parse(&text).expect("parses");
    for (a, b) in g.body.consts.iter().zip(&back.body.consts) {
        assert_eq!(g.const_value(*a).and_then(Tensor::raw), back.const_value(*b).and_then(Tensor::raw));
    }
}

#[test]
fn every_attribute_kind_round_trips() {
    let mut g = Graph::default();
    let x = g.add_value(f32s(&[2]), "x", ValueDef::Param);
    g.body.params.push(x);
    let ops = [
        Op::Cast(op::Cast { to: DType::F16, saturate: 0, ..Default::default() }),
        Op::LeakyRelu(op::LeakyRelu { alpha: 1e-5 }),
        Op::Gelu(op::Gelu { approximate: op::GeluApprox::Tanh }),
        Op::ConstantOfShape(op::ConstantOfShape { value: Some(Tensor::from_i64s(&[1], &[7])) }),
        Op::LSTM(op::LSTM { activation_alpha: vec![1.0, 2.5], activations: vec![op::RnnActivation::Tanh, op::RnnActivation::Relu], ..Default::default() }),
        Op::Transpose(op::Transpose { perm: vec![1, 0] }),
    ];
    for o in ops {
        push(&mut g, o, "", &[x], f32s(&[2]));
    }
    let text = round_trip(&g);
    for piece in [
        "{saturate = 0, to = f16}",
        "{alpha = 1e-5}",
        r#"{approximate = "tanh"}"#,
        "{value = dense<i64[1]: [7]>}",
        r#"{activation_alpha = [1.0, 2.5], activations = ["Tanh", "Relu"]}"#,
    ] {
        assert!(text.contains(piece), "missing `{piece}` in\n{text}");
    }
    assert_eq!(parse(&text).expect("parses").nodes, g.nodes);
}

#[test]
fn enum_attributes_parse_their_onnx_spellings() {
    let strs = |v: &[&str]| AttrValue::Strs(v.iter().map(|s| s.to_string()).collect());
    // Recurrent activations match ignoring case, as onnxruntime reads them, and print as ONNX
    // spells them.
    let lstm = OpKind::LSTM.with_attrs(vec![("activations".into(), strs(&["sigmoid", "TANH", "Tanh"]))]).expect("valid");
    assert_eq!(lstm.attrs(), vec![("activations", strs(&["Sigmoid", "Tanh", "Tanh"]))]);
    let bad = OpKind::LSTM.with_attrs(vec![("activations".into(), strs(&["Tanh", "Swish"]))]).unwrap_err();
    assert!(bad.to_string().starts_with("attribute `activations`: `Swish` is not one of `Relu`, `Tanh`, "), "{bad}");
    // Other enums match exactly.
    let cast = OpKind::Cast.with_attrs(vec![("to".into(), AttrValue::DType(DType::F16)), ("round_mode".into(), AttrValue::Str("Up".into()))]);
    assert_eq!(cast.unwrap_err().to_string(), "attribute `round_mode`: `Up` is not one of `up`, `down`, `nearest`");
}

#[test]
fn regions_and_optional_values_round_trip() {
    let mut g = Graph::default();
    let c = g.add_value(TensorType::known(DType::Bool, &[]), "c", ValueDef::Param);
    let x = g.add_value(f32s(&[2]), "x", ValueDef::Param);
    g.body.params = vec![c, x];
    let relu = g.add_node(Op::Relu(op::Relu {}), "", vec![Some(x)], vec![Some((f32s(&[2]), String::new()))], Vec::new());
    let then_out = g.node(relu).outputs[0].unwrap_or(x);
    let then_branch = Region { nodes: vec![relu], results: vec![then_out], ..Region::default() };
    let else_branch = Region { results: vec![x], ..Region::default() };
    let node = g.add_node(OpKind::If.default_op(), "cond \"1\"\n", vec![Some(c)], vec![Some((f32s(&[2]), "y".into()))], vec![then_branch, else_branch]);
    g.body.nodes.push(node);
    let y = g.node(node).outputs[0].unwrap_or(x);
    let d = g.add_node(OpKind::Dropout.default_op(), "", vec![Some(y), None, None], vec![Some((f32s(&[2]), String::new())), None], Vec::new());
    g.body.nodes.push(d);
    g.body.results = vec![y, g.node(d).outputs[0].unwrap_or(x)];
    let text = round_trip(&g);
    let expected = r#"graph @main(%0: bool[] "c", %1: f32[2] "x") -> (f32[2] "y", f32[2]) {
  %2 = tensor.if(%0) : f32[2] loc("cond \"1\"\n") {
    then_branch() {
      %3 = tensor.relu(%1) : f32[2]
      yield %3
    }
    else_branch() {
      yield %1
    }
  }
  %4, _ = tensor.dropout(%2, _, _) : f32[2]
  return %2, %4
}
"#;
    assert_eq!(text, expected);
}

/// The message of parsing `src`, which must fail.
#[track_caller]
fn error(src: &str) -> String {
    match parse(src) {
        Ok(g) => panic!("parsed:\n{}", print(&g)),
        Err(e) => e.to_string(),
    }
}

/// A graph with one f32[2] input `%0` whose body is `body`.
fn with_body(body: &str) -> String {
    format!("graph @main(%0: f32[2] \"x\") -> (f32[2]) {{\n{body}\n}}\n")
}

#[test]
fn scoping_errors_have_positions() {
    assert_eq!(error(&with_body("  %1 = tensor.relu(%7) : f32[2]\n  return %1")), "line 2, column 20: undefined value %7");
    assert_eq!(error(&with_body("  %0 = tensor.relu(%0) : f32[2]\n  return %0")), "line 2, column 3: value %0 is already defined");
    let inner = "  %1 = tensor.if(%0) : f32[2] {\n    then_branch() {\n      %2 = tensor.relu(%0) : f32[2]\n      yield %2\n    }\n    else_branch() {\n      yield %2\n    }\n  }\n  return %1";
    assert_eq!(error(&with_body(inner)), "line 8, column 13: value %2 is not visible here");
    assert_eq!(error(&with_body("  return %0, %0")), "line 2, column 10: `return` has 2 values but the graph declares 1 results");
    assert_eq!(
        error("graph @main(%0: f32[3]) -> (f32[2]) {\n  return %0\n}"),
        "line 2, column 10: type mismatch: the value has type `f32[3]` but the graph result is declared `f32[2]`"
    );
}

#[test]
fn op_errors_name_the_op() {
    assert_eq!(error(&with_body("  %1 = tensor.nope(%0) : f32[2]\n  return %1")), "line 2, column 8: unknown op `tensor.nope`");
    assert_eq!(
        error(&with_body("  %1 = tensor.cast(%0) {to = 3.5} : f32[2]\n  return %1")),
        "line 2, column 25: `tensor.cast`: attribute `to`: expected dtype, found float"
    );
    assert_eq!(error(&with_body("  %1 = tensor.cast(%0) : f32[2]\n  return %1")), "line 2, column 8: `tensor.cast`: missing required attribute `to`");
    assert_eq!(error(&with_body("  %1 = tensor.relu(%0) {alpha = 1.0} : f32[2]\n  return %1")), "line 2, column 25: `tensor.relu`: unknown attribute `alpha`");
    let one_branch = "  %1 = tensor.if(%0) : f32[2] {\n    then_branch() {\n      yield %0\n    }\n  }\n  return %1";
    assert_eq!(error(&with_body(one_branch)), "line 6, column 3: `tensor.if` expects 2 regions (`then_branch`, `else_branch`), found 1");
    assert_eq!(error(&with_body("  %1 = tensor.relu(%0) : f32[2] {\n  }\n  return %1")), "line 2, column 33: `tensor.relu` has no regions");
    assert_eq!(
        error(&with_body("  %1 = tensor.if(%0) : f32[2]\n  return %1")),
        "line 3, column 3: expected `{` and the regions of `tensor.if` (`then_branch`, `else_branch`), found `return`"
    );
}

#[test]
fn literal_errors() {
    assert_eq!(error(&with_body("  %1 = const dense<i64[3]: [1, 2]>\n  return %0")), "line 2, column 33: expected 3 elements for `i64[3]`, found 2");
    assert_eq!(error(&with_body("  %1 = const dense<i8[1]: [300]>\n  return %0")), "line 2, column 28: `300` is out of range for `i8`");
    assert_eq!(error(&with_body("  %1 = weight \"w\" : f32[4] bytes 15\n  return %0")), "line 2, column 34: weight `f32[4]` takes 16 bytes, not 15");
    assert_eq!(error(&with_body("  %1 = const dense<f32[n]: [1.0]>\n  return %0")), "line 2, column 20: constant type `f32[n]` has symbolic dims");
    assert_eq!(error("graph @main(%0: f32[2, seq*]) -> () {\n  return\n}"), "line 1, column 24: dim ends early");
    assert_eq!(error("graph @main(%0: f32[\"a\\q\"]) -> () {\n  return\n}"), "line 1, column 23: unknown escape in string");
}

#[test]
fn odd_symbols_print_quoted() {
    let mut g = Graph::default();
    let shape = vec![Dim::sym("batch size"), Dim::parse("seq*4+1").unwrap_or(Dim::Known(0)), Dim::sym("a,b]")];
    let x = g.add_value(TensorType { dtype: DType::F32, shape }, "x", ValueDef::Param);
    g.body.params.push(x);
    g.body.results.push(x);
    let text = round_trip(&g);
    assert!(text.starts_with(r#"graph @main(%0: f32["batch size", seq*4+1, "a,b]"] "x")"#), "{text}");
    assert_eq!(parse(&text).expect("parses").values, g.values);
}

/// If a mutated text parses, its print must itself round-trip.
fn check_no_panic(src: &str) {
    if let Ok(g) = parse(src) {
        round_trip(&g);
    }
}

#[test]
fn garbage_never_panics() {
    let mut g = conv_chain(1);
    g.values[0].name = "in\"put\u{1}é".into();
    let mut base = print(&g);
    base.push_str("// trailing comment\n");
    let regions = with_body(
        "  %1 = const dense<c64[1]: [(1.0, nan)]>\n  %2 = const dense<string[1]: [\"\\xff\"]>\n  %3 = tensor.loop(_, _, %0) : f32[2] {\n    body(%4: i64[], %5: bool[], %6: f32[2]) {\n      yield %5, %6\n    }\n  }\n  return %3",
    );
    let extra = "dense<f16[1]: [0x3c00]> -inf -> [] {} () \" \\u{41} @x %99999999999 0x 1e 1.5e+3 seq*4+1";
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for text in [base, regions] {
        check_no_panic(&text);
        for (i, _) in text.char_indices() {
            check_no_panic(&text[..i]);
        }
        let chars: Vec<char> = text.chars().collect();
        let pool: Vec<char> = extra.chars().chain(chars.iter().copied()).collect();
        for _ in 0..3000 {
            let mut m = chars.clone();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(m.len());
                match rng.below(4) {
                    0 if !m.is_empty() => {
                        m.remove(at);
                    }
                    1 => m.insert(at, pool[rng.below(pool.len())]),
                    2 if !m.is_empty() => m[at] = pool[rng.below(pool.len())],
                    _ => {
                        let from = rng.below(m.len());
                        let len = rng.below(12).min(m.len() - from);
                        let piece: Vec<char> = m[from..from + len].to_vec();
                        m.splice(at..at, piece);
                    }
                }
            }
            check_no_panic(&m.into_iter().collect::<String>());
        }
    }
    for hostile in ["graph @m() -> () {".repeat(3), format!("graph @m(%0: f32[{}1{}]) -> () {{ return }}", "(".repeat(10_000), ")".repeat(10_000))] {
        check_no_panic(&hostile);
    }
    let mut deep = with_body("");
    for _ in 0..10_000 {
        deep.push_str("%1 = tensor.if(%0) : f32[2] {\n then_branch() {\n");
    }
    assert!(parse(&deep).is_err());
}

#[test]
fn printing_a_resnet_sized_graph_is_fast() {
    // About the size of resnet50: 53 convs with 2 weights each is too few; 150 layers gives
    // 300 weights and 300 nodes.
    let g = conv_chain(150);
    let start = std::time::Instant::now();
    let text = print(&g);
    let took = start.elapsed();
    assert!(text.len() > 10_000);
    // Generous, since tests run unoptimized on shared cores; the release figure is far lower.
    assert!(took.as_millis() < 200, "printing took {took:?}");
}
