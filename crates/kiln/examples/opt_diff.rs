//! Finds where the optimizer changes what a model computes: runs the bound graph and the
//! optimized graph, every node output made a graph output, as compiled code without further
//! optimization on the same inputs, and reports the first value (in the bound graph's order)
//! whose optimized counterpart, found by name, differs.
//!
//!     cargo run --release -p kiln --example opt_diff -- MODEL.onnx INPUT.pb...

use kiln::pipeline::{Bindings, Stage};
use kiln::{CompileOptions, Model};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = Model::load(&args[0]).expect("model loads");
    let inputs: Vec<kiln::Tensor> = args[1..].iter().map(|p| kiln_onnx::import::read_tensor_file(std::path::Path::new(p)).expect("input").1).collect();
    let pipeline = CompileOptions::default().pipeline();
    let bindings = Bindings { input_shapes: inputs.iter().enumerate().map(|(i, t)| (i, t.shape.clone())).collect(), ..Bindings::default() };
    let bound = pipeline.run(model.graph(), &bindings, Stage::Bind).expect("binds").graph;
    let optimized = pipeline.run(model.graph(), &bindings, Stage::Optimize).expect("optimizes").graph;
    let all = |g: &kiln_tir::Graph| {
        let mut g = g.clone();
        let nodes = g.body.nodes.clone();
        let mut names = Vec::new();
        g.body.results = Vec::new();
        for &n in &nodes {
            for (k, v) in g.node(n).outputs.clone().into_iter().enumerate() {
                let Some(v) = v else { continue };
                names.push(format!("{} {}#{k}", g.node(n).name, g.node(n).op.kind().text_name()));
                g.body.results.push(v);
            }
        }
        let options = CompileOptions { optimizer: None, ..CompileOptions::default() };
        let vals = Model::from_graph(g).compile(&options).expect("compiles").run(&inputs).expect("runs");
        names.into_iter().zip(vals).collect::<Vec<_>>()
    };
    let a = all(&bound);
    let b: std::collections::HashMap<String, kiln::Tensor> = all(&optimized).into_iter().collect();
    let mut compared = 0;
    for (name, want) in &a {
        let Some(got) = b.get(name) else {
            if std::env::var_os("OPT_DIFF_EXACT").is_some() {
                println!("{name}: not in the optimized graph");
            }
            continue;
        };
        compared += 1;
        if got.shape != want.shape || got.dtype != want.dtype {
            println!("{name}: {} vs {}", got.ty(), want.ty());
            continue;
        }
        if std::env::var_os("OPT_DIFF_EXACT").is_some() && got.dtype == kiln::DType::F32 {
            let f = |t: &kiln::Tensor| t.raw().unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<_>>();
            let worst = f(got).iter().zip(f(want)).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0f32, f32::max);
            if worst > 0.0 {
                println!("{name}: max relative difference {worst:.2e}");
            }
        }
        if let Err(e) = kiln_testkit::compare_with_onnxruntime(got, want, None) {
            println!("first difference at {name} ({}): {e}", want.ty());
            return;
        }
    }
    println!("no difference in {compared} values shared by name");
}
