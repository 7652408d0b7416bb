//! Tests for the zero-copy ONNX loader.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use kiln_onnx::load::{LoadError, OnnxFile, TensorData};
use kiln_onnx::proto::tensor_proto::{DataLocation, DataType};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto,
};
use prost::Message;

// ---------------------------------------------------------------- helpers

fn tensor(name: &str, dt: DataType, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(dt as i32),
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn model_with(initializers: Vec<TensorProto>) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        producer_name: Some("kiln-test".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some("Add".into()),
                input: vec!["x".into(), "w".into()],
                output: vec!["y".into()],
                attribute: vec![AttributeProto {
                    name: Some("note".into()),
                    s: Some(Bytes::from_static(b"hi")),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn encode(m: &ModelProto) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// Loads a one-initializer model from memory and resolves that initializer.
fn roundtrip(t: TensorProto) -> Result<TensorData, LoadError> {
    let file = OnnxFile::from_bytes(encode(&model_with(vec![t]))).expect("decode");
    file.tensor_data(&file.model.graph.as_ref().unwrap().initializer[0])
}

fn raw(t: TensorProto) -> Vec<u8> {
    match roundtrip(t).expect("tensor data") {
        TensorData::Raw(b) => b.to_vec(),
        other => panic!("expected raw data, got {other:?}"),
    }
}

fn inside(inner: &[u8], outer: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    i >= o && i + inner.len() <= o + outer.len()
}

/// A fresh, unique directory under the system temp dir (removed on drop).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "kiln-onnx-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic xorshift64* PRNG (no extra crates).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn external(name: &str, dt: DataType, dims: &[i64], kv: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        data_location: Some(DataLocation::External as i32),
        external_data: kv
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            })
            .collect(),
        ..tensor(name, dt, dims)
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// ---------------------------------------------------------------- raw_data

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

// ---------------------------------------------------------------- typed fields

#[test]
fn typed_float_and_double() {
    let t = TensorProto {
        float_data: vec![1.5, -2.0],
        ..tensor("f", DataType::Float, &[2])
    };
    assert_eq!(raw(t), f32_bytes(&[1.5, -2.0]));
    let t = TensorProto {
        double_data: vec![0.25, 1e300],
        ..tensor("d", DataType::Double, &[1, 2])
    };
    let want: Vec<u8> = [0.25f64, 1e300]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(raw(t), want);
    // Scalar (no dims): one element.
    let t = TensorProto {
        float_data: vec![7.0],
        ..tensor("s", DataType::Float, &[])
    };
    assert_eq!(raw(t), f32_bytes(&[7.0]));
}

#[test]
fn typed_complex() {
    let t = TensorProto {
        float_data: vec![1.0, 2.0, 3.0, 4.0],
        ..tensor("c64", DataType::Complex64, &[2])
    };
    assert_eq!(raw(t), f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let t = TensorProto {
        double_data: vec![1.0, -1.0],
        ..tensor("c128", DataType::Complex128, &[1])
    };
    let want: Vec<u8> = [1.0f64, -1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(raw(t), want);
    // A complex64 needs two floats per element.
    let t = TensorProto {
        float_data: vec![1.0, 2.0],
        ..tensor("c64", DataType::Complex64, &[2])
    };
    assert!(roundtrip(t).is_err());
}

#[test]
fn typed_integers() {
    let t = TensorProto {
        int64_data: vec![-1, 1 << 40],
        ..tensor("i64", DataType::Int64, &[2])
    };
    let want: Vec<u8> = [-1i64, 1 << 40]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(raw(t), want);
    let t = TensorProto {
        int32_data: vec![-7, 123456],
        ..tensor("i32", DataType::Int32, &[2])
    };
    let want: Vec<u8> = [-7i32, 123456]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(raw(t), want);
    let t = TensorProto {
        int32_data: vec![-128, 127, -1],
        ..tensor("i8", DataType::Int8, &[3])
    };
    assert_eq!(raw(t), vec![0x80, 0x7f, 0xff]);
    let t = TensorProto {
        int32_data: vec![255, 0],
        ..tensor("u8", DataType::Uint8, &[2])
    };
    assert_eq!(raw(t), vec![255, 0]);
    let t = TensorProto {
        int32_data: vec![65535, -2],
        ..tensor("u16", DataType::Uint16, &[2])
    };
    assert_eq!(raw(t), vec![0xff, 0xff, 0xfe, 0xff]);
    let t = TensorProto {
        uint64_data: vec![u64::MAX],
        ..tensor("u64", DataType::Uint64, &[1])
    };
    assert_eq!(raw(t), vec![0xff; 8]);
    let t = TensorProto {
        uint64_data: vec![0xDEAD_BEEF],
        ..tensor("u32", DataType::Uint32, &[1])
    };
    assert_eq!(raw(t), 0xDEAD_BEEFu32.to_le_bytes().to_vec());
    // Out-of-range values are rejected rather than truncated.
    let t = TensorProto {
        int32_data: vec![300],
        ..tensor("i8", DataType::Int8, &[1])
    };
    assert!(
        roundtrip(t)
            .unwrap_err()
            .to_string()
            .contains("does not fit")
    );
    let t = TensorProto {
        uint64_data: vec![1 << 33],
        ..tensor("u32", DataType::Uint32, &[1])
    };
    assert!(roundtrip(t).is_err());
}

#[test]
fn typed_half_floats_as_bits() {
    // 1.0 in f16 is 0x3C00; -2.0 is 0xC000 (stored as its unsigned bits).
    let t = TensorProto {
        int32_data: vec![0x3C00, 0xC000],
        ..tensor("h", DataType::Float16, &[2])
    };
    assert_eq!(raw(t), vec![0x00, 0x3C, 0x00, 0xC0]);
    // 1.0 in bf16 is 0x3F80.
    let t = TensorProto {
        int32_data: vec![0x3F80],
        ..tensor("bf", DataType::Bfloat16, &[1])
    };
    assert_eq!(raw(t), vec![0x80, 0x3F]);
    let t = TensorProto {
        int32_data: vec![0x38, 0xFF],
        ..tensor("f8", DataType::Float8e4m3fn, &[2])
    };
    assert_eq!(raw(t), vec![0x38, 0xFF]);
}

#[test]
fn typed_bool() {
    let t = TensorProto {
        int32_data: vec![1, 0, 1],
        ..tensor("b", DataType::Bool, &[3])
    };
    assert_eq!(raw(t), vec![1, 0, 1]);
}

#[test]
fn typed_sub_byte_packing() {
    // int4 [1, -2, 3]: int32_data holds packed bytes, low nibble first.
    let packed = [(1 | (0xE << 4)), 3];
    let t = TensorProto {
        int32_data: packed.to_vec(),
        ..tensor("i4", DataType::Int4, &[3])
    };
    assert_eq!(raw(t), vec![0xE1, 0x03]);
    let t = TensorProto {
        int32_data: vec![0x21],
        ..tensor("u4", DataType::Uint4, &[2])
    };
    assert_eq!(raw(t), vec![0x21]);
    // int4 with one int32 per element (unpacked) is a size error.
    let t = TensorProto {
        int32_data: vec![1, 2, 3],
        ..tensor("i4", DataType::Int4, &[3])
    };
    assert!(roundtrip(t).is_err());
    // uint2: four per byte.
    let t = TensorProto {
        int32_data: vec![0b11_10_01_00, 0b01],
        ..tensor("u2", DataType::Uint2, &[5])
    };
    assert_eq!(raw(t), vec![0xE4, 0x01]);
    // float6: one per int32, packed as a 6-bit LSB-first stream.
    let xs = [0x3F, 0x01, 0x2A, 0x15];
    let t = TensorProto {
        int32_data: xs.to_vec(),
        ..tensor("f6", DataType::Float6e2m3, &[4])
    };
    let b0 = xs[0] | ((xs[1] & 0x3) << 6);
    let b1 = (xs[1] >> 2) | ((xs[2] & 0xF) << 4);
    let b2 = (xs[2] >> 4) | (xs[3] << 2);
    assert_eq!(raw(t), vec![b0 as u8, b1 as u8, b2 as u8]);
    // raw int4 data length rounds up.
    let t = TensorProto {
        raw_data: Some(Bytes::from_static(&[0x12, 0x03])),
        ..tensor("r4", DataType::Int4, &[3])
    };
    assert_eq!(raw(t), vec![0x12, 0x03]);
}

#[test]
fn strings() {
    let t = TensorProto {
        string_data: vec![Bytes::from_static(b"hello"), Bytes::from_static(b"")],
        ..tensor("s", DataType::String, &[2])
    };
    let src = encode(&model_with(vec![t]));
    let file = OnnxFile::from_bytes(src.clone()).unwrap();
    let init = &file.model.graph.as_ref().unwrap().initializer[0];
    let TensorData::Strings(v) = file.tensor_data(init).unwrap() else {
        panic!("strings")
    };
    assert_eq!(v, vec![Bytes::from_static(b"hello"), Bytes::new()]);
    assert!(inside(&v[0], &src));
    let t = TensorProto {
        string_data: vec![Bytes::from_static(b"a")],
        ..tensor("s", DataType::String, &[2])
    };
    assert!(roundtrip(t).is_err());
}

#[test]
fn malformed_tensors_name_the_tensor() {
    let cases = [
        TensorProto {
            float_data: vec![1.0],
            ..tensor("neg_dim", DataType::Float, &[-1])
        },
        TensorProto {
            float_data: vec![1.0],
            ..tensor("unknown_type", DataType::Float, &[1])
        },
        TensorProto {
            float_data: vec![1.0],
            ..tensor("undefined_type", DataType::Undefined, &[1])
        },
        TensorProto {
            int64_data: vec![1, 2],
            ..tensor("wrong_field", DataType::Float, &[2])
        },
        tensor("no_data", DataType::Float, &[2]),
        TensorProto {
            raw_data: Some(Bytes::from_static(b"ab")),
            ..tensor("string_raw", DataType::String, &[1])
        },
        TensorProto {
            float_data: vec![1.0],
            ..tensor("huge", DataType::Float, &[i64::MAX, i64::MAX])
        },
        TensorProto {
            float_data: vec![1.0],
            data_location: Some(7),
            ..tensor("bad_location", DataType::Float, &[1])
        },
    ];
    for mut t in cases {
        if t.name.as_deref() == Some("unknown_type") {
            t.data_type = Some(99);
        }
        let name = t.name.clone().unwrap();
        let e = roundtrip(t).unwrap_err();
        assert!(
            matches!(&e, LoadError::TensorData { tensor, .. } if *tensor == name),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains(&name), "{e}");
    }
    let e = roundtrip(TensorProto {
        int64_data: vec![1, 2],
        ..tensor("wf", DataType::Float, &[2])
    })
    .unwrap_err();
    assert!(e.to_string().contains("int64_data"), "{e}");
}

// ---------------------------------------------------------------- external data

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

// ---------------------------------------------------------------- corrupted input

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

// ---------------------------------------------------------------- real model

#[test]
fn resnet50_loads_zero_copy() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/resnet50.onnx"
    );
    let t = std::time::Instant::now();
    let file = OnnxFile::from_path(path).unwrap();
    let load_time = t.elapsed();
    let graph = file.model.graph.as_ref().expect("graph");
    let convs = graph.node.iter().filter(|n| n.op_type() == "Conv").count();
    assert_eq!(convs, 53);
    assert!(!graph.initializer.is_empty());
    let map = file.bytes();
    let mut weight_bytes = 0usize;
    for init in &graph.initializer {
        let raw_field = init
            .raw_data
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no raw_data", init.name()));
        assert!(
            inside(raw_field, map),
            "{} raw_data is not inside the mapping",
            init.name()
        );
        let TensorData::Raw(data) = file.tensor_data(init).unwrap() else {
            panic!("raw")
        };
        assert!(
            inside(&data, map) && data.as_ptr() == raw_field.as_ptr(),
            "{}",
            init.name()
        );
        weight_bytes += data.len();
    }
    assert!(
        weight_bytes > 90_000_000,
        "resnet50 has ~100 MB of weights, saw {weight_bytes}"
    );
    eprintln!(
        "resnet50.onnx: {} bytes, {} initializers ({weight_bytes} weight bytes, none copied), from_path took {load_time:?}",
        map.len(),
        graph.initializer.len()
    );
}

// ---------------------------------------------------------------- schema export

/// Writes our compiled FileDescriptorSet to `$KILN_ONNX_FDS_OUT` (used by
/// `scripts/check_proto.py`); otherwise just sanity-checks it.
#[test]
fn export_descriptor_set() {
    let fds = kiln_onnx::proto::FILE_DESCRIPTOR_SET;
    assert!(fds.len() > 1000);
    assert!(fds.windows(b"ModelProto".len()).any(|w| w == b"ModelProto"));
    if let Some(out) = std::env::var_os("KILN_ONNX_FDS_OUT") {
        std::fs::write(out, fds).unwrap();
    }
}

#[test]
fn onnx_file_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<OnnxFile>();
    check::<TensorData>();
    check::<LoadError>();
}
