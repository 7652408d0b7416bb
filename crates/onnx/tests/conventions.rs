//! Exporters' conventions the importer keeps rather than rejects, on the zoo's hand-built
//! models (`scripts/zoo.sh`).

use kiln_onnx::import::import_path;

fn zoo_model(name: &str) -> kiln_tir::Graph {
    let path = kiln_testkit::zoo().join(name).join("model.onnx");
    import_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn declared_shapes_that_contradict_inference_are_dropped_with_a_note() {
    let g = zoo_model("value_info_lies");
    assert_eq!(
        g.notes,
        [
            r#"value "h": declared f32[7, 7], inferred f32[N, 16]; the declaration is dropped"#,
            r#"value "y": declared f32[2, 9], inferred f32[N, 16]; the declaration is dropped"#,
        ]
    );
}

#[test]
fn dim_names_that_sanitize_alike_stay_different_symbols() {
    let g = zoo_model("dim_names_collide");
    let dims: Vec<String> = g.inputs().iter().map(|&v| g.ty(v).shape[0].to_string()).collect();
    assert_eq!(dims.len(), 2);
    assert_ne!(dims[0], dims[1], "`a-b` and `a_b` became one symbol");
}

#[test]
fn minus_one_and_missing_dims_become_distinct_symbols() {
    for name in ["neg_dim_input", "unnamed_dims"] {
        let g = zoo_model(name);
        let shape = &g.ty(g.inputs()[0]).shape;
        assert!(shape.iter().any(|d| d.known().is_none()), "{name}: {shape:?} has no symbol");
    }
    let g = zoo_model("unnamed_dims");
    let shape = &g.ty(g.inputs()[0]).shape;
    assert_ne!(shape[0], shape[1], "two unknown dims became one symbol");
}
