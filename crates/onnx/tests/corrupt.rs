//! A truncated or bit-flipped model is an error, never a panic, all the way through import
//! (decoding, tensor data, attributes, inference, verification) and the text form.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kiln_onnx::import::import;
use kiln_onnx::load::OnnxFile;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Imports `bytes`; returns whether it imported, and panics the test if anything panicked.
fn import_bytes(bytes: Vec<u8>, what: &str) -> bool {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let file = OnnxFile::from_bytes(bytes.into()).ok()?;
        let g = import(&file).ok()?;
        // Whatever imports must also print and parse back.
        let text = kiln_tir::text::print(&g);
        kiln_tir::text::parse(&text).expect("printed IR parses");
        Some(())
    }));
    match result {
        Ok(r) => r.is_some(),
        Err(_) => panic!("import panicked on {what}"),
    }
}

fn model_bytes(name: &str) -> Vec<u8> {
    std::fs::read(kiln_testkit::repo_root().join(name)).expect("model exists")
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = model_bytes("examples/models/tiny_cnn.onnx");
    assert!(import_bytes(bytes.clone(), "the intact model"));
    // Cutting inside the weights can still decode (raw_data just gets shorter), but the tensor
    // size check must then reject it; no prefix may import.
    for len in (0..bytes.len()).step_by(7) {
        assert!(!import_bytes(bytes[..len].to_vec(), &format!("a {len}-byte prefix")), "a {len}-byte prefix imported");
    }
}

#[test]
fn bit_flips_never_panic() {
    let bytes = model_bytes("examples/models/tiny_cnn.onnx");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut imported = 0;
    for round in 0..3000 {
        let mut m = bytes.clone();
        for _ in 0..1 + rng.next() % 4 {
            let bit = rng.next() as usize % (m.len() * 8);
            m[bit / 8] ^= 1 << (bit % 8);
        }
        imported += usize::from(import_bytes(m, &format!("bit-flip round {round}")));
    }
    // Most flips land in weight bytes and leave a valid model; the rest must be clean errors.
    println!("{imported} of 3000 bit-flipped models still imported");
}

#[test]
fn node_suite_models_survive_bit_flips() {
    let mut rng = Rng(42);
    for case in kiln_testkit::node_cases().iter().step_by(40) {
        let bytes = std::fs::read(&case.model).expect("case model");
        for round in 0..20 {
            let mut m = bytes.clone();
            let bit = rng.next() as usize % (m.len() * 8);
            m[bit / 8] ^= 1 << (bit % 8);
            import_bytes(m, &format!("{} flip {round}", case.name));
        }
    }
}
