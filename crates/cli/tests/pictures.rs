//! `kiln dump --format dot|svg`: mobilenet_v2's optimized graph as Graphviz source, with its
//! fused convolutions drawn as clusters of the ONNX nodes they came from, and as an SVG that
//! Graphviz draws (`scripts/graphviz.sh` installs it when `dot` is missing).

use std::process::Command;

fn dump(format: &str) -> std::process::Output {
    let model = kiln_testkit::shared_models().join("mobilenet_v2.onnx");
    Command::new(env!("CARGO_BIN_EXE_kiln")).arg("dump").arg(&model).args(["--stage", "optimize", "--format", format]).output().expect("kiln runs")
}

#[test]
fn the_optimized_graph_as_graphviz_source_and_svg() {
    let out = dump("dot");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dot = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(dot.starts_with("digraph kiln {") && dot.trim_end().ends_with('}'), "{dot}");
    // A fused convolution's cluster holds the Conv and its activation (Clip) as notes.
    assert!(dot.contains("fused_conv (") && dot.contains("shape=note, label=\"Conv ") && dot.contains("shape=note, label=\"Clip "), "{dot}");
    assert!(dot.contains("[shape=ellipse, label=\"input\\nf32[1, 3, 224, 224]\"]"), "{dot}");
    assert!(dot.contains("-> out0 [label=\"f32[1, 1000]\"]"), "{dot}");

    let setup = kiln_testkit::repo_root().join("scripts/graphviz.sh");
    let status = Command::new("bash").arg(&setup).status().expect("bash runs");
    assert!(status.success(), "{} failed", setup.display());
    let out = dump("svg");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"), "{}", &svg[..svg.len().min(500)]);
    // Every op box is drawn: Graphviz names each node's group by its dot id.
    let boxes = dot.lines().filter(|l| l.trim_start().starts_with('n') && l.contains("[label=") || l.contains("style=bold]")).count();
    assert!(boxes > 50 && svg.matches("class=\"node\"").count() > boxes, "{boxes} boxes");

    let bad = Command::new(env!("CARGO_BIN_EXE_kiln")).arg("dump").arg(kiln_testkit::shared_models().join("mlp.onnx")).args(["--stage", "lower", "--format", "dot"]).output().expect("kiln runs");
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("stages import, bind and optimize"));
}
