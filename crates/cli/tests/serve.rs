//! `kiln serve` against an independent client: Triton's `tritonclient[http]` (PyPI) checks the
//! Open Inference Protocol endpoints, compares every shared model's outputs with onnxruntime
//! (binary and JSON tensors), checks that bad requests are errors naming the field, that
//! concurrent requests to a batchable model are batched and answered with their own rows, and
//! that SIGTERM lets the request in flight finish (`tests/serve/oip_client.py`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The venv's python (`scripts/serve-venv.sh` installs the pinned client on first use).
fn python() -> PathBuf {
    let root = kiln_testkit::repo_root();
    let out = Command::new("bash").arg(root.join("scripts/serve-venv.sh")).output().expect("bash runs scripts/serve-venv.sh");
    assert!(out.status.success(), "scripts/serve-venv.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn an_independent_client_gets_onnxruntime_outputs_errors_batches_and_a_graceful_stop() {
    let root = kiln_testkit::repo_root();
    let python = python();
    let client = root.join("tests/serve/oip_client.py");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve");
    std::fs::create_dir_all(&scratch).unwrap();
    let batched = scratch.join("batched.onnx");
    let made = Command::new(&python).arg(&client).arg("make-batch-model").arg(&batched).status().unwrap();
    assert!(made.success());

    let mut models: Vec<(String, PathBuf)> = vec![("tiny_cnn".into(), root.join("examples/models/tiny_cnn.onnx"))];
    let shared = kiln_testkit::shared_models();
    let mut names: Vec<String> = std::fs::read_dir(&shared).unwrap().filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(String::from)).filter(|n| shared.join(format!("{n}.onnx")).exists()).collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 9, "expected the nine shared models in {}", shared.display());
    models.extend(names.into_iter().map(|n| (n.clone(), shared.join(format!("{n}.onnx")))));
    let model_args: Vec<String> = models.iter().map(|(n, p)| format!("{n}={}", p.display())).collect();

    let mut server = Command::new(env!("CARGO_BIN_EXE_kiln"));
    server.args(["serve", "--address", "127.0.0.1:0", "--max-body-bytes", "8M", "--batch-window-ms", "20", "--max-batch", "8"]);
    for m in &model_args {
        server.args(["--model", m]);
    }
    server.arg("--model").arg(format!("batched={}", batched.display())).args(["--batch", "batched"]);
    let mut server = server.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let url = first.trim().rsplit("http://").next().unwrap().to_string();
    assert!(url.starts_with("127.0.0.1:"), "first line: {first:?}");

    let mut check = Command::new(&python);
    check.arg(&client).args(["check", "--url", &url, "--max-body-bytes", "8388608"]);
    for m in &model_args {
        check.args(["--model", m]);
    }
    check.arg("--batch-model").arg(format!("batched={}", batched.display()));
    check.args(["--stop-pid", &server.id().to_string(), "--stop-model", "resnet50"]);
    let checked = check.status().unwrap();

    let start = Instant::now();
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(60) {
            server.kill().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(checked.success(), "the client's checks failed (see its output)");
    assert!(status.is_some_and(|s| s.success()), "the server did not stop cleanly after SIGTERM: {status:?}");
}

#[test]
fn a_model_that_does_not_load_stops_the_server_with_an_error_naming_it() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve/no-such-model.onnx");
    let mut server = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--address", "127.0.0.1:0", "--model"])
        .arg(format!("ghost={}", missing.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the server kept running");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error: model \"ghost\" failed to load"), "{stderr}");
    assert!(stderr.contains("no-such-model.onnx"), "{stderr}");
}
