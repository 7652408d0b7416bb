//! Loader tests: raw_data.

use super::*;

#[test]
fn raw_data_is_zero_copy_from_bytes() {
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let t = TensorProto {
        raw_data: Some(Bytes::from(data.clone())),
        ..tensor("w", DataType::Float, &[2, 3])
    };
    let src = encode(&model_with(vec![t]));
    let file = OnnxFile::from_bytes(src.clone()).unwrap();
    let init = &file.model.graph.as_ref().unwrap().initializer[0];
    let field = init.raw_data.as_ref().unwrap();
    assert!(
        inside(field, &src),
        "raw_data field must slice the source buffer"
    );
    let TensorData::Raw(out) = file.tensor_data(init).unwrap() else {
        panic!("raw")
    };
    assert_eq!(&out[..], &data[..]);
    assert!(
        inside(&out, &src),
        "tensor_data must slice the source buffer"
    );
    assert!(inside(&out, file.bytes()));
}

#[test]
fn raw_data_is_zero_copy_from_path() {
    let dir = TempDir::new("raw");
    let data = f32_bytes(&[0.5; 16]);
    let t = TensorProto {
        raw_data: Some(Bytes::from(data.clone())),
        ..tensor("w", DataType::Float, &[4, 4])
    };
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model_with(vec![t]).encode_to_vec()).unwrap();
    let file = OnnxFile::from_path(&path).unwrap();
    assert_eq!(file.path(), Some(path.as_path()));
    assert_eq!(file.base_dir(), Some(dir.path()));
    let init = &file.model.graph.as_ref().unwrap().initializer[0];
    let TensorData::Raw(out) = file.tensor_data(init).unwrap() else {
        panic!("raw")
    };
    assert_eq!(&out[..], &data[..]);
    assert!(inside(&out, file.bytes()));
    assert_eq!(
        file.model.graph.as_ref().unwrap().node[0].attribute[0]
            .s
            .as_deref(),
        Some(&b"hi"[..])
    );
}

#[test]
fn raw_data_size_mismatch_is_error() {
    let t = TensorProto {
        raw_data: Some(Bytes::from(vec![0u8; 10])),
        ..tensor("bad_raw", DataType::Float, &[3])
    };
    let e = roundtrip(t).unwrap_err();
    assert!(
        matches!(e, LoadError::TensorData { ref tensor, .. } if tensor == "bad_raw"),
        "{e}"
    );
    assert!(
        e.to_string().contains("raw_data has 10 bytes") && e.to_string().contains("needs 12"),
        "{e}"
    );
}

#[test]
fn empty_tensor() {
    assert!(raw(tensor("e", DataType::Float, &[0, 5])).is_empty());
    let t = TensorProto {
        raw_data: Some(Bytes::new()),
        ..tensor("e", DataType::Int64, &[3, 0])
    };
    assert!(raw(t).is_empty());
}
