//! `kiln dump`: the IR after each stage.

use std::path::Path;

use anyhow::{Context, Result, anyhow};

use crate::{Stage, join};

/// Reads a graph from an ONNX model or from the tensor-IR text form, by file extension.
fn load_tir(path: &Path) -> Result<kiln_tir::Graph> {
    if path.extension().is_some_and(|e| e == "tir") {
        let src = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let g = kiln_tir::text::parse(&src).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        kiln_tir::verify::verify(&g)
            .map_err(|errs| anyhow!("{}: invalid IR:\n{}", path.display(), join(&errs)))?;
        Ok(g)
    } else {
        kiln_onnx::import::import_path(path)
            .with_context(|| format!("cannot import {}", path.display()))
    }
}

/// What `kiln dump` prints besides the IR, and whether the optimizer runs.
pub struct Options {
    /// Optimizer statistics (stage `opt`).
    pub stats: bool,
    /// Provenance comments (stage `opt`).
    pub explain: bool,
    /// Run the optimizer before lowering.
    pub optimize: bool,
    /// The parallel-loop analysis (stage `loops`).
    pub parallel: bool,
}

pub fn dump(
    file: &Path,
    stage: Stage,
    bindings: &[(String, u64)],
    options: &Options,
) -> Result<()> {
    let mut graph = load_tir(file)?;
    if !bindings.is_empty() {
        let refs: Vec<(&str, u64)> = bindings.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        kiln_tir::infer::bind_symbols(&mut graph, &refs)
            .map_err(|errs| anyhow!("binding symbols:\n{}", join(&errs)))?;
    }
    if let Stage::Tir = stage {
        print!("{}", kiln_tir::text::print(&graph));
        return Ok(());
    }
    if options.optimize || matches!(stage, Stage::Opt) {
        let opt = kiln_passes::optimize(&graph, &kiln_passes::Limits::from_env())?;
        if let Stage::Opt = stage {
            if options.stats {
                print!("{}", kiln_passes::stats_text(&opt.stats));
            }
            if options.explain {
                print!("{}", kiln_passes::explain_text(&opt));
            } else {
                print!("{}", kiln_tir::text::print(&opt.graph));
            }
            return Ok(());
        }
        graph = opt.graph;
    }
    let mut program = kiln_loops::lower::lower(&graph)?;
    let compile = kiln::CompileOptions::default();
    if compile.prepack {
        // As compiling does: the dump shows the program that runs here.
        if compile.nchwc && kiln_loops::nchwc::pays_here() {
            kiln_loops::nchwc::blocked(&mut program);
        }
        kiln_loops::prepack::prepack(&mut program, kiln_loops::prepack::Layouts::detected());
    }
    match stage {
        Stage::Tir | Stage::Opt => unreachable!("printed above"),
        Stage::Loops => {
            print!("{}", kiln_loops::text::print(&program));
            if options.parallel {
                for line in kiln_loops::parallel::report(&program).lines() {
                    println!("// {line}");
                }
            }
        }
        Stage::Plan => print!("{}", kiln_loops::plan::plan(&program).print(&program)),
        Stage::Clif => print!("{}", kiln_codegen::clif_text(&program)?),
    }
    Ok(())
}
