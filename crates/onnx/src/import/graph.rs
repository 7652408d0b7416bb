//! The import walk: graphs and subgraphs become regions, nodes become typed ops.

use std::collections::HashMap;

use kiln_tir::infer::{InferError, InferInput, RegionSig, SymbolSource, infer_op};
use kiln_tir::op::AttrValue;
use kiln_tir::{Assumed, Assumption, DType, Dim, Graph, Op, OpKind, Region, Tensor, TensorType, ValueDef, ValueId};

use super::{ImportError, ImportLimits, bounded};
use super::attrs::{self, AttrEnv, OnnxAttr};
use super::types::{Symbols, tensor, tensor_type};
use super::upgrade::{self, Pending};
use super::expand;
use crate::load::OnnxFile;
use crate::proto::{FunctionProto, GraphProto, NodeProto, OperatorSetIdProto};

mod emit;
mod inline;

/// ONNX ops that take or produce sequences, maps or optionals: kiln's values are tensors.
const NON_TENSOR_OPS: &[&str] = &[
    "ConcatFromSequence",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
];

/// Opset version per domain (`""` is the default ONNX domain).
type Opsets = HashMap<String, i64>;

/// The newest default-domain opset kiln imports (onnx 1.23's).
pub const NEWEST_OPSET: i64 = 28;

/// The opset imports of a model or function. A domain listed twice with one version is kept;
/// two versions, or a default-domain version outside 1..=[`NEWEST_OPSET`], are errors.
fn opsets(list: &[OperatorSetIdProto], location: &str) -> Result<Opsets, ImportError> {
    let mut out = Opsets::new();
    for o in list {
        let d = o.domain.clone().unwrap_or_default();
        let domain = if d == "ai.onnx" { String::new() } else { d };
        let version = o.version.unwrap_or(1);
        let shown = if domain.is_empty() { "the default domain (ai.onnx)".to_string() } else { format!("domain {:?}", bounded(&domain)) };
        let invalid = |reason: String| ImportError::Invalid { location: location.to_string(), reason };
        if domain.is_empty() && !(1..=NEWEST_OPSET).contains(&version) {
            return Err(invalid(format!("opset {version} of {shown} is outside what kiln imports (1 to {NEWEST_OPSET})")));
        }
        if version < 1 {
            return Err(invalid(format!("opset {version} of {shown} is not a version")));
        }
        match out.insert(domain, version) {
            Some(v) if v != version => return Err(invalid(format!("imports {shown} twice, as opset {v} and {version}"))),
            _ => {}
        }
    }
    Ok(out)
}

/// Names visible while importing: one frame per enclosing graph, innermost last. A name bound
/// to `None` is an omitted optional input passed into an inlined function.
#[derive(Default)]
struct Scope {
    frames: Vec<HashMap<String, Option<ValueId>>>,
}

impl Scope {
    fn lookup(&self, name: &str) -> Option<Option<ValueId>> {
        self.frames.iter().rev().find_map(|f| f.get(name).copied())
    }

    fn bind(&mut self, name: &str, v: Option<ValueId>) {
        if let Some(f) = self.frames.last_mut() {
            f.insert(name.to_string(), v);
        }
    }
}

/// What a function body is imported with: its opsets, attribute bindings and a name prefix
/// for the values it defines.
struct Context<'m> {
    opsets: Opsets,
    env: Option<AttrEnv<'m>>,
    prefix: String,
}

/// A default-domain node on its way into the graph, from the model or from [`expand`].
struct Emit<'n, 'f> {
    location: String,
    op_type: &'n str,
    version: i64,
    name: String,
    attrs: Vec<(String, AttrValue)>,
    graphs: Vec<(String, &'f GraphProto)>,
    inputs: &'n [String],
    outputs: &'n [String],
}

/// One model's import in progress.
pub struct Importer<'f> {
    file: &'f OnnxFile,
    g: Graph,
    kinds: HashMap<&'static str, OpKind>,
    functions: HashMap<(String, String), &'f FunctionProto>,
    symbols: Symbols,
    calls: u32,
    expansions: u32,
    unnamed: u32,
    limits: ImportLimits,
    /// Subgraphs and function calls being imported, outermost first; a function found here
    /// again calls itself.
    nesting: Vec<Nest>,
}

/// One level of [`Importer::nesting`].
#[derive(PartialEq)]
enum Nest {
    Subgraph,
    Call(String, String),
}

fn node_location(np: &NodeProto) -> String {
    format!(
        "node \"{}\" ({})",
        bounded(np.name.as_deref().unwrap_or("")).escape_debug(),
        bounded(np.op_type.as_deref().unwrap_or(""))
    )
}

impl<'f> Importer<'f> {
    /// Prepares to import `file`.
    pub fn new(file: &'f OnnxFile, limits: &ImportLimits) -> Result<Importer<'f>, ImportError> {
        let kinds = OpKind::ALL
            .iter()
            .filter(|k| !k.is_internal())
            .map(|k| (k.ident(), *k))
            .collect();
        let functions = file
            .model
            .functions
            .iter()
            .map(|f| {
                (
                    (
                        f.domain.clone().unwrap_or_default(),
                        f.name.clone().unwrap_or_default(),
                    ),
                    f,
                )
            })
            .collect();
        Ok(Importer {
            file,
            g: Graph::default(),
            kinds,
            functions,
            symbols: Symbols::default(),
            calls: 0,
            expansions: 0,
            unnamed: 0,
            limits: limits.clone(),
            nesting: Vec::new(),
        })
    }

    /// Imports the main graph.
    pub fn run(mut self) -> Result<Graph, ImportError> {
        let file = self.file;
        let Some(gp) = file.model.graph.as_ref() else {
            return Err(ImportError::Invalid {
                location: "model".into(),
                reason: "has no graph".into(),
            });
        };
        let opsets = opsets(&file.model.opset_import, "model")?;
        let nodes = self.inlined_size(&gp.node, &mut HashMap::new(), &mut Vec::new())?;
        if nodes > self.limits.max_nodes as u64 {
            return Err(ImportError::Invalid {
                location: "model".into(),
                reason: format!("has {nodes} nodes once its functions are inlined, over the limit of {} (ImportLimits::max_nodes)", self.limits.max_nodes),
            });
        }
        let default_domain_nodes = gp.node.iter().any(|n| matches!(n.domain.as_deref(), None | Some("" | "ai.onnx")));
        if !opsets.contains_key("") && default_domain_nodes {
            return Err(ImportError::Invalid {
                location: "model".into(),
                reason: "imports no opset of the default domain (ai.onnx), which its nodes use".into(),
            });
        }
        let ctx = Context {
            opsets,
            env: None,
            prefix: String::new(),
        };
        let mut scope = Scope::default();
        self.g.body = self.region(gp, &mut scope, &ctx, None)?;
        Ok(self.g)
    }

    fn add_const(&mut self, region: &mut Region, t: Tensor, name: String) -> ValueId {
        let v = self.g.add_value(t.ty(), name, ValueDef::Const(t));
        region.consts.push(v);
        v
    }

    /// Imports `gp` as a region. `fallback` gives parameter types for subgraph inputs that do
    /// not declare a full type (Loop bodies often leave shapes out).
    fn region(
        &mut self,
        gp: &'f GraphProto,
        scope: &mut Scope,
        ctx: &Context<'f>,
        fallback: Option<&[TensorType]>,
    ) -> Result<Region, ImportError> {
        self.enter(Nest::Subgraph, || "a subgraph".to_string())?;
        scope.frames.push(HashMap::new());
        let result = self.region_inner(gp, scope, ctx, fallback);
        scope.frames.pop();
        self.nesting.pop();
        result
    }

    /// Pushes one level of nesting, checking the depth limit and, for a call, recursion.
    fn enter(&mut self, nest: Nest, what: impl Fn() -> String) -> Result<(), ImportError> {
        if let Nest::Call(domain, name) = &nest {
            if self.nesting.contains(&nest) {
                return Err(ImportError::Invalid {
                    location: format!("function \"{}\" (domain {:?})", bounded(name), bounded(domain)),
                    reason: "calls itself, directly or through other functions".into(),
                });
            }
        }
        // The main graph is level 1.
        if self.nesting.len() > self.limits.max_depth {
            return Err(ImportError::Invalid {
                location: what(),
                reason: format!("subgraphs and function calls nest deeper than {} levels", self.limits.max_depth),
            });
        }
        self.nesting.push(nest);
        Ok(())
    }

    fn region_inner(
        &mut self,
        gp: &'f GraphProto,
        scope: &mut Scope,
        ctx: &Context<'f>,
        fallback: Option<&[TensorType]>,
    ) -> Result<Region, ImportError> {
        let mut region = Region::default();
        let mut initialized = std::collections::HashSet::new();
        for t in &gp.initializer {
            let name = t.name.clone().unwrap_or_default();
            let what = format!("initializer \"{}\"", name.escape_debug());
            let tensor = tensor(self.file, t, &what)?;
            let v = self.add_const(&mut region, tensor, name.clone());
            scope.bind(&name, Some(v));
            initialized.insert(name);
        }
        if !gp.sparse_initializer.is_empty() {
            return Err(ImportError::Unsupported {
                location: "graph".into(),
                reason: "sparse initializers".into(),
            });
        }
        for (i, vi) in gp.input.iter().enumerate() {
            let name = vi.name.clone().unwrap_or_default();
            // Before IR version 4 initializers were also listed as inputs; the constant wins.
            if initialized.contains(&name) {
                continue;
            }
            let what = format!("input \"{}\"", name.escape_debug());
            let declared = tensor_type(vi.r#type.as_ref(), &what, &name, &mut self.symbols)?;
            let ty = match (declared, fallback.and_then(|f| f.get(i))) {
                (Some(d), Some(f))
                    if d.shape.iter().any(|x| x.known().is_none())
                        && f.rank() == d.rank()
                        && f.dtype == d.dtype =>
                {
                    f.clone()
                }
                (Some(d), _) => d,
                (None, Some(f)) => f.clone(),
                (None, None) => {
                    return Err(ImportError::Unsupported {
                        location: what,
                        reason: "no element type or shape is declared".into(),
                    });
                }
            };
            let v = self.g.add_value(ty, name.clone(), ValueDef::Param);
            region.params.push(v);
            scope.bind(&name, Some(v));
        }
        for np in &gp.node {
            self.node(np, scope, ctx, &mut region)?;
        }
        self.check_hints(gp, scope);
        for vi in &gp.output {
            let name = vi.name.clone().unwrap_or_default();
            match scope.lookup(&name) {
                Some(Some(v)) => region.results.push(v),
                _ => {
                    return Err(ImportError::Invalid {
                        location: format!("output \"{}\"", name.escape_debug()),
                        reason: "is not produced by any node, input or initializer".into(),
                    });
                }
            }
        }
        Ok(region)
    }

    /// Declared value_info and output types are hints: one that contradicts inference (another
    /// element type or rank, or another size where both are known) is dropped with a note.
    fn check_hints(&mut self, gp: &GraphProto, scope: &Scope) {
        for vi in gp.value_info.iter().chain(&gp.output) {
            let name = vi.name.clone().unwrap_or_default();
            let Some(Some(v)) = scope.lookup(&name) else { continue };
            // Declared names must not claim symbols: a scratch table reads them.
            let mut scratch = Symbols::default();
            let Ok(Some(declared)) = tensor_type(vi.r#type.as_ref(), &name, &name, &mut scratch) else { continue };
            let inferred = self.g.ty(v);
            let contradicts = declared.dtype != inferred.dtype
                || declared.rank() != inferred.rank()
                || declared.shape.iter().zip(&inferred.shape).any(|(d, i)| matches!((d.known(), i.known()), (Some(a), Some(b)) if a != b));
            if contradicts {
                self.g.notes.push(format!("value {:?}: declared {declared}, inferred {inferred}; the declaration is dropped", name));
            }
        }
    }

    fn node(
        &mut self,
        np: &'f NodeProto,
        scope: &mut Scope,
        ctx: &Context<'f>,
        region: &mut Region,
    ) -> Result<(), ImportError> {
        let op_type = np.op_type.as_deref().unwrap_or("");
        // Unnamed nodes get a name errors and dumps can point at: the op type and a number.
        let node_name = match np.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => {
                self.unnamed += 1;
                format!("{op_type}#{}", self.unnamed)
            }
        };
        let location = format!("node \"{}\" ({op_type})", bounded(&node_name).escape_debug());
        if self.g.nodes.len() >= self.limits.max_nodes {
            return Err(ImportError::Invalid {
                location,
                reason: format!("the graph has more than {} nodes after inlining functions (ImportLimits::max_nodes)", self.limits.max_nodes),
            });
        }
        let domain = match np.domain.as_deref().unwrap_or("") {
            "ai.onnx" => "",
            d => d,
        };
        if let Some(f) = self
            .functions
            .get(&(domain.to_string(), op_type.to_string()))
            .copied()
        {
            return self.inline(np, f, scope, ctx, region);
        }
        let version = ctx.opsets.get("").copied().unwrap_or(1);

        let mut values = Vec::new();
        let mut graphs = Vec::new();
        for (name, a) in attrs::convert(self.file, &np.attribute, ctx.env.as_ref(), &location)? {
            match a {
                OnnxAttr::Value(v) => values.push((name, v)),
                OnnxAttr::Graph(g) => graphs.push((name, g)),
            }
        }
        self.expansions += 1;
        let call = expand::Call {
            op_type,
            domain,
            version,
            name: &node_name,
            id: self.expansions,
            inputs: &np.input,
            outputs: &np.output,
            attrs: &values,
        };
        let ty = |name: &str| scope.lookup(name).flatten().map(|v| self.g.ty(v).clone());
        let expanded = expand::expand(&call, &ty).map_err(|reason| ImportError::Unsupported { location: location.clone(), reason })?;
        if let Some(nodes) = expanded {
            if let Some((n, _)) = graphs.first() {
                return Err(ImportError::Invalid { location, reason: format!("unexpected graph attribute `{n}`") });
            }
            for n in nodes {
                self.generated(n, scope, ctx, region)?;
            }
            return Ok(());
        }
        if !domain.is_empty() {
            return Err(ImportError::Unsupported {
                location,
                reason: format!("operator domain \"{domain}\""),
            });
        }
        if op_type == "Constant" {
            return self.constant(np, values, scope, ctx, region, &location);
        }
        if NON_TENSOR_OPS.contains(&op_type) {
            return Err(ImportError::Unsupported {
                location,
                reason: "sequence and optional values are not supported".into(),
            });
        }
        let name = format!("{}{node_name}", ctx.prefix);
        self.emit(Emit { location, op_type, version, name, attrs: values, graphs, inputs: &np.input, outputs: &np.output }, scope, ctx, region)
    }

    /// Imports one node that [`expand`] wrote in the newest opset.
    fn generated(&mut self, n: expand::Node, scope: &mut Scope, ctx: &Context<'f>, region: &mut Region) -> Result<(), ImportError> {
        let location = format!("node \"{}\" ({})", n.name.escape_debug(), n.op_type);
        if n.op_type == "Constant" {
            let (Some(out), Some((_, AttrValue::Tensor(t)))) = (n.outputs.first(), n.attrs.into_iter().next()) else {
                return Err(ImportError::Invalid { location, reason: "generated constant without a value".into() });
            };
            let v = self.add_const(region, t, format!("{}{out}", ctx.prefix));
            scope.bind(out, Some(v));
            return Ok(());
        }
        let name = format!("{}{}", ctx.prefix, n.name);
        let emit = Emit { location, op_type: n.op_type, version: expand::OPSET, name, attrs: n.attrs, graphs: Vec::new(), inputs: &n.inputs, outputs: &n.outputs };
        self.emit(emit, scope, ctx, region)
    }
}
