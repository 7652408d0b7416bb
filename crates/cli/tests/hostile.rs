//! Crafted hostile models and inputs: each is a clean error (exit 1, one line starting with
//! `error:` that names the problem), never a signal, an abort or a hang.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiln_onnx::proto::NodeProto;
use kiln_testkit::onnx::*;

/// Longer than any of these should take; a case still running then has hung.
const TIMEOUT: Duration = Duration::from_secs(60);

fn scratch() -> PathBuf {
    // Under target/, so that nothing is left in the system's temporary folder.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `kiln run FILE --random-inputs` (plus `extra`) and checks the clean error.
fn expect_error(name: &str, model: &Path, extra: &[&str], want: &str) {
    let out_dir = scratch().join(format!("{name}-out"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("run")
        .arg(model)
        .args(["--random-inputs", "-o"])
        .arg(&out_dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            child.kill().ok();
            panic!("{name}: still running after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{name}: {status} (a signal has no code); stderr:\n{err}");
    assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{name}: not one `error:` line:\n{err}");
    assert!(err.len() < 1000, "{name}: a {}-byte message", err.len());
    assert!(err.contains(want), "{name}: expected {want:?} in\n{err}");
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(format!("{name}.onnx"));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// One node `op(x, c) -> y` over input `x: f32[x_dims]` and an int64 constant `c`.
fn with_const(op: &str, x_dims: &[i64], c: &[i64]) -> Vec<u8> {
    let g = graph(
        vec![node(op, &["x", "c"], &["y"])],
        vec![value("x", FLOAT, Some(x_dims))],
        vec![value("y", FLOAT, None)],
        vec![ints("c", &[c.len() as i64], c)],
    );
    model(g, vec![opset("", 17)], vec![])
}

fn unary(op: &str, opsets: Vec<kiln_onnx::proto::OperatorSetIdProto>) -> Vec<u8> {
    let g = graph(vec![node(op, &["x"], &["y"])], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![]);
    model(g, opsets, vec![])
}

#[test]
fn sizes_that_overflow_or_exceed_memory_are_errors_before_anything_runs() {
    let too_large = "over the limit of";
    expect_error("tile", &write("tile", &with_const("Tile", &[1, 2], &[1 << 62, 1])), &[], too_large);
    expect_error("expand", &write("expand", &with_const("Expand", &[1], &[1 << 20, 1 << 20, 1 << 20])), &[], too_large);
    expect_error("cos", &write("cos", &{
        let g = graph(vec![node("ConstantOfShape", &["c"], &["y"])], vec![], vec![value("y", FLOAT, None)], vec![ints("c", &[1], &[1_000_000_000_000])]);
        model(g, vec![opset("", 17)], vec![])
    }), &[], "node \"ConstantOfShape#1\"");
    expect_error("pad", &write("pad", &with_const("Pad", &[1, 2], &[0, 0, 0, 1_000_000_000_000])), &[], too_large);
    let conv = {
        let n = with_ints(node("Conv", &["x", "w"], &["y"]), "pads", &[1 << 29; 4]);
        let g = graph(vec![n], vec![value("x", FLOAT, Some(&[1, 1, 2, 2]))], vec![value("y", FLOAT, None)], vec![floats("w", &[1, 1, 1, 1], &[1.0])]);
        model(g, vec![opset("", 17)], vec![])
    };
    expect_error("conv", &write("conv", &conv), &[], too_large);
    let resize = {
        let g = graph(
            vec![node("Resize", &["x", "", "s"], &["y"])],
            vec![value("x", FLOAT, Some(&[1, 1, 2, 2]))],
            vec![value("y", FLOAT, None)],
            vec![floats("s", &[4], &[1.0, 1.0, 1e9, 1e9])],
        );
        model(g, vec![opset("", 17)], vec![])
    };
    expect_error("resize", &write("resize", &resize), &[], too_large);
    let size = {
        let g = graph(vec![node("Size", &["x"], &["y"])], vec![value("x", FLOAT, Some(&[1 << 32, 1 << 32]))], vec![value("y", INT64, None)], vec![]);
        model(g, vec![opset("", 17)], vec![])
    };
    expect_error("size", &write("size", &size), &[], "input \"x\"");
    // A random input of 2^62 elements is refused before it is made.
    let huge_input = write("huge-input", &{
        let g = graph(vec![node("Relu", &["x"], &["y"])], vec![value("x", FLOAT, Some(&[1 << 62]))], vec![value("y", FLOAT, None)], vec![]);
        model(g, vec![opset("", 17)], vec![])
    });
    expect_error("huge-input", &huge_input, &[], "input \"x\" of shape [4611686018427387904]");
    // The limits are options: a small model over a small limit.
    expect_error("limit", &write("limit", &with_const("Tile", &[1, 2], &[1000, 1])), &["--max-tensor-bytes", "4K"], "over the limit of 4.0 KiB");
}

#[test]
fn function_recursion_bombs_and_deep_nesting_are_errors() {
    let fns = vec![opset("", 17), opset("loc", 1)];
    let call = |f: &str, i: &str, o: &str| NodeProto { domain: Some("loc".into()), ..node(f, &[i], &[o]) };
    let main = |functions| {
        let g = graph(vec![call("f0", "x", "y")], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![]);
        model(g, fns.clone(), functions)
    };
    let direct = main(vec![function("loc", "f0", vec![call("f0", "a", "b")], fns.clone())]);
    expect_error("recursion", &write("recursion", &direct), &[], "function \"f0\" (domain \"loc\"): calls itself");
    let mutual = main(vec![function("loc", "f0", vec![call("f1", "a", "b")], fns.clone()), function("loc", "f1", vec![call("f0", "a", "b")], fns.clone())]);
    expect_error("mutual", &write("mutual", &mutual), &[], "calls itself");
    // 40 functions each calling the next twice: 2^40 nodes once inlined, refused up front.
    let mut bomb: Vec<_> = (0..40).map(|i| function("loc", &format!("f{i}"), vec![call(&format!("f{}", i + 1), "a", "t"), call(&format!("f{}", i + 1), "t", "b")], fns.clone())).collect();
    bomb.push(function("loc", "f40", vec![node("Relu", &["a"], &["b"])], fns.clone()));
    expect_error("bomb", &write("bomb", &main(bomb)), &[], "1099511627776 nodes once its functions are inlined");
    // A chain of 100 functions, each calling the next once.
    let mut chain: Vec<_> = (0..100).map(|i| function("loc", &format!("f{i}"), vec![call(&format!("f{}", i + 1), "a", "b")], fns.clone())).collect();
    chain.push(function("loc", "f100", vec![node("Relu", &["a"], &["b"])], fns.clone()));
    expect_error("chain", &write("chain", &main(chain)), &[], "nest deeper than 64 levels");
    // If inside If, 100 deep: past the protobuf decoder's nesting limit.
    let leaf = graph(vec![node("Identity", &["x"], &["y0"])], vec![], vec![value("y0", FLOAT, None)], vec![]);
    let mut body = leaf.clone();
    for _ in 0..100 {
        let n = with_graph(with_graph(node("If", &["c"], &["y0"]), "then_branch", body), "else_branch", leaf.clone());
        body = graph(vec![n], vec![], vec![value("y0", FLOAT, None)], vec![]);
    }
    let mut deep = body;
    deep.input = vec![value("x", FLOAT, Some(&[1])), value("c", BOOL, Some(&[]))];
    expect_error("deep", &write("deep", &model(deep, vec![opset("", 17)], vec![])), &[], "messages nest deeper than 100 levels (in ModelProto.graph at byte 2 > GraphProto.node at byte 5 > … (");
}

#[test]
fn opsets_and_attribute_types_are_validated() {
    expect_error("no-opset", &write("no-opset", &unary("Relu", vec![opset("foo", 1)])), &[], "imports no opset of the default domain");
    for v in [0, -5, 99] {
        expect_error("opset", &write(&format!("opset{v}"), &unary("Relu", vec![opset("", v)])), &[], &format!("opset {v} of the default domain"));
    }
    expect_error("twice", &write("twice", &unary("Relu", vec![opset("", 13), opset("ai.onnx", 17)])), &[], "twice, as opset 13 and 17");
    let g = graph(vec![with_float(node("LeakyRelu", &["x"], &["y"]), "alpha", 0.1, 99)], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![]);
    expect_error("attr-type", &write("attr-type", &model(g, vec![opset("", 17)], vec![])), &[], "unknown attribute type 99");
}

#[test]
fn long_user_data_is_echoed_bounded() {
    // A million-element shape and a megabyte node name: the message stays one short line.
    expect_error("long-shape", &write("long-shape", &with_const("Reshape", &[1, 2], &(0..1_000_000).collect::<Vec<_>>())), &[], "Reshape");
    let mut n = node("Reshape", &["x", "c"], &["y"]);
    n.name = Some("n".repeat(1 << 20));
    let g = graph(vec![n], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![ints("c", &[1], &[3])]);
    expect_error("long-name", &write("long-name", &model(g, vec![opset("", 17)], vec![])), &[], "more characters");
}

#[test]
fn a_loop_past_its_trip_limit_is_an_error() {
    let body = graph(vec![node("Identity", &["c"], &["co"])], vec![value("i", INT64, Some(&[])), value("c", BOOL, Some(&[]))], vec![value("co", BOOL, None)], vec![]);
    let g = graph(
        vec![with_graph(node("Loop", &["n", ""], &[]), "body", body), node("Identity", &["x"], &["y"])],
        vec![value("x", FLOAT, Some(&[1]))],
        vec![value("y", FLOAT, None)],
        vec![ints("n", &[], &[1 << 62])],
    );
    expect_error("loop", &write("loop", &model(g, vec![opset("", 17)], vec![])), &[], "trip count 4611686018427387904");
}

#[test]
fn a_cut_or_corrupt_file_is_an_error_at_a_byte_offset() {
    let g = graph(vec![node("Relu", &["x"], &["y"])], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![floats("w", &[64], &[0.5; 64])]);
    let bytes = model(g, vec![opset("", 17)], vec![]);
    // Cut inside the initializer's data.
    let cut = &bytes[..bytes.len() - 40];
    // The graph (field 7 at byte 2) now claims more bytes than the file has.
    expect_error("cut", &write("cut", cut), &[], "byte 2: field 7: a length of ");
    // A key with wire type 7, which protobuf does not have, at byte 0.
    let mut bad = bytes.clone();
    bad.insert(0, 0x0f);
    expect_error("wire", &write("wire", &bad), &[], "byte 0: field 1: wire type 7");
}

#[test]
fn files_that_are_not_regular_are_refused_without_blocking() {
    let fifo = scratch().join("fifo.onnx");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    assert!(made, "mkfifo failed");
    expect_error("fifo", &fifo, &[], "not a regular file");
    expect_error("dir", &scratch(), &[], "not a regular file");
    expect_error("missing", &scratch().join("missing.onnx"), &[], "No such file");
}

#[test]
fn errors_inside_subgraphs_and_functions_name_the_enclosing_nodes() {
    // The Loop's body reads a value nobody defines.
    let body = graph(vec![node("Add", &["c", "ghost"], &["co"])], vec![value("i", INT64, Some(&[])), value("c", BOOL, Some(&[]))], vec![value("co", BOOL, None)], vec![]);
    let mut outer = with_graph(node("Loop", &["n", "c0"], &[]), "body", body);
    outer.name = Some("the_loop".into());
    let g = graph(vec![outer, node("Identity", &["x"], &["y"])], vec![value("x", FLOAT, Some(&[1])), value("n", INT64, Some(&[])), value("c0", BOOL, Some(&[]))], vec![value("y", FLOAT, None)], vec![]);
    expect_error("loop-body", &write("loop-body", &model(g, vec![opset("", 17)], vec![])), &[], "node \"the_loop\" (Loop) > body > node \"Add#1\" (Add): input \"ghost\" is not defined before this node");
    // A function body with the same mistake.
    let fns = vec![opset("", 17), opset("loc", 1)];
    let mut call = node("f", &["x"], &["y"]);
    call.domain = Some("loc".into());
    call.name = Some("the_call".into());
    let g = graph(vec![call], vec![value("x", FLOAT, Some(&[1, 2]))], vec![value("y", FLOAT, None)], vec![]);
    let f = function("loc", "f", vec![node("Mul", &["a", "ghost"], &["b"])], fns.clone());
    expect_error("function-body", &write("function-body", &model(g, fns, vec![f])), &[], "node \"the_call\" (f) > function \"f\" > node \"Mul#1\" (Mul): input \"ghost\" is not defined");
}
