//! `kiln-bench`: kiln, onnxruntime and tract side by side on the same models, inputs and
//! thread count.
//!
//! ```text
//! kiln-bench [--threads N] [--iters N] [--rounds N] [--warmup N] [--turn-warmup N] [--seed N]
//!            [--engines kiln,kiln-base,onnxruntime,tract] [--base-bin PATH] [--no-gemm]
//!            [--input-shape NAME=D,D,..]... [--bind SYM=N]... [--int-max INPUT=N]... [MODEL.onnx...]
//! kiln-bench gemm [--n N] [--reps N]
//! ```
//!
//! The driver starts one worker process per engine (`kiln-bench worker ...`, see [`worker`]),
//! each loading the model and then idling on stdin; it then hands out batches of runs in turn
//! (kiln, onnxruntime, tract, kiln, ...), so the engines share the machine's state but never run
//! at once, and each worker's peak RSS is its own. onnxruntime is the PyPI wheel's
//! `libonnxruntime.so`, loaded through `ORT_DYLIB_PATH` (default: the one in
//! `build/venv-ort`, which `scripts/bench.sh` installs). With `--base-bin PATH` (another build of
//! kiln-bench, e.g. from `scripts/bench.sh --base REV`), the `kiln-base` engine is that build's
//! kiln, for a before/after table in one run. Finally it times `kiln_rt_sgemm`.

mod driver;
mod engine;
mod gemm;
mod inputs;
mod protocol;
mod report;
mod worker;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use driver::Settings;
use engine::EngineKind;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("worker") => worker::main(&args[1..]),
        Some("gemm") => gemm_main(&args[1..]),
        _ => drive(&args),
    };
    if let Err(e) = result {
        eprintln!("kiln-bench: {e:#}");
        std::process::exit(1);
    }
}

/// The repository root (this crate lives in `<repo>/benches`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Every `.onnx` file in `$KILN_SHARED_MODELS` (default `../shared/models`), by name.
fn default_models() -> Result<Vec<PathBuf>> {
    let dir = std::env::var_os("KILN_SHARED_MODELS").map(PathBuf::from).unwrap_or_else(|| repo_root().join("../shared/models"));
    let mut models: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("no models given, and {} cannot be listed", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    models.sort();
    if models.is_empty() {
        bail!("no models given, and {} has no .onnx files", dir.display());
    }
    Ok(models)
}

fn drive(args: &[String]) -> Result<()> {
    let mut s = Settings { models: Vec::new(), engines: EngineKind::ALL.to_vec(), threads: 1, iters: 50, rounds: 10, warmup: 2, turn_warmup: 1, seed: 0, ort_dylib: None, base_bin: None, input_shapes: Vec::new(), bind: Vec::new(), int_max: Vec::new() };
    let mut gemm = true;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--threads" => s.threads = value()?.parse::<usize>()?.max(1),
            "--iters" => s.iters = value()?.parse::<usize>()?.max(1),
            "--rounds" => s.rounds = value()?.parse()?,
            "--warmup" => s.warmup = value()?.parse()?,
            "--turn-warmup" => s.turn_warmup = value()?.parse()?,
            "--seed" => s.seed = value()?.parse()?,
            "--engines" => s.engines = value()?.split(',').map(EngineKind::parse).collect::<Result<_>>()?,
            "--no-gemm" => gemm = false,
            "--base-bin" => s.base_bin = Some(PathBuf::from(value()?)),
            "--input-shape" => {
                let v = value()?;
                let (name, dims) = v.split_once('=').with_context(|| format!("--input-shape {v}: expected NAME=D,D,..."))?;
                let dims = dims.split([',', 'x']).filter(|d| !d.is_empty()).map(|d| d.parse::<u64>().with_context(|| format!("--input-shape {v}: `{d}` is not a size"))).collect::<Result<_>>()?;
                s.input_shapes.push((name.to_string(), dims));
            }
            flag @ ("--bind" | "--int-max") => {
                let v = value()?;
                let (name, n) = v.split_once('=').with_context(|| format!("{flag} {v}: expected NAME=N"))?;
                let n = n.parse().with_context(|| format!("{flag} {v}: `{n}` is not a number"))?;
                if flag == "--bind" { s.bind.push((name.to_string(), n)) } else { s.int_max.push((name.to_string(), n)) }
            }
            "-h" | "--help" => {
                println!("usage: kiln-bench [--threads N] [--iters N] [--rounds N] [--warmup N] [--turn-warmup N] [--seed N] [--engines kiln,kiln-base,onnxruntime,tract] [--base-bin PATH] [--no-gemm] [--input-shape NAME=D,D,..]... [--bind SYM=N]... [--int-max INPUT=N]... [MODEL.onnx...]");
                return Ok(());
            }
            flag if flag.starts_with('-') => bail!("unknown option {flag} (try --help)"),
            model => s.models.push(PathBuf::from(model)),
        }
    }
    if s.models.is_empty() {
        s.models = default_models()?;
    }
    if s.base_bin.is_some() && !s.engines.contains(&EngineKind::KilnBase) {
        s.engines.insert(1, EngineKind::KilnBase);
    }
    s.ort_dylib = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from).or_else(|| driver::find_ort_dylib(&repo_root()));
    let ort = s.ort_dylib.as_ref().map_or("(not found: run scripts/bench.sh)".to_string(), |p| p.display().to_string());
    println!(
        "kiln-bench: threads={} iters={} rounds={} warmup={} turn-warmup={} seed={} engines={}",
        s.threads,
        s.iters,
        s.rounds,
        s.warmup,
        s.turn_warmup,
        s.seed,
        s.engines.iter().map(|e| e.name()).collect::<Vec<_>>().join(",")
    );
    println!("onnxruntime: {ort}");
    println!("cpu: {}", cpu_model());
    println!("load average before: {}", load_average());
    println!();
    let scratch = std::env::temp_dir().join(format!("kiln-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut results = Vec::new();
    for model in &s.models {
        results.push(driver::bench_model(&s, model, &scratch).with_context(|| format!("{}", model.display()))?);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{}", report::table(&results, s.threads));
    println!("load average after: {} (other processes running on these cores make every figure noisy)", load_average());
    if gemm {
        println!();
        println!("{}", gemm::measure(1024, 5).line());
    }
    Ok(())
}

fn gemm_main(args: &[String]) -> Result<()> {
    let (mut n, mut reps) = (1024, 5);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--n" => n = value()?.parse()?,
            "--reps" => reps = value()?.parse()?,
            other => bail!("gemm: unknown argument {other}"),
        }
    }
    println!("{}", gemm::measure(n, reps).line());
    Ok(())
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let name = info.lines().find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())).unwrap_or_else(|| "unknown".into());
    format!("{name}, {} logical cores", std::thread::available_parallelism().map_or(0, |n| n.get()))
}

/// The 1, 5 and 15 minute load averages, to tell a quiet machine from a busy one.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_else(|_| "unknown".into())
}
