//! Corrupted input: a truncated or bit-flipped model is an error, never a panic, all the way
//! through decoding, tensor data, import (attributes, inference, verification) and the text
//! form.

use std::panic::{AssertUnwindSafe, catch_unwind};

use kiln_onnx::import::import;
use kiln_testkit::Rng;

use super::*;

/// A model built here, with initializers of every kind of data (raw, typed, string, external).
fn small_model_bytes() -> Vec<u8> {
    let mut inits = vec![
        TensorProto {
            raw_data: Some(Bytes::from(f32_bytes(&[1.0, 2.0]))),
            ..tensor("r", DataType::Float, &[2])
        },
        TensorProto {
            int32_data: vec![0x3C00],
            ..tensor("h", DataType::Float16, &[1])
        },
        TensorProto {
            string_data: vec![Bytes::from_static(b"s")],
            ..tensor("s", DataType::String, &[1])
        },
        external("e", DataType::Float, &[1], &[("location", "w.bin")]),
    ];
    inits[0].doc_string = Some("doc".into());
    model_with(inits).encode_to_vec()
}

/// A model that imports: corruption there reaches the importer and the text form.
fn tiny_cnn_bytes() -> Vec<u8> {
    std::fs::read(kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx")).expect("model exists")
}

/// How far [`exercise`] got with a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    /// It did not decode.
    DecodeError,
    /// It decoded (its initializers resolved or were rejected) but did not import.
    Decoded,
    /// It imported, and its text form printed and parsed back.
    Imported,
}

/// Decodes `bytes`, resolves every initializer, imports the model and round-trips it through
/// the text form; a decoding error must be a `Decode` error with a message. Fails the test,
/// naming `what`, if any step panics.
fn exercise(bytes: Vec<u8>, what: &str) -> Reached {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let file = match OnnxFile::from_bytes(Bytes::from(bytes)) {
            Ok(file) => file,
            Err(e) => {
                assert!(matches!(e, LoadError::Decode { path: None, .. }), "{e:?}");
                assert!(!e.to_string().is_empty());
                return Reached::DecodeError;
            }
        };
        for t in file.model.graph.iter().flat_map(|g| &g.initializer) {
            let _ = file.tensor_data(t);
        }
        let Ok(g) = import(&file) else {
            return Reached::Decoded;
        };
        let text = kiln_tir::text::print(&g);
        kiln_tir::text::parse(&text).expect("printed IR parses");
        Reached::Imported
    }));
    result.unwrap_or_else(|_| panic!("{what} panicked"))
}

#[test]
fn truncation_never_panics() {
    let full = small_model_bytes();
    assert_ne!(exercise(full.clone(), "the intact model"), Reached::DecodeError);
    let mut errors = 0;
    for len in 0..full.len() {
        if exercise(full[..len].to_vec(), &format!("a {len}-byte prefix")) == Reached::DecodeError {
            errors += 1;
        }
    }
    assert!(
        errors > full.len() / 2,
        "most truncations must be decode errors ({errors}/{})",
        full.len()
    );
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = tiny_cnn_bytes();
    assert_eq!(exercise(bytes.clone(), "the intact model"), Reached::Imported);
    // Cutting inside the weights can still decode (raw_data just gets shorter), but the tensor
    // size check must then reject it; no prefix may import.
    for len in (0..bytes.len()).step_by(7) {
        let reached = exercise(bytes[..len].to_vec(), &format!("a {len}-byte prefix"));
        assert_ne!(reached, Reached::Imported, "a {len}-byte prefix imported");
    }
}

/// One test for both models: the small one reaches every kind of initializer data, tiny_cnn
/// the importer and the text form.
#[test]
fn bit_flips_never_panic() {
    let models = [("the small model", small_model_bytes(), 5000), ("tiny_cnn", tiny_cnn_bytes(), 3000)];
    for (name, model, rounds) in models {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut imported = 0;
        for round in 0..rounds {
            let mut m = model.clone();
            for _ in 0..1 + rng.below(4) {
                let bit = rng.below(m.len() * 8);
                m[bit / 8] ^= 1 << (bit % 8);
            }
            imported += usize::from(exercise(m, &format!("{name}, bit-flip round {round}")) == Reached::Imported);
        }
        // Most flips in tiny_cnn land in weight bytes and leave a valid model; the rest must be
        // clean errors.
        println!("{name}: {imported} of {rounds} bit-flipped models still imported");
    }
}

#[test]
fn node_suite_models_survive_bit_flips() {
    let mut rng = Rng::new(42);
    for case in kiln_testkit::node_cases().iter().step_by(40) {
        let bytes = std::fs::read(&case.model).expect("case model");
        for round in 0..20 {
            let mut m = bytes.clone();
            let bit = rng.below(m.len() * 8);
            m[bit / 8] ^= 1 << (bit % 8);
            exercise(m, &format!("{} flip {round}", case.name));
        }
    }
}

#[test]
fn decode_error_names_the_file() {
    let dir = TempDir::new("corrupt");
    let path = dir.path().join("broken.onnx");
    let full = small_model_bytes();
    std::fs::write(&path, &full[..full.len() - 3]).unwrap();
    let e = OnnxFile::from_path(&path).unwrap_err();
    assert!(
        matches!(&e, LoadError::Decode { path: Some(p), .. } if *p == path),
        "{e:?}"
    );
    assert!(e.to_string().contains("broken.onnx"), "{e}");

    let e = OnnxFile::from_path(dir.path().join("nope.onnx")).unwrap_err();
    assert!(
        matches!(&e, LoadError::Io { .. }) && e.to_string().contains("nope.onnx"),
        "{e}"
    );
    let e = OnnxFile::from_path(dir.path()).unwrap_err();
    assert!(matches!(&e, LoadError::Io { .. }), "{e}");
}

#[test]
fn huge_length_prefix_fails_fast() {
    // ModelProto.graph (field 7, length-delimited) claiming ~2^62 bytes.
    let mut b = vec![7 << 3 | 2];
    b.extend([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F]);
    b.extend([0u8; 16]);
    let t = std::time::Instant::now();
    assert_eq!(exercise(b, "a graph of 2^62 bytes"), Reached::DecodeError);
    // Field 9 (raw_data) inside a tensor inside a graph, with a bogus length.
    let mut inner = vec![9 << 3 | 2, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 1, 2, 3];
    let mut graph = vec![5 << 3 | 2, inner.len() as u8];
    graph.append(&mut inner);
    let mut model = vec![7 << 3 | 2, graph.len() as u8];
    model.append(&mut graph);
    assert_eq!(exercise(model, "raw_data of a bogus length"), Reached::DecodeError);
    // Packed repeated field claiming more elements than bytes.
    let mut tensor = vec![4 << 3 | 2, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0x80, 0x3F];
    let mut graph = vec![5 << 3 | 2, tensor.len() as u8];
    graph.append(&mut tensor);
    let mut model = vec![7 << 3 | 2, graph.len() as u8];
    model.append(&mut graph);
    assert_eq!(exercise(model, "a packed field longer than its bytes"), Reached::DecodeError);
    assert!(t.elapsed().as_secs() < 2);
}

#[test]
fn deep_nesting_hits_recursion_limit() {
    // Graph -> node -> attribute -> graph ... 60 levels deep (180 messages).
    let mut g = GraphProto::default();
    for _ in 0..60 {
        g = GraphProto {
            node: vec![NodeProto {
                op_type: Some("If".into()),
                attribute: vec![AttributeProto {
                    name: Some("then_branch".into()),
                    g: Some(g),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
    }
    let m = ModelProto {
        graph: Some(g),
        ..Default::default()
    };
    let e = OnnxFile::from_bytes(encode(&m)).unwrap_err();
    assert!(matches!(e, LoadError::Decode { .. }), "{e}");
    assert!(e.to_string().contains("nest deeper than 100 levels"), "{e}");
}
