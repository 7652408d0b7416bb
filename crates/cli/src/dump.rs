//! `kiln dump`: what the pipeline holds after a stage. It runs `kiln::Pipeline::run`, the
//! function compiling runs, and prints what it stopped with.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use kiln::{Bindings, CompileOptions, Stage, Target};

use crate::join;

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

/// What `kiln dump` prints besides the IR, and what it compiles for.
pub struct Options {
    /// Optimizer statistics (stage `optimize`).
    pub stats: bool,
    /// Provenance comments (stage `optimize`).
    pub explain: bool,
    /// Run the optimizer.
    pub optimize: bool,
    /// The parallel-loop analysis (stages `lower` and `schedule`).
    pub parallel: bool,
    /// The target (default: this machine).
    pub target: Option<Target>,
}

pub fn dump(file: &Path, stage: Stage, symbols: &[(String, u64)], shapes: &[(String, Vec<u64>)], options: &Options) -> Result<()> {
    let graph = load_tir(file)?;
    let mut bindings = Bindings { symbols: symbols.to_vec(), ..Bindings::default() };
    for (name, dims) in shapes {
        let index = graph
            .inputs()
            .iter()
            .position(|&v| graph.value(v).name == *name)
            .ok_or_else(|| anyhow!("--input-shape {name}=...: the model has no input named \"{name}\""))?;
        bindings.input_shapes.push((index, dims.clone()));
    }
    let mut compile = CompileOptions::from_env();
    if !options.optimize {
        compile.optimizer = None;
    }
    if let Some(target) = &options.target {
        compile.target = target.clone();
    }
    let pipeline = compile.pipeline();
    // Machine code has no text form of its own: the CLIF it is made from is printed instead.
    let stop = if stage == Stage::Codegen { Stage::Plan } else { stage };
    let out = pipeline.run(&graph, &bindings, stop)?;
    match stage {
        Stage::Import | Stage::Bind => print!("{}{}", kiln_tir::text::print(&out.graph), kiln_tir::text::print_assumptions(&out.graph)),
        Stage::Optimize => match &out.optimized {
            Some(opt) => {
                if options.stats {
                    print!("{}", kiln_passes::stats_text(&opt.stats));
                }
                if options.explain {
                    print!("{}", kiln_passes::explain_text(opt));
                } else {
                    print!("{}", kiln_tir::text::print(&opt.graph));
                }
            }
            None => print!("{}", kiln_tir::text::print(&out.graph)),
        },
        Stage::Lower | Stage::Schedule => {
            let program = out.program.as_ref().context("the pipeline stopped before lowering")?;
            print!("{}", kiln_loops::text::print(program));
            if options.parallel {
                for line in kiln_loops::parallel::report(program).lines() {
                    println!("// {line}");
                }
            }
        }
        Stage::Plan => {
            let (program, plan) = out.program.as_ref().zip(out.plan.as_ref()).context("the pipeline stopped before planning")?;
            print!("{}", plan.print(program));
        }
        Stage::Codegen => {
            let program = out.program.as_ref().context("the pipeline stopped before planning")?;
            print!("{}", kiln_codegen::clif_text(program, pipeline.target(), &pipeline.codegen_options())?);
        }
    }
    Ok(())
}
