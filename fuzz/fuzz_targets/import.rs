//! Any bytes as an ONNX model: loading and import return a value or an error, never panic, and
//! stay within small limits.
#![no_main]

use kiln_onnx::import::{ImportLimits, import_with};
use kiln_onnx::load::OnnxFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = OnnxFile::from_bytes(bytes::Bytes::copy_from_slice(data)) else { return };
    let limits = ImportLimits { max_nodes: 10_000, max_depth: 16 };
    if let Ok(g) = import_with(&file, &limits) {
        // What import accepts prints and parses back.
        let text = kiln_tir::text::print(&g);
        kiln_tir::text::parse(&text).expect("an imported graph's text form parses");
    }
});
