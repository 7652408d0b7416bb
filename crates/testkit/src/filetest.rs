//! File-driven tests, in the manner of Cranelift filetests and MLIR lit, shared by the IR crates.
//!
//! Each file starts with a command line, then holds the input, then the expected output after
//! a separator line:
//!
//! ```text
//! // test roundtrip
//! // Any further comment lines describe the case.
//! ...input...
//! // ----- expected -----
//! ...expected output...
//! ```
//!
//! The input is everything before the separator (the command line is a comment to the IR
//! parsers, so error positions are file positions). A command turns the input into the text
//! that must equal the expected section. Every file is one case; all failures are reported
//! together. `KILN_BLESS=1` rewrites each expected section that differs and prints a line diff
//! instead of failing.

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The line between the input and the expected output.
pub const SEPARATOR: &str = "// ----- expected -----";

/// A command: the input section in, the actual output (or why it could not be produced) out.
pub type Command = fn(&str) -> Result<String, String>;

/// Runs every file with extension `ext` in `dir` with the command its `// test NAME` line
/// names, panicking with every failure at the end.
pub fn run_dir(dir: &Path, ext: &str, commands: &[(&str, Command)]) {
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{ext} files in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let shown = path.strip_prefix(dir).unwrap_or(path).display().to_string();
        match run_file(path, commands, bless) {
            Ok(None) => {}
            // Straight to stderr: the test harness would swallow `println!` from a passing test.
            Ok(Some(diff)) => {
                let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("blessed {shown}:\n{diff}\n").as_bytes());
            }
            Err(msg) => failures.push(format!("{shown}: {msg}")),
        }
    }
    if !failures.is_empty() {
        panic!("{} of {} filetests failed:\n\n{}", failures.len(), files.len(), failures.join("\n\n"));
    }
}

/// One test file, split into its parts.
struct Case<'a> {
    command: &'a str,
    input: &'a str,
    /// The expected section and the byte offset where it starts, if the file has one.
    expected: Option<(&'a str, usize)>,
}

fn split(text: &str) -> Result<Case<'_>, String> {
    let mut command = None;
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        if let Some(rest) = line.strip_prefix("// test ")
            && command.replace(rest.trim()).is_some()
        {
            return Err("more than one `// test` line".into());
        }
    }
    let command = command.ok_or("no `// test COMMAND` line at the top")?;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        offset += line.len();
        if line.trim_end() == SEPARATOR {
            return Ok(Case { command, input: &text[..offset - line.len()], expected: Some((&text[offset..], offset)) });
        }
    }
    Ok(Case { command, input: text, expected: None })
}

/// Runs one file; `Ok(Some(diff))` when it was blessed.
fn run_file(path: &Path, commands: &[(&str, Command)], bless: bool) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let case = split(&text)?;
    let Some(&(_, run)) = commands.iter().find(|(name, _)| *name == case.command) else {
        let known: Vec<&str> = commands.iter().map(|(name, _)| *name).collect();
        return Err(format!("unknown command `{}` (known: {})", case.command, known.join(", ")));
    };
    let actual = std::panic::catch_unwind(|| run(case.input)).map_err(|_| "the command panicked".to_string())??;
    let expected = case.expected.map_or("", |(e, _)| e);
    if case.expected.is_some() && actual == expected {
        return Ok(None);
    }
    let diff = line_diff(expected, &actual);
    if !bless {
        let what = if case.expected.is_some() { "output differs from the expected section" } else { "no expected section" };
        return Err(format!("{what} (- expected, + actual; KILN_BLESS=1 rewrites it):\n{diff}"));
    }
    let keep = case
        .expected
        .map_or_else(|| format!("{}{}{SEPARATOR}\n", case.input, if case.input.ends_with('\n') { "" } else { "\n" }), |(_, at)| text[..at].to_string());
    std::fs::write(path, keep + &actual).map_err(|e| format!("cannot write: {e}"))?;
    Ok(Some(diff))
}

/// A line diff from a longest common subsequence, with unchanged stretches shortened.
pub fn line_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', a[i]));
            i += 1;
        } else {
            lines.push(('+', b[j]));
            j += 1;
        }
    }
    const CONTEXT: usize = 2;
    let near_change = |k: usize| lines[k.saturating_sub(CONTEXT)..(k + CONTEXT + 1).min(lines.len())].iter().any(|(t, _)| *t != ' ');
    let mut out = String::new();
    let mut skipping = false;
    for (k, (tag, line)) in lines.iter().enumerate() {
        if near_change(k) {
            skipping = false;
            let _ = writeln!(out, "{tag} {line}");
        } else if !skipping {
            skipping = true;
            out.push_str("  ...\n");
        }
    }
    out
}


#[cfg(test)]
mod tests {
    #[test]
    fn diff_marks_changed_lines() {
        let diff = super::line_diff("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nX\nd\ne\nf\ng\n");
        assert_eq!(diff, "  a\n  b\n- c\n+ X\n  d\n  e\n  ...\n");
    }
}
