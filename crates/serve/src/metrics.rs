//! Counters per model, written in the Prometheus text format at `GET /metrics`.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What one model's endpoint has seen.
#[derive(Default)]
pub struct ModelMetrics {
    requests: AtomicU64,
    /// Failed requests by HTTP status.
    failures: Mutex<Vec<(u16, u64)>>,
    /// Requests per latency bucket (the last counts those above every bound).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    latency_micros: AtomicU64,
    compile_micros: AtomicU64,
    batches: AtomicU64,
    batched_requests: AtomicU64,
}

impl ModelMetrics {
    /// Counts one request that took `elapsed` and ended with HTTP `status`.
    pub fn request(&self, elapsed: Duration, status: u16) {
        self.requests.fetch_add(1, Relaxed);
        let seconds = elapsed.as_secs_f64();
        let bucket = BUCKETS.iter().position(|&b| seconds <= b).unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Relaxed);
        self.latency_micros.fetch_add(elapsed.as_micros().try_into().unwrap_or(u64::MAX), Relaxed);
        if status >= 400 {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            match failures.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => failures.push((status, 1)),
            }
        }
    }

    /// Records how long loading and compiling the model took.
    pub fn compiled(&self, elapsed: Duration) {
        self.compile_micros.store(elapsed.as_micros().try_into().unwrap_or(u64::MAX), Relaxed);
    }

    /// Counts one run of `requests` batched requests.
    pub fn batch(&self, requests: usize) {
        self.batches.fetch_add(1, Relaxed);
        self.batched_requests.fetch_add(requests as u64, Relaxed);
    }
}

/// The text exposition of every model's metrics.
pub fn render<'a>(models: impl Iterator<Item = (&'a str, &'a ModelMetrics)> + Clone, runs_in_progress: usize) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, body: &dyn Fn(&mut String, &str, &ModelMetrics)| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (model, m) in models.clone() {
            body(&mut out, &label(model), m);
        }
    };
    family("kiln_requests_total", "counter", "Inference requests received.", &|o, l, m| {
        let _ = writeln!(o, "kiln_requests_total{{model=\"{l}\"}} {}", m.requests.load(Relaxed));
    });
    family("kiln_request_failures_total", "counter", "Inference requests answered with an error, by HTTP status.", &|o, l, m| {
        for (status, n) in m.failures.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(o, "kiln_request_failures_total{{model=\"{l}\",code=\"{status}\"}} {n}");
        }
    });
    family("kiln_request_duration_seconds", "histogram", "Time from a request's arrival to its answer.", &|o, l, m| {
        let mut cumulative = 0;
        for (k, bound) in BUCKETS.iter().enumerate() {
            cumulative += m.buckets[k].load(Relaxed);
            let _ = writeln!(o, "kiln_request_duration_seconds_bucket{{model=\"{l}\",le=\"{bound}\"}} {cumulative}");
        }
        cumulative += m.buckets[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(o, "kiln_request_duration_seconds_bucket{{model=\"{l}\",le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(o, "kiln_request_duration_seconds_sum{{model=\"{l}\"}} {}", m.latency_micros.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(o, "kiln_request_duration_seconds_count{{model=\"{l}\"}} {cumulative}");
    });
    family("kiln_compile_seconds", "gauge", "Time to load and compile the model at start-up.", &|o, l, m| {
        let _ = writeln!(o, "kiln_compile_seconds{{model=\"{l}\"}} {}", m.compile_micros.load(Relaxed) as f64 / 1e6);
    });
    family("kiln_batches_total", "counter", "Runs of dynamically batched requests.", &|o, l, m| {
        let _ = writeln!(o, "kiln_batches_total{{model=\"{l}\"}} {}", m.batches.load(Relaxed));
    });
    family("kiln_batched_requests_total", "counter", "Requests answered by dynamically batched runs.", &|o, l, m| {
        let _ = writeln!(o, "kiln_batched_requests_total{{model=\"{l}\"}} {}", m.batched_requests.load(Relaxed));
    });
    let _ = writeln!(out, "# HELP kiln_runs_in_progress Model runs executing now.\n# TYPE kiln_runs_in_progress gauge\nkiln_runs_in_progress {runs_in_progress}");
    out
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
