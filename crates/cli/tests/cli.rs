//! The `kiln` binary end to end.

use std::path::PathBuf;
use std::process::Command;

fn kiln() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
}

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/models/tiny_cnn.onnx")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn dump_prints_the_tensor_ir_and_it_round_trips_through_a_tir_file() {
    let out = kiln().args(["dump"]).arg(tiny()).args(["--stage", "tir"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("tensor.conv(") && text.contains("f32[batch, 10] \"probs\""), "{text}");
    let path = scratch("tiny.tir");
    std::fs::write(&path, &text).unwrap();
    let again = kiln().arg("dump").arg(&path).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
}

#[test]
fn bind_specializes_symbolic_dims() {
    let out = kiln().arg("dump").arg(tiny()).args(["--bind", "batch=3"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains("f32[3, 10] \"probs\""));
}

#[test]
fn a_truncated_model_is_an_error_not_a_crash() {
    let bytes = std::fs::read(tiny()).unwrap();
    let path = scratch("truncated.onnx");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let out = kiln().arg("dump").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: cannot import"), "{err}");
}
