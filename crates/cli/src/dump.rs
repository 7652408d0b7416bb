//! `kiln dump`: what the pipeline holds after a stage. It runs `kiln::Pipeline::run`, the
//! function compiling runs, and prints what it stopped with.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use kiln::{Bindings, CompileOptions, Stage, Target};

use crate::join;

/// Reads a graph from an ONNX model or from the tensor-IR text form, by file extension.
fn load_tir(path: &Path) -> Result<kiln_tir::Graph> {
    if path.extension().is_some_and(|e| e == "tir") {
        let src = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let g = kiln_tir::text::parse(&src).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        kiln_tir::verify::verify(&g)
            .map_err(|errs| anyhow!("{}: invalid IR:\n{}", path.display(), join(&errs)))?;
        Ok(g)
    } else {
        kiln_onnx::import::import_path(path)
            .with_context(|| format!("cannot import {}", path.display()))
    }
}

/// What `kiln dump` prints besides the IR, and what it compiles for.
pub struct Options {
    /// Optimizer statistics (stage `optimize`).
    pub stats: bool,
    /// Provenance comments (stage `optimize`).
    pub explain: bool,
    /// Run the optimizer.
    pub optimize: bool,
    /// The parallel-loop analysis (stages `lower` and `schedule`).
    pub parallel: bool,
    /// The target (default: this machine).
    pub target: Option<Target>,
    /// How a tensor-IR stage is printed.
    pub format: Format,
}

/// How `kiln dump` prints a tensor-IR stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The IR's text form.
    Text,
    /// Graphviz source.
    Dot,
    /// SVG drawn by Graphviz's `dot`.
    Svg,
}

/// `g` as Graphviz source, or as SVG drawn from it; `sources` gives a node's source nodes.
fn picture(g: &kiln_tir::Graph, sources: &dyn Fn(kiln_tir::NodeId) -> Vec<(String, String)>, format: Format) -> Result<String> {
    let dot = kiln_tir::dot::print(g, sources);
    if format == Format::Dot {
        return Ok(dot);
    }
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow!("--format svg runs Graphviz's `dot`, which did not start ({e}): install Graphviz (apt-get install graphviz) or use --format dot"))?;
    let mut stdin = child.stdin.take().context("dot's standard input")?;
    // Written from another thread: dot may fill its output pipe before it has read all input.
    let writer = std::thread::spawn(move || stdin.write_all(dot.as_bytes()));
    let out = child.wait_with_output().context("waiting for dot")?;
    writer.join().map_err(|_| anyhow!("writing to dot panicked"))?.context("writing to dot")?;
    if !out.status.success() {
        return Err(anyhow!("dot failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    String::from_utf8(out.stdout).context("dot wrote non-UTF-8 SVG")
}

pub fn dump(file: &Path, stage: Stage, symbols: &[(String, u64)], shapes: &[(String, Vec<u64>)], options: &Options) -> Result<()> {
    let graph = load_tir(file)?;
    let mut bindings = Bindings { symbols: symbols.to_vec(), ..Bindings::default() };
    for (name, dims) in shapes {
        let index = graph
            .inputs()
            .iter()
            .position(|&v| graph.value(v).name == *name)
            .ok_or_else(|| anyhow!("--input-shape {name}=...: the model has no input named \"{name}\""))?;
        bindings.input_shapes.push((index, dims.clone()));
    }
    let mut compile = CompileOptions::from_env();
    if !options.optimize {
        compile.optimizer = None;
    }
    if let Some(target) = &options.target {
        compile.target = target.clone();
    }
    let pipeline = compile.pipeline();
    // Machine code has no text form of its own: the CLIF it is made from is printed instead.
    let stop = if stage == Stage::Codegen { Stage::Plan } else { stage };
    let out = pipeline.run(&graph, &bindings, stop)?;
    if options.format != Format::Text {
        if stage > Stage::Optimize {
            return Err(anyhow!("--format {:?} draws the tensor IR: stages import, bind and optimize", options.format));
        }
        let text = match (&out.optimized, stage) {
            (Some(opt), Stage::Optimize) => {
                let sources = |n: kiln_tir::NodeId| opt.explain.get(&n).map(|e| e.sources.iter().map(|(name, op)| (op.to_string(), name.clone())).collect()).unwrap_or_default();
                picture(&opt.graph, &sources, options.format)?
            }
            _ => picture(&out.graph, &|_| Vec::new(), options.format)?,
        };
        print!("{text}");
        return Ok(());
    }
    match stage {
        Stage::Import | Stage::Bind => print!("{}{}", kiln_tir::text::print(&out.graph), kiln_tir::text::print_assumptions(&out.graph)),
        Stage::Optimize => match &out.optimized {
            Some(opt) => {
                if options.stats {
                    print!("{}", kiln_passes::stats_text(&opt.stats));
                }
                if options.explain {
                    print!("{}", kiln_passes::explain_text(opt));
                } else {
                    print!("{}", kiln_tir::text::print(&opt.graph));
                }
            }
            None => print!("{}", kiln_tir::text::print(&out.graph)),
        },
        Stage::Lower | Stage::Schedule => {
            let program = out.program.as_ref().context("the pipeline stopped before lowering")?;
            print!("{}", kiln_loops::text::print(program));
            if options.parallel {
                for line in kiln_loops::parallel::report(program).lines() {
                    println!("// {line}");
                }
            }
        }
        Stage::Plan => {
            let (program, plan) = out.program.as_ref().zip(out.plan.as_ref()).context("the pipeline stopped before planning")?;
            print!("{}", plan.print(program));
        }
        Stage::Codegen => {
            let program = out.program.as_ref().context("the pipeline stopped before planning")?;
            print!("{}", kiln_codegen::clif_text(program, pipeline.target(), &pipeline.codegen_options())?);
        }
    }
    Ok(())
}

/// `kiln dump --stage obj`: the object `kiln compile` would write, listed: its sections with
/// their sizes, its symbols, and each relocation.
pub fn object(file: &Path, symbols: &[(String, u64)], shapes: &[(String, Vec<u64>)], options: &Options) -> Result<()> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let model = kiln::Model::load(file)?;
    let mut target = options.target.clone().unwrap_or_else(Target::host);
    if target.runtime == kiln::target::Runtime::Jit {
        target.runtime = kiln::target::Runtime::Static;
    }
    let input_shapes = crate::compile::input_shapes(&model, shapes, symbols)?;
    let mut compile = CompileOptions { target, input_shapes, threads: 1, ..CompileOptions::from_env() };
    if !options.optimize {
        compile.optimizer = None;
    }
    let name = "model";
    let code = model.compile_object(&compile, name, kiln_codegen::Weights::Embedded)?.code;
    let obj = object::File::parse(&*code.bytes).context("reading back the object kiln wrote")?;
    println!("; {name}.o for {}: {} bytes, {:?} {:?}, arena {} bytes", compile.target, code.bytes.len(), obj.format(), obj.architecture(), code.arena_bytes);
    println!("; sections");
    for section in obj.sections().filter(|s| s.size() > 0) {
        println!("{:<24} {:>10} bytes  align {:<4} {} relocations", section.name().unwrap_or("?"), section.size(), section.align(), section.relocations().count());
    }
    println!("; symbols");
    for sym in obj.symbols().filter(|s| !s.name().unwrap_or("").is_empty() && s.kind() != object::SymbolKind::Section && s.kind() != object::SymbolKind::File) {
        let place = match sym.section_index() {
            Some(i) => obj.section_by_index(i).ok().and_then(|s| s.name().ok().map(str::to_string)).unwrap_or_default(),
            None => "undefined".to_string(),
        };
        let scope = if sym.is_global() { "global" } else { "local" };
        println!("{:<40} {:<8} {:<6} {:<16} {:>10} bytes", sym.name().unwrap_or("?"), format!("{:?}", sym.kind()).to_lowercase(), scope, place, sym.size());
    }
    println!("; relocations");
    for section in obj.sections() {
        for (offset, r) in section.relocations() {
            let target = match r.target() {
                object::RelocationTarget::Symbol(i) => obj.symbol_by_index(i).ok().and_then(|s| s.name().ok().map(str::to_string)).unwrap_or_default(),
                object::RelocationTarget::Section(i) => obj.section_by_index(i).ok().and_then(|s| s.name().ok().map(str::to_string)).unwrap_or_default(),
                _ => String::new(),
            };
            println!("{}+{offset:#x}: {:?} {target} {:+}", section.name().unwrap_or("?"), r.flags(), r.addend());
        }
    }
    Ok(())
}
