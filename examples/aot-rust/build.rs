//! Compiles the model with `kiln compile` into OUT_DIR and links the object; the constants of
//! its C header that the program needs become `model.rs`.
//!
//! `KILN` names the kiln binary (default: the workspace's release build), `KILN_MODEL` the
//! model (default: the bundled tiny CNN, batch 1). The object is built with `--runtime none`,
//! so nothing but libm is linked beside it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let kiln = std::env::var("KILN").map(PathBuf::from).unwrap_or_else(|_| here.join("../../target/release/kiln"));
    let model = std::env::var("KILN_MODEL").map(PathBuf::from).unwrap_or_else(|_| here.join("../models/tiny_cnn.onnx"));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=KILN");
    println!("cargo:rerun-if-env-changed=KILN_MODEL");
    println!("cargo:rerun-if-changed={}", model.display());
    let status = Command::new(&kiln)
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--name", "model", "--runtime", "none", "--bind", "batch=1"])
        .status()
        .unwrap_or_else(|e| panic!("running {} (build it: cargo build --release -p kiln-cli): {e}", kiln.display()));
    assert!(status.success(), "kiln compile failed");

    // The header's constants, as Rust: `static const size_t model_arena_bytes = N;` and the
    // arrays of byte sizes.
    let header = std::fs::read_to_string(out.join("model.h")).unwrap();
    let value = |name: &str| -> String {
        let line = header.lines().find(|l| l.contains(&format!(" {name}"))).unwrap_or_else(|| panic!("{name} is not in model.h"));
        let v = line.split('=').nth(1).unwrap().trim().trim_end_matches(';');
        v.trim_start_matches('{').trim_end_matches('}').replace('u', "")
    };
    let rust = format!(
        "pub const ARENA_BYTES: usize = {};\npub const INPUT_BYTES: &[usize] = &[{}];\npub const OUTPUT_BYTES: &[usize] = &[{}];\n",
        value("model_arena_bytes"),
        value("model_input_bytes[]"),
        value("model_output_bytes[]")
    );
    std::fs::write(out.join("model.rs"), rust).unwrap();
    println!("cargo:rustc-link-arg={}", out.join("model.o").display());
    println!("cargo:rustc-link-lib=m");
}
