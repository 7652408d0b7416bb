//! The driver: one worker process per engine and model, batches of runs handed out in turn so
//! no two engines ever run at once, and the table.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command as Process, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::engine::EngineKind;
use crate::inputs;
use crate::protocol::{Command, Reply};
use crate::report::{EngineResult, ModelResult};
use crate::worker::WorkerArgs;

/// The driver's settings (the command line).
#[derive(Clone, Debug)]
pub struct Settings {
    pub models: Vec<PathBuf>,
    pub engines: Vec<EngineKind>,
    pub threads: usize,
    /// Timed runs per engine and model.
    pub iters: usize,
    /// How many turns each engine gets; `iters` is split evenly over them.
    pub rounds: usize,
    /// Untimed runs when a worker starts.
    pub warmup: usize,
    /// Untimed runs at the start of every turn: the other engines' turns evict this one's
    /// weights from the caches, and a service running one model keeps them warm.
    pub turn_warmup: usize,
    pub seed: u64,
    /// Shapes of named inputs, over what the model declares.
    pub input_shapes: Vec<(String, Vec<u64>)>,
    /// Sizes of the models' named symbolic input dims (the others are 1).
    pub bind: Vec<(String, u64)>,
    /// Bounds of the values of named integer inputs (the others are below 8192).
    pub int_max: Vec<(String, u64)>,
    /// onnxruntime's shared library, passed to the workers as `ORT_DYLIB_PATH`.
    pub ort_dylib: Option<PathBuf>,
    /// Another build of kiln-bench whose kiln is the `kiln-base` engine.
    pub base_bin: Option<PathBuf>,
}

/// Pause before each turn, once the previous engine's process is idle: the time a service
/// idles between requests, when a pool's threads may fall asleep.
const TURN_GAP: Duration = Duration::from_millis(20);

/// An engine's process counts as idle once its threads have run for less than [`QUIET_SLACK`]
/// over this long. onnxruntime's pool threads spin for ~50 ms after each run (measured: a
/// 2-thread session used 45–52 ms of CPU in a 100–500 ms sleep after a run), longer than
/// [`TURN_GAP`]; without waiting, they took one of two cores from the next engine's turn.
const QUIET: Duration = Duration::from_millis(5);
const QUIET_SLACK: Duration = Duration::from_micros(200);
/// Give up waiting for quiet after this long (a process that never idles still gets measured).
const QUIET_MAX: Duration = Duration::from_secs(2);

/// A running worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    label: String,
}

impl Worker {
    fn spawn(args: &WorkerArgs, ort_dylib: Option<&Path>, base_bin: Option<&Path>) -> Result<Worker> {
        let (exe, worker_args) = match args.engine {
            // The baseline build runs its own kiln engine.
            EngineKind::KilnBase => {
                let exe = base_bin.context("the kiln-base engine needs --base-bin PATH")?.to_path_buf();
                (exe, WorkerArgs { engine: EngineKind::Kiln, ..args.clone() })
            }
            _ => (std::env::current_exe().context("cannot find the kiln-bench executable")?, args.clone()),
        };
        let mut process = Process::new(exe);
        if let Some(lib) = ort_dylib {
            process.env("ORT_DYLIB_PATH", lib);
        }
        let mut child = process.args(worker_args.to_args()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("cannot start a worker")?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("worker stdout")?);
        Ok(Worker { child, stdin, stdout, label: args.engine.name().to_string() })
    }

    fn send(&mut self, c: Command) -> Result<()> {
        writeln!(self.stdin, "{}", c.to_line()).and_then(|_| self.stdin.flush()).with_context(|| format!("{} worker is gone", self.label))
    }

    /// The next protocol line; anything else a library printed to stdout is passed to stderr.
    fn recv(&mut self) -> Result<Reply> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("{} worker exited ({})", self.label, self.child.wait().map(|s| s.to_string()).unwrap_or_default());
            }
            match Reply::parse(&line) {
                Ok(Reply::Error(msg)) => bail!("{msg}"),
                Ok(r) => return Ok(r),
                Err(_) => eprint!("[{}] {line}", self.label),
            }
        }
    }

    /// Waits until the worker's threads have been idle for [`QUIET`] (see there).
    fn wait_until_idle(&self) {
        let start = Instant::now();
        let mut last = cpu_time(self.child.id());
        let mut since = Instant::now();
        while start.elapsed() < QUIET_MAX {
            std::thread::sleep(Duration::from_millis(1));
            let now = cpu_time(self.child.id());
            match (last, now) {
                (Some(a), Some(b)) if b.saturating_sub(a) < QUIET_SLACK => {
                    if since.elapsed() >= QUIET {
                        return;
                    }
                }
                (Some(_), Some(_)) => {
                    last = now;
                    since = Instant::now();
                }
                // No per-thread accounting (not Linux): the fixed gap alone.
                _ => return,
            }
        }
    }

    fn finish(mut self) -> Result<u64> {
        self.send(Command::Quit)?;
        let reply = self.recv()?;
        self.child.wait()?;
        match reply {
            Reply::PeakRss { kb } => Ok(kb),
            other => bail!("{}: expected peak RSS, got {other:?}", self.label),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker left over after an error: it only ever waits on stdin, so ending it is safe.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A model's name in the table: its file stem, or its directory's name for `DIR/model.onnx`
/// (the zoo's and the node suite's layout).
fn model_name(model: &Path) -> String {
    let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    match model.parent().and_then(Path::file_name) {
        Some(dir) if stem == "model" => dir.to_string_lossy().into_owned(),
        _ => stem,
    }
}

/// Benchmarks one model: workers start one after the other (load times are not disturbed),
/// then take turns.
pub fn bench_model(settings: &Settings, model: &Path, scratch: &Path) -> Result<ModelResult> {
    let specs = inputs::read_specs(model, &settings.input_shapes, &settings.bind, &settings.int_max)?;
    let name = model_name(model);
    let mut results: Vec<EngineResult> = settings.engines.iter().map(|&e| EngineResult::new(e)).collect();
    let mut workers: Vec<Option<Worker>> = Vec::new();
    for r in results.iter_mut() {
        let dump = scratch.join(format!("{name}.{}.f32", r.engine.name()));
        let args = WorkerArgs { engine: r.engine, model: model.to_path_buf(), specs: specs.clone(), seed: settings.seed, threads: settings.threads, warmup: settings.warmup, dump: Some(dump.clone()) };
        eprintln!("{name}: loading in {}", r.engine.name());
        let started = Worker::spawn(&args, settings.ort_dylib.as_deref(), settings.base_bin.as_deref()).and_then(|mut w| match w.recv()? {
            Reply::Ready { load_ms } => Ok((w, load_ms)),
            other => bail!("expected ready, got {other:?}"),
        });
        match started {
            Ok((w, load_ms)) => {
                r.load_ms = Some(load_ms);
                r.output = std::fs::read(&dump).ok().map(|b| b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
                workers.push(Some(w));
            }
            Err(e) => {
                r.error = Some(format!("{e:#}"));
                workers.push(None);
            }
        }
    }
    let rounds = settings.rounds.clamp(1, settings.iters.max(1));
    // The worker whose turn came last.
    let mut last: Option<usize> = None;
    for round in 0..rounds {
        let batch = settings.iters / rounds + usize::from(round < settings.iters % rounds);
        let n = workers.len();
        // Rotate who goes first, so no engine always runs right after the same one.
        for i in (0..n).map(|i| (i + round) % n) {
            if workers[i].is_none() {
                continue;
            }
            if let Some(prev) = last.and_then(|p| workers[p].as_ref()) {
                prev.wait_until_idle();
            }
            let Some(w) = workers[i].as_mut() else { continue };
            std::thread::sleep(TURN_GAP);
            last = Some(i);
            let turn = w.send(Command::Run { timed: batch, untimed: settings.turn_warmup }).and_then(|_| w.recv());
            match turn {
                Ok(Reply::Times(ts)) => results[i].times.extend(ts),
                Ok(other) => {
                    results[i].error = Some(format!("expected times, got {other:?}"));
                    workers[i] = None;
                }
                Err(e) => {
                    results[i].error = Some(format!("{e:#}"));
                    workers[i] = None;
                }
            }
        }
        eprintln!("{name}: round {}/{rounds}", round + 1);
    }
    for (r, w) in results.iter_mut().zip(workers) {
        if let Some(w) = w {
            match w.finish() {
                Ok(kb) => r.peak_rss_kb = Some(kb),
                Err(e) => r.error = Some(format!("{e:#}")),
            }
        }
    }
    Ok(ModelResult { model: name, engines: results })
}

/// The CPU time all of process `pid`'s threads have run (`/proc/PID/task/*/schedstat`, in
/// nanoseconds), or `None` where that is not available.
fn cpu_time(pid: u32) -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        // A thread that exits between listing and reading no longer runs: skip it.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// `<repo>/build/venv-ort/.../onnxruntime/capi/libonnxruntime.so.<version>`, if installed.
pub fn find_ort_dylib(repo: &Path) -> Option<PathBuf> {
    let lib = repo.join("build/venv-ort/lib");
    for py in std::fs::read_dir(lib).ok()?.flatten() {
        let capi = py.path().join("site-packages/onnxruntime/capi");
        for f in std::fs::read_dir(&capi).into_iter().flatten().flatten() {
            if f.file_name().to_string_lossy().starts_with("libonnxruntime.so.") {
                return Some(f.path());
            }
        }
    }
    None
}
