//! File-driven tests of the loop IR, in the manner of Cranelift filetests and MLIR lit.
//!
//! Each file in `tests/filetests/loops/` (at the repository root) starts with a command line,
//! then holds the input, then the expected output after a separator line:
//!
//! ```text
//! // test roundtrip
//! // Any further comment lines describe the case.
//! buffer @0 "x" : f32[4] input 0
//! ...
//! // ----- expected -----
//! buffer @0 "x" : f32[4] input 0
//! ...
//! ```
//!
//! The input is everything before the separator (the command line is a comment to both
//! parsers, so error positions are file positions). Commands live in [`COMMANDS`]:
//!
//! - `roundtrip`: the input is loop IR; the output is `print(parse(input))`, which must itself
//!   be a fixed point of print ∘ parse.
//! - `verify`: the input is loop IR; the output is the verifier's messages, one a line, or `ok`.
//! - `lower`: the input is tensor IR; the output is the printed loop IR of
//!   `kiln_loops::lower::lower`, which must verify and round-trip (or `lower error: ...`).
//! - `parse-error`: the input is loop IR that must not parse; the output is the error.
//!
//! Every file is one case; all failures are reported together at the end.
//! `KILN_BLESS=1 cargo test -p kiln-loops --test filetests` rewrites each expected section
//! that differs and prints a line diff instead of failing.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use kiln_loops::Program;
use kiln_loops::text::{parse, print};
use kiln_loops::verify::verify;

/// The line between the input and the expected output.
const SEPARATOR: &str = "// ----- expected -----";

/// A command: the input section in, the actual output (or why it could not be produced) out.
type Command = fn(&str) -> Result<String, String>;

/// Every command a file can name in its `// test NAME` line.
const COMMANDS: &[(&str, Command)] = &[("roundtrip", roundtrip), ("verify", verify_command), ("lower", lower), ("parse-error", parse_error)];

/// Prints `p` and checks the text is a fixed point of print ∘ parse.
fn print_checked(p: &Program) -> Result<String, String> {
    let out = print(p);
    let again = parse(&out).map_err(|e| format!("printed text does not parse: {e}\n{out}"))?;
    let reprinted = print(&again);
    if reprinted != out {
        return Err(format!("print(parse(printed)) differs from printed:\n{}", line_diff(&out, &reprinted)));
    }
    Ok(out)
}

/// `print(parse(input))`.
fn roundtrip(input: &str) -> Result<String, String> {
    let p = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    print_checked(&p)
}

/// The verifier's messages, one a line, or `ok`.
fn verify_command(input: &str) -> Result<String, String> {
    let p = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    Ok(match verify(&p) {
        Ok(()) => "ok\n".to_string(),
        Err(errors) => errors.iter().map(|e| format!("{e}\n")).collect(),
    })
}

/// The loop IR that tensor IR lowers to; it must verify.
fn lower(input: &str) -> Result<String, String> {
    let graph = kiln_tir::text::parse(input).map_err(|e| format!("input is not tensor IR: {e}"))?;
    let p = match kiln_loops::lower::lower(&graph) {
        Ok(p) => p,
        Err(e) => return Ok(format!("lower error: {e}\n")),
    };
    let out = print_checked(&p)?;
    if let Err(errors) = verify(&p) {
        let list: String = errors.iter().map(|e| format!("  {e}\n")).collect();
        return Err(format!("the lowered program does not verify:\n{list}{out}"));
    }
    Ok(out)
}

/// The parse error's message; the input must not parse.
fn parse_error(input: &str) -> Result<String, String> {
    match parse(input) {
        Ok(p) => Err(format!("expected a parse error, but the input parsed:\n{}", print(&p))),
        Err(e) => Ok(format!("{e}\n")),
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
fn run_file(path: &Path, bless: bool) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let case = split(&text)?;
    let Some(&(_, run)) = COMMANDS.iter().find(|(name, _)| *name == case.command) else {
        let known: Vec<&str> = COMMANDS.iter().map(|(name, _)| *name).collect();
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
    let keep = case.expected.map_or_else(|| format!("{}{}{SEPARATOR}\n", case.input, if case.input.ends_with('\n') { "" } else { "\n" }), |(_, at)| text[..at].to_string());
    std::fs::write(path, keep + &actual).map_err(|e| format!("cannot write: {e}"))?;
    Ok(Some(diff))
}

/// A line diff from a longest common subsequence, with unchanged stretches shortened.
fn line_diff(old: &str, new: &str) -> String {
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

fn filetest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/filetests/loops")
}

#[test]
fn filetests() {
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let dir = filetest_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "loops"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .loops files in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let shown = path.strip_prefix(&dir).unwrap_or(path).display().to_string();
        match run_file(path, bless) {
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

#[test]
fn diff_marks_changed_lines() {
    let diff = line_diff("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nX\nd\ne\nf\ng\n");
    assert_eq!(diff, "  a\n  b\n- c\n+ X\n  d\n  e\n  ...\n");
}

/// Verifier cases the text form cannot write down (the printer marks them so that the parser
/// rejects them): constants that disagree with their buffer, variables with no type, integer
/// constants of a float type, an unnamed kernel.
#[test]
fn verifier_catches_what_text_cannot_express() {
    use kiln_loops::{Buffer, BufferKind, ElemType, Expr, Kernel, Scalar, ScalarType, Stmt, Var};
    let mut p = Program::default();
    let c = kiln_tir::Tensor::from_i64s(&[2], &[1, 2]);
    p.add_buffer(Buffer { name: "c".into(), elem: ElemType::Scalar(ScalarType::F32), len: 3, kind: BufferKind::Const(c) });
    let mut k = Kernel::new("");
    k.body = vec![Stmt::Let(Var(0), Expr::Const(Scalar::Int(ScalarType::F32, 1)))];
    p.kernels.push(k);
    let errors: Vec<String> = verify(&p).err().unwrap_or_default().iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        [
            "buffer @0: constant tensor is i64 but the buffer holds f32",
            "buffer @0: constant tensor has 2 elements but the buffer has 3",
            "buffer @0: constant holds 16 bytes but 3 elements of f32 take 12",
            "kernel : kernel has an empty name",
            "kernel , statement 0: integer constant 1 has type f32",
            "kernel , statement 0: $0 has no type: the kernel declares 0 variables",
        ]
    );
    assert!(parse(&print(&p)).is_err(), "{}", print(&p));
}
