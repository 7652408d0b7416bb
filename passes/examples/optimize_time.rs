//! Wall time of the optimizer alone on one model, averaged over repeated runs (import once).
//!
//! ```text
//! cargo run --release -p kiln-passes --example optimize_time -- ../shared/models/bert_mini.onnx [RUNS]
//! ```

use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: optimize_time MODEL.onnx [RUNS]")?;
    let runs: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20).max(1);
    let g = kiln_onnx::import::import_path(Path::new(&path))?;
    let limits = kiln_passes::Limits::from_env();
    let start = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(kiln_passes::optimize(&g, &limits)?);
    }
    println!("{path}: {:.2} ms per optimization ({runs} runs)", start.elapsed().as_secs_f64() * 1e3 / runs as f64);
    Ok(())
}
