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
//!   `kiln_lower::lower`, which must verify and round-trip (or `lower error: ...`).
//! - `parse-error`: the input is loop IR that must not parse; the output is the error.
//! - `parallel`: the input is loop IR; the output is `kiln_loops::parallel::report`, which
//!   top-level loops may run their iterations on several threads, and why the others may not.
//! - `plan`: the input is loop IR; the output is its memory plan (`kiln_schedule::plan`), one line
//!   per buffer with its arena offset and lifetime.
//!
//! - `schedule`: the input is tensor IR and a `// target TRIPLE +FEATURE...` line; the output is
//!   the loop IR it lowers to after `kiln_schedule::schedule` for that target (blocked layouts,
//!   packed weights), which must verify. Naming the target makes the output the same on every
//!   machine.
//!
//! Every file is one case; all failures are reported together at the end.
//! `KILN_BLESS=1 cargo test -p kiln-schedule --test filetests` rewrites each expected section
//! that differs and prints a line diff instead of failing.

use std::path::Path;

use kiln_loops::Program;
use kiln_loops::text::{parse, print};
use kiln_loops::verify::verify;
use kiln_testkit::filetest::{line_diff, run_dir, Command};

/// Every command a file can name in its `// test NAME` line.
const COMMANDS: &[(&str, Command)] = &[("roundtrip", roundtrip), ("verify", verify_command), ("lower", lower), ("parse-error", parse_error), ("parallel", parallel), ("plan", plan), ("schedule", schedule)];

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

/// Which top-level loops are parallel, and why the others are not.
fn parallel(input: &str) -> Result<String, String> {
    let p = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    Ok(kiln_loops::parallel::report(&p))
}

/// The memory plan: each buffer's arena offset and lifetime, the arena's size.
fn plan(input: &str) -> Result<String, String> {
    let p = parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    verify(&p).map_err(|errors| format!("input does not verify: {errors:?}"))?;
    Ok(kiln_schedule::plan::plan(&p).print(&p))
}

/// The loop IR that tensor IR lowers to; it must verify.
fn lower(input: &str) -> Result<String, String> {
    let graph = kiln_tir::text::parse(input).map_err(|e| format!("input is not tensor IR: {e}"))?;
    let p = match kiln_lower::lower(&graph) {
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

/// The loop IR after scheduling for the file's `// target` line.
fn schedule(input: &str) -> Result<String, String> {
    let line = input
        .lines()
        .find_map(|l| l.trim().strip_prefix("// target "))
        .ok_or("a schedule test names its target in a `// target TRIPLE +FEATURE...` line")?;
    let target: kiln_target::Target = line.parse().map_err(|e| format!("// target {line}: {e}"))?;
    let graph = kiln_tir::text::parse(input).map_err(|e| format!("input is not tensor IR: {e}"))?;
    let mut p = kiln_lower::lower(&graph).map_err(|e| format!("lower error: {e}"))?;
    let options = kiln_schedule::ScheduleOptions { prepack: true, nchwc: true };
    if let Some(deferred) = kiln_schedule::schedule(&mut p, &target, options) {
        let data = deferred.pack().ok_or("no memory for the packed weights")?;
        deferred.install(&mut p, data);
    }
    let out = print_checked(&p)?;
    if let Err(errors) = verify(&p) {
        let list: String = errors.iter().map(|e| format!("  {e}\n")).collect();
        return Err(format!("the scheduled program does not verify:\n{list}{out}"));
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

#[test]
fn filetests() {
    run_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/filetests/loops"), "loops", COMMANDS);
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
