//! `kiln compile` end to end: each model becomes an object and a header, the C program in
//! `examples/aot-c` is linked against them by its Makefile, and its outputs are compared with
//! the JIT's (`kiln run`) on the inputs the program wrote: bit for bit with the runtime's
//! kernels (`--runtime static`), within 1e-4 of each output's scale with plain loops
//! (`--runtime none`), whose sums run in another order. A model that quantizes activations
//! (QuantizeLinear) amplifies that: a sum within rounding of a step boundary lands one int8 step
//! away, and the step travels on through the layers; such outputs are checked within 5% of
//! their scale. A `--runtime none` object may need only libc and libm.
//!
//! Models: the bundled tiny CNN and, when `../shared/models` is there, the benchmark models.
//! `KILN_AOT_MODELS=a,b` picks models by file stem.

use std::path::{Path, PathBuf};
use std::process::Command;

fn kiln() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd:?}: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    text
}

fn models() -> Vec<PathBuf> {
    let mut all = vec![kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx")];
    let shared = kiln_testkit::shared_models();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&shared).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "onnx")).collect();
    found.sort();
    all.extend(found);
    match std::env::var("KILN_AOT_MODELS") {
        Ok(list) => all.into_iter().filter(|p| list.split(',').any(|m| p.file_stem().is_some_and(|s| s == m))).collect(),
        Err(_) => all,
    }
}

fn read_npy(path: &Path) -> kiln::Tensor {
    kiln::npy::read(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The symbols `object` needs from outside it (`nm -u`).
fn undefined(object: &Path) -> Vec<String> {
    let out = run(Command::new("nm").arg("-u").arg(object));
    out.lines().filter_map(|l| l.split_whitespace().last()).map(str::to_string).collect()
}

/// What a `--runtime none` object may call: C's string and math libraries.
const LIBC: &[&str] = &[
    "memcpy", "memset", "memmove", "expf", "exp", "logf", "log", "powf", "pow", "tanhf", "tanh", "erff", "erf", "sinf", "sin", "cosf", "cos", "tanf", "tan", "asinf", "asin", "acosf", "acos",
    "atanf", "atan", "sinhf", "sinh", "coshf", "cosh", "asinhf", "asinh", "acoshf", "acosh", "atanhf", "atanh", "rintf", "rint", "fmodf", "fmod", "log1pf", "log1p", "floorf", "floor", "ceilf",
    "ceil", "truncf", "trunc", "nearbyintf", "nearbyint", "fmaf", "fma",
];

#[test]
fn objects_linked_into_the_c_example_compute_what_the_jit_computes() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aot");
    let example = kiln_testkit::repo_root().join("examples/aot-c");
    let mut report = Vec::new();
    for model in models() {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = scratch.join(&stem);
        let _ = std::fs::remove_dir_all(&dir);
        let mut reference: Option<Vec<kiln::Tensor>> = None;
        for runtime in ["static", "none"] {
            let out = dir.join(runtime);
            std::fs::create_dir_all(out.join("in")).unwrap();
            std::fs::create_dir_all(out.join("out")).unwrap();
            run(kiln().arg("compile").arg(&model).arg("-o").arg(&out).args(["--name", &stem, "--runtime", runtime]).args(binds(&model)));
            let header = std::fs::read_to_string(out.join(format!("{stem}.h"))).unwrap();
            assert!(header.contains(&format!("int32_t {stem}_run(void *arena")), "{header}");
            if runtime == "none" {
                let extra: Vec<String> = undefined(&out.join(format!("{stem}.o"))).into_iter().filter(|s| !LIBC.contains(&s.as_str())).collect();
                assert!(extra.is_empty(), "{stem}: a runtime=none object needs {extra:?}");
            }
            run(Command::new("make").arg("-s").arg("-C").arg(&example).arg(format!("MODEL={stem}")).arg(format!("DIR={}", out.display())).arg(format!("RUNTIME={runtime}")));
            let program = out.join(&stem);
            run(Command::new(&program).arg("-w").arg(out.join("in")).arg("-o").arg(out.join("out")));
            let outputs: Vec<kiln::Tensor> = (0..).map(|i| out.join("out").join(format!("output_{i}.npy"))).take_while(|p| p.exists()).map(|p| read_npy(&p)).collect();
            let want = match &reference {
                Some(r) => r.clone(),
                None => {
                    // The JIT on the inputs the program used.
                    let names = input_names(&model);
                    let mut cmd = kiln();
                    cmd.arg("run").arg(&model).arg("-o").arg(dir.join("jit"));
                    for (i, name) in names.iter().enumerate() {
                        cmd.arg("--input").arg(format!("{name}={}", out.join("in").join(format!("input_{i}.npy")).display()));
                    }
                    run(&mut cmd);
                    let files = output_files(&model);
                    let r: Vec<kiln::Tensor> = files.iter().map(|f| read_npy(&dir.join("jit").join(f))).collect();
                    reference = Some(r.clone());
                    r
                }
            };
            assert_eq!(outputs.len(), want.len(), "{stem} ({runtime}): output count");
            for (k, (got, want)) in outputs.iter().zip(&want).enumerate() {
                if runtime == "static" {
                    assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{stem} output {k}");
                    assert!(got.raw() == want.raw(), "{stem} (static) output {k}: not the JIT's bytes");
                } else {
                    let scale = kiln_testkit::max_abs(want);
                    let rtol = if quantizes(&model) { 5e-2 } else { 1e-4 };
                    let worst = kiln_testkit::compare_with_onnxruntime(got, want, Some((rtol, rtol * scale))).unwrap_or_else(|e| panic!("{stem} (none) output {k}: {e}"));
                    report.push(format!("{stem} output {k}: largest difference {worst:.3e} (scale {scale:.3e})"));
                }
            }
        }
        // The objects embed the weights: keep the scratch folder small.
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("{}", report.join("\n"));
}

/// Whether the model rounds activations to integer steps.
fn quantizes(model: &Path) -> bool {
    let m = kiln::Model::load(model).unwrap();
    let g = m.graph();
    g.all_nodes().iter().any(|&n| g.node(n).op.kind().text_name() == "quantize_linear")
}

/// `--bind` arguments for the models whose inputs have symbolic dims.
fn binds(model: &Path) -> Vec<&'static str> {
    if model.ends_with("tiny_cnn.onnx") { vec!["--bind", "batch=1"] } else { vec![] }
}

fn input_names(model: &Path) -> Vec<String> {
    let m = kiln::Model::load(model).unwrap();
    let g = m.graph();
    g.inputs().iter().map(|&v| g.value(v).name.clone()).collect()
}

/// The file names `kiln run` writes the outputs to.
fn output_files(model: &Path) -> Vec<String> {
    let m = kiln::Model::load(model).unwrap();
    let g = m.graph();
    let names: Vec<&str> = g.outputs().iter().map(|&v| g.value(v).name.as_str()).collect();
    kiln::npy::file_names(&names)
}

/// Cross targets: objects for aarch64 and riscv64 with `--runtime none`, linked statically by
/// Debian's cross compilers (`scripts/cross-tools.sh` installs them and qemu-user when
/// missing) and run under qemu, against the host JIT on the same inputs.
#[test]
fn objects_for_aarch64_and_riscv64_run_under_qemu_like_the_host_jit() {
    let setup = kiln_testkit::repo_root().join("scripts/cross-tools.sh");
    run(Command::new("bash").arg(&setup));
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aot-cross");
    let example = kiln_testkit::repo_root().join("examples/aot-c");
    let wanted = ["tiny_cnn", "mlp", "mobilenet_v2", "bert_mini"];
    let mut report = Vec::new();
    for model in models().into_iter().filter(|m| m.file_stem().is_some_and(|s| wanted.iter().any(|w| s == *w))) {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = scratch.join(&stem);
        let _ = std::fs::remove_dir_all(&dir);
        let mut reference: Option<(PathBuf, Vec<kiln::Tensor>)> = None;
        for (triple, cc, qemu) in [("aarch64-unknown-linux-gnu", "aarch64-linux-gnu-gcc", "qemu-aarch64"), ("riscv64gc-unknown-linux-gnu", "riscv64-linux-gnu-gcc", "qemu-riscv64")] {
            let out = dir.join(triple);
            std::fs::create_dir_all(out.join("in")).unwrap();
            std::fs::create_dir_all(out.join("out")).unwrap();
            run(kiln().arg("compile").arg(&model).arg("-o").arg(&out).args(["--name", &stem, "--runtime", "none", "--target", triple]).args(binds(&model)));
            let extra: Vec<String> = undefined(&out.join(format!("{stem}.o"))).into_iter().filter(|s| !LIBC.contains(&s.as_str())).collect();
            assert!(extra.is_empty(), "{stem} ({triple}): the object needs {extra:?}");
            run(Command::new("make").arg("-s").arg("-C").arg(&example).arg(format!("MODEL={stem}")).arg(format!("DIR={}", out.display())).args(["RUNTIME=none", &format!("CC={cc}"), "CFLAGS=-O2 -std=c11 -static"]));
            let program = out.join(&stem);
            let mut cmd = Command::new(qemu);
            cmd.arg(&program).arg("-o").arg(out.join("out"));
            match &reference {
                // The second target reads the inputs the first one wrote.
                Some((inputs, _)) => {
                    for i in 0..input_names(&model).len() {
                        cmd.arg(inputs.join(format!("input_{i}.npy")));
                    }
                }
                None => {
                    cmd.arg("-w").arg(out.join("in"));
                }
            }
            run(&mut cmd);
            if reference.is_none() {
                let mut jit = kiln();
                jit.arg("run").arg(&model).arg("-o").arg(dir.join("jit"));
                for (i, name) in input_names(&model).iter().enumerate() {
                    jit.arg("--input").arg(format!("{name}={}", out.join("in").join(format!("input_{i}.npy")).display()));
                }
                run(&mut jit);
                let want = output_files(&model).iter().map(|f| read_npy(&dir.join("jit").join(f))).collect();
                reference = Some((out.join("in"), want));
            }
            let want = &reference.as_ref().unwrap().1;
            for (k, want) in want.iter().enumerate() {
                let got = read_npy(&out.join("out").join(format!("output_{k}.npy")));
                let scale = kiln_testkit::max_abs(want);
                let worst = kiln_testkit::compare_with_onnxruntime(&got, want, Some((1e-4, 1e-4 * scale))).unwrap_or_else(|e| panic!("{stem} ({triple}) output {k}: {e}"));
                report.push(format!("{stem} {triple} output {k}: largest difference {worst:.3e} (scale {scale:.3e})"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("{}", report.join("\n"));
}

/// `examples/aot-rust`: a Rust program whose build script runs `kiln compile` and links the
/// object. The bundled model ends in a softmax, so its output sums to 1.
#[test]
fn the_rust_example_links_the_object_its_build_script_compiles() {
    let manifest = kiln_testkit::repo_root().join("examples/aot-rust/Cargo.toml");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aot-rust");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = run(Command::new(cargo).args(["run", "--quiet", "--manifest-path"]).arg(&manifest).env("KILN", env!("CARGO_BIN_EXE_kiln")).env("CARGO_TARGET_DIR", &target));
    let sum: f32 = out
        .split("sum ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sum in the example's output:\n{out}"));
    assert!((sum - 1.0).abs() < 1e-5, "the softmax output sums to {sum}:\n{out}");
}

/// `--weights file`: the object holds no weights, `NAME_run` takes the file's bytes, its
/// outputs are the embedded object's, and a file written for another compilation is refused
/// with the status that names it.
#[test]
fn weights_in_a_file_give_the_same_outputs_and_another_file_is_refused() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aot-weights");
    let example = kiln_testkit::repo_root().join("examples/aot-c");
    let _ = std::fs::remove_dir_all(&scratch);
    let model = kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx");
    let mut outputs = Vec::new();
    for weights in ["embed", "file"] {
        let out = scratch.join(weights);
        std::fs::create_dir_all(out.join("out")).unwrap();
        run(kiln().arg("compile").arg(&model).arg("-o").arg(&out).args(["--name", "tiny", "--runtime", "none", "--weights", weights]).args(binds(&model)));
        run(Command::new("make").arg("-s").arg("-C").arg(&example).arg("MODEL=tiny").arg(format!("DIR={}", out.display())).arg("RUNTIME=none"));
        let mut cmd = Command::new(out.join("tiny"));
        cmd.arg("-o").arg(out.join("out"));
        if weights == "file" {
            cmd.arg("-W").arg(out.join("tiny.weights"));
        }
        run(&mut cmd);
        outputs.push(std::fs::read(out.join("out/output_0.npy")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1], "the outputs differ with the weights in a file");
    let object = std::fs::metadata(scratch.join("file/tiny.o")).unwrap().len();
    let embedded = std::fs::metadata(scratch.join("embed/tiny.o")).unwrap().len();
    let weights = std::fs::metadata(scratch.join("file/tiny.weights")).unwrap().len();
    assert!(object + 10_000 < embedded && weights > 10_000, "object {object} bytes, embedded {embedded}, weights {weights}");

    // Another model's weights file: a different fingerprint.
    let other = scratch.join("other");
    run(kiln().arg("compile").arg(kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx")).arg("-o").arg(&other).args(["--name", "tiny", "--runtime", "none", "--weights", "file", "--bind", "batch=2"]));
    let mut bytes = std::fs::read(other.join("tiny.weights")).unwrap();
    bytes[20] ^= 1;
    std::fs::write(other.join("tiny.weights"), &bytes).unwrap();
    let refused = Command::new(scratch.join("file/tiny")).arg("-W").arg(other.join("tiny.weights")).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("not the file written with this object"), "{err}");
}

/// Bad arguments to `NAME_run` are statuses, and `NAME_error_string` has a sentence for any
/// status (`tests/aot/abi.c`).
#[test]
fn bad_arguments_are_statuses_with_sentences() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aot-abi");
    let _ = std::fs::remove_dir_all(&out);
    let model = kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx");
    run(kiln().arg("compile").arg(&model).arg("-o").arg(&out).args(["--name", "m", "--runtime", "none"]).args(binds(&model)));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/aot/abi.c");
    run(Command::new("cc").args(["-O1", "-Wall", "-Werror", "-std=c11", "-I"]).arg(&out).arg(&source).arg(out.join("m.o")).arg("-lm").arg("-o").arg(out.join("abi")));
    let text = run(&mut Command::new(out.join("abi")));
    let want = [
        "ok 0",
        "null arena -1",
        "misaligned arena -1",
        "null inputs array -2",
        "null outputs array -2",
        "null input -2",
        "misaligned input -2",
        "status 0: success",
        "status -1: the arena is null or not aligned to 64 bytes",
        "status -2: an input or output pointer is null or not aligned to 16 bytes",
        "status -3: the weights are null, not aligned to 64 bytes, or not the file written with this object",
        "status -4: unknown status",
        "status 100000: unknown status",
        "status -2147483648: unknown status",
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}
