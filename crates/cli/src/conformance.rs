//! `kiln conformance`: the node suite through compiled code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln::conformance::{run_suite_with, Outcome};

use crate::progress::Progress;

pub fn conformance(dir: &Path, report: &Path, filter: Option<&str>, min_pass_file: Option<&Path>) -> Result<ExitCode> {
    let mut progress = Progress::on_terminal();
    let mut failed_so_far = 0;
    let results = run_suite_with(dir, filter, |done, total, r| {
        failed_so_far += usize::from(!matches!(r.outcome, Outcome::Pass));
        progress.show(&format!("[{done}/{total}] {failed_so_far} failed  {}", r.name));
    })
    .with_context(|| format!("cannot read {}", dir.display()))?;
    progress.clear();
    let mut table = String::from("case\tresult\tstage\treason\tms\n");
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut passed = 0;
    for r in &results {
        match &r.outcome {
            Outcome::Pass => {
                passed += 1;
                let _ = writeln!(table, "{}\tpass\t\t\t{:.1}", r.name, r.millis);
            }
            Outcome::Fail { stage, reason } => {
                let one_line = reason.replace(['\n', '\t'], " ");
                let _ = writeln!(table, "{}\tfail\t{stage}\t{one_line}\t{:.1}", r.name, r.millis);
                *reasons.entry(format!("{stage}: {}", group_key(&one_line))).or_default() += 1;
            }
        }
    }
    if let Some(parent) = report.parent() {
        std::fs::create_dir_all(parent).ok();
    }
    std::fs::write(report, table).with_context(|| format!("cannot write {}", report.display()))?;
    let mut grouped: Vec<_> = reasons.into_iter().collect();
    grouped.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (reason, n) in grouped.iter().take(25) {
        println!("  {n:>4}  {reason}");
    }
    let failed = results.len() - passed;
    println!("{passed} passed, {failed} failed");
    if let Some(file) = min_pass_file {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
        let floor: usize = text.split_whitespace().next().unwrap_or("0").parse().with_context(|| format!("{} does not start with a count", file.display()))?;
        if passed < floor {
            eprintln!("error: {passed} cases pass, fewer than the {floor} recorded in {}", file.display());
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A failure reason without the node name and numbers, so similar failures group together.
fn group_key(reason: &str) -> String {
    let mut key = String::new();
    let mut quoted = false;
    for c in reason.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                if quoted {
                    key.push_str("\"…\"");
                }
            }
            _ if quoted => {}
            c if c.is_ascii_digit() => {
                if !key.ends_with('N') {
                    key.push('N');
                }
            }
            c => key.push(c),
        }
    }
    key.chars().take(110).collect()
}
