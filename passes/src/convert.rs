//! Tensor IR → e-graph, and the extracted e-graph → tensor IR.
//!
//! Only the top region's single-result, region-free, deterministic nodes enter the e-graph.
//! Everything else (control flow, several results, random ops) stays an opaque node: its
//! inputs and the top-level values its regions read become roots, and its outputs become
//! leaves. Rebuilding walks the extracted choice of each needed class in dependency order,
//! reusing an original node when the choice is that node unchanged, so values keep their ids
//! and names where nothing happened.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use egg::Id;
use kiln_tir::{Graph, NodeId, Region, ValueDef, ValueId};

use crate::analysis::{Egraph, Leaf, LeafOrigin, Tir, is_random};
use crate::lang::{ENode, Head};

/// A graph in an e-graph.
pub struct Converted {
    /// The e-graph.
    pub eg: Egraph,
    /// The class of every top-level value.
    pub class_of: HashMap<ValueId, Id>,
    /// Top-level nodes that became e-nodes, with their class.
    pub transparent: Vec<(NodeId, Id)>,
}

/// True when node `n` can be an e-node.
fn is_transparent(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.regions.is_empty()
        && !is_random(node.op.kind())
        && !node.inputs.is_empty()
        && node.outputs.first().is_some_and(|o| o.is_some())
        && node.outputs[1..].iter().all(|o| o.is_none())
        && node
            .inputs
            .iter()
            .flatten()
            .all(|v| g.ty(*v).dtype != kiln_tir::DType::String)
}

/// Loads the top region of `g` into a fresh e-graph.
pub fn to_egraph(g: &Graph, fold_limit: u64) -> Converted {
    let mut eg = Egraph::new(Tir::new(fold_limit));
    let mut class_of = HashMap::default();
    let mut transparent = Vec::new();
    let leaf = |eg: &mut Egraph, v: ValueId, value| {
        let i = eg.analysis.leaves.len() as u32;
        eg.analysis.leaves.push(Leaf {
            ty: g.ty(v).clone(),
            value,
            origin: LeafOrigin::Value(v),
        });
        eg.add(ENode {
            head: Head::Leaf(i),
            args: Vec::new(),
        })
    };
    for &p in &g.body.params {
        let id = leaf(&mut eg, p, None);
        class_of.insert(p, id);
    }
    for &c in &g.body.consts {
        let id = leaf(&mut eg, c, g.const_value(c).cloned());
        class_of.insert(c, id);
    }
    let absent = eg.add(ENode {
        head: Head::Absent,
        args: Vec::new(),
    });
    for &n in &g.body.nodes {
        let node = g.node(n);
        if is_transparent(g, n) {
            let keep = node
                .inputs
                .iter()
                .rposition(|i| i.is_some())
                .map_or(0, |i| i + 1);
            let args = node.inputs[..keep]
                .iter()
                .map(|i| i.map_or(absent, |v| class_of[&v]))
                .collect();
            let index = eg.analysis.ops.intern(node.op.clone());
            let id = eg.add(ENode {
                head: Head::Op(node.op.kind(), index),
                args,
            });
            if let Some(Some(out)) = node.outputs.first() {
                class_of.insert(*out, id);
            }
            transparent.push((n, id));
        } else {
            for &out in node.outputs.iter().flatten() {
                let id = leaf(&mut eg, out, None);
                class_of.insert(out, id);
            }
        }
    }
    Converted {
        eg,
        class_of,
        transparent,
    }
}

/// Values of the top region that node `n`'s regions read (free variables).
pub(crate) fn free_values(g: &Graph, n: NodeId, top: &HashMap<ValueId, Id>) -> Vec<ValueId> {
    let mut out = Vec::new();
    let mut seen = HashSet::default();
    fn walk(
        g: &Graph,
        r: &Region,
        top: &HashMap<ValueId, Id>,
        out: &mut Vec<ValueId>,
        seen: &mut HashSet<ValueId>,
    ) {
        fn visit(
            v: ValueId,
            top: &HashMap<ValueId, Id>,
            out: &mut Vec<ValueId>,
            seen: &mut HashSet<ValueId>,
        ) {
            if top.contains_key(&v) && seen.insert(v) {
                out.push(v);
            }
        }
        for &m in &r.nodes {
            for v in g.node(m).inputs.iter().flatten() {
                visit(*v, top, out, seen);
            }
            for sub in &g.node(m).regions {
                walk(g, sub, top, out, seen);
            }
        }
        for &v in &r.results {
            visit(v, top, out, seen);
        }
    }
    for r in &g.node(n).regions {
        walk(g, r, top, &mut out, &mut seen);
    }
    out
}

/// Renames uses of values inside region `r` (recursively).
fn rename_in_region(g: &mut Graph, r: &mut Region, map: &HashMap<ValueId, ValueId>) {
    for v in r.results.iter_mut() {
        if let Some(&to) = map.get(v) {
            *v = to;
        }
    }
    for &m in &r.nodes.clone() {
        for v in g.nodes[m.index()].inputs.iter_mut().flatten() {
            if let Some(&to) = map.get(v) {
                *v = to;
            }
        }
        let mut regions = std::mem::take(&mut g.nodes[m.index()].regions);
        for sub in regions.iter_mut() {
            rename_in_region(g, sub, map);
        }
        g.nodes[m.index()].regions = regions;
    }
}

/// What rebuilding produced, besides the graph: for each top-level node of the result, the
/// class it computes.
pub struct Rebuilt {
    /// The optimized graph.
    pub graph: Graph,
    /// Node of the new top region → its class (opaque nodes are absent).
    pub class_of_node: HashMap<NodeId, Id>,
}

/// Rebuilds `g`'s top region from the choices `best` makes (one e-node per class); `name_of`
/// names new nodes by class.
pub fn rebuild(
    g: &Graph,
    conv: &Converted,
    best: &dyn Fn(Id) -> ENode,
    name_of: &dyn Fn(Id) -> String,
) -> Rebuilt {
    let eg = &conv.eg;
    let mut out = g.clone();
    let mut body = Region {
        params: g.body.params.clone(),
        consts: Vec::new(),
        nodes: Vec::new(),
        results: Vec::new(),
    };
    let mut memo: HashMap<Id, ValueId> = HashMap::default();
    let mut used_consts: Vec<ValueId> = Vec::new();
    let mut originals: HashMap<Id, Vec<NodeId>> = HashMap::default();
    for &(n, c) in &conv.transparent {
        originals.entry(eg.find(c)).or_default().push(n);
    }
    let mut class_of_node = HashMap::default();

    // Post-order without recursion: a class is emitted once all its argument classes are.
    let mut materialize = |out: &mut Graph,
                           body: &mut Region,
                           root: Id,
                           memo: &mut HashMap<Id, ValueId>,
                           used_consts: &mut Vec<ValueId>|
     -> ValueId {
        let mut stack = vec![(eg.find(root), false)];
        while let Some((c, ready)) = stack.pop() {
            if memo.contains_key(&c) {
                continue;
            }
            let node = best(c);
            if !ready {
                stack.push((c, true));
                for &a in &node.args {
                    let a = eg.find(a);
                    if !memo.contains_key(&a) && best(a).head != Head::Absent {
                        stack.push((a, false));
                    }
                }
                continue;
            }
            let value = match node.head {
                Head::Absent => continue,
                Head::Leaf(i) => {
                    let leaf = &eg.analysis.leaves[i as usize];
                    match leaf.origin {
                        LeafOrigin::Value(v) => {
                            if matches!(g.value(v).def, ValueDef::Const(_))
                                && !used_consts.contains(&v)
                            {
                                used_consts.push(v);
                            }
                            v
                        }
                        LeafOrigin::Folded => {
                            let t = leaf
                                .value
                                .clone()
                                .unwrap_or_else(|| unreachable!("folded leaves carry their value"));
                            let v = out.add_value(leaf.ty.clone(), "", ValueDef::Const(t));
                            used_consts.push(v);
                            v
                        }
                    }
                }
                Head::Op(_, a) => {
                    let op = eg.analysis.ops.get(a).clone();
                    let inputs: Vec<Option<ValueId>> = node
                        .args
                        .iter()
                        .map(|&x| memo.get(&eg.find(x)).copied())
                        .collect();
                    let reused = originals.get(&c).and_then(|ns| {
                        ns.iter().copied().find(|&n| {
                            let orig = g.node(n);
                            let keep = orig
                                .inputs
                                .iter()
                                .rposition(|i| i.is_some())
                                .map_or(0, |i| i + 1);
                            orig.op == op && orig.inputs[..keep] == inputs[..]
                        })
                    });
                    let n = match reused {
                        Some(n) => {
                            out.nodes[n.index()].outputs.truncate(1);
                            n
                        }
                        None => {
                            let ty = eg[c]
                                .data
                                .ty
                                .clone()
                                .unwrap_or_else(|| unreachable!("op classes are typed"));
                            out.add_node(
                                op,
                                name_of(c),
                                inputs,
                                vec![Some((ty, String::new()))],
                                Vec::new(),
                            )
                        }
                    };
                    body.nodes.push(n);
                    class_of_node.insert(n, c);
                    out.nodes[n.index()].outputs[0]
                        .unwrap_or_else(|| unreachable!("transparent nodes have output 0"))
                }
            };
            memo.insert(c, value);
        }
        memo[&eg.find(root)]
    };

    for &n in &g.body.nodes {
        if conv.transparent.iter().any(|&(t, _)| t == n) {
            continue;
        }
        // An opaque node: its inputs and free values first, then the node itself.
        let mut renames = HashMap::default();
        let inputs = g.node(n).inputs.clone();
        let mut new_inputs = Vec::with_capacity(inputs.len());
        for i in inputs {
            new_inputs.push(i.map(|v| {
                materialize(
                    &mut out,
                    &mut body,
                    conv.class_of[&v],
                    &mut memo,
                    &mut used_consts,
                )
            }));
        }
        for v in free_values(g, n, &conv.class_of) {
            let nv = materialize(
                &mut out,
                &mut body,
                conv.class_of[&v],
                &mut memo,
                &mut used_consts,
            );
            if nv != v {
                renames.insert(v, nv);
            }
        }
        out.nodes[n.index()].inputs = new_inputs;
        if !renames.is_empty() {
            let mut regions = std::mem::take(&mut out.nodes[n.index()].regions);
            for r in regions.iter_mut() {
                rename_in_region(&mut out, r, &renames);
            }
            out.nodes[n.index()].regions = regions;
        }
        body.nodes.push(n);
        for &o in g.node(n).outputs.iter().flatten() {
            memo.insert(eg.find(conv.class_of[&o]), o);
        }
    }
    for &r in &g.body.results {
        let v = materialize(
            &mut out,
            &mut body,
            conv.class_of[&r],
            &mut memo,
            &mut used_consts,
        );
        // Outputs keep their names. A value computed here can take the name; a parameter,
        // a constant or a value another output already is gets an Identity (a view) named
        // after the output.
        let want = g.value(r).name.clone();
        let taken = body.results.contains(&v);
        let v = if out.values[v.index()].name == want && !taken {
            v
        } else if matches!(out.values[v.index()].def, ValueDef::Node { .. }) && !taken {
            out.values[v.index()].name = want;
            v
        } else {
            let ty = out.values[v.index()].ty.clone();
            let n = out.add_node(kiln_tir::Op::Identity(kiln_tir::op::Identity {}), want.clone(), vec![Some(v)], vec![Some((ty, want))], Vec::new());
            body.nodes.push(n);
            out.nodes[n.index()].outputs[0].unwrap_or_else(|| unreachable!("just added"))
        };
        body.results.push(v);
    }
    // Constants in their original order, then the folded ones.
    let original: Vec<ValueId> = g
        .body
        .consts
        .iter()
        .copied()
        .filter(|c| used_consts.contains(c))
        .collect();
    body.consts = original
        .iter()
        .copied()
        .chain(
            used_consts
                .iter()
                .copied()
                .filter(|c| !original.contains(c)),
        )
        .collect();
    out.body = body;
    Rebuilt {
        graph: out,
        class_of_node,
    }
}

/// `g` with only what its regions reach, renumbered densely in definition order. Rebuilding
/// leaves replaced nodes and values behind in the arrays; the verifier (rightly) wants every
/// node and value in a region.
/// Returns the new graph and the new id of every node kept.
pub fn compact(g: &Graph) -> (Graph, HashMap<NodeId, NodeId>) {
    let mut out = Graph::default();
    let mut values: HashMap<ValueId, ValueId> = HashMap::default();
    let mut nodes: HashMap<NodeId, NodeId> = HashMap::default();
    out.body = compact_region(g, &g.body, &mut out, &mut values, &mut nodes);
    (out, nodes)
}

fn compact_region(g: &Graph, r: &Region, out: &mut Graph, values: &mut HashMap<ValueId, ValueId>, renumbered: &mut HashMap<NodeId, NodeId>) -> Region {
    let copy = |out: &mut Graph, values: &mut HashMap<ValueId, ValueId>, v: ValueId, def: ValueDef| {
        let old = g.value(v);
        let nv = out.add_value(old.ty.clone(), old.name.clone(), def);
        values.insert(v, nv);
        nv
    };
    let params = r.params.iter().map(|&p| copy(out, values, p, ValueDef::Param)).collect();
    let consts = r.consts.iter().map(|&c| copy(out, values, c, g.value(c).def.clone())).collect();
    let mut nodes = Vec::with_capacity(r.nodes.len());
    for &n in &r.nodes {
        let node = g.node(n);
        let id = NodeId(out.nodes.len() as u32);
        let inputs = node.inputs.iter().map(|i| i.map(|v| values.get(&v).copied().unwrap_or(v))).collect();
        out.nodes.push(kiln_tir::Node { op: node.op.clone(), name: node.name.clone(), inputs, outputs: Vec::new(), regions: Vec::new() });
        renumbered.insert(n, id);
        let regions = node.regions.iter().map(|sub| compact_region(g, sub, out, values, renumbered)).collect();
        let outputs = node.outputs.iter().enumerate().map(|(i, o)| o.map(|v| copy(out, values, v, ValueDef::Node { node: id, output: i as u32 }))).collect();
        let slot = &mut out.nodes[id.index()];
        slot.regions = regions;
        slot.outputs = outputs;
        nodes.push(id);
    }
    let results = r.results.iter().map(|&v| values.get(&v).copied().unwrap_or(v)).collect();
    Region { params, consts, nodes, results }
}
