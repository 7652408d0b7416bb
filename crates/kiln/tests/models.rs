//! The nine shared models run through JIT-compiled code and agree with onnxruntime (rtol 1e-3,
//! atol 1e-4) on the fixed inputs of `scripts/model-reference.sh`, and give bit-identical outputs
//! on 1, 2 and 3 intra-op threads.

use kiln::{CompileOptions, Model, Tensor};

fn check(name: &str) {
    kiln_testkit::check_model_against_onnxruntime(name, |g, inputs| {
        let run = |threads: usize| -> Result<Vec<Tensor>, String> {
            let options = CompileOptions { threads, ..CompileOptions::default() };
            let compiled = Model::from_graph(g.clone()).compile(&options).map_err(|e| e.to_string())?;
            assert_eq!(compiled.threads(), threads);
            compiled.run(inputs).map_err(|e| e.to_string())
        };
        let alone = run(1)?;
        for threads in [2, 3] {
            assert_eq!(run(threads)?, alone, "{name}: {threads} threads change the outputs");
        }
        Ok(alone)
    });
}

#[test]
fn mlp() {
    check("mlp");
}

#[test]
fn resnet50() {
    check("resnet50");
}

#[test]
fn mobilenet_v2() {
    check("mobilenet_v2");
}

#[test]
fn bert_mini() {
    check("bert_mini");
}

#[test]
fn mobilenet_v3_large() {
    check("mobilenet_v3_large");
}

#[test]
fn gru_tagger() {
    check("gru_tagger");
}

#[test]
fn llama_tiny() {
    check("llama_tiny");
}

#[test]
fn audio_encoder() {
    check("audio_encoder");
}

#[test]
fn mobilenet_v2_qdq() {
    check("mobilenet_v2_qdq");
}
