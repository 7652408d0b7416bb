//! Loader tests: real model.

use super::*;

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
