//! `kiln bench`: compile time and run latency on one line.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kiln::{CompileOptions, Model};

use crate::run::{Sizes, gather_inputs};

/// What `kiln bench` runs: the model, its inputs (files, else random at `sizes`), and how.
pub struct Bench<'a> {
    pub model: &'a Path,
    pub inputs: &'a [String],
    pub sizes: Sizes,
    pub threads: Option<usize>,
    pub callers: usize,
    pub iters: usize,
    pub idle_ms: u64,
    pub kernels: Option<usize>,
    pub limits: kiln::ResourceLimits,
    /// Where to write a Chrome/Perfetto trace of compilation and every run.
    pub trace: Option<&'a Path>,
}

pub fn bench(b: Bench<'_>) -> Result<()> {
    let Bench { model: model_path, inputs: given, sizes, threads, callers, iters, idle_ms, kernels, limits, trace } = b;
    if trace.is_some() {
        kiln::trace::start();
    }
    let start = Instant::now();
    let model = Model::load_with(model_path, &limits).with_context(|| format!("cannot import {}", model_path.display()))?;
    let mut options = CompileOptions { limits, ..CompileOptions::from_env() };
    if let Some(t) = threads {
        options.threads = t.max(1);
    }
    let compiled = model.compile(&options)?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs = gather_inputs(&model, given, true, 0, &sizes, &options.limits)?;
    compiled.run(&inputs)?;
    let callers = callers.max(1);
    let mut times: Vec<f64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..callers)
            .map(|i| {
                std::thread::Builder::new().name(format!("caller-{i}")).spawn_scoped(s, || {
                    (0..iters)
                        .map(|_| {
                            std::thread::sleep(Duration::from_millis(idle_ms));
                            let t = Instant::now();
                            compiled.run(&inputs).map(|_| t.elapsed().as_secs_f64() * 1e3)
                        })
                        .collect::<kiln::Result<Vec<f64>>>()
                })
            })
            .collect::<std::io::Result<_>>()?;
        workers.into_iter().map(|w| w.join().expect("bench thread")).collect::<kiln::Result<Vec<Vec<f64>>>>().map_err(anyhow::Error::from)
    })?
    .into_iter()
    .flatten()
    .collect();
    times.sort_by(f64::total_cmp);
    let pick = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    if let Some(top) = kernels {
        print_kernels(&compiled, &inputs, iters.max(1), top)?;
    }
    if let Some(path) = trace {
        let recorded = kiln::trace::finish();
        std::fs::write(path, recorded.chrome_json()).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("trace: {} slices written to {} (open in ui.perfetto.dev or chrome://tracing)", recorded.spans.len(), path.display());
    }
    println!("compile_ms={compile_ms:.1} median_ms={:.3} p90_ms={:.3} threads={} callers={callers} iters={iters} idle_ms={idle_ms}", pick(0.5), pick(0.9), compiled.threads());
    Ok(())
}

/// The `top` kernels by median time over `runs` kernel-by-kernel runs, as `//` lines (medians,
/// as onnxruntime's per-node profiles are usually read, so one preempted call does not count).
fn print_kernels(compiled: &kiln::CompiledModel, inputs: &[kiln::Tensor], runs: usize, top: usize) -> Result<()> {
    let mut samples: Vec<(String, Vec<f64>)> = Vec::new();
    for _ in 0..runs {
        for (i, (name, t)) in compiled.profile(inputs)?.into_iter().enumerate() {
            match samples.get_mut(i) {
                Some(slot) => slot.1.push(t.as_secs_f64()),
                None => samples.push((name, vec![t.as_secs_f64()])),
            }
        }
    }
    let mut medians: Vec<(String, f64)> = samples
        .into_iter()
        .map(|(name, mut ts)| {
            ts.sort_by(f64::total_cmp);
            (name, ts[ts.len() / 2])
        })
        .collect();
    let sum: f64 = medians.iter().map(|(_, t)| t).sum();
    medians.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("// kernel                              ms/run   share  (median over {runs} runs)");
    for (name, t) in medians.iter().take(top) {
        println!("// {name:<34} {:>8.3} {:>6.1}%", t * 1e3, 100.0 * t / sum.max(f64::MIN_POSITIVE));
    }
    println!("// {} kernels, {:.3} ms/run timed one by one (sum of medians)", medians.len(), sum * 1e3);
    Ok(())
}
