//! `kiln dump --stage S` runs the pipeline that compiling runs: for every shared model, the
//! memory plan the dump prints is the plan of the program a compiled model runs, and the
//! scheduled loop IR it prints is that program.

use std::process::Command;

use kiln::{CompileOptions, Model};

/// `kiln dump MODEL --stage STAGE` with the test's environment.
fn dump(model: &std::path::Path, stage: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("dump")
        .arg(model)
        .args(["--stage", stage])
        .output()
        .expect("kiln runs");
    assert!(out.status.success(), "kiln dump {} --stage {stage}: {}", model.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("the dump is UTF-8")
}

#[test]
fn the_dumped_plan_and_program_are_those_a_compiled_model_runs() {
    let dir = kiln_testkit::shared_models();
    let mut models: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    models.sort();
    assert!(models.len() >= 4, "the shared models are beside the repository ({})", dir.display());
    for path in models {
        let model = Model::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let compiled = model.compile(&CompileOptions::from_env()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let shapes: Vec<Vec<u64>> = model
            .graph()
            .inputs()
            .iter()
            .map(|&v| model.graph().ty(v).known_dims().expect("the shared models' inputs are static"))
            .collect();
        let spec = compiled.specialization(&shapes, &[]).expect("compiled at compile time");
        let plan = spec.plan().print(spec.program());
        assert_eq!(dump(&path, "plan"), plan, "{}: the dumped plan differs from the compiled one", path.display());
        let program = kiln_loops::text::print(spec.program());
        assert_eq!(dump(&path, "schedule"), program, "{}: the dumped program differs from the compiled one", path.display());
    }
}
