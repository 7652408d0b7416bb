//! The example service answers an independent client (`tests/serve/oip_client.py
//! check-example`, plain JSON over HTTP) with onnxruntime's outputs, for a model with a
//! symbolic batch dim, an f32 model and a model of token ids.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn the_example_service_answers_like_onnxruntime() {
    let root = kiln_testkit::repo_root();
    let venv = Command::new("bash").arg(root.join("scripts/serve-venv.sh")).output().unwrap();
    assert!(venv.status.success(), "scripts/serve-venv.sh: {}", String::from_utf8_lossy(&venv.stderr));
    let python = PathBuf::from(String::from_utf8_lossy(&venv.stdout).trim());
    let models = [("tiny_cnn", root.join("examples/models/tiny_cnn.onnx")), ("mlp", kiln_testkit::shared_models().join("mlp.onnx")), ("bert_mini", kiln_testkit::shared_models().join("bert_mini.onnx"))];
    for (name, path) in models {
        let mut service = Command::new(env!("CARGO_BIN_EXE_kiln-example-service")).arg(&path).arg("127.0.0.1:0").stdout(Stdio::piped()).spawn().unwrap();
        let mut first = String::new();
        BufReader::new(service.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let url = first.trim().rsplit("http://").next().unwrap_or_default().to_string();
        let checked = Command::new(&python).arg(root.join("tests/serve/oip_client.py")).args(["check-example", "--url", &url, "--model"]).arg(format!("{name}={}", path.display())).status().unwrap();
        service.kill().ok();
        service.wait().ok();
        assert!(checked.success(), "{name}: the client's checks failed (see its output)");
    }
}
