//! Loader tests: typed fields.

use super::*;

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
