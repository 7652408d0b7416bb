//! `kiln-bench worker`: one engine in its own process, so its peak RSS is its own.
//!
//! It builds the inputs, loads the model (timed), warms up, writes its first output for the
//! agreement check, says `ready`, and then idles on stdin until the driver asks for a batch.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::engine::{self, EngineKind, Setup};
use crate::inputs::{self, InputSpec};
use crate::protocol::{Command, Reply};

/// The worker's command line, as the driver writes it.
#[derive(Clone)]
pub struct WorkerArgs {
    pub engine: EngineKind,
    pub model: PathBuf,
    pub specs: Vec<InputSpec>,
    pub seed: u64,
    pub threads: usize,
    pub warmup: usize,
    /// Where to write the first output as little-endian `f32`s.
    pub dump: Option<PathBuf>,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["worker".to_string(), "--engine".into(), self.engine.name().into(), "--model".into(), self.model.display().to_string()];
        for s in &self.specs {
            args.extend(["--input".to_string(), s.to_arg()]);
        }
        args.extend(["--seed".into(), self.seed.to_string(), "--threads".into(), self.threads.to_string(), "--warmup".into(), self.warmup.to_string()]);
        if let Some(d) = &self.dump {
            args.extend(["--dump".into(), d.display().to_string()]);
        }
        args
    }

    pub fn parse(args: &[String]) -> Result<WorkerArgs> {
        let mut w = WorkerArgs { engine: EngineKind::Kiln, model: PathBuf::new(), specs: Vec::new(), seed: 0, threads: 1, warmup: 1, dump: None };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--engine" => w.engine = EngineKind::parse(value()?)?,
                "--model" => w.model = PathBuf::from(value()?),
                "--input" => w.specs.push(InputSpec::parse_arg(value()?)?),
                "--seed" => w.seed = value()?.parse()?,
                "--threads" => w.threads = value()?.parse()?,
                "--warmup" => w.warmup = value()?.parse()?,
                "--dump" => w.dump = Some(PathBuf::from(value()?)),
                _ => anyhow::bail!("worker: unknown argument {flag}"),
            }
        }
        Ok(w)
    }
}

/// Runs the worker; protocol errors go to stdout as `error ...` lines.
pub fn main(args: &[String]) -> Result<()> {
    // Not locked for the worker's lifetime: a library thread that prints must not block.
    let mut out = std::io::stdout();
    let result = serve(args, &mut out);
    if let Err(e) = &result {
        writeln!(out, "{}", Reply::Error(format!("{e:#}")).to_line())?;
        out.flush()?;
    }
    result
}

fn serve(args: &[String], out: &mut impl Write) -> Result<()> {
    let args = WorkerArgs::parse(args)?;
    let data = inputs::generate(&args.specs, args.seed);
    let setup = Setup { model: &args.model, specs: &args.specs, data: &data, threads: args.threads.max(1) };
    engine::prepare(args.engine)?;
    let start = Instant::now();
    let mut engine = engine::load(args.engine, &setup)?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let first = engine.first_output()?;
    if let Some(path) = &args.dump {
        let bytes: Vec<u8> = first.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for _ in 1..args.warmup {
        engine.run()?;
    }
    reply(out, &Reply::Ready { load_ms })?;
    for line in std::io::stdin().lock().lines() {
        match Command::parse(&line?)? {
            Command::Run { timed, untimed } => {
                for _ in 0..untimed {
                    engine.run()?;
                }
                let mut times = Vec::with_capacity(timed);
                for _ in 0..timed {
                    let t = Instant::now();
                    engine.run()?;
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
                reply(out, &Reply::Times(times))?;
            }
            Command::Quit => break,
        }
    }
    reply(out, &Reply::PeakRss { kb: peak_rss_kb()? })
}

fn reply(out: &mut impl Write, r: &Reply) -> Result<()> {
    writeln!(out, "{}", r.to_line())?;
    out.flush()?;
    Ok(())
}

/// The process's peak resident set (`VmHWM` in /proc/self/status), in KiB.
fn peak_rss_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM in /proc/self/status")?;
    line.split_whitespace().nth(1).context("malformed VmHWM")?.parse().context("malformed VmHWM")
}
