//! The text of `kiln dump --stage opt --stats` and `--explain`.

use std::fmt::Write;

use kiln_tir::Graph;

use crate::rules::all;
use crate::{Optimized, Stats};

/// The statistics block: stop reason, sizes, times, cost and per-rule application counts.
pub fn stats_text(s: &Stats) -> String {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// optimizer: {} after {} iterations; {} e-nodes in {} e-classes",
        s.stop, s.iterations, s.enodes, s.eclasses
    );
    let _ = writeln!(
        out,
        "// time: {:.2} ms (load {:.2}, saturate {:.2}, extract {:.2})",
        ms(s.total),
        ms(s.load),
        ms(s.saturate),
        ms(s.extract)
    );
    let _ = writeln!(
        out,
        "// nodes: {} -> {}; cost: {:.4e} -> {:.4e}",
        s.nodes_before, s.nodes_after, s.cost_before, s.cost_after
    );
    let rules = all();
    let _ = writeln!(out, "// {:<26} {:>7}  algebra", "rule", "applied");
    for (name, n) in &s.rules {
        let algebra = rules
            .iter()
            .find(|r| r.name == *name)
            .map_or("", |r| r.algebra);
        let _ = writeln!(out, "// {name:<26} {n:>7}  {algebra}");
    }
    let _ = writeln!(out, "// {:<26} {:>7}  elementwise chain -> fused_elementwise (after extraction)", crate::group::RULE, s.chains);
    out
}

/// The optimized graph's text with, above each top-level node, the input nodes it computes
/// and the rules that built it.
pub fn explain_text(opt: &Optimized) -> String {
    let g: &Graph = &opt.graph;
    let text = kiln_tir::text::print(g);
    let mut nodes = g.body.nodes.iter();
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.lines() {
        // Top-level node lines are indented by two spaces and apply a `tensor.` op; nested
        // regions are indented further.
        let top = line.starts_with("  %") && !line.starts_with("   ") && line.contains("= tensor.");
        if top && let Some(n) = nodes.next() {
            match opt.explain.get(n) {
                Some(e) if !e.rules.is_empty() => {
                    let from: Vec<String> = e
                        .sources
                        .iter()
                        .map(|(name, op)| format!("{op} \"{name}\""))
                        .collect();
                    let _ = writeln!(
                        out,
                        "  // from {}",
                        if from.is_empty() {
                            "no input node (new, made by the rules below)".to_string()
                        } else {
                            from.join(", ")
                        }
                    );
                    let _ = writeln!(out, "  // by {}", e.rules.join(" -> "));
                }
                Some(e) => {
                    let from: Vec<String> = e
                        .sources
                        .iter()
                        .map(|(name, op)| format!("{op} \"{name}\""))
                        .collect();
                    if from.len() > 1 {
                        let _ = writeln!(out, "  // from {} (unchanged op)", from.join(", "));
                    }
                }
                None => {}
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
