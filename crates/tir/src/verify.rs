//! The tensor-IR verifier.
//!
//! [`verify`] checks every invariant below and reports every violation it finds, each with
//! its location, rather than stopping at the first:
//!
//! 1. **Ids are in range**: every value and node id a graph mentions indexes its arrays.
//! 2. **Each value is defined exactly once**, where its [`ValueDef`] says: a `Param` in the
//!    params of exactly one region, a `Const` in the consts of exactly one region, a node
//!    output in that node's output list at that position.
//! 3. **Each node sits in exactly one region**, once.
//! 4. **Definitions dominate uses, so the graph is acyclic**: a node input is a param or const
//!    of its own region or an enclosing one, or an output of an earlier node of one of those
//!    regions. Region results obey the same rule.
//! 5. **Graph outputs are defined** (a special case of 4 for the top region) and the top
//!    region has at least one result.
//! 6. **Names are unique**: graph inputs and outputs have non-empty, distinct names, and no two
//!    values share a non-empty name.
//! 7. **Regions match their op**: a node has as many regions as its op kind names.
//! 8. **Constants are well formed**: a constant's bytes match its dtype and shape, and its
//!    value type equals the tensor's type.
//! 9. **Types agree**: shape inference run on each node's inputs gives the node's recorded
//!    output types (dims inference could only invent — data-dependent sizes — match anything).

use std::collections::HashMap;
use std::fmt;

use crate::dim::Dim;
use crate::graph::{Graph, NodeId, Region, ValueDef, ValueId};
use crate::infer::{infer_op, InferInput, RegionSig};
use crate::tensor::TensorData;
use crate::types::TensorType;

/// One invariant violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// Where: a node (`node "name" (tensor.op)`), a value (`%3`) or the graph.
    pub location: String,
    /// Which invariant is broken, and how.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Checks every invariant in the module doc; returns all violations found.
pub fn verify(g: &Graph) -> Result<(), Vec<VerifyError>> {
    let mut v = Verifier { g, errors: Vec::new(), defined_in: HashMap::new(), node_seen: vec![false; g.nodes.len()] };
    v.check_ids();
    if v.errors.is_empty() {
        v.check_region(&g.body, &mut Vec::new());
        v.check_all_defined();
        v.check_names();
        v.check_types();
    }
    if v.errors.is_empty() { Ok(()) } else { Err(v.errors) }
}

struct Verifier<'g> {
    g: &'g Graph,
    errors: Vec<VerifyError>,
    /// How many times each value has been seen defined (params, consts, node outputs).
    defined_in: HashMap<ValueId, u32>,
    node_seen: Vec<bool>,
}

/// Sign-posts for error locations.
fn node_loc(g: &Graph, n: NodeId) -> String {
    let node = g.node(n);
    format!("node \"{}\" (tensor.{})", node.name.escape_debug(), node.op.kind().text_name())
}

impl Verifier<'_> {
    fn err(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.errors.push(VerifyError { location: location.into(), message: message.into() });
    }

    fn check_ids(&mut self) {
        let nv = self.g.values.len();
        let nn = self.g.nodes.len();
        let mut bad = Vec::new();
        let in_range = |v: ValueId| v.index() < nv;
        fn walk_region(r: &Region, nn: usize, in_range: &dyn Fn(ValueId) -> bool, bad: &mut Vec<String>, g: &Graph) {
            for &v in r.params.iter().chain(&r.consts).chain(&r.results) {
                if !in_range(v) {
                    bad.push(format!("region mentions {v}, past the {} values", g.values.len()));
                }
            }
            for &n in &r.nodes {
                if n.index() >= nn {
                    bad.push(format!("region mentions {n}, past the {nn} nodes"));
                    continue;
                }
                let node = g.node(n);
                for v in node.inputs.iter().chain(&node.outputs).flatten() {
                    if !in_range(*v) {
                        bad.push(format!("{} mentions {v}, past the {} values", node_loc(g, n), g.values.len()));
                    }
                }
                for sub in &node.regions {
                    walk_region(sub, nn, in_range, bad, g);
                }
            }
        }
        walk_region(&self.g.body, nn, &in_range, &mut bad, self.g);
        for (i, val) in self.g.values.iter().enumerate() {
            if let ValueDef::Node { node, .. } = val.def {
                if node.index() >= nn {
                    bad.push(format!("%{i} is defined by {node}, past the {nn} nodes"));
                }
            }
        }
        for b in bad {
            self.err("graph", b);
        }
    }

    fn define(&mut self, v: ValueId, location: &str) {
        let count = self.defined_in.entry(v).or_insert(0);
        *count += 1;
        if *count == 2 {
            self.err(location.to_string(), format!("{v} is defined more than once"));
        }
    }

    /// Walks `r`, checking definitions and uses; `scope` holds the values visible from
    /// enclosing regions and is restored on return.
    fn check_region(&mut self, r: &Region, scope: &mut Vec<ValueId>) {
        let mark = scope.len();
        for &p in &r.params {
            if self.g.value(p).def != ValueDef::Param {
                self.err(format!("{p}"), "listed as a region parameter but not defined as one");
            }
            self.define(p, &format!("{p}"));
            scope.push(p);
        }
        for &c in &r.consts {
            if !matches!(self.g.value(c).def, ValueDef::Const(_)) {
                self.err(format!("{c}"), "listed as a region constant but not defined as one");
            }
            self.define(c, &format!("{c}"));
            self.check_const(c);
            scope.push(c);
        }
        for &n in &r.nodes {
            let loc = node_loc(self.g, n);
            if std::mem::replace(&mut self.node_seen[n.index()], true) {
                self.err(loc.clone(), "node appears in more than one place");
                continue;
            }
            let node = self.g.node(n);
            for (i, input) in node.inputs.iter().enumerate() {
                if let Some(v) = input {
                    if !scope.contains(v) {
                        self.err(loc.clone(), format!("input {i} uses {v}, which is not defined before this node in an enclosing region"));
                    }
                }
            }
            let kind = node.op.kind();
            if node.regions.len() != kind.region_names().len() {
                self.err(loc.clone(), format!("has {} regions; tensor.{} takes {}", node.regions.len(), kind.text_name(), kind.region_names().len()));
            }
            for sub in &node.regions {
                self.check_region(sub, scope);
            }
            for (i, out) in node.outputs.iter().enumerate() {
                let Some(v) = *out else { continue };
                let want = ValueDef::Node { node: n, output: i as u32 };
                if self.g.value(v).def != want {
                    self.err(loc.clone(), format!("output {i} is {v}, whose definition says otherwise"));
                }
                self.define(v, &loc);
                scope.push(v);
            }
        }
        for &res in &r.results {
            if !scope.contains(&res) {
                self.err("region results", format!("{res} is not defined in the region or an enclosing one"));
            }
        }
        scope.truncate(mark);
    }

    fn check_const(&mut self, c: ValueId) {
        let val = self.g.value(c);
        let ValueDef::Const(t) = &val.def else { return };
        if val.ty != t.ty() {
            self.err(format!("{c}"), format!("has type {} but its constant is {}", val.ty, t.ty()));
        }
        let numel = t.numel();
        match &t.data {
            TensorData::Raw(b) => {
                let want = numel.and_then(|n| t.dtype.storage_bytes(n));
                if want != Some(b.len() as u64) {
                    self.err(format!("{c}"), format!("constant holds {} bytes; {} needs {}", b.len(), t.ty(), want.map_or("an unrepresentable size".into(), |w| w.to_string())));
                }
            }
            TensorData::Strings(s) => {
                if numel != Some(s.len() as u64) {
                    self.err(format!("{c}"), format!("constant holds {} strings; {} needs {numel:?}", s.len(), t.ty()));
                }
            }
            TensorData::Absent => {}
        }
    }

    fn check_all_defined(&mut self) {
        if self.g.body.results.is_empty() {
            self.err("graph", "has no outputs");
        }
        for (i, val) in self.g.values.iter().enumerate() {
            let id = ValueId(i as u32);
            if !self.defined_in.contains_key(&id) {
                // A node output of a node that is in no region is reported once, below.
                if !matches!(val.def, ValueDef::Node { .. }) {
                    self.err(format!("{id}"), "is defined nowhere in the graph");
                }
            }
        }
        for (i, seen) in self.node_seen.clone().into_iter().enumerate() {
            if !seen {
                self.err(node_loc(self.g, NodeId(i as u32)), "is in no region");
            }
        }
    }

    fn check_names(&mut self) {
        let mut io: HashMap<&str, ValueId> = HashMap::new();
        for &v in self.g.inputs() {
            let name = self.g.value(v).name.as_str();
            if name.is_empty() {
                self.err(format!("{v}"), "graph input has no name");
            } else if let Some(prev) = io.insert(name, v) {
                self.err(format!("{v}"), format!("graph input name \"{}\" is also used by {prev}", name.escape_debug()));
            }
        }
        let mut outs: HashMap<&str, ValueId> = HashMap::new();
        for &v in self.g.outputs() {
            let name = self.g.value(v).name.as_str();
            if name.is_empty() {
                self.err(format!("{v}"), "graph output has no name");
            } else if let Some(prev) = outs.insert(name, v) {
                if prev != v {
                    self.err(format!("{v}"), format!("graph output name \"{}\" is also used by {prev}", name.escape_debug()));
                }
            }
        }
        let mut seen: HashMap<&str, ValueId> = HashMap::new();
        for (i, val) in self.g.values.iter().enumerate() {
            if val.name.is_empty() {
                continue;
            }
            if let Some(prev) = seen.insert(val.name.as_str(), ValueId(i as u32)) {
                self.err(format!("%{i}"), format!("name \"{}\" is also the name of {prev}", val.name.escape_debug()));
            }
        }
    }

    fn check_types(&mut self) {
        for n in self.g.all_nodes() {
            let node = self.g.node(n);
            let inputs: Vec<Option<InferInput<'_>>> = node
                .inputs
                .iter()
                .map(|i| i.map(|v| InferInput { ty: self.g.ty(v), value: self.g.const_value(v) }))
                .collect();
            let regions: Vec<RegionSig> = node
                .regions
                .iter()
                .map(|r| RegionSig {
                    params: r.params.iter().map(|&p| self.g.ty(p).clone()).collect(),
                    results: r.results.iter().map(|&p| self.g.ty(p).clone()).collect(),
                })
                .collect();
            let mut fresh = || Dim::sym(FRESH);
            match infer_op(&node.op, &inputs, &regions, node.outputs.len(), &mut fresh) {
                Err(e) => self.err(node_loc(self.g, n), format!("shape inference fails: {e}")),
                Ok(types) => {
                    for (i, (out, want)) in node.outputs.iter().zip(&types).enumerate() {
                        let Some(v) = out else { continue };
                        let have = self.g.ty(*v);
                        if !type_matches(have, want) {
                            self.err(node_loc(self.g, n), format!("output {i} ({v}) is recorded as {have} but inference gives {want}"));
                        }
                    }
                }
            }
        }
    }
}

/// The symbol the verifier hands inference for data-dependent dims: it matches any dim.
const FRESH: &str = "?";

fn type_matches(have: &TensorType, inferred: &TensorType) -> bool {
    have.dtype == inferred.dtype
        && have.rank() == inferred.rank()
        && have.shape.iter().zip(&inferred.shape).all(|(h, w)| h == w || w.symbols().contains(&FRESH))
}
