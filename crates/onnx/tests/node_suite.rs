//! Imports every case of the ONNX backend node suite: each must import and verify, or fail
//! with a deliberate "unsupported" error; imported graphs must round-trip through the text
//! form byte for byte. Prints the counts and the most common unsupported reasons.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use kiln_onnx::import::import_path;
use kiln_tir::text;

#[test]
fn node_suite_imports_or_reports_unsupported() {
    let cases = kiln_testkit::node_cases();
    assert_eq!(cases.len(), 1884, "the pinned onnx 1.23.2 suite has 1884 cases");
    let start = Instant::now();
    let mut imported = 0;
    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let result = catch_unwind(AssertUnwindSafe(|| import_path(&case.model)));
        match result {
            Err(_) => failures.push(format!("{}: PANIC", case.name)),
            Ok(Ok(g)) => {
                imported += 1;
                let printed = text::print(&g);
                match text::parse(&printed) {
                    Ok(again) if text::print(&again) == printed => {}
                    Ok(_) => failures.push(format!("{}: print → parse → print differs", case.name)),
                    Err(e) => failures.push(format!("{}: printed IR does not parse: {e}", case.name)),
                }
            }
            Ok(Err(e)) if e.is_unsupported() => {
                let msg = e.to_string();
                let reason = msg.split(": unsupported: ").nth(1).unwrap_or(&msg).to_string();
                unsupported.entry(reason).or_default().push(case.name.clone());
            }
            Ok(Err(e)) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    let n_unsupported: usize = unsupported.values().map(Vec::len).sum();
    println!("node suite import: {imported} imported and verified, {n_unsupported} unsupported, {} failed, of {} ({:.1} s)", failures.len(), cases.len(), start.elapsed().as_secs_f64());
    let mut reasons: Vec<_> = unsupported.iter().collect();
    reasons.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for (reason, names) in reasons {
        println!("  unsupported ×{:<4} {reason}   e.g. {}", names.len(), names[0]);
    }
    for f in &failures {
        println!("  FAILED {f}");
    }
    assert!(failures.is_empty(), "{} node-suite cases failed to import without an unsupported error", failures.len());
}
