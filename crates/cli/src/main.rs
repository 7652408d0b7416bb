//! `kiln`: the command-line front end.

mod bench;
mod conformance;
mod dump;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln compiles ONNX models to native code"
)]
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
        /// Bind a symbolic dim to a size first, e.g. `--bind batch=1`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
        /// With `--stage opt`: print the optimizer's stop reason, times and per-rule counts
        /// (as `//` comments above the IR).
        #[arg(long)]
        stats: bool,
        /// With `--stage opt`: above each op, the input nodes it computes and the rules that
        /// built it.
        #[arg(long)]
        explain: bool,
        /// Lower the imported IR without optimizing it (stages after `opt`).
        #[arg(long)]
        no_opt: bool,
        /// With `--stage loops`: after the IR, which top-level loops run their iterations in
        /// parallel and why the others do not (as `//` comments).
        #[arg(long)]
        parallel: bool,
    },
    /// Compile a model, run it once and write each output as DIR/NAME.npy.
    Run {
        /// The .onnx model.
        model: PathBuf,
        /// An input as NAME=FILE (.npy or ONNX TensorProto .pb); repeatable.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Fill inputs not given with seeded random values (floats in [-1, 1), integers in
        /// 0..8192; symbolic dims are 1).
        #[arg(long)]
        random_inputs: bool,
        /// Seed for --random-inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Where to write the outputs.
        #[arg(long)]
        output_dir: PathBuf,
    },
    /// Time compilation and runs on seeded random inputs; prints one line.
    Bench {
        /// The .onnx model.
        model: PathBuf,
        /// Intra-op threads per run (default: KILN_THREADS, else the available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Concurrent callers running the one compiled model.
        #[arg(long, default_value_t = 1)]
        callers: usize,
        /// Timed runs per caller (after one warm-up run).
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Sleep this long before each timed run, as a service between requests (the pool's
        /// workers fall asleep after 1 ms).
        #[arg(long, default_value_t = 0, value_name = "MS")]
        idle_ms: u64,
        /// Also time each kernel alone over the runs and print the N slowest, with their share.
        #[arg(long, value_name = "N")]
        kernels: Option<usize>,
    },
    /// Run the ONNX backend node suite through compiled code and compare outputs.
    Conformance {
        /// The generated suite (scripts/gen-node-suite.sh writes build/node-suite).
        dir: PathBuf,
        /// Per-case table (name, result, stage, reason, ms) as tab-separated values.
        #[arg(long, default_value = "build/conformance.tsv")]
        report: PathBuf,
        /// Only cases whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Fail (exit 1) if fewer cases pass than the number in this file.
        #[arg(long)]
        min_pass_file: Option<PathBuf>,
    },
}

/// Pipeline stages `kiln dump` can print.
#[derive(Clone, Copy, ValueEnum)]
enum Stage {
    /// The typed tensor IR straight from the importer.
    Tir,
    /// The tensor IR after the egg optimizer (folding, casts, algebra, layout, fusion).
    Opt,
    /// The loop IR after lowering.
    Loops,
    /// The memory plan: each buffer's place, size and lifetime.
    Plan,
    /// The Cranelift IR of every kernel.
    Clif,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Dump {
            file,
            stage,
            bindings,
            stats,
            explain,
            no_opt,
            parallel,
        } => {
            let options = dump::Options {
                stats,
                explain,
                optimize: !no_opt,
                parallel,
            };
            dump::dump(&file, stage, &parse_bindings(&bindings)?, &options)
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Run {
            model,
            inputs,
            random_inputs,
            seed,
            output_dir,
        } => {
            run::run(&model, &inputs, random_inputs, seed, &output_dir).map(|()| ExitCode::SUCCESS)
        }
        Command::Bench {
            model,
            threads,
            callers,
            iters,
            idle_ms,
            kernels,
        } => bench::bench(&model, threads, callers, iters, idle_ms, kernels).map(|()| ExitCode::SUCCESS),
        Command::Conformance {
            dir,
            report,
            filter,
            min_pass_file,
        } => conformance::conformance(&dir, &report, filter.as_deref(), min_pass_file.as_deref()),
    }
}

fn parse_bindings(list: &[String]) -> Result<Vec<(String, u64)>> {
    list.iter()
        .map(|b| {
            let Some((sym, n)) = b.split_once('=') else {
                bail!("--bind {b}: expected SYM=N")
            };
            let n: u64 = n
                .parse()
                .with_context(|| format!("--bind {b}: `{n}` is not a size"))?;
            Ok((sym.to_string(), n))
        })
        .collect()
}

/// Joins error lists one per line.
fn join<T: std::fmt::Display>(errs: &[T]) -> String {
    errs.iter()
        .map(|e| format!("  {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}
