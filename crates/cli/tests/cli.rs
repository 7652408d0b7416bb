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
    // Under target/, so that nothing is left in the system's temporary folder.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn dump_prints_the_tensor_ir_and_it_round_trips_through_a_tir_file() {
    let out = kiln()
        .args(["dump"])
        .arg(tiny())
        .args(["--stage", "tir"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("tensor.conv(") && text.contains("f32[batch, 10] \"probs\""),
        "{text}"
    );
    let path = scratch("tiny.tir");
    std::fs::write(&path, &text).unwrap();
    let again = kiln().arg("dump").arg(&path).output().unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
}

#[test]
fn bind_specializes_symbolic_dims() {
    let out = kiln()
        .arg("dump")
        .arg(tiny())
        .args(["--bind", "batch=3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("f32[3, 10] \"probs\"")
    );
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

#[test]
fn run_writes_each_output_as_npy() {
    let dir = scratch("run-out");
    let out = kiln()
        .arg("run")
        .arg(tiny())
        .args(["--random-inputs", "--seed", "3", "--output-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join("probs.npy")).unwrap();
    let t = kiln::npy::read(&bytes).unwrap();
    assert_eq!(t.shape, vec![1, 10]);
    let sum: f32 = kiln::tensor_to_array::<f32>(&t).unwrap().sum();
    assert!(
        (sum - 1.0).abs() < 1e-5,
        "softmax outputs sum to 1, got {sum}"
    );
    // The same input given as a file gives the same output.
    let input = dir.join("image.npy");
    let image = kiln::Tensor::from_f32s(&[1, 1, 16, 16], &[0.25; 256]);
    std::fs::write(&input, kiln::npy::write(&image).unwrap()).unwrap();
    let again = kiln()
        .arg("run")
        .arg(tiny())
        .arg("--input")
        .arg(format!("image={}", input.display()))
        .arg("--output-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let model = kiln::Model::load(tiny()).unwrap();
    let want = model
        .compile(&kiln::CompileOptions::default())
        .unwrap()
        .run(&[image])
        .unwrap();
    assert_eq!(
        kiln::npy::read(&std::fs::read(dir.join("probs.npy")).unwrap()).unwrap(),
        want[0]
    );
}

#[test]
fn dump_prints_every_stage() {
    let stages = [
        (vec!["--stage", "opt"], "tensor.fused_conv"),
        (
            vec!["--stage", "opt", "--stats"],
            "// conv-relu                        2",
        ),
        (
            vec!["--stage", "opt", "--explain"],
            "// from Conv \"conv1\", Relu \"relu1\"\n  // by conv-relu\n",
        ),
        (vec!["--stage", "loops"], "kernel fused_conv_1"),
        (vec!["--stage", "loops", "--no-opt"], "kernel conv_1"),
        (vec!["--stage", "plan"], "arena: "),
        (vec!["--stage", "clif"], "function %kiln_k0_fused_conv_1"),
    ];
    for (args, marker) in stages {
        let out = kiln()
            .arg("dump")
            .arg(tiny())
            .args(["--bind", "batch=1"])
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(marker),
            "{args:?} output lacks {marker}:\n{text}"
        );
    }
}

#[test]
fn bench_prints_one_line() {
    let out = kiln()
        .arg("bench")
        .arg(tiny())
        .args(["--iters", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.starts_with("compile_ms=")
            && line.contains(" median_ms=")
            && line.contains(" p90_ms="),
        "{line}"
    );
}

#[test]
fn bench_prints_kernel_times() {
    let out = kiln().arg("bench").arg(tiny()).args(["--iters", "2", "--kernels", "2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // A header, the two slowest kernels, the total, and the summary line.
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[1..3].iter().all(|l| l.starts_with("// ") && l.ends_with('%')), "{text}");
    assert!(lines[3].contains(" kernels, ") && lines[4].starts_with("compile_ms="), "{text}");
}

#[test]
fn progress_stays_off_when_stderr_is_not_a_terminal() {
    // Progress lines are for terminals; a pipe (CI logs, scripts) gets nothing on stderr.
    let out = kiln().arg("run").arg(tiny()).args(["--random-inputs", "-o"]).arg(scratch("quiet")).output().unwrap();
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "stderr: {:?}", String::from_utf8_lossy(&out.stderr));
    let out = kiln().arg("compile").arg(tiny()).args(["--bind", "batch=1", "-o"]).arg(scratch("quiet-obj")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "stderr: {:?}", String::from_utf8_lossy(&out.stderr));
}
