//! Results and the table the driver prints (Markdown, so it pastes into issues and READMEs).

use crate::engine::EngineKind;

/// What one engine did on one model.
#[derive(Clone, Debug)]
pub struct EngineResult {
    pub engine: EngineKind,
    pub load_ms: Option<f64>,
    /// Wall-clock time of every timed run, in ms.
    pub times: Vec<f64>,
    pub peak_rss_kb: Option<u64>,
    /// The first output, for the agreement check.
    pub output: Option<Vec<f32>>,
    pub error: Option<String>,
}

impl EngineResult {
    pub fn new(engine: EngineKind) -> EngineResult {
        EngineResult { engine, load_ms: None, times: Vec::new(), peak_rss_kb: None, output: None, error: None }
    }

    /// The `q` quantile of the run times (nearest rank), if there were runs.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut t = self.times.clone();
        t.sort_by(f64::total_cmp);
        t.get(((t.len() as f64 - 1.0) * q).round() as usize).copied()
    }
}

/// All engines on one model.
#[derive(Clone, Debug)]
pub struct ModelResult {
    pub model: String,
    pub engines: Vec<EngineResult>,
}

impl ModelResult {
    fn get(&self, kind: EngineKind) -> Option<&EngineResult> {
        self.engines.iter().find(|e| e.engine == kind)
    }
}

/// The largest absolute difference between an output and the reference, and that over the
/// reference's largest magnitude (`None` when their lengths differ).
fn max_abs_diff(reference: &[f32], other: &[f32]) -> Option<(f32, f32)> {
    (reference.len() == other.len()).then(|| {
        let diff = reference.iter().zip(other).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        let scale = reference.iter().map(|x| x.abs()).fold(0.0, f32::max);
        (diff, if scale > 0.0 { diff / scale } else { diff })
    })
}

/// The results table, with its notes.
pub fn table(results: &[ModelResult], threads: usize) -> String {
    let header = ["model", "engine", "threads", "compile/load ms", "median ms", "p90 ms", "peak RSS MiB", "kiln ÷ engine", "max abs diff vs onnxruntime (relative)"];
    let mut rows: Vec<[String; 9]> = Vec::new();
    let mut errors = Vec::new();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), fmt_ms);
    for m in results {
        let kiln_median = m.get(EngineKind::Kiln).and_then(|k| k.quantile(0.5));
        let reference = m.get(EngineKind::Ort).and_then(|o| o.output.as_deref());
        for e in &m.engines {
            let median = e.quantile(0.5);
            let ratio = match (e.engine, kiln_median, median) {
                (EngineKind::Kiln, _, _) => "-".to_string(),
                (_, Some(k), Some(x)) if x > 0.0 => format!("{:.2}", k / x),
                _ => "-".to_string(),
            };
            let diff = match (e.engine, reference, e.output.as_deref()) {
                (EngineKind::Ort, _, _) => "-".to_string(),
                (_, Some(r), Some(o)) => max_abs_diff(r, o).map_or("shape differs".to_string(), |(d, rel)| format!("{d:.1e} ({rel:.1e})")),
                _ => "-".to_string(),
            };
            let threads = threads.to_string();
            rows.push([
                m.model.clone(),
                e.engine.name().to_string(),
                threads,
                ms(e.load_ms),
                ms(median),
                ms(e.quantile(0.9)),
                e.peak_rss_kb.map_or("-".to_string(), |kb| format!("{:.1}", kb as f64 / 1024.0)),
                ratio,
                diff,
            ]);
            if let Some(err) = &e.error {
                errors.push(format!("- {} on {}: {err}", e.engine.name(), m.model));
            }
        }
    }
    let widths: Vec<usize> = (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).chain([header[c].chars().count()]).max().unwrap_or(0)).collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = widths[c] - s.chars().count();
                // Text columns left-aligned, numbers right-aligned.
                if c < 2 { format!("{s}{}", " ".repeat(pad)) } else { format!("{}{s}", " ".repeat(pad)) }
            })
            .collect();
        format!("| {} |", padded.join(" | "))
    };
    let mut out = String::new();
    out.push_str(&line(&header.map(String::from)));
    out.push('\n');
    let rule: Vec<String> = widths.iter().enumerate().map(|(c, &w)| if c < 2 { "-".repeat(w + 2) } else { format!("{}:", "-".repeat(w + 1)) }).collect();
    out.push_str(&format!("|{}|\n", rule.join("|")));
    for r in &rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    for line in geometric_means(results) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nkiln ÷ engine: kiln's median latency over that engine's (above 1: kiln is slower).\n");
    out.push_str("latency: engines take turns; each turn starts once the previous engine's process has been idle 5 ms, then 20 ms later, with the untimed turn warm-up runs first.\n");
    out.push_str("compile/load: kiln import + compile; onnxruntime session creation (library loaded before); tract load + optimize + plan.\n");
    out.push_str("peak RSS: VmHWM of each engine's own worker process (model, weights, inputs and the engine's runtime).\n");
    out.push_str("max abs diff: first output against onnxruntime's on the same inputs; relative is over its largest |value|.\n");
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors.join("\n"));
        out.push('\n');
    }
    out
}

/// A line per engine other than kiln: the geometric mean of kiln ÷ engine over the models both
/// ran, which weighs a model that is 2× faster and one that is 2× slower equally.
fn geometric_means(results: &[ModelResult]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut kinds: Vec<EngineKind> = Vec::new();
    for e in results.iter().flat_map(|m| &m.engines) {
        if e.engine != EngineKind::Kiln && !kinds.contains(&e.engine) {
            kinds.push(e.engine);
        }
    }
    for kind in kinds {
        let ratios: Vec<f64> = results
            .iter()
            .filter_map(|m| Some(m.get(EngineKind::Kiln)?.quantile(0.5)? / m.get(kind)?.quantile(0.5)?))
            .filter(|r| r.is_finite() && *r > 0.0)
            .collect();
        if !ratios.is_empty() {
            let mean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
            let worst = ratios.iter().copied().fold(0.0, f64::max);
            lines.push(format!("\nkiln ÷ {}: geometric mean {mean:.2} over {} models (largest {worst:.2})", kind.name(), ratios.len()));
        }
    }
    lines
}

/// Milliseconds with three significant digits or more.
fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_nearest_rank() {
        let mut e = EngineResult::new(EngineKind::Kiln);
        e.times = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(e.quantile(0.5), Some(3.0));
        assert_eq!(e.quantile(0.9), Some(5.0));
        assert_eq!(EngineResult::new(EngineKind::Tract).quantile(0.5), None);
    }

    #[test]
    fn table_shows_ratios_and_errors() {
        let mut kiln = EngineResult::new(EngineKind::Kiln);
        kiln.times = vec![4.0];
        kiln.output = Some(vec![1.0, 2.0]);
        let mut ort = EngineResult::new(EngineKind::Ort);
        ort.times = vec![2.0];
        ort.output = Some(vec![1.0, 2.5]);
        let mut tract = EngineResult::new(EngineKind::Tract);
        tract.error = Some("unsupported op".into());
        let t = table(&[ModelResult { model: "m".into(), engines: vec![kiln, ort, tract] }], 1);
        assert!(t.contains(" 2.00 |"), "{t}");
        assert!(t.contains("5.0e-1 (2.0e-1)"), "{t}");
        assert!(t.contains("- tract on m: unsupported op"), "{t}");
        assert!(t.contains("kiln ÷ onnxruntime: geometric mean 2.00 over 1 models"), "{t}");
        assert!(!t.contains("kiln ÷ tract: geometric mean"), "{t}");
    }

    #[test]
    fn geometric_mean_weighs_ratios_evenly() {
        let model = |name: &str, k: f64, o: f64| {
            let mut kiln = EngineResult::new(EngineKind::Kiln);
            kiln.times = vec![k];
            let mut ort = EngineResult::new(EngineKind::Ort);
            ort.times = vec![o];
            ModelResult { model: name.into(), engines: vec![kiln, ort] }
        };
        let lines = geometric_means(&[model("a", 2.0, 1.0), model("b", 1.0, 2.0)]);
        assert_eq!(lines, vec!["\nkiln ÷ onnxruntime: geometric mean 1.00 over 2 models (largest 2.00)".to_string()]);
    }
}
