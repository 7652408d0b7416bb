//! Traces of compilation and runs for Chrome's `about:tracing` and Perfetto: [`start`], compile
//! and run, then [`finish`] and write [`Trace::chrome_json`]. Each pipeline stage, each kernel
//! of each run (with the ONNX nodes it computes) and each pool worker's share of a split
//! kernel is a slice on the thread that ran it.

use std::fmt::Write;
use std::sync::RwLock;

pub use kiln_runtime::trace::Span;

static ON_STAGE: RwLock<Option<fn(&str)>> = RwLock::new(None);

/// Calls `hook` with each pipeline stage's name (`import`, `bind`, `optimize`, …) as it
/// starts, process-wide: a command-line progress line. `None` removes it.
pub fn on_stage(hook: Option<fn(&str)>) {
    *ON_STAGE.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// Runs one stage of the pipeline: announced to the [`on_stage`] hook, and a slice of the
/// trace when one is recording.
pub(crate) fn stage<R>(name: &str, f: impl FnOnce() -> R) -> R {
    if let Some(hook) = *ON_STAGE.read().unwrap_or_else(|e| e.into_inner()) {
        hook(name);
    }
    kiln_runtime::trace::span(name, "compile", f)
}

/// Starts recording, process-wide (an earlier unfinished trace is dropped).
pub fn start() {
    kiln_runtime::trace::start();
}

/// Stops recording and returns what was recorded.
pub fn finish() -> Trace {
    Trace { spans: kiln_runtime::trace::stop() }
}

/// Recorded slices.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// In the order they ended.
    pub spans: Vec<Span>,
}

impl Trace {
    /// The Trace Event Format's JSON: complete events (`"ph": "X"`, microseconds) and a
    /// `thread_name` record per thread.
    pub fn chrome_json(&self) -> String {
        let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        let mut threads: Vec<&(u64, String)> = self.spans.iter().map(|s| &s.thread).collect();
        threads.sort();
        threads.dedup();
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push_str(",\n");
            }
        };
        for (id, name) in threads {
            sep(&mut out);
            let name = if name.is_empty() { format!("thread {id}") } else { name.clone() };
            let _ = write!(out, "{{\"ph\":\"M\",\"pid\":1,\"tid\":{id},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}", quote(&name));
        }
        for s in &self.spans {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"name\":{},\"cat\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{",
                s.thread.0,
                quote(&s.name),
                quote(s.category),
                s.start.as_secs_f64() * 1e6,
                s.duration.as_secs_f64() * 1e6
            );
            for (i, (k, v)) in s.args.iter().enumerate() {
                let _ = write!(out, "{}{}:{}", if i > 0 { "," } else { "" }, quote(k), quote(v));
            }
            out.push_str("}}");
        }
        out.push_str("\n]}\n");
        out
    }
}

/// `s` as a JSON string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
