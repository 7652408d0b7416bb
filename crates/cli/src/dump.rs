//! `kiln dump`: the IR after each stage.

use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::{join, Stage};

/// Reads a graph from an ONNX model or from the tensor-IR text form, by file extension.
fn load_tir(path: &Path) -> Result<kiln_tir::Graph> {
    if path.extension().is_some_and(|e| e == "tir") {
        let src = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let g = kiln_tir::text::parse(&src).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        kiln_tir::verify::verify(&g).map_err(|errs| anyhow!("{}: invalid IR:\n{}", path.display(), join(&errs)))?;
        Ok(g)
    } else {
        kiln_onnx::import::import_path(path).with_context(|| format!("cannot import {}", path.display()))
    }
}

pub fn dump(file: &Path, stage: Stage, bindings: &[(String, u64)]) -> Result<()> {
    let mut graph = load_tir(file)?;
    if !bindings.is_empty() {
        let refs: Vec<(&str, u64)> = bindings.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        kiln_tir::infer::bind_symbols(&mut graph, &refs).map_err(|errs| anyhow!("binding symbols:\n{}", join(&errs)))?;
    }
    if let Stage::Tir = stage {
        print!("{}", kiln_tir::text::print(&graph));
        return Ok(());
    }
    let program = kiln_loops::lower::lower(&graph)?;
    match stage {
        Stage::Tir => unreachable!("printed above"),
        Stage::Loops => print!("{}", kiln_loops::text::print(&program)),
        Stage::Plan => print!("{}", kiln_loops::plan::plan(&program).print(&program)),
        Stage::Clif => print!("{}", kiln_codegen::clif_text(&program)?),
    }
    Ok(())
}
