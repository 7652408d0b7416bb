//! Loader tests: external data.

use super::*;

/// Writes `weights.bin` (given bytes) and `model.onnx` with `inits` into `dir`.
fn write_external_model(dir: &Path, weights: &[u8], inits: Vec<TensorProto>) -> PathBuf {
    std::fs::write(dir.join("weights.bin"), weights).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_with(inits).encode_to_vec()).unwrap();
    path
}

#[test]
fn external_data_good() {
    let dir = TempDir::new("ext");
    let mut weights = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    weights.extend(f32_bytes(&[5.0, 6.0]));
    let path = write_external_model(
        dir.path(),
        &weights,
        vec![
            external(
                "a",
                DataType::Float,
                &[2, 2],
                &[
                    ("location", "weights.bin"),
                    ("offset", "0"),
                    ("length", "16"),
                ],
            ),
            external(
                "b",
                DataType::Float,
                &[2],
                &[
                    ("location", "./weights.bin"),
                    ("offset", "16"),
                    ("checksum", "x"),
                ],
            ),
        ],
    );
    let file = OnnxFile::from_path(&path).unwrap();
    let inits = &file.model.graph.as_ref().unwrap().initializer;
    let TensorData::Raw(a) = file.tensor_data(&inits[0]).unwrap() else {
        panic!()
    };
    let TensorData::Raw(b) = file.tensor_data(&inits[1]).unwrap() else {
        panic!()
    };
    assert_eq!(&a[..], &weights[..16]);
    assert_eq!(&b[..], &weights[16..]);
    // Both slices come from one mapping of weights.bin (mapped once, not copied).
    assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + 16);
    let TensorData::Raw(a2) = file.tensor_data(&inits[0]).unwrap() else {
        panic!()
    };
    assert_eq!(a2.as_ptr(), a.as_ptr());

    // Same model from memory with an explicit base directory.
    let file =
        OnnxFile::from_bytes_with_base_dir(Bytes::from(std::fs::read(&path).unwrap()), dir.path())
            .unwrap();
    let inits = &file.model.graph.as_ref().unwrap().initializer;
    assert_eq!(
        file.tensor_data(&inits[1]).unwrap(),
        TensorData::Raw(Bytes::from(weights[16..].to_vec()))
    );
}

#[test]
fn external_data_in_subdirectory() {
    let dir = TempDir::new("extsub");
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/w.bin"), f32_bytes(&[9.0])).unwrap();
    let t = external(
        "w",
        DataType::Float,
        &[1],
        &[("location", "data/../data/w.bin")],
    );
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model_with(vec![t]).encode_to_vec()).unwrap();
    let file = OnnxFile::from_path(&path).unwrap();
    let init = &file.model.graph.as_ref().unwrap().initializer[0];
    assert_eq!(
        file.tensor_data(init).unwrap(),
        TensorData::Raw(Bytes::from(f32_bytes(&[9.0])))
    );
}

fn external_error(kv: &[(&str, &str)], dims: &[i64]) -> LoadError {
    let dir = TempDir::new("exterr");
    let weights = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let path = write_external_model(
        dir.path(),
        &weights,
        vec![external("ext_w", DataType::Float, dims, kv)],
    );
    let file = OnnxFile::from_path(&path).unwrap();
    let e = file
        .tensor_data(&file.model.graph.as_ref().unwrap().initializer[0])
        .unwrap_err();
    assert!(
        e.to_string().contains("ext_w"),
        "error must name the tensor: {e}"
    );
    e
}

#[test]
fn external_data_errors() {
    let is_ext =
        |e: &LoadError| matches!(e, LoadError::ExternalData { tensor, .. } if tensor == "ext_w");
    let e = external_error(&[("location", "weights.bin"), ("offset", "17")], &[0]);
    assert!(is_ext(&e) && e.to_string().contains("past the end"), "{e}");
    let e = external_error(
        &[
            ("location", "weights.bin"),
            ("offset", "8"),
            ("length", "12"),
        ],
        &[3],
    );
    assert!(is_ext(&e) && e.to_string().contains("past the end"), "{e}");
    let e = external_error(
        &[
            ("location", "weights.bin"),
            ("offset", "4"),
            ("length", "18446744073709551615"),
        ],
        &[1],
    );
    assert!(is_ext(&e), "{e}");
    let e = external_error(&[("location", "weights.bin"), ("offset", "-4")], &[1]);
    assert!(is_ext(&e), "{e}");
    let e = external_error(&[("location", "../escape.bin")], &[1]);
    assert!(is_ext(&e) && e.to_string().contains("escapes"), "{e}");
    let e = external_error(&[("location", "a/../../escape.bin")], &[1]);
    assert!(is_ext(&e) && e.to_string().contains("escapes"), "{e}");
    let e = external_error(&[("location", "/etc/passwd")], &[1]);
    assert!(is_ext(&e) && e.to_string().contains("absolute"), "{e}");
    let e = external_error(&[("location", "missing.bin")], &[1]);
    assert!(is_ext(&e) && e.to_string().contains("missing.bin"), "{e}");
    let e = external_error(&[("offset", "0")], &[1]);
    assert!(is_ext(&e) && e.to_string().contains("location"), "{e}");
    // Whole file (16 bytes) for a 3-float tensor: size mismatch.
    let e = external_error(&[("location", "weights.bin")], &[3]);
    assert!(
        matches!(&e, LoadError::TensorData { .. })
            && e.to_string().contains("external data has 16 bytes"),
        "{e}"
    );
}

#[cfg(unix)]
#[test]
fn external_data_symlink_escape() {
    let outside = TempDir::new("outside");
    std::fs::write(outside.path().join("secret.bin"), f32_bytes(&[1.0])).unwrap();
    let dir = TempDir::new("symlink");
    std::os::unix::fs::symlink(
        outside.path().join("secret.bin"),
        dir.path().join("link.bin"),
    )
    .unwrap();
    let t = external("ext_w", DataType::Float, &[1], &[("location", "link.bin")]);
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model_with(vec![t]).encode_to_vec()).unwrap();
    let file = OnnxFile::from_path(&path).unwrap();
    let e = file
        .tensor_data(&file.model.graph.as_ref().unwrap().initializer[0])
        .unwrap_err();
    assert!(
        matches!(&e, LoadError::ExternalData { tensor, .. } if tensor == "ext_w"),
        "{e}"
    );
    assert!(e.to_string().contains("outside the model directory"), "{e}");
}

#[test]
fn external_data_from_memory_without_base_dir() {
    let t = external(
        "mem_w",
        DataType::Float,
        &[1],
        &[("location", "weights.bin")],
    );
    let e = roundtrip(t).unwrap_err();
    assert!(
        matches!(&e, LoadError::ExternalData { tensor, .. } if tensor == "mem_w"),
        "{e}"
    );
    assert!(e.to_string().contains("base directory"), "{e}");
}
