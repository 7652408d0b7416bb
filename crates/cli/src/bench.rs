//! `kiln bench`: compile time and run latency on one line.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use kiln::{CompileOptions, Model};

use crate::run::gather_inputs;

pub fn bench(model_path: &Path, threads: usize, iters: usize) -> Result<()> {
    let start = Instant::now();
    let model = Model::load(model_path).with_context(|| format!("cannot import {}", model_path.display()))?;
    let compiled = model.compile(&CompileOptions::default())?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs = gather_inputs(&model, &[], true, 0)?;
    compiled.run(&inputs)?;
    let threads = threads.max(1);
    let mut times: Vec<f64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..iters)
                        .map(|_| {
                            let t = Instant::now();
                            compiled.run(&inputs).map(|_| t.elapsed().as_secs_f64() * 1e3)
                        })
                        .collect::<kiln::Result<Vec<f64>>>()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("bench thread")).collect::<kiln::Result<Vec<Vec<f64>>>>()
    })?
    .into_iter()
    .flatten()
    .collect();
    times.sort_by(f64::total_cmp);
    let pick = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    println!("compile_ms={compile_ms:.1} median_ms={:.3} p90_ms={:.3} threads={threads} iters={iters}", pick(0.5), pick(0.9));
    Ok(())
}
