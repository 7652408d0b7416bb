//! The Rust API: inputs by position and name, ndarray, symbolic shapes, concurrency, and
//! errors on bad inputs.

use std::sync::Arc;

use kiln::{
    CompileOptions, CompiledModel, Error, Model, Tensor, TensorData, tensor_from_array,
    tensor_to_array,
};

fn tiny() -> Model {
    Model::load(kiln_testkit::repo_root().join("examples/models/tiny_cnn.onnx")).unwrap()
}

fn image(batch: u64, seed: u32) -> Tensor {
    let n = (batch * 256) as usize;
    let values: Vec<f32> = (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
        })
        .collect();
    Tensor::from_f32s(&[batch, 1, 16, 16], &values)
}

#[test]
fn compiled_models_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CompiledModel>();
}

#[test]
fn results_match_the_reference_evaluator_for_several_batch_sizes() {
    let model = tiny();
    let compiled = model.compile(&CompileOptions::default()).unwrap();
    for batch in [1, 3, 1, 2] {
        let input = image(batch, batch as u32);
        let got = compiled.run(std::slice::from_ref(&input)).unwrap();
        let want = kiln_eval::eval_graph(model.graph(), &[input]).unwrap();
        assert_eq!(got[0].shape, vec![batch, 10]);
        kiln_testkit::compare(&got[0], &want[0]).unwrap();
    }
}

#[test]
fn inputs_by_name_and_as_ndarray() {
    let compiled = tiny()
        .compile(&CompileOptions {
            input_shapes: vec![("image".into(), vec![2, 1, 16, 16])],
            ..Default::default()
        })
        .unwrap();
    let input = image(2, 7);
    let by_position = compiled.run(std::slice::from_ref(&input)).unwrap();
    let by_name = compiled.run_named(&[("image", input.clone())]).unwrap();
    assert_eq!(by_position, by_name);
    let array = tensor_to_array::<f32>(&input).unwrap();
    let from_array = compiled.run(&[tensor_from_array(array.view())]).unwrap();
    assert_eq!(from_array, by_position);
    let probs = tensor_to_array::<f32>(&from_array[0]).unwrap();
    for row in probs.rows() {
        assert!((row.sum() - 1.0).abs() < 1e-5, "softmax rows sum to 1");
    }
}

#[test]
fn eight_threads_get_bit_identical_outputs() {
    let compiled = Arc::new(tiny().compile(&CompileOptions::default()).unwrap());
    let inputs: Vec<Tensor> = (0..4).map(|i| image(1 + i % 2, i as u32)).collect();
    let expected: Vec<Vec<Tensor>> = inputs
        .iter()
        .map(|t| compiled.run(std::slice::from_ref(t)).unwrap())
        .collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (compiled, inputs, expected) = (compiled.clone(), &inputs, &expected);
            s.spawn(move || {
                for r in 0..200 {
                    let i = (t + r) % inputs.len();
                    let got = compiled.run(std::slice::from_ref(&inputs[i])).unwrap();
                    assert_eq!(got, expected[i], "thread {t} run {r}");
                }
            });
        }
    });
}

#[test]
fn bad_inputs_are_errors() {
    let compiled = tiny().compile(&CompileOptions::default()).unwrap();
    assert!(matches!(
        compiled.run(&[]),
        Err(Error::InputCount {
            expected: 1,
            got: 0
        })
    ));
    let wrong_dtype = Tensor::from_i64s(&[1, 1, 16, 16], &[0; 256]);
    assert!(matches!(
        compiled.run(&[wrong_dtype]),
        Err(Error::InputDType { .. })
    ));
    let wrong_shape = Tensor::from_f32s(&[1, 2, 16, 16], &[0.0; 512]);
    let e = compiled.run(&[wrong_shape]).unwrap_err();
    assert!(
        e.to_string().contains("dim 1 is 2, the model declares 1 (shape [?, 1, 16, 16])"),
        "{e}"
    );
    let short = Tensor {
        data: TensorData::Raw(vec![0u8; 100].into()),
        ..image(1, 0)
    };
    let e = compiled.run(&[short]).unwrap_err();
    assert!(e.to_string().contains("100 bytes"), "{e}");
    assert!(matches!(
        compiled.run_named(&[("nope", image(1, 0))]),
        Err(Error::UnknownInput(_))
    ));
}

#[test]
fn an_index_out_of_range_is_a_run_time_error() {
    // Gather with indices from the caller: an index past the data is reported, not read.
    let text = r#"graph @main(%0: f32[4] "data", %1: i64[2] "idx") -> (f32[2] "out") {
  %2 = tensor.gather(%0, %1) : f32[2] loc("pick")
  return %2
}
"#;
    let g = kiln_tir::text::parse(text).unwrap();
    let compiled = Model::from_graph(g)
        .compile(&CompileOptions::default())
        .unwrap();
    let data = Tensor::from_f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let ok = compiled
        .run(&[data.clone(), Tensor::from_i64s(&[2], &[3, -4])])
        .unwrap();
    assert_eq!(
        tensor_to_array::<f32>(&ok[0])
            .unwrap()
            .into_raw_vec_and_offset()
            .0,
        vec![4.0, 1.0]
    );
    let e = compiled
        .run(&[data, Tensor::from_i64s(&[2], &[0, 4])])
        .unwrap_err();
    assert!(matches!(&e, Error::Run(m) if m.contains("\"pick\"")), "{e}");
}

#[test]
fn a_value_too_large_for_memory_is_a_compile_error_naming_it() {
    // An Expand to 2^60 elements: its byte size overflows u64 once multiplied by the element
    // width, which once sized the output buffer as 0 bytes.
    let text = r#"graph @main(%0: f32[1] "x") -> (f32[1048576, 1048576, 1048576] "huge") {
  %1 = const dense<i64[3]: [1048576, 1048576, 1048576]>
  %2 = tensor.expand(%0, %1) : f32[1048576, 1048576, 1048576]
  return %2
}
"#;
    let g = kiln_tir::text::parse(text).unwrap();
    let err = match Model::from_graph(g).compile(&CompileOptions::default()) {
        Ok(_) => panic!("a 4 EiB output compiled"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("\"huge\"") && err.contains("(output of tensor.expand)") && err.contains("over the limit"), "{err}");
}

/// A Loop of `trips` iterations adding 1 to a carried scalar, from an ONNX model.
fn counting_loop(trips: i64) -> Model {
    use kiln_testkit::onnx::*;
    let body = graph(
        vec![node("Add", &["v", "one"], &["v2"]), node("Identity", &["c"], &["c2"])],
        vec![value("i", INT64, Some(&[])), value("c", BOOL, Some(&[])), value("v", FLOAT, Some(&[]))],
        vec![value("c2", BOOL, None), value("v2", FLOAT, None)],
        vec![floats("one", &[], &[1.0])],
    );
    let g = graph(
        vec![with_graph(node("Loop", &["n", "", "x"], &["y"]), "body", body)],
        vec![value("x", FLOAT, Some(&[]))],
        vec![value("y", FLOAT, None)],
        vec![ints("n", &[], &[trips])],
    );
    Model::from_bytes(model(g, vec![opset("", 17)], vec![])).unwrap()
}

#[test]
fn a_run_stops_at_its_deadline_or_when_cancelled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let x = Tensor::from_f32s(&[], &[0.0]);
    let short = counting_loop(1000).compile(&CompileOptions::default()).unwrap();
    let y = short.run_with(std::slice::from_ref(&x), &kiln::RunOptions::timeout(Duration::from_secs(600))).unwrap();
    assert_eq!(tensor_to_array::<f32>(&y[0]).unwrap().iter().copied().collect::<Vec<_>>(), vec![1000.0]);

    // 2^32 iterations would take far longer than the test; the deadline ends it.
    let long = counting_loop(1 << 32).compile(&CompileOptions::default()).unwrap();
    let e = long.run_with(std::slice::from_ref(&x), &kiln::RunOptions::timeout(Duration::from_millis(50))).unwrap_err();
    assert!(matches!(e, Error::Stopped(m) if m.contains("deadline")), "{e}");

    let cancel = Arc::new(AtomicBool::new(false));
    let options = kiln::RunOptions { cancel: Some(cancel.clone()), deadline: None };
    let started = Instant::now();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            cancel.store(true, Ordering::Relaxed);
        });
        long.run_with(std::slice::from_ref(&x), &options).unwrap_err()
    });
    assert!(matches!(e, Error::Stopped(m) if m.contains("cancelled")), "{e} after {:?}", started.elapsed());
    // The flag stays with the run that was given it.
    assert!(short.run(std::slice::from_ref(&x)).is_ok());
}

#[test]
fn a_deadline_stops_a_run_between_kernels() {
    use kiln_testkit::onnx::*;
    use std::time::Duration;
    // 64 products of 1024² matrices: 137 GFLOP, seconds of work on any machine, no Loop.
    let n = 64;
    let names: Vec<String> = std::iter::once("x".to_string()).chain((0..n).map(|i| format!("m{i}"))).collect();
    let nodes = (0..n).map(|i| node("MatMul", &[&names[i], "x"], &[&names[i + 1]])).collect::<Vec<_>>();
    let g = graph(nodes, vec![value("x", FLOAT, Some(&[1024, 1024]))], vec![value(&format!("m{}", n - 1), FLOAT, None)], vec![]);
    let compiled = Model::from_bytes(model(g, vec![opset("", 17)], vec![])).unwrap().compile(&CompileOptions::default()).unwrap();
    let x = Tensor::from_f32s(&[1024, 1024], &vec![1e-3; 1024 * 1024]);
    let e = compiled.run_with(std::slice::from_ref(&x), &kiln::RunOptions::timeout(Duration::from_millis(20))).unwrap_err();
    assert!(matches!(e, Error::Stopped(m) if m.contains("deadline")), "{e}");
}

#[test]
fn a_caller_input_over_the_tensor_limit_is_refused_before_anything_is_compiled_or_allocated() {
    // The caller allocated the input; kiln must not size anything from it past the limits.
    let mut options = CompileOptions::default();
    options.limits.max_tensor_bytes = 64 << 10;
    let compiled = tiny().compile(&options).unwrap();
    assert!(compiled.run(&[image(4, 1)]).is_ok());
    let e = compiled.run(&[image(100, 1)]).unwrap_err();
    assert!(matches!(&e, Error::Limit(m) if m.contains("max_tensor_bytes")), "{e}");
    assert_eq!(compiled.specializations(), 1, "the refused shape left a specialization behind");
}

#[test]
fn specializations_past_the_limit_drop_the_least_recently_used() {
    let mut options = CompileOptions::default();
    options.limits.max_specializations = 2;
    let compiled = tiny().compile(&options).unwrap();
    let want: Vec<Vec<Tensor>> = (1..=3).map(|b| tiny().compile(&CompileOptions::default()).unwrap().run(&[image(b, 5)]).unwrap()).collect();
    for b in [1u64, 2, 3, 1, 2, 3, 3, 1] {
        let got = compiled.run(&[image(b, 5)]).unwrap();
        assert_eq!(got, want[b as usize - 1], "batch {b}");
        assert!(compiled.specializations() <= 2, "{} specializations kept", compiled.specializations());
    }
}

#[test]
fn a_loop_over_the_trip_limit_is_a_compile_error() {
    let mut options = CompileOptions::default();
    options.limits.max_loop_trips = 100;
    let e = counting_loop(1000).compile(&options).err().expect("compiled");
    assert!(matches!(&e, Error::Limit(m) if m.contains("trip count 1000")), "{e}");
}

#[test]
fn inputs_at_any_byte_address_give_the_same_outputs() {
    let compiled = tiny().compile(&CompileOptions::default()).unwrap();
    let x = image(2, 7);
    let want = compiled.run(std::slice::from_ref(&x)).unwrap();
    // The same bytes starting one byte into a buffer: a slice of a caller's file, say.
    let raw = x.raw().unwrap();
    let mut shifted = vec![0u8; raw.len() + 1];
    shifted[1..].copy_from_slice(raw);
    let bytes = bytes::Bytes::from(shifted).slice(1..);
    assert_ne!(bytes.as_ptr() as usize % 4, 0);
    let y = Tensor { dtype: x.dtype, shape: x.shape.clone(), data: TensorData::Raw(bytes) };
    assert_eq!(compiled.run(&[y]).unwrap(), want);
}
