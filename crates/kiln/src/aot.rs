//! Ahead-of-time compilation: a model to a relocatable object file and the C header that
//! describes its ABI (`kiln compile`).
//!
//! The object runs one specialization: every input shape is fixed when it is compiled (from the
//! model, or [`CompileOptions::input_shapes`]). With `runtime=static` it calls the runtime's
//! kernels and links with `libkiln_runtime.a`; with `runtime=none` every runtime call is plain
//! generated code (`kiln_lower::plain`) and it needs only libc and libm.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use kiln_codegen::{ArenaPlan, ObjectCode, Weights};
use kiln_target::Runtime;
use kiln_tir::DType;

use crate::pipeline::{Bindings, Stage};
use crate::{CompileOptions, Error, Model, Result};

/// A graph input or output as the object sees it: static shape, element type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// The ONNX name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dims.
    pub shape: Vec<u64>,
}

impl Port {
    /// Bytes of the buffer the caller passes.
    pub fn bytes(&self) -> u64 {
        self.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).and_then(|n| self.dtype.storage_bytes(n)).unwrap_or(u64::MAX)
    }
}

/// A model compiled to an object file.
#[derive(Clone, Debug)]
pub struct ObjectFile {
    /// The C identifier every exported symbol starts with.
    pub name: String,
    /// The object and its ABI figures.
    pub code: ObjectCode,
    /// The graph's inputs, in the order `NAME_run` takes them.
    pub inputs: Vec<Port>,
    /// The graph's outputs, in order.
    pub outputs: Vec<Port>,
    /// What it was compiled for.
    pub target: kiln_target::Target,
    /// Wall time from the imported model to the object's bytes.
    pub compile_time: Duration,
}

impl Model {
    /// Compiles the model to an object file for `options.target`, whose runtime must be
    /// `static` or `none`, with exported symbols `{name}_run` and `{name}_error_string`.
    /// With [`Weights::External`] the constants go to [`ObjectCode::weights`] instead, which
    /// `NAME_run` takes as its first argument.
    pub fn compile_object(&self, options: &CompileOptions, name: &str, weights: Weights) -> Result<ObjectFile> {
        let start = Instant::now();
        let target = &options.target;
        if target.runtime == Runtime::Jit {
            return Err(Error::Object(format!("the target {target} is for JIT code; an object file needs runtime=static or runtime=none")));
        }
        if !kiln_codegen::is_c_identifier(name) {
            return Err(Error::Object(format!("the name \"{}\" is not a C identifier (letters, digits and _, not starting with a digit)", kiln_tir::echo::text(name))));
        }
        let graph = self.graph();
        let mut shapes = Vec::new();
        for &v in graph.inputs() {
            let value = graph.value(v);
            let given = options.input_shapes.iter().find(|(n, _)| *n == value.name).map(|(_, d)| d.clone());
            let known = value.ty.shape.iter().map(kiln_tir::Dim::known).collect::<Option<Vec<u64>>>();
            match given.or(known) {
                Some(dims) => shapes.push(dims),
                None => {
                    let (k, d) = value.ty.shape.iter().enumerate().find(|(_, d)| d.known().is_none()).map(|(k, d)| (k, d.to_string())).unwrap_or((0, "?".into()));
                    return Err(Error::Object(format!("input {:?} dim {k} is {d}, not a number: give the input's shape (--input-shape {}=...)", value.name, value.name)));
                }
            }
        }
        if let Some((n, _)) = options.input_shapes.iter().find(|(n, _)| !graph.inputs().iter().any(|&v| graph.value(v).name == *n)) {
            return Err(Error::UnknownInput(n.clone()));
        }
        let deciding = crate::pipeline::shape_deciding_inputs(graph, &shapes)?;
        if let Some(&i) = deciding.first() {
            let name = &graph.value(graph.inputs()[i]).name;
            return Err(Error::Object(format!("input {name:?} decides shapes inside the model by its value; an object file runs one specialization and cannot take it")));
        }
        let pipeline = CompileOptions { threads: 1, ..options.clone() }.pipeline();
        let bindings = Bindings { symbols: Vec::new(), input_shapes: shapes.into_iter().enumerate().collect(), input_values: Vec::new() };
        let bound = pipeline.run(graph, &bindings, Stage::Bind)?.graph;
        if crate::staged::split(&bound).is_some() {
            return Err(Error::Object("a shape in this model comes from data (NonZero, NonMaxSuppression, a Loop's outputs...): it runs in stages, which an object file cannot".into()));
        }
        let compiled = pipeline.run(&bound, &Bindings::default(), Stage::Plan)?;
        let (Some(program), Some(plan)) = (&compiled.program, &compiled.plan) else {
            return Err(Error::Internal("the pipeline stopped before the memory plan".into()));
        };
        let g = &compiled.graph;
        let port = |v| {
            let value = g.value(v);
            Port { name: value.name.clone(), dtype: value.ty.dtype, shape: value.ty.known_dims().unwrap_or_default() }
        };
        let inputs: Vec<Port> = g.inputs().iter().map(|&v| port(v)).collect();
        let outputs: Vec<Port> = g.outputs().iter().map(|&v| port(v)).collect();
        if let Some(p) = inputs.iter().chain(&outputs).find(|p| p.dtype == DType::String) {
            return Err(Error::Object(format!("{:?} holds strings, which compiled code never reads", p.name)));
        }
        let code = kiln_codegen::compile_object(program, ArenaPlan { offsets: &plan.offsets, bytes: plan.arena_bytes }, target, &pipeline.codegen_options(), name, weights)?;
        Ok(ObjectFile { name: name.to_string(), code, inputs, outputs, target: target.clone(), compile_time: start.elapsed() })
    }
}

impl ObjectFile {
    /// The C header: the arena size, each input's and output's name, element type and shape,
    /// the status codes, and the two functions.
    pub fn header(&self) -> String {
        let n = &self.name;
        let mut h = String::new();
        let _ = writeln!(h, "/* {n}.h: the C interface of {n}.o, written by kiln for {}. */", self.target);
        let _ = writeln!(h, "#ifndef KILN_H_{n}\n#define KILN_H_{n}\n\n#include <stddef.h>\n#include <stdint.h>\n");
        let _ = writeln!(h, "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");
        let rank = |ports: &[Port]| ports.iter().map(|p| p.shape.len()).max().unwrap_or(0).max(1);
        let _ = writeln!(h, "enum {{");
        let _ = writeln!(h, "    /* {n}_run's status: success, a bad argument, or (positive) a check the model failed. */");
        let _ = writeln!(h, "    {n}_ok = 0,\n    {n}_bad_arena = {},\n    {n}_bad_buffer = {},\n    {n}_bad_weights = {},", kiln_codegen::STATUS_BAD_ARENA, kiln_codegen::STATUS_BAD_BUFFER, kiln_codegen::STATUS_BAD_WEIGHTS);
        let _ = writeln!(h, "    /* The alignment in bytes of the arena, and of every input and output buffer. */");
        let _ = writeln!(h, "    {n}_arena_align = {},\n    {n}_buffer_align = {},", kiln_codegen::ARENA_ALIGN, kiln_codegen::BUFFER_ALIGN);
        let _ = writeln!(h, "    {n}_num_inputs = {},\n    {n}_num_outputs = {},", self.inputs.len(), self.outputs.len());
        let _ = writeln!(h, "    {n}_max_input_rank = {},\n    {n}_max_output_rank = {}\n}};\n", rank(&self.inputs), rank(&self.outputs));
        let _ = writeln!(h, "/* Scratch memory {n}_run needs. One arena per concurrent run; nothing else is written but");
        let _ = writeln!(h, "   the outputs. */");
        let _ = writeln!(h, "static const size_t {n}_arena_bytes = {}u;\n", self.code.arena_bytes);
        for (kind, ports) in [("input", &self.inputs), ("output", &self.outputs)] {
            for (i, p) in ports.iter().enumerate() {
                let dims: Vec<String> = p.shape.iter().map(u64::to_string).collect();
                let _ = writeln!(h, "/* {kind} {i}: {} {}[{}] */", c_string(&p.name), p.dtype.name(), dims.join(", "));
            }
            let list = |f: &dyn Fn(&Port) -> String| ports.iter().map(f).collect::<Vec<_>>().join(", ");
            let or_none = |s: String| if s.is_empty() { "0".to_string() } else { s };
            let _ = writeln!(h, "static const char *const {n}_{kind}_names[] = {{{}}};", or_none(list(&|p| c_string(&p.name))));
            let _ = writeln!(h, "static const char *const {n}_{kind}_dtypes[] = {{{}}};", or_none(list(&|p| c_string(p.dtype.name()))));
            let _ = writeln!(h, "/* NumPy's dtype of each (empty where NumPy has none). */");
            let _ = writeln!(h, "static const char *const {n}_{kind}_npy_descr[] = {{{}}};", or_none(list(&|p| c_string(crate::npy::descr(p.dtype).unwrap_or("")))));
            let _ = writeln!(h, "static const size_t {n}_{kind}_bytes[] = {{{}}};", or_none(list(&|p| format!("{}u", p.bytes()))));
            let _ = writeln!(h, "static const int {n}_{kind}_ranks[] = {{{}}};", or_none(list(&|p| p.shape.len().to_string())));
            let shapes = list(&|p| format!("{{{}}}", if p.shape.is_empty() { "0".into() } else { p.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ") }));
            let _ = writeln!(h, "static const int64_t {n}_{kind}_shapes[][{n}_max_{kind}_rank] = {{{}}};\n", if shapes.is_empty() { "{0}".into() } else { shapes });
        }
        let _ = writeln!(h, "/* Runs the model: inputs[i] and outputs[i] point to the i-th input's and output's elements");
        let _ = writeln!(h, "   (row-major, {n}_input_bytes[i] and {n}_output_bytes[i] bytes). Reentrant: two threads may run");
        let _ = writeln!(h, "   at once with two arenas. */");
        match &self.code.weights {
            None => {
                let _ = writeln!(h, "#define {n}_external_weights 0");
                let _ = writeln!(h, "int32_t {n}_run(void *arena, const void *const *inputs, void *const *outputs);\n");
            }
            Some(file) => {
                let _ = writeln!(h, "#define {n}_external_weights 1");
                let _ = writeln!(h, "/* The weights are the bytes of {n}.weights ({} bytes), loaded or mapped at an address aligned to", file.len());
                let _ = writeln!(h, "   {n}_arena_align. {n}_run checks the file's header (magic, fingerprint); the caller checks");
                let _ = writeln!(h, "   that all {n}_weights_bytes bytes are there. */");
                let _ = writeln!(h, "static const size_t {n}_weights_bytes = {}u;", file.len());
                let _ = writeln!(h, "int32_t {n}_run(const void *weights, void *arena, const void *const *inputs, void *const *outputs);\n");
            }
        }
        let _ = writeln!(h, "/* A sentence for any status {n}_run returns. */");
        let _ = writeln!(h, "const char *{n}_error_string(int32_t status);\n");
        let _ = writeln!(h, "#ifdef __cplusplus\n}}\n#endif\n\n#endif");
        h
    }
}

/// `s` as a C string literal: printable ASCII as it is, everything else escaped in octal (so no
/// following character can extend an escape).
fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            // `??` starts a trigraph in older C standards; `*/` would end the comments the names
            // also appear in.
            b'?' => out.push_str("\\?"),
            b'*' => out.push_str("\\052"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::c_string;

    #[test]
    fn names_become_c_string_literals_whatever_they_hold() {
        assert_eq!(c_string("input_1"), "\"input_1\"");
        assert_eq!(c_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(c_string("x\n\u{e9}?"), "\"x\\012\\303\\251\\?\"");
        assert_eq!(c_string("a*/b"), "\"a\\052/b\"");
    }
}
