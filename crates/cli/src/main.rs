//! `kiln`: the command-line front end.

mod bench;
mod compile;
mod conformance;
mod dump;
mod progress;
mod run;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

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
        /// The stage after which to print what the pipeline holds (default: `import`, or
        /// `bind` when something is bound).
        #[arg(long, value_enum)]
        stage: Option<DumpStage>,
        /// Bind a symbolic dim to a size first, e.g. `--bind batch=1`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
        /// Bind an input's shape, e.g. `--input-shape x=1,3,224,224`; repeatable.
        #[arg(long = "input-shape", value_name = "NAME=DIMS")]
        input_shapes: Vec<String>,
        /// Compile for this target instead of this machine, e.g.
        /// `"x86_64-unknown-linux-gnu +avx2 +fma"` (stages up to `plan`).
        #[arg(long)]
        target: Option<String>,
        /// With `--stage optimize`: print the optimizer's stop reason, times and per-rule counts
        /// (as `//` comments above the IR).
        #[arg(long)]
        stats: bool,
        /// With `--stage optimize`: above each op, the input nodes it computes and the rules that
        /// built it.
        #[arg(long)]
        explain: bool,
        /// Lower the bound IR without optimizing it.
        #[arg(long)]
        no_opt: bool,
        /// With `--stage lower` or `schedule`: after the IR, which top-level loops run their iterations in
        /// parallel and why the others do not (as `//` comments).
        #[arg(long)]
        parallel: bool,
        /// How to print a tensor-IR stage (`import`, `bind`, `optimize`): the text form, Graphviz
        /// source (fused ops as clusters of the nodes they came from), or an SVG picture drawn by
        /// Graphviz's `dot`.
        #[arg(long, value_enum, default_value = "text")]
        format: dump::Format,
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
        /// The shape of a random input, e.g. `--input-shape images=1x3x640x640`; repeatable.
        #[arg(long = "input-shape", value_name = "NAME=DIMS")]
        input_shapes: Vec<String>,
        /// The size of a symbolic dim of random inputs, e.g. `--bind batch=4`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
        /// Where to write the outputs.
        #[arg(long, short = 'o')]
        output_dir: PathBuf,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Time compilation and runs on seeded random inputs; prints one line.
    Bench {
        /// The .onnx model.
        model: PathBuf,
        /// An input as NAME=FILE (.npy or ONNX TensorProto .pb); the others are random.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// The shape of a random input, e.g. `--input-shape images=1x3x640x640`; repeatable.
        #[arg(long = "input-shape", value_name = "NAME=DIMS")]
        input_shapes: Vec<String>,
        /// The size of a symbolic dim of random inputs, e.g. `--bind batch=4`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
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
        /// Write a trace of compilation and every run (Chrome/Perfetto JSON): a slice per
        /// pipeline stage, per kernel (with its ONNX nodes) and per pool worker's share.
        #[arg(long, value_name = "FILE.json")]
        trace: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Compile a model to a relocatable object file (DIR/NAME.o) and its C header (DIR/NAME.h),
    /// and print the command that links them.
    Compile {
        /// The .onnx model.
        model: PathBuf,
        /// Where to write the files.
        #[arg(long, short = 'o')]
        output_dir: PathBuf,
        /// The C identifier the exported symbols start with (default: the file's name).
        #[arg(long)]
        name: Option<String>,
        /// The target, `TRIPLE [+FEATURE]...`, e.g. `aarch64-unknown-linux-gnu` (default: this
        /// machine and all its CPU features).
        #[arg(long)]
        target: Option<String>,
        /// `static`: call the runtime's kernels, linked from libkiln_runtime.a (copied beside
        /// the object); `none`: everything is generated code that needs only libc and libm.
        #[arg(long, value_enum, default_value = "static")]
        runtime: RuntimeArg,
        /// `embed`: the weights in the object's read-only data; `file`: in DIR/NAME.weights,
        /// which NAME_run takes as its first argument (loaded or mapped by the caller).
        #[arg(long, value_enum, default_value = "embed")]
        weights: WeightsArg,
        /// An input's shape, e.g. `--input-shape x=1,3,224,224`; repeatable.
        #[arg(long = "input-shape", value_name = "NAME=DIMS")]
        input_shapes: Vec<String>,
        /// The size of a symbolic dim of the inputs, e.g. `--bind batch=1`; repeatable.
        #[arg(long = "bind", value_name = "SYM=N")]
        bindings: Vec<String>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Serve models over HTTP on the Open Inference Protocol V2 (KServe V2 REST), until SIGTERM
    /// or Ctrl-C; requests in flight finish first.
    Serve {
        /// A model to serve as NAME=PATH; repeatable.
        #[arg(long = "model", value_name = "NAME=PATH")]
        models: Vec<String>,
        /// Serve every .onnx file in this directory, named by its file stem; repeatable.
        #[arg(long = "models", value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Compile at start-up for this input shape, e.g. `bert:input=1x128` (`MODEL:` may be
        /// left out when it applies to every model); other shapes compile on first request.
        #[arg(long = "input-shape", value_name = "[MODEL:]NAME=DIMS")]
        input_shapes: Vec<String>,
        /// Where to listen (port 0: any free port; the first line printed says which).
        #[arg(long, default_value = "127.0.0.1:8000", value_name = "HOST:PORT")]
        address: String,
        /// Intra-op threads per run (default: KILN_THREADS, else the available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Runs executing at once over all models; more requests wait for a slot until their
        /// deadline (default: the available cores).
        #[arg(long, value_name = "N")]
        max_concurrent_runs: Option<usize>,
        /// The largest request body.
        #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = kiln::limits::parse_bytes)]
        max_body_bytes: u64,
        /// The largest input tensor of a request.
        #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = kiln::limits::parse_bytes)]
        max_input_bytes: u64,
        /// Requests handled at once over all models (reading, decoding, running, answering);
        /// more are answered 503.
        #[arg(long, value_name = "N", default_value_t = 32)]
        max_requests: usize,
        /// A request's deadline from its arrival (a request's `timeout` parameter can shorten it).
        #[arg(long, value_name = "MS", default_value_t = 30_000)]
        timeout_ms: u64,
        /// Batch requests to the `--batch` models that arrive within this window into one run
        /// along their leading symbolic dim (0: no batching).
        #[arg(long, value_name = "MS", default_value_t = 0.0)]
        batch_window_ms: f64,
        /// A model whose requests are batched (its rows must be independent: the leading dim of
        /// every input and output is the batch); repeatable.
        #[arg(long = "batch", value_name = "NAME")]
        batched: Vec<String>,
        /// Rows of one batched run at most.
        #[arg(long, value_name = "N", default_value_t = 16)]
        max_batch: u64,
        #[command(flatten)]
        limits: LimitArgs,
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

/// Resource limits (`kiln::ResourceLimits`); each defaults to the library's default.
#[derive(Args)]
struct LimitArgs {
    /// The largest tensor, e.g. `4G` (default: 16 GiB or the machine's memory if less).
    #[arg(long, value_name = "BYTES", value_parser = kiln::limits::parse_bytes)]
    max_tensor_bytes: Option<u64>,
    /// The largest scratch arena of one run (default: the machine's memory).
    #[arg(long, value_name = "BYTES", value_parser = kiln::limits::parse_bytes)]
    max_arena_bytes: Option<u64>,
    /// The most nodes the imported graph may have after inlining functions.
    #[arg(long, value_name = "N")]
    max_nodes: Option<usize>,
    /// The most iterations of one Loop.
    #[arg(long, value_name = "N")]
    max_loop_trips: Option<u64>,
    /// Specializations (code for one set of input shapes) a model keeps; the least recently
    /// used is dropped past it (default 64).
    #[arg(long, value_name = "N")]
    max_specializations: Option<usize>,
}

impl LimitArgs {
    fn resolve(&self) -> kiln::ResourceLimits {
        let mut l = kiln::ResourceLimits::default();
        l.max_tensor_bytes = self.max_tensor_bytes.unwrap_or(l.max_tensor_bytes);
        l.max_arena_bytes = self.max_arena_bytes.unwrap_or(l.max_arena_bytes);
        l.import.max_nodes = self.max_nodes.unwrap_or(l.import.max_nodes);
        l.max_loop_trips = self.max_loop_trips.unwrap_or(l.max_loop_trips);
        l.max_specializations = self.max_specializations.unwrap_or(l.max_specializations).max(1);
        l
    }
}

/// Where an object file's runtime calls go (`kiln::target::Runtime`).
#[derive(Clone, Copy, ValueEnum)]
enum RuntimeArg {
    /// The runtime's kernels, from libkiln_runtime.a.
    Static,
    /// Generated code only: the object needs libc and libm.
    None,
}

/// Where an object file's weights go (`kiln_codegen::Weights`).
#[derive(Clone, Copy, ValueEnum)]
enum WeightsArg {
    /// In the object.
    Embed,
    /// In a file beside it.
    File,
}

/// Pipeline stages `kiln dump` can print (`kiln::Stage`); the older names are aliases.
#[derive(Clone, Copy, ValueEnum)]
enum DumpStage {
    /// The typed tensor IR straight from the importer.
    #[value(alias = "tir")]
    Import,
    /// The tensor IR with input shapes and symbols bound, shape computations and computations on weights folded.
    Bind,
    /// The tensor IR after the egg optimizer (folding, casts, algebra, layout, fusion).
    #[value(alias = "opt")]
    Optimize,
    /// The loop IR after lowering, before the target's rewrites.
    Lower,
    /// The loop IR that is compiled: blocked layouts and packed weights for the target.
    #[value(alias = "loops")]
    Schedule,
    /// The memory plan: each buffer's place, size and lifetime.
    Plan,
    /// The Cranelift IR of every kernel.
    #[value(alias = "clif")]
    Codegen,
    /// The object file `kiln compile` writes: sections, symbols, relocations (the target's
    /// runtime defaults to `static`).
    #[value(alias = "object")]
    Obj,
}

impl From<DumpStage> for kiln::Stage {
    fn from(s: DumpStage) -> kiln::Stage {
        match s {
            DumpStage::Import => kiln::Stage::Import,
            DumpStage::Bind => kiln::Stage::Bind,
            DumpStage::Optimize => kiln::Stage::Optimize,
            DumpStage::Lower => kiln::Stage::Lower,
            DumpStage::Schedule => kiln::Stage::Schedule,
            DumpStage::Plan => kiln::Stage::Plan,
            DumpStage::Codegen | DumpStage::Obj => kiln::Stage::Codegen,
        }
    }
}

fn main() -> ExitCode {
    // Like other command-line tools, end quietly when the reader of stdout goes away (`kiln ... |
    // head -1`); Rust ignores SIGPIPE, and printing to a closed pipe would panic.
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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
            input_shapes,
            target,
            stats,
            explain,
            no_opt,
            parallel,
            format,
        } => {
            let target = target.map(|t| t.parse::<kiln::Target>().map_err(|e| anyhow::anyhow!("--target {t}: {e}"))).transpose()?;
            let options = dump::Options { stats, explain, optimize: !no_opt, parallel, target, format };
            let shapes = input_shapes.iter().map(|s| parse_input_shape(s)).collect::<Result<Vec<_>>>()?;
            if matches!(stage, Some(DumpStage::Obj)) {
                return dump::object(&file, &parse_bindings(&bindings)?, &shapes, &options).map(|()| ExitCode::SUCCESS);
            }
            let bound = !bindings.is_empty() || !shapes.is_empty();
            let stage = stage.map_or(if bound { kiln::Stage::Bind } else { kiln::Stage::Import }, Into::into);
            dump::dump(&file, stage, &parse_bindings(&bindings)?, &shapes, &options)
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Run {
            model,
            inputs,
            random_inputs,
            seed,
            input_shapes,
            bindings,
            output_dir,
            limits,
        } => {
            let sizes = sizes(&input_shapes, &bindings)?;
            let options = kiln::CompileOptions { limits: limits.resolve(), ..kiln::CompileOptions::from_env() };
            progress::stages(|| run::run(&model, &inputs, random_inputs, seed, &sizes, &output_dir, &options)).map(|()| ExitCode::SUCCESS)
        }
        Command::Bench {
            model,
            inputs,
            input_shapes,
            bindings,
            threads,
            callers,
            iters,
            idle_ms,
            kernels,
            trace,
            limits,
        } => {
            let sizes = sizes(&input_shapes, &bindings)?;
            let limits = limits.resolve();
            let b = bench::Bench { model: &model, inputs: &inputs, sizes, threads, callers, iters, idle_ms, kernels, limits, trace: trace.as_deref() };
            bench::bench(b).map(|()| ExitCode::SUCCESS)
        }
        Command::Compile { model, output_dir, name, target, runtime, weights, input_shapes, bindings, limits } => {
            let weights = match weights {
                WeightsArg::Embed => kiln_codegen::Weights::Embedded,
                WeightsArg::File => kiln_codegen::Weights::External,
            };
            let runtime = match runtime {
                RuntimeArg::Static => kiln::target::Runtime::Static,
                RuntimeArg::None => kiln::target::Runtime::None,
            };
            let input_shapes = input_shapes.iter().map(|s| parse_input_shape(s)).collect::<Result<Vec<_>>>()?;
            let c = compile::Compile { model: &model, out_dir: &output_dir, name, target, runtime, input_shapes, symbols: parse_bindings(&bindings)?, weights, limits: limits.resolve() };
            progress::stages(|| compile::compile(c)).map(|()| ExitCode::SUCCESS)
        }
        Command::Serve { models, dirs, input_shapes, batched, address, threads, max_concurrent_runs, max_requests, max_body_bytes, max_input_bytes, timeout_ms, batch_window_ms, max_batch, limits } => {
            if !(0.0..=60_000.0).contains(&batch_window_ms) {
                bail!("--batch-window-ms {batch_window_ms:?}: a window from 0 to 60000 ms");
            }
            let mut serve_limits = kiln_serve::Limits {
                max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(usize::MAX),
                max_tensor_bytes: max_input_bytes,
                timeout: serve::millis(timeout_ms),
                max_requests_in_flight: max_requests.max(1),
                ..kiln_serve::Limits::default()
            };
            if let Some(n) = max_concurrent_runs {
                serve_limits.max_concurrent_runs = n.max(1);
            }
            let batching = (batch_window_ms > 0.0).then(|| kiln_serve::BatchOptions { window: std::time::Duration::from_secs_f64(batch_window_ms / 1e3), max_rows: max_batch.max(1) });
            let s = serve::Serve { models, dirs, input_shapes, batched, address, threads, limits: limits.resolve(), serve: kiln_serve::ServeOptions { limits: serve_limits, batching } };
            serve::serve(s).map(|()| ExitCode::SUCCESS)
        }
        Command::Conformance {
            dir,
            report,
            filter,
            min_pass_file,
        } => conformance::conformance(&dir, &report, filter.as_deref(), min_pass_file.as_deref()),
    }
}

fn sizes(input_shapes: &[String], bindings: &[String]) -> Result<run::Sizes> {
    let input_shapes = input_shapes.iter().map(|s| parse_input_shape(s)).collect::<Result<Vec<_>>>()?;
    Ok(run::Sizes { input_shapes, symbols: parse_bindings(bindings)? })
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

/// `NAME=D0,D1,...` (an empty list for a scalar).
fn parse_input_shape(text: &str) -> Result<(String, Vec<u64>)> {
    let Some((name, dims)) = text.split_once('=') else {
        bail!("--input-shape {text}: expected NAME=DIMS")
    };
    // `1x3x224x224` or `1,3,224,224`; empty for a scalar.
    let dims = dims
        .split([',', 'x'])
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim().parse::<u64>().with_context(|| format!("--input-shape {text}: `{d}` is not a size")))
        .collect::<Result<Vec<u64>>>()?;
    Ok((name.to_string(), dims))
}

/// Joins error lists one per line.
fn join<T: std::fmt::Display>(errs: &[T]) -> String {
    errs.iter()
        .map(|e| format!("  {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}
