//! Spans for a trace viewer (Chrome's `about:tracing`, Perfetto): off unless [`start`] was
//! called; then the pipeline's stages, each kernel of each run and the pool workers' share of
//! split kernels record where their time went, on the thread that spent it.
//!
//! Recording takes a lock per span, so it is for looking at a run, not for production: a
//! disabled trace costs one relaxed load per kernel.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One slice: what ran, on which thread, from when (since the trace started) for how long.
#[derive(Clone, Debug)]
pub struct Span {
    /// A kernel's or a stage's name.
    pub name: String,
    /// The kind of slice: `compile`, `kernel`, `worker`.
    pub category: &'static str,
    /// A small number per thread, and the thread's name when it has one.
    pub thread: (u64, String),
    /// When it began, from [`start`].
    pub start: Duration,
    /// How long it took.
    pub duration: Duration,
    /// Extra details shown with the slice (the ONNX nodes behind a kernel).
    pub args: Vec<(&'static str, String)>,
}

static ON: AtomicBool = AtomicBool::new(false);
static SPANS: Mutex<Vec<Span>> = Mutex::new(Vec::new());
static ORIGIN: OnceLock<Mutex<Instant>> = OnceLock::new();
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

fn origin() -> &'static Mutex<Instant> {
    ORIGIN.get_or_init(|| Mutex::new(Instant::now()))
}

/// Starts recording (dropping what an earlier trace left); times count from now.
pub fn start() {
    *origin().lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    SPANS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    ON.store(true, Ordering::Release);
}

/// Stops recording and returns the spans, in the order they ended.
pub fn stop() -> Vec<Span> {
    ON.store(false, Ordering::Release);
    std::mem::take(&mut *SPANS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Whether spans are being recorded.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Records a span from `start` to now on this thread, if recording.
pub fn record(name: impl Into<String>, category: &'static str, start: Instant, args: Vec<(&'static str, String)>) {
    if !enabled() {
        return;
    }
    let end = Instant::now();
    let origin = *origin().lock().unwrap_or_else(|e| e.into_inner());
    let id = THREAD.with(|t| {
        if t.get() == 0 {
            t.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    });
    let thread = (id, std::thread::current().name().unwrap_or("").to_string());
    let span = Span { name: name.into(), category, thread, start: start.saturating_duration_since(origin), duration: end.saturating_duration_since(start), args };
    SPANS.lock().unwrap_or_else(|e| e.into_inner()).push(span);
}

/// Runs `f`, recording it as a span when recording.
pub fn span<R>(name: &str, category: &'static str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let start = Instant::now();
    let r = f();
    record(name, category, start, Vec::new());
    r
}
