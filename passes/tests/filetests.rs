//! File tests of the optimizer: each file in `tests/filetests/opt/` (at the repository root)
//! holds input tensor IR, the command `// test opt`, and the optimized IR with its provenance
//! comments (`--explain`) after the separator. `KILN_BLESS=1 cargo test -p kiln-passes --test
//! filetests` rewrites expected sections that differ.
//!
//! A second test checks that every rule of the rule tables fires in at least one file. Files
//! with `// test qdq` check the QDQ rewrite ([`kiln_passes::qdq::integer_operators`]) instead:
//! the graph after it, then how many operators it rewrote.

use std::path::{Path, PathBuf};

use kiln_passes::{explain_text, optimize, rules, Limits};
use kiln_testkit::filetest::{run_dir, Command, SEPARATOR};
use kiln_tir::text::parse;

const COMMANDS: &[(&str, Command)] = &[("opt", opt), ("qdq", qdq)];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/filetests/opt")
}

fn opt(input: &str) -> Result<String, String> {
    let g = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    kiln_tir::verify::verify(&g).map_err(|errs| format!("input does not verify: {errs:?}"))?;
    let out = optimize(&g, &Limits::default()).map_err(|e| e.to_string())?;
    kiln_tir::verify::verify(&out.graph).map_err(|errs| format!("optimized graph does not verify: {errs:?}\n{}", kiln_tir::text::print(&out.graph)))?;
    let text = explain_text(&out);
    let again = parse(&text).map_err(|e| format!("--explain output does not parse: {e}\n{text}"))?;
    if kiln_tir::text::print(&again) != kiln_tir::text::print(&out.graph) {
        return Err("--explain output does not read back as the optimized graph".into());
    }
    Ok(text)
}

fn qdq(input: &str) -> Result<String, String> {
    let mut g = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    kiln_tir::verify::verify(&g).map_err(|errs| format!("input does not verify: {errs:?}"))?;
    let n = kiln_passes::qdq::integer_operators(&mut g);
    // The nodes that left the region stay in the graph's arena; its text is the graph.
    let text = kiln_tir::text::print(&g);
    let again = parse(&text).map_err(|e| format!("the rewritten graph does not parse: {e}\n{text}"))?;
    kiln_tir::verify::verify(&again).map_err(|errs| format!("the rewritten graph does not verify: {errs:?}\n{text}"))?;
    Ok(format!("{text}// {n} rewritten\n"))
}

#[test]
fn filetests() {
    run_dir(&dir(), "tir", COMMANDS);
}

#[test]
fn every_rule_fires_in_some_file() {
    let mut fired: Vec<(&'static str, usize)> = rules::all().iter().map(|r| (r.name, 0)).collect();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "tir")).collect();
    files.sort();
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let input = src.split(SEPARATOR).next().unwrap();
        let g = parse(input).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = optimize(&g, &Limits::default()).unwrap();
        for (name, n) in out.stats.rules {
            if let Some(slot) = fired.iter_mut().find(|(r, _)| *r == name) {
                slot.1 += n;
            }
        }
    }
    let silent: Vec<&str> = fired.iter().filter(|(_, n)| *n == 0).map(|(r, _)| *r).collect();
    assert!(silent.is_empty(), "rules no file test exercises: {silent:?}");
}

/// The time limit stops saturation before the next iteration, and the graph extracted from
/// what the e-graph holds by then is still valid. (egg's runner reads a clock that stands
/// still, so this limit is the optimizer's own.)
#[test]
fn time_limit_stops_between_iterations() {
    let text = std::fs::read_to_string(dir().join("recognize_gelu.tir")).expect("a file test");
    let g = parse(text.split(SEPARATOR).next().unwrap_or_default()).expect("its input parses");
    let out = optimize(&g, &Limits { time: std::time::Duration::ZERO, ..Limits::default() }).expect("an optimized graph");
    assert!(out.stats.stop.starts_with("time limit"), "stopped by {}", out.stats.stop);
    // egg records the iteration its hook stopped, with nothing applied.
    assert!(out.stats.rules.iter().all(|&(_, n)| n == 0), "rules applied: {:?}", out.stats.rules);
    kiln_tir::verify::verify(&out.graph).expect("the graph verifies");
    let full = optimize(&g, &Limits::default()).expect("an optimized graph");
    assert_eq!(full.stats.stop, "saturated");
    assert!(full.stats.rules.iter().any(|&(_, n)| n > 0));
}
