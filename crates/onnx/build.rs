//! Compiles `proto/onnx.proto` (workspace root) with protox, a pure-Rust
//! protobuf compiler, and generates prost types from it. Every `bytes` field
//! becomes `bytes::Bytes`, so decoding from a `Bytes` buffer is zero-copy.
//! The encoded `FileDescriptorSet` is also written to `OUT_DIR` so the crate
//! can expose it (used by `scripts/check_proto.py`).

use std::path::PathBuf;

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let proto_dir = manifest_dir.join("../../proto");
    let proto_file = proto_dir.join("onnx.proto");
    println!("cargo:rerun-if-changed={}", proto_file.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut compiler =
        protox::Compiler::new([&proto_dir]).unwrap_or_else(|e| panic!("protox: {e}"));
    compiler.include_source_info(true).include_imports(true);
    compiler
        .open_file("onnx.proto")
        .unwrap_or_else(|e| panic!("protox failed to compile {}: {e}", proto_file.display()));
    std::fs::write(
        out_dir.join("onnx_fds.bin"),
        compiler.encode_file_descriptor_set(),
    )
    .expect("write onnx_fds.bin");

    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(compiler.file_descriptor_set())
        .unwrap_or_else(|e| panic!("prost-build failed: {e}"));
}
