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

    /// How many nodes `nodes` become once function calls are inlined, counting subgraphs'
    /// nodes (saturating); found before anything is imported, so that a call bomb costs nothing.
    /// A function reached again through its own body is recursion, an error.
    fn inlined_size(&self, nodes: &'f [NodeProto], memo: &mut HashMap<(String, String), u64>, active: &mut Vec<(String, String)>) -> Result<u64, ImportError> {
        let mut total = 0u64;
        for np in nodes {
            let domain = match np.domain.as_deref().unwrap_or("") {
                "ai.onnx" => "",
                d => d,
            };
            let key = (domain.to_string(), np.op_type.clone().unwrap_or_default());
            let size = match self.functions.get(&key) {
                Some(f) => match memo.get(&key) {
                    Some(&n) => n,
                    None => {
                        if active.contains(&key) {
                            return Err(ImportError::Invalid {
                                location: format!("function \"{}\" (domain {:?})", bounded(&key.1), bounded(&key.0)),
                                reason: "calls itself, directly or through other functions".into(),
                            });
                        }
                        active.push(key.clone());
                        let n = self.inlined_size(&f.node, memo, active)?;
                        active.pop();
                        memo.insert(key, n);
                        n
                    }
                },
                None => {
                    let mut n = 1u64;
                    for a in &np.attribute {
                        for g in a.g.iter().chain(&a.graphs) {
                            n = n.saturating_add(self.inlined_size(&g.node, memo, active)?);
                        }
                    }
                    n
                }
            };
            total = total.saturating_add(size);
        }
        Ok(total)
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

    /// Imports one default-domain node: inputs looked up, the op upgraded to the newest form,
    /// regions imported, types inferred; shape computations fold to constants.
    fn emit(&mut self, e: Emit<'_, 'f>, scope: &mut Scope, ctx: &Context<'f>, region: &mut Region) -> Result<(), ImportError> {
        let Emit { location, op_type, version, name: node_name, attrs: values, mut graphs, inputs: input_names, outputs: output_names } = e;
        let mut inputs = Vec::with_capacity(input_names.len());
        for name in input_names {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            match scope.lookup(name) {
                Some(v) => inputs.push(v),
                None => {
                    return Err(ImportError::Invalid {
                        location,
                        reason: format!(
                            "input \"{}\" is not defined before this node",
                            name.escape_debug()
                        ),
                    });
                }
            }
        }
        let kind =
            upgrade::kind_of(op_type, &self.kinds).ok_or_else(|| ImportError::Unsupported {
                location: location.clone(),
                reason: format!("unknown operator {op_type}"),
            })?;
        let mut pending = Pending {
            kind,
            attrs: values,
            inputs,
            num_outputs: output_names.len(),
        };
        let input_types: Vec<Option<TensorType>> = pending
            .inputs
            .iter()
            .map(|i| i.map(|v| self.g.ty(v).clone()))
            .collect();
        let g = &mut self.g;
        let mut new_const = |t: Tensor| {
            let v = g.add_value(t.ty(), String::new(), ValueDef::Const(t));
            region.consts.push(v);
            v
        };
        upgrade::upgrade(op_type, version, &mut pending, &input_types, &mut new_const).map_err(
            |reason| ImportError::Unsupported {
                location: location.clone(),
                reason,
            },
        )?;

        let op = pending
            .kind
            .with_attrs(pending.attrs)
            .map_err(|e| ImportError::Invalid {
                location: location.clone(),
                reason: e.to_string(),
            })?;

        // Regions, in the order the op names them.
        let mut regions = Vec::new();
        for rname in pending.kind.region_names() {
            let Some(pos) = graphs.iter().position(|(n, _)| n == rname) else {
                return Err(ImportError::Invalid {
                    location,
                    reason: format!("missing graph attribute `{rname}`"),
                });
            };
            let (_, gp) = graphs.swap_remove(pos);
            let fallback = self.body_param_types(&op, &pending.inputs);
            regions.push(self.region(gp, scope, ctx, fallback.as_deref())?);
        }
        if let Some((n, _)) = graphs.first() {
            return Err(ImportError::Invalid {
                location,
                reason: format!("unexpected graph attribute `{n}`"),
            });
        }

        let sigs: Vec<RegionSig> = regions
            .iter()
            .map(|r| RegionSig {
                params: r.params.iter().map(|&p| self.g.ty(p).clone()).collect(),
                results: r.results.iter().map(|&p| self.g.ty(p).clone()).collect(),
            })
            .collect();
        let mut assumed = Vec::new();
        let types = {
            let inputs: Vec<Option<InferInput<'_>>> = pending
                .inputs
                .iter()
                .map(|i| {
                    i.map(|v| InferInput {
                        ty: self.g.ty(v),
                        value: self.g.const_value(v),
                    })
                })
                .collect();
            let mut symbols = NodeSymbols { symbols: &mut self.symbols, assumed: &mut assumed };
            let r = infer_op(&op, &inputs, &sigs, output_names.len(), &mut symbols);
            r.map_err(|e| match e {
                // kiln compiles for static ranks; a rank that depends on input data is a limit of
                // kiln, not a fault of the model.
                InferError::NotStatic(_) => ImportError::Unsupported {
                    location: location.clone(),
                    reason: format!("shape depends on run-time data: {e}"),
                },
                _ => ImportError::Invalid {
                    location: location.clone(),
                    reason: e.to_string(),
                },
            })?
        };

        if let Some(folded) = kiln_eval::fold::fold_node(&self.g, &op, &pending.inputs, &types) {
            for (name, t) in output_names.iter().zip(folded) {
                if !name.is_empty() {
                    let v = self.add_const(region, t, format!("{}{name}", ctx.prefix));
                    scope.bind(name, Some(v));
                }
            }
            return Ok(());
        }
        let outputs = output_names
            .iter()
            .zip(types)
            .map(|(name, ty)| (!name.is_empty()).then(|| (ty, format!("{}{name}", ctx.prefix))))
            .collect();
        let node = self.g.add_node(op, node_name, pending.inputs, outputs, regions);
        region.nodes.push(node);
        self.g.assumptions.extend(assumed.into_iter().map(|what| Assumption { node, what }));
        for (name, out) in output_names.iter().zip(self.g.node(node).outputs.clone()) {
            if !name.is_empty() {
                scope.bind(name, out);
            }
        }
        Ok(())
    }

    /// Parameter types to fall back on for Loop and Scan bodies whose inputs leave them out:
    /// Loop bodies take (iteration, condition, carried values...), Scan bodies take (state
    /// values..., one slice of each scanned input).
    fn body_param_types(&self, op: &Op, inputs: &[Option<ValueId>]) -> Option<Vec<TensorType>> {
        let ty = |v: &Option<ValueId>| v.map(|v| self.g.ty(v).clone());
        match op {
            Op::Loop(_) => {
                let mut types = vec![
                    TensorType::known(DType::I64, &[]),
                    TensorType::known(DType::Bool, &[]),
                ];
                for v in inputs.iter().skip(2) {
                    types.push(ty(v)?);
                }
                Some(types)
            }
            Op::Scan(s) => {
                let scanned = usize::try_from(s.num_scan_inputs).ok()?;
                let states = inputs.len().checked_sub(scanned)?;
                let mut types: Vec<TensorType> =
                    inputs[..states].iter().map(ty).collect::<Option<_>>()?;
                for (i, v) in inputs[states..].iter().enumerate() {
                    let mut t = ty(v)?;
                    let axis = s.scan_input_axes.get(i).copied().unwrap_or(0);
                    let axis = if axis < 0 {
                        axis + t.rank() as i64
                    } else {
                        axis
                    };
                    if axis < 0 || axis as usize >= t.rank() {
                        return None;
                    }
                    t.shape.remove(axis as usize);
                    types.push(t);
                }
                Some(types)
            }
            _ => None,
        }
    }

    fn constant(
        &mut self,
        np: &NodeProto,
        attrs: Vec<(String, AttrValue)>,
        scope: &mut Scope,
        ctx: &Context<'f>,
        region: &mut Region,
        location: &str,
    ) -> Result<(), ImportError> {
        let invalid = |reason: &str| ImportError::Invalid {
            location: location.to_string(),
            reason: reason.to_string(),
        };
        let [(name, value)] = &attrs[..] else {
            return Err(invalid("Constant needs exactly one value attribute"));
        };
        let t = match (name.as_str(), value) {
            ("value", AttrValue::Tensor(t)) => t.clone(),
            ("value_float", AttrValue::Float(f)) => Tensor::from_f32s(&[], &[*f]),
            ("value_floats", AttrValue::Floats(f)) => Tensor::from_f32s(&[f.len() as u64], f),
            ("value_int", AttrValue::Int(i)) => Tensor::from_i64s(&[], &[*i]),
            ("value_ints", AttrValue::Ints(i)) => Tensor::from_i64s(&[i.len() as u64], i),
            ("value_string", AttrValue::Str(s)) => string_tensor(&[], std::slice::from_ref(s)),
            ("value_strings", AttrValue::Strs(s)) => string_tensor(&[s.len() as u64], s),
            ("sparse_value", _) => {
                return Err(ImportError::Unsupported {
                    location: location.to_string(),
                    reason: "sparse constants".into(),
                });
            }
            _ => {
                return Err(invalid(&format!(
                    "unexpected attribute `{name}` of kind {}",
                    value.kind()
                )));
            }
        };
        let Some(out) = np.output.first() else {
            return Err(invalid("Constant has no output"));
        };
        let v = self.add_const(region, t, format!("{}{out}", ctx.prefix));
        scope.bind(out, Some(v));
        Ok(())
    }

    /// Inlines a call of model-local function `f`: its body is imported in a scope of its own
    /// where the formal inputs name the actual ones, and the formal outputs then name the call's.
    fn inline(
        &mut self,
        np: &'f NodeProto,
        f: &'f FunctionProto,
        scope: &mut Scope,
        ctx: &Context<'f>,
        region: &mut Region,
    ) -> Result<(), ImportError> {
        let location = node_location(np);
        self.calls += 1;
        let call_name = match np.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("call{}", self.calls),
        };
        let mut inner = Scope::default();
        inner.frames.push(HashMap::new());
        for (i, formal) in f.input.iter().enumerate() {
            let actual = match np.input.get(i).map(String::as_str) {
                None | Some("") => None,
                Some(name) => match scope.lookup(name) {
                    Some(v) => v,
                    None => {
                        return Err(ImportError::Invalid {
                            location,
                            reason: format!(
                                "input \"{}\" is not defined before this node",
                                name.escape_debug()
                            ),
                        });
                    }
                },
            };
            inner.bind(formal, actual);
        }
        let mut env: AttrEnv<'f> = HashMap::new();
        for a in &f.attribute_proto {
            env.insert(a.name.clone().unwrap_or_default(), a);
        }
        for a in &np.attribute {
            env.insert(a.name.clone().unwrap_or_default(), a);
        }
        let mut fn_opsets = ctx.opsets.clone();
        let fn_key = (f.domain.clone().unwrap_or_default(), f.name.clone().unwrap_or_default());
        fn_opsets.extend(opsets(&f.opset_import, &format!("function \"{}\"", bounded(&fn_key.1)))?);
        let inner_ctx = Context {
            opsets: fn_opsets,
            env: Some(env),
            prefix: format!("{}{call_name}/", ctx.prefix),
        };
        self.enter(Nest::Call(fn_key.0, fn_key.1), || location.clone())?;
        let body = f.node.iter().try_for_each(|n| self.node(n, &mut inner, &inner_ctx, region));
        self.nesting.pop();
        body?;
        for (formal, actual) in f.output.iter().zip(&np.output) {
            if actual.is_empty() {
                continue;
            }
            match inner.lookup(formal) {
                Some(Some(v)) => {
                    self.g.values[v.index()].name = format!("{}{actual}", ctx.prefix);
                    scope.bind(actual, Some(v));
                }
                _ => {
                    return Err(ImportError::Invalid {
                        location,
                        reason: format!(
                            "function output \"{}\" is never defined",
                            formal.escape_debug()
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The import's symbols, and the broadcasts one node's inference assumed.
struct NodeSymbols<'a> {
    symbols: &'a mut Symbols,
    assumed: &'a mut Vec<Assumed>,
}

impl SymbolSource for NodeSymbols<'_> {
    fn fresh(&mut self) -> Dim {
        self.symbols.fresh("dyn")
    }

    fn assume(&mut self, what: Assumed) {
        self.assumed.push(what);
    }
}

fn string_tensor(shape: &[u64], s: &[String]) -> Tensor {
    Tensor {
        dtype: kiln_tir::DType::String,
        shape: shape.to_vec(),
        data: kiln_tir::TensorData::Strings(
            s.iter()
                .map(|x| bytes::Bytes::from(x.clone().into_bytes()))
                .collect(),
        ),
    }
}
