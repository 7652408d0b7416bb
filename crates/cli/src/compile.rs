//! `kiln compile`: a model to `NAME.o` and `NAME.h`, and the line that links them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kiln::{CompileOptions, Model, Target};
use kiln::target::{Architecture, Runtime, Triple};

/// What `kiln compile` was asked.
pub struct Compile<'a> {
    pub model: &'a Path,
    pub out_dir: &'a Path,
    pub name: Option<String>,
    /// `TRIPLE [+FEATURE]...`; `None` for this machine with its features.
    pub target: Option<String>,
    pub runtime: Runtime,
    pub input_shapes: Vec<(String, Vec<u64>)>,
    pub symbols: Vec<(String, u64)>,
    pub weights: kiln_codegen::Weights,
    pub limits: kiln::ResourceLimits,
}

pub fn compile(c: Compile<'_>) -> Result<()> {
    let target = match &c.target {
        None => Target { runtime: c.runtime, ..Target::host() },
        Some(text) => {
            let t: Target = text.parse().map_err(|e| anyhow::anyhow!("--target {text}: {e}"))?;
            Target { runtime: c.runtime, ..t }
        }
    };
    let model = Model::load_with(c.model, &c.limits)?;
    let name = match c.name {
        Some(n) => n,
        None => c_name(c.model),
    };
    let input_shapes = input_shapes(&model, &c.input_shapes, &c.symbols)?;
    let options = CompileOptions { target: target.clone(), input_shapes, threads: 1, limits: c.limits, ..CompileOptions::from_env() };
    let object = model.compile_object(&options, &name, c.weights)?;
    std::fs::create_dir_all(c.out_dir).with_context(|| format!("creating {}", c.out_dir.display()))?;
    let obj_path = c.out_dir.join(format!("{name}.o"));
    let h_path = c.out_dir.join(format!("{name}.h"));
    std::fs::write(&obj_path, &object.code.bytes).with_context(|| format!("writing {}", obj_path.display()))?;
    std::fs::write(&h_path, object.header()).with_context(|| format!("writing {}", h_path.display()))?;
    println!(
        "{}: {} bytes of code and weights, {} bytes of arena, for {target}; compiled in {:.2} s",
        obj_path.display(),
        object.code.bytes.len(),
        object.code.arena_bytes,
        object.compile_time.as_secs_f64()
    );
    println!("{}: the C interface ({name}_run, {name}_error_string)", h_path.display());
    if let Some(file) = &object.code.weights {
        let w_path = c.out_dir.join(format!("{name}.weights"));
        std::fs::write(&w_path, file).with_context(|| format!("writing {}", w_path.display()))?;
        println!("{}: the weights, {} bytes, which {name}_run takes loaded or mapped", w_path.display(), file.len());
    }
    let cc = linker(&target.triple);
    let link = match target.runtime {
        Runtime::Static => {
            let archive = runtime_archive(&target.triple)?;
            let copy = c.out_dir.join("libkiln_runtime.a");
            if archive != copy {
                std::fs::copy(&archive, &copy).with_context(|| format!("copying {} to {}", archive.display(), copy.display()))?;
            }
            // What Rust's standard library in the archive needs (`rustc --print native-static-libs`).
            format!("{cc} YOUR_PROGRAM.c {} {} -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc", obj_path.display(), copy.display())
        }
        Runtime::None => format!("{cc} YOUR_PROGRAM.c {} -lm", obj_path.display()),
        Runtime::Jit => unreachable!("compile_object refuses JIT targets"),
    };
    println!("link with: {link}");
    Ok(())
}

/// The model file's stem as a C identifier: other characters become `_`, and a leading digit
/// gets a `_` before it.
fn c_name(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert(0, '_');
    }
    name
}

/// Input shapes from `--input-shape`, and from `--bind` for inputs whose symbolic dims are all
/// bound; an input with a dim still unknown is left to `compile_object`, whose error names it.
pub fn input_shapes(model: &Model, given: &[(String, Vec<u64>)], symbols: &[(String, u64)]) -> Result<Vec<(String, Vec<u64>)>> {
    let g = model.graph();
    let mut shapes = given.to_vec();
    if let Some((s, _)) = symbols.iter().find(|(s, _)| !g.inputs().iter().any(|&v| g.value(v).ty.shape.iter().any(|d| d.symbols().contains(&s.as_str())))) {
        bail!("--bind {s}: no input has a dim named {s}");
    }
    for &v in g.inputs() {
        let value = g.value(v);
        if given.iter().any(|(n, _)| *n == value.name) || value.ty.known_dims().is_some() {
            continue;
        }
        let dims: Option<Vec<u64>> = value
            .ty
            .shape
            .iter()
            .map(|d| match (d.known(), d.symbols().as_slice()) {
                (Some(n), _) => Some(n),
                (None, [s]) if *d == kiln::Dim::sym(s) => symbols.iter().find(|(n, _)| n == s).map(|(_, v)| *v),
                _ => None,
            })
            .collect();
        if let Some(dims) = dims {
            shapes.push((value.name.clone(), dims));
        }
    }
    Ok(shapes)
}

/// The C compiler driver that links for `triple`: `cc` for this machine, Debian's cross
/// compilers' names for the others.
pub fn linker(triple: &Triple) -> String {
    if triple.architecture == Triple::host().architecture {
        return "cc".into();
    }
    match triple.architecture {
        Architecture::Aarch64(_) => "aarch64-linux-gnu-gcc".into(),
        Architecture::Riscv64(_) => "riscv64-linux-gnu-gcc".into(),
        Architecture::X86_64 => "x86_64-linux-gnu-gcc".into(),
        other => format!("{other}-linux-gnu-gcc"),
    }
}

/// `libkiln_runtime.a` for `triple`: `KILN_RUNTIME_LIB`, else the one cargo built beside this
/// executable (for this machine only).
fn runtime_archive(triple: &Triple) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("KILN_RUNTIME_LIB") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("KILN_RUNTIME_LIB={}: no such file", path.display());
        }
        return Ok(path);
    }
    let build = "cargo build --release -p kiln-runtime";
    if triple.architecture != Triple::host().architecture {
        bail!("runtime=static for {triple} links libkiln_runtime.a built for it: `{build} --target {triple}`, then set KILN_RUNTIME_LIB to target/{triple}/release/libkiln_runtime.a (or compile with --runtime none)");
    }
    let exe = std::env::current_exe().context("finding the kiln executable")?;
    let dir = exe.parent().context("the kiln executable has no folder")?;
    let beside = dir.join("libkiln_runtime.a");
    if beside.is_file() {
        return Ok(beside);
    }
    // A dependency's archive stays in deps/, named with its build's hash; the newest is the one
    // this executable was built with.
    let newest = std::fs::read_dir(dir.join("deps"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("libkiln_runtime-") && e.file_name().to_string_lossy().ends_with(".a"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    match newest {
        Some((_, path)) => Ok(path),
        None => bail!("runtime=static links libkiln_runtime.a, which is not beside {}: `{build}` builds it (or set KILN_RUNTIME_LIB, or compile with --runtime none)", exe.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::c_name;
    use std::path::Path;

    #[test]
    fn file_names_become_c_identifiers() {
        assert_eq!(c_name(Path::new("models/mobilenet-v2.onnx")), "mobilenet_v2");
        assert_eq!(c_name(Path::new("3d.onnx")), "_3d");
        assert_eq!(c_name(Path::new("bert_mini.onnx")), "bert_mini");
    }
}
