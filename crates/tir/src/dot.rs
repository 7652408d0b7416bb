//! A graph as Graphviz `dot` source: a picture of the top region.
//!
//! Ops are boxes labelled with their op and node name; graph inputs and outputs are ellipses;
//! an edge carries the type of the value it stands for. Constants are not drawn (a model has
//! hundreds): a box says how many it reads. A node made of several source nodes is drawn as a
//! cluster around its box holding one note per source node (`sources`: the optimizer's
//! provenance, `"Conv conv1"`), and a `fused_elementwise` as a cluster of its body's ops.

use std::collections::HashMap;
use std::fmt::Write;

use crate::{Graph, NodeId, ValueDef, ValueId};

/// Graphviz source for the top region of `g`. `sources(n)` names the source nodes node `n`
/// computes, as `(op, name)` pairs; two or more make a cluster.
pub fn print(g: &Graph, sources: &dyn Fn(NodeId) -> Vec<(String, String)>) -> String {
    let mut out = String::from("digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n");
    // Where each value comes from: a dot node id.
    let mut producer: HashMap<ValueId, String> = HashMap::new();
    for (i, &v) in g.inputs().iter().enumerate() {
        let id = format!("in{i}");
        let _ = writeln!(out, "  {id} [shape=ellipse, label=\"{}\"];", escape(&format!("{}\n{}", g.value(v).name, g.ty(v))));
        producer.insert(v, id);
    }
    for (k, &n) in g.body.nodes.iter().enumerate() {
        let node = g.node(n);
        let id = format!("n{}", n.index());
        let constants = node.inputs.iter().flatten().filter(|v| matches!(g.value(**v).def, ValueDef::Const(_))).count();
        let mut label = format!("{}\n{}", node.op.kind().text_name(), node.name);
        if constants > 0 {
            label.push_str(&format!("\n+{constants} constant{}", if constants == 1 { "" } else { "s" }));
        }
        let from = sources(n);
        if let Some(body) = node.regions.first().filter(|_| node.op.kind() == crate::OpKind::FusedElementwise) {
            let _ = writeln!(out, "  subgraph cluster_{k} {{\n    label=\"{}\"; style=rounded; color=gray40;", escape(&format!("fused_elementwise {}", node.name)));
            let _ = writeln!(out, "    {id} [label=\"{}\", style=bold];", escape(&label));
            for (j, &m) in body.nodes.iter().enumerate() {
                let member = g.node(m);
                let _ = writeln!(out, "    {id}_m{j} [shape=note, label=\"{}\"];", escape(&format!("{} {}", member.op.kind().text_name(), member.name)));
                let _ = writeln!(out, "    {id}_m{j} -> {id} [style=dotted, arrowhead=none];");
            }
            out.push_str("  }\n");
        } else if from.len() >= 2 {
            let _ = writeln!(out, "  subgraph cluster_{k} {{\n    label=\"{}\"; style=rounded; color=gray40;", escape(&format!("{} ({} source nodes)", node.op.kind().text_name(), from.len())));
            let _ = writeln!(out, "    {id} [label=\"{}\", style=bold];", escape(&label));
            for (j, (op, name)) in from.iter().enumerate() {
                let _ = writeln!(out, "    {id}_s{j} [shape=note, label=\"{}\"];", escape(&format!("{op} {name}")));
                let _ = writeln!(out, "    {id}_s{j} -> {id} [style=dotted, arrowhead=none];");
            }
            out.push_str("  }\n");
        } else {
            let _ = writeln!(out, "  {id} [label=\"{}\"];", escape(&label));
        }
        for v in node.inputs.iter().flatten() {
            if let Some(p) = producer.get(v) {
                let _ = writeln!(out, "  {p} -> {id} [label=\"{}\"];", escape(&g.ty(*v).to_string()));
            }
        }
        for v in node.outputs.iter().flatten() {
            producer.insert(*v, id.clone());
        }
    }
    for (i, &v) in g.outputs().iter().enumerate() {
        let id = format!("out{i}");
        let _ = writeln!(out, "  {id} [shape=ellipse, label=\"{}\"];", escape(&g.value(v).name));
        if let Some(p) = producer.get(&v) {
            let _ = writeln!(out, "  {p} -> {id} [label=\"{}\"];", escape(&g.ty(v).to_string()));
        }
    }
    out.push_str("}\n");
    out
}

/// `s` inside a double-quoted dot string: quotes and backslashes escaped, newlines as `\n`.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_inputs_outputs_and_clusters() {
        let g = crate::text::parse(
            "graph @main(%0: f32[2, 3] \"x\") -> (f32[2, 3] \"y\") {
  %1 = const dense<f32[3]: [1.0, 2.0, 3.0]>
  %2 = tensor.add(%0, %1) : f32[2, 3] loc(\"add \\\"one\\\"\")
  %3 = tensor.relu(%2) : f32[2, 3] loc(\"relu\")
  return %3
}",
        )
        .expect("parses");
        let relu = g.body.nodes[1];
        let dot = print(&g, &|n| if n == relu { vec![("Relu".into(), "r".into()), ("Clip".into(), "c".into())] } else { Vec::new() });
        assert!(dot.starts_with("digraph kiln {"), "{dot}");
        assert!(dot.contains("in0 [shape=ellipse, label=\"x\\nf32[2, 3]\"]"), "{dot}");
        assert!(dot.contains("add\\nadd \\\"one\\\"\\n+1 constant\""), "{dot}");
        assert!(dot.contains("subgraph cluster_1 {"), "{dot}");
        assert!(dot.contains("shape=note, label=\"Clip c\""), "{dot}");
        assert!(dot.contains("-> out0 [label=\"f32[2, 3]\"]"), "{dot}");
        assert_eq!(dot.matches('{').count(), dot.matches('}').count(), "{dot}");
    }
}
