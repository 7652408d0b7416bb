//! Whole-graph inference: every node in order, regions first, errors collected.

use std::collections::HashSet;

use crate::dim::Dim;
use crate::graph::{Assumed, Assumption, Graph, NodeId, Region, ValueDef, ValueId};
use crate::op::{Op, OpKind};
use crate::types::TensorType;

use super::{GraphInferError, InferInput, RegionSig, SymbolSource, infer_op};

/// Names fresh symbols `unk__N`, skipping the symbols region parameters already use, so that
/// inferring the same graph twice gives the same names.
pub(super) struct FreshNames {
    used: HashSet<String>,
    next: usize,
}

impl FreshNames {
    fn new(g: &Graph) -> FreshNames {
        let used = g
            .values
            .iter()
            .filter(|v| v.def == ValueDef::Param)
            .flat_map(|v| v.ty.shape.iter().flat_map(|d| d.symbols().into_iter().map(str::to_string)).collect::<Vec<_>>())
            .collect();
        FreshNames { used, next: 0 }
    }

    fn make(&mut self) -> Dim {
        loop {
            let name = format!("unk__{}", self.next);
            self.next += 1;
            if !self.used.contains(&name) {
                return Dim::sym(&name);
            }
        }
    }
}

/// Re-infers every node of `g` in order (regions recursively; a region's params keep their
/// declared types, Loop/Scan body params are re-derived where they depend on the outer
/// inputs), replacing output types; errors name the node (`node "name" (tensor.conv): reason`)
/// and all failures are collected.
pub fn infer_graph(g: &mut Graph) -> Result<(), Vec<GraphInferError>> {
    g.assumptions.clear();
    let mut w = Walk { fresh: FreshNames::new(g), errors: Vec::new() };
    let body = g.body.clone();
    w.region(g, &body);
    if w.errors.is_empty() { Ok(()) } else { Err(w.errors) }
}

/// Fresh names, and the broadcasts one node's inference assumed.
struct Symbols<'a> {
    fresh: &'a mut FreshNames,
    assumed: Vec<Assumed>,
}

impl SymbolSource for Symbols<'_> {
    fn fresh(&mut self) -> Dim {
        self.fresh.make()
    }

    fn assume(&mut self, what: Assumed) {
        self.assumed.push(what);
    }
}

struct Walk {
    fresh: FreshNames,
    errors: Vec<GraphInferError>,
}

impl Walk {
    fn region(&mut self, g: &mut Graph, region: &Region) {
        for &c in &region.consts {
            if let Some(v) = g.values.get_mut(c.index())
                && let ValueDef::Const(t) = &v.def
            {
                v.ty = t.ty();
            }
        }
        for &n in &region.nodes {
            self.node(g, n);
        }
    }

    fn fail(&mut self, g: &Graph, n: NodeId, message: String) {
        let (node_name, op) = match g.nodes.get(n.index()) {
            Some(node) => (node.name.clone(), node.op.kind().text_name()),
            None => (n.to_string(), ""),
        };
        self.errors.push(GraphInferError { node: Some(n), node_name, op, message });
    }

    fn node(&mut self, g: &mut Graph, n: NodeId) {
        let Some(node) = g.nodes.get(n.index()) else {
            self.errors.push(GraphInferError { node: Some(n), node_name: n.to_string(), op: "", message: "the node does not exist".into() });
            return;
        };
        if let Some(bad) = node.inputs.iter().chain(&node.outputs).flatten().find(|v| v.index() >= g.values.len()) {
            let msg = format!("refers to value {bad}, which does not exist");
            self.fail(g, n, msg);
            return;
        }
        let regions = node.regions.clone();
        let sigs = match node.op.kind() {
            OpKind::Loop | OpKind::Scan => self.carrying_body(g, n, &regions),
            _ => regions
                .iter()
                .map(|r| {
                    self.region(g, r);
                    signature(g, r)
                })
                .collect(),
        };
        let node = &g.nodes[n.index()];
        let inputs: Vec<Option<InferInput<'_>>> = node.inputs.iter().map(|i| i.map(|id| InferInput { ty: g.ty(id), value: g.const_value(id) })).collect();
        let mut symbols = Symbols { fresh: &mut self.fresh, assumed: Vec::new() };
        let result = infer_op(&node.op, &inputs, &sigs, node.outputs.len(), &mut symbols);
        let assumed = symbols.assumed;
        drop(inputs);
        g.assumptions.extend(assumed.into_iter().map(|what| Assumption { node: n, what }));
        match result {
            Ok(types) => {
                let outs = g.nodes[n.index()].outputs.clone();
                for (o, t) in outs.into_iter().zip(types) {
                    if let Some(id) = o {
                        g.values[id.index()].ty = t;
                    }
                }
            }
            Err(e) => self.fail(g, n, e.to_string()),
        }
    }

    /// Infers a Loop or Scan body after re-deriving its parameters from the outer inputs. When
    /// a carried value's body result differs from its parameter, the differing dims are
    /// relaxed and the body inferred again.
    fn carrying_body(&mut self, g: &mut Graph, n: NodeId, regions: &[Region]) -> Vec<RegionSig> {
        let Some(body) = regions.first() else {
            return Vec::new();
        };
        let node = &g.nodes[n.index()];
        let outer: Vec<Option<TensorType>> = node.inputs.iter().map(|i| i.map(|id| g.ty(id).clone())).collect();
        let (carried, derived) = match &node.op {
            Op::Loop(_) => {
                // Params: iteration number, condition, then one per carried input.
                let carried: Vec<(usize, usize)> = (2..outer.len()).map(|i| (i, i)).collect();
                (carried, Vec::new())
            }
            Op::Scan(a) => {
                let m = usize::try_from(a.num_scan_inputs).unwrap_or(0).min(outer.len());
                let states = outer.len() - m;
                let carried: Vec<(usize, usize)> = (0..states).map(|i| (i, i)).collect();
                let derived: Vec<(usize, Option<TensorType>)> = (0..m)
                    .map(|j| {
                        let ax = a.scan_input_axes.get(j).copied().unwrap_or(0);
                        let slice = outer[states + j].as_ref().and_then(|t| {
                            let r = t.rank() as i64;
                            let i = if ax < 0 { ax + r } else { ax };
                            (0..r).contains(&i).then(|| {
                                let mut s = t.clone();
                                s.shape.remove(i as usize);
                                s
                            })
                        });
                        (states + j, slice)
                    })
                    .collect();
                (carried, derived)
            }
            _ => (Vec::new(), Vec::new()),
        };
        let declared: Vec<Option<TensorType>> = body.params.iter().map(|p| g.values.get(p.index()).map(|v| v.ty.clone())).collect();
        let set_param = |g: &mut Graph, k: usize, ty: TensorType| {
            if let Some(v) = body.params.get(k).and_then(|p| g.values.get_mut(p.index())) {
                v.ty = ty;
            }
        };
        for &(input, param) in &carried {
            if let (Some(Some(d)), Some(Some(o))) = (declared.get(param), outer.get(input)) {
                set_param(g, param, refine(d, o));
            }
        }
        for (param, slice) in &derived {
            if let (Some(Some(d)), Some(s)) = (declared.get(*param), slice) {
                set_param(g, *param, refine(d, s));
            }
        }
        self.region(g, body);
        // Carried results sit after the condition for Loop, first for Scan.
        let is_loop = matches!(g.nodes[n.index()].op, Op::Loop(_));
        let result_of = |param: usize| if is_loop { param - 1 } else { param };
        let mut relaxed = false;
        for &(_, param) in &carried {
            let (Some(&p), Some(&r)) = (body.params.get(param), body.results.get(result_of(param))) else {
                continue;
            };
            let (Some(pv), Some(rv)) = (g.values.get(p.index()), g.values.get(r.index())) else {
                continue;
            };
            let (pt, rt) = (pv.ty.clone(), rv.ty.clone());
            if pt.rank() != rt.rank() || pt.shape == rt.shape {
                continue;
            }
            let decl = declared.get(param).cloned().flatten().filter(|d| d.rank() == pt.rank());
            let shape = (0..pt.rank())
                .map(|k| match (&pt.shape[k], &rt.shape[k], decl.as_ref().map(|d| &d.shape[k])) {
                    (a, b, _) if a == b => a.clone(),
                    (_, _, Some(d @ Dim::Sym(_))) => d.clone(),
                    _ => self.fresh.make(),
                })
                .collect();
            set_param(g, param, TensorType { dtype: pt.dtype, shape });
            relaxed = true;
        }
        if relaxed {
            self.region(g, body);
        }
        let mut sigs = vec![signature(g, body)];
        for r in &regions[1..] {
            self.region(g, r);
            sigs.push(signature(g, r));
        }
        sigs
    }
}

/// A parameter type from its declaration and the outer value it receives: the outer type
/// where it is more specific (same dtype and rank, known where the declaration is symbolic),
/// the outer type when the declared rank differs, else the declaration.
fn refine(declared: &TensorType, outer: &TensorType) -> TensorType {
    if declared.dtype != outer.dtype {
        return declared.clone();
    }
    if declared.rank() != outer.rank() {
        return outer.clone();
    }
    let shape = declared.shape.iter().zip(&outer.shape).map(|(d, o)| if matches!(d, Dim::Sym(_)) { o.clone() } else { d.clone() }).collect();
    TensorType { dtype: declared.dtype, shape }
}

/// The types of a region's parameters and results.
fn signature(g: &Graph, r: &Region) -> RegionSig {
    let ty = |id: &ValueId| g.values.get(id.index()).map(|v| v.ty.clone()).unwrap_or(TensorType { dtype: Default::default(), shape: Vec::new() });
    RegionSig { params: r.params.iter().map(ty).collect(), results: r.results.iter().map(ty).collect() }
}
