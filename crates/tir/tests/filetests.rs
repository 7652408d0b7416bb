//! File-driven tests of the tensor IR, in the manner of Cranelift filetests and MLIR lit.
//!
//! Each file in `tests/filetests/tir/` (at the repository root) starts with a command line,
//! then holds the input IR, then the expected output after a separator line:
//!
//! ```text
//! // test roundtrip
//! // Any further comment lines describe the case.
//! graph @main(...) -> (...) {
//!   ...
//! }
//! // ----- expected -----
//! graph @main(...) -> (...) {
//!   ...
//! }
//! ```
//!
//! The input is everything before the separator (the command line is a comment to the IR
//! parser, so error positions are file positions). Commands live in [`COMMANDS`]; each turns
//! the input into the text that must equal the expected section (`kiln_testkit::filetest`
//! runs them). Every file is one case; all failures are reported together at the end.
//!
//! `KILN_BLESS=1 cargo test -p kiln-tir --test filetests` rewrites each expected section that
//! differs and prints a line diff instead of failing.

use std::path::Path;

use kiln_testkit::filetest::{line_diff, run_dir, Command};
use kiln_tir::text::{parse, print};

/// Every command a file can name in its `// test NAME` line.
const COMMANDS: &[(&str, Command)] = &[("roundtrip", roundtrip), ("parse-error", parse_error)];

/// `print(parse(input))`, which must itself be a fixed point of print ∘ parse.
fn roundtrip(input: &str) -> Result<String, String> {
    let graph = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    let out = print(&graph);
    let again = parse(&out).map_err(|e| format!("printed text does not parse: {e}\n{out}"))?;
    let reprinted = print(&again);
    if reprinted != out {
        return Err(format!("print(parse(printed)) differs from printed:\n{}", line_diff(&out, &reprinted)));
    }
    Ok(out)
}

/// The parse error's message; the input must not parse.
fn parse_error(input: &str) -> Result<String, String> {
    match parse(input) {
        Ok(g) => Err(format!("expected a parse error, but the input parsed:\n{}", print(&g))),
        Err(e) => Ok(format!("{e}\n")),
    }
}

#[test]
fn filetests() {
    run_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/filetests/tir"), "tir", COMMANDS);
}
