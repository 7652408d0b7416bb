//! `kiln bench --trace` writes a Chrome/Perfetto trace that parses, with a slice per pipeline
//! stage, one per kernel per run (named with the ONNX nodes it computes) nested in its run,
//! and the pool workers' shares of split kernels on their own named threads.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_writes_a_trace_of_stages_kernels_and_workers() {
    let model = kiln_testkit::shared_models().join("bert_mini.onnx");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bert_mini.trace.json");
    let status = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("bench")
        .arg(&model)
        .args(["--iters", "2", "--threads", "2", "--trace"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let slices = |cat: &str| events.iter().filter(|e| e["ph"] == "X" && e["cat"] == cat).collect::<Vec<_>>();

    let stages: Vec<&str> = slices("compile").iter().map(|e| e["name"].as_str().unwrap()).collect();
    for stage in ["import", "bind", "optimize", "lower", "schedule", "plan", "codegen", "pack weights"] {
        assert!(stages.contains(&stage), "no {stage} slice in {stages:?}");
    }

    // The warm-up run and the two timed ones, each with every kernel inside it.
    let runs = slices("run");
    let kernels = slices("kernel");
    assert_eq!(runs.len(), 3);
    assert!(!kernels.is_empty() && kernels.len() % 3 == 0, "{} kernel slices", kernels.len());
    let span = |e: &Value| (e["ts"].as_f64().unwrap(), e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap());
    for k in &kernels {
        let (a, b) = span(k);
        assert!(runs.iter().any(|r| {
            let (ra, rb) = span(r);
            ra <= a + 1e-3 && b <= rb + 1e-3 && r["tid"] == k["tid"]
        }), "kernel slice {k} is in no run");
    }
    // Kernels name the ONNX nodes behind them; a fused product names all of them. A node the
    // optimizer's rules built anew (a residual product moved through a reshape) has no source
    // node: in bert_mini that is 4 of 65 kernels.
    let nodes: Vec<&str> = kernels.iter().map(|k| k["args"]["nodes"].as_str().unwrap_or("")).collect();
    let unnamed = nodes.iter().filter(|n| n.is_empty()).count();
    assert!(unnamed * 10 <= nodes.len(), "{unnamed} of {} kernels without nodes: {nodes:?}", nodes.len());
    assert!(nodes.iter().any(|n| n.contains("node_gelu") && n.contains(" + ")), "no fused GELU product in {nodes:?}");

    // Split kernels ran partly on the pool's worker, whose thread is named.
    let workers = slices("worker");
    assert!(!workers.is_empty());
    let names: Vec<(&Value, &str)> = events.iter().filter(|e| e["ph"] == "M").map(|e| (&e["tid"], e["args"]["name"].as_str().unwrap())).collect();
    let worker_tid = &workers[0]["tid"];
    assert!(names.iter().any(|(t, n)| *t == worker_tid && n.starts_with("kiln-worker")), "{names:?}");
}
