//! Loader tests: corrupted input.

use super::*;

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

/// Decodes `bytes` and resolves every initializer; must never panic.
fn exercise(bytes: Vec<u8>) -> bool {
    match OnnxFile::from_bytes(Bytes::from(bytes)) {
        Ok(file) => {
            for t in file.model.graph.iter().flat_map(|g| &g.initializer) {
                let _ = file.tensor_data(t);
            }
            true
        }
        Err(e) => {
            assert!(matches!(e, LoadError::Decode { path: None, .. }), "{e:?}");
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

#[test]
fn truncation_never_panics() {
    let full = small_model_bytes();
    assert!(exercise(full.clone()));
    let mut errors = 0;
    for len in 0..full.len() {
        if !exercise(full[..len].to_vec()) {
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
fn bit_flips_never_panic() {
    let full = small_model_bytes();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..5000 {
        let mut b = full.clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        exercise(b);
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
    assert!(!exercise(b));
    // Field 9 (raw_data) inside a tensor inside a graph, with a bogus length.
    let mut inner = vec![9 << 3 | 2, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 1, 2, 3];
    let mut graph = vec![5 << 3 | 2, inner.len() as u8];
    graph.append(&mut inner);
    let mut model = vec![7 << 3 | 2, graph.len() as u8];
    model.append(&mut graph);
    assert!(!exercise(model));
    // Packed repeated field claiming more elements than bytes.
    let mut tensor = vec![4 << 3 | 2, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0x80, 0x3F];
    let mut graph = vec![5 << 3 | 2, tensor.len() as u8];
    graph.append(&mut tensor);
    let mut model = vec![7 << 3 | 2, graph.len() as u8];
    model.append(&mut graph);
    assert!(!exercise(model));
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
    assert!(e.to_string().contains("recursion"), "{e}");
}
