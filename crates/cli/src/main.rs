//! `kiln`: the command-line front end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "kiln", version, about = "kiln compiles ONNX models to native code")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's IR after a pipeline stage (or parse a .tir file and print it again).
    Dump {
        /// An .onnx model or a .tir text file.
        file: PathBuf,
        /// The stage whose IR to print.
        #[arg(long, value_enum, default_value_t = Stage::Tir)]
        stage: Stage,
        /// Bind a symbolic dim to a size before printing, e.g. `--bind batch=1`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Stage {
    /// The typed tensor IR straight from the importer.
    Tir,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Dump { file, stage: Stage::Tir, bindings } => {
            let mut graph = load_tir(&file)?;
            if !bindings.is_empty() {
                let parsed = parse_bindings(&bindings)?;
                let refs: Vec<(&str, u64)> = parsed.iter().map(|(s, n)| (s.as_str(), *n)).collect();
                kiln_tir::infer::bind_symbols(&mut graph, &refs).map_err(|errs| anyhow::anyhow!(join(&errs)))?;
            }
            print!("{}", kiln_tir::text::print(&graph));
            Ok(())
        }
    }
}

/// Reads a graph from an ONNX model or from the tensor-IR text form, by file extension.
fn load_tir(path: &Path) -> Result<kiln_tir::Graph> {
    if path.extension().is_some_and(|e| e == "tir") {
        let src = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let g = kiln_tir::text::parse(&src).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        kiln_tir::verify::verify(&g).map_err(|errs| anyhow::anyhow!("{}: invalid IR:\n{}", path.display(), join(&errs)))?;
        Ok(g)
    } else {
        kiln_onnx::import::import_path(path).with_context(|| format!("cannot import {}", path.display()))
    }
}

fn parse_bindings(list: &[String]) -> Result<Vec<(String, u64)>> {
    list.iter()
        .map(|b| {
            let Some((sym, n)) = b.split_once('=') else { bail!("--bind {b}: expected SYM=N") };
            let n: u64 = n.parse().with_context(|| format!("--bind {b}: `{n}` is not a size"))?;
            Ok((sym.to_string(), n))
        })
        .collect()
}

fn join<T: std::fmt::Display>(errs: &[T]) -> String {
    errs.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n")
}
