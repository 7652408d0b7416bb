//! The printer: a [`Graph`] to its text form, with canonical value numbers.
//!
//! Numbers follow definition order: the graph's parameters, its constants, then each node's
//! outputs followed by the contents of the node's regions, recursively. A graph that breaks
//! its own invariants (a use of a value that no region defines, a dangling id) still prints;
//! the offending spot is marked in a way the parser rejects with a position.

use std::fmt::Write;

use super::lex::write_quoted;
use super::literal::{INLINE_MAX, well_formed, write_attr, write_dense, write_type};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, Region, ValueDef, ValueId};

/// Prints `g` in the text form; [`parse`](super::parse()) reads it back.
pub fn print(g: &Graph) -> String {
    let mut p = Printer { g, out: String::with_capacity(64 * (g.nodes.len() + g.values.len() + 4)), numbers: vec![UNNUMBERED; g.values.len()], next: 0 };
    p.number_region(&g.body);
    p.graph();
    p.out
}

/// The importer's notes and what inference assumed about `g`'s symbols (see
/// [`crate::Assumed`]), one comment line each; empty when there are none. Both are derived
/// (by import and inference), so the text form itself does not carry them.
pub fn print_assumptions(g: &Graph) -> String {
    let mut out = String::new();
    for note in &g.notes {
        let _ = writeln!(out, "// import: {note}");
    }
    for a in &g.assumptions {
        let node = g.nodes.get(a.node.index()).map_or("", |n| n.name.as_str());
        out.push_str("// assumed at ");
        write_quoted(&mut out, node.as_bytes());
        let _ = writeln!(out, ": {}", a.what);
    }
    out
}

const UNNUMBERED: u32 = u32::MAX;

struct Printer<'g> {
    g: &'g Graph,
    out: String,
    /// The printed number of each value, by [`ValueId`] index.
    numbers: Vec<u32>,
    next: u32,
}

impl<'g> Printer<'g> {
    fn define(&mut self, v: ValueId) {
        if let Some(slot) = self.numbers.get_mut(v.index())
            && *slot == UNNUMBERED
        {
            *slot = self.next;
            self.next += 1;
        }
    }

    fn number_region(&mut self, r: &Region) {
        r.params.iter().chain(&r.consts).for_each(|&v| self.define(v));
        for &n in &r.nodes {
            let Some(node) = self.g.nodes.get(n.index()) else { continue };
            node.outputs.iter().flatten().for_each(|&v| self.define(v));
            node.regions.iter().for_each(|sub| self.number_region(sub));
        }
    }

    fn value(&mut self, v: ValueId) {
        match self.numbers.get(v.index()) {
            Some(&n) if n != UNNUMBERED => {
                let _ = write!(self.out, "%{n}");
            }
            _ => {
                let _ = write!(self.out, "%<undefined v{}>", v.0);
            }
        }
    }

    fn value_type(&mut self, v: ValueId) {
        match self.g.values.get(v.index()) {
            Some(value) => write_type(&mut self.out, &value.ty),
            None => self.out.push_str("<invalid type>"),
        }
    }

    fn name(&self, v: ValueId) -> &'g str {
        self.g.values.get(v.index()).map_or("", |value| value.name.as_str())
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    /// `%N: TYPE`, plus the quoted ONNX name for graph inputs.
    fn param(&mut self, v: ValueId, with_name: bool) {
        self.value(v);
        self.out.push_str(": ");
        self.value_type(v);
        let name = self.name(v);
        if with_name && !name.is_empty() {
            self.out.push(' ');
            write_quoted(&mut self.out, name.as_bytes());
        }
    }

    fn graph(&mut self) {
        let body = &self.g.body;
        self.out.push_str("graph @main(");
        for (i, &v) in body.params.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.param(v, true);
        }
        self.out.push_str(") -> (");
        for (i, &v) in body.results.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.value_type(v);
            let name = self.name(v);
            if !name.is_empty() {
                self.out.push(' ');
                write_quoted(&mut self.out, name.as_bytes());
            }
        }
        self.out.push_str(") {\n");
        self.region_body(body, "return", 1);
        self.out.push_str("}\n");
    }

    /// Constants, nodes and the terminator, each on its own line.
    fn region_body(&mut self, r: &Region, terminator: &str, depth: usize) {
        for &c in &r.consts {
            self.constant(c, depth);
        }
        for &n in &r.nodes {
            self.node(n, depth);
        }
        self.indent(depth);
        self.out.push_str(terminator);
        for (i, &v) in r.results.iter().enumerate() {
            self.out.push_str(if i == 0 { " " } else { ", " });
            self.value(v);
        }
        self.out.push('\n');
    }

    fn constant(&mut self, v: ValueId, depth: usize) {
        self.indent(depth);
        self.value(v);
        let Some(value) = self.g.values.get(v.index()) else {
            self.out.push_str(" = <invalid value>\n");
            return;
        };
        let ValueDef::Const(t) = &value.def else {
            self.out.push_str(" = <not a constant>\n");
            return;
        };
        if well_formed(t) && t.numel().is_some_and(|n| n <= INLINE_MAX) {
            self.out.push_str(" = const ");
            write_dense(&mut self.out, t);
        } else {
            self.out.push_str(" = weight ");
            write_quoted(&mut self.out, value.name.as_bytes());
            self.out.push_str(" : ");
            write_type(&mut self.out, &t.ty());
            if t.dtype != DType::String {
                let _ = write!(self.out, " bytes {}", t.byte_len());
            }
        }
        self.out.push('\n');
    }

    /// `OUTS = tensor.OP(INS) {ATTRS} : TYPES loc("NAME") { REGIONS }`.
    fn node(&mut self, id: NodeId, depth: usize) {
        self.indent(depth);
        let Some(node) = self.g.nodes.get(id.index()) else {
            let _ = writeln!(self.out, "<invalid node {}>", id.0);
            return;
        };
        for (i, o) in node.outputs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            match o {
                Some(v) => self.value(*v),
                None => self.out.push('_'),
            }
        }
        if !node.outputs.is_empty() {
            self.out.push_str(" = ");
        }
        let kind = node.op.kind();
        self.out.push_str("tensor.");
        self.out.push_str(kind.text_name());
        self.out.push('(');
        for (i, input) in node.inputs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            match input {
                Some(v) => self.value(*v),
                None => self.out.push('_'),
            }
        }
        self.out.push(')');
        let attrs = node.op.attrs();
        for (i, (name, v)) in attrs.iter().enumerate() {
            self.out.push_str(if i == 0 { " {" } else { ", " });
            self.out.push_str(name);
            self.out.push_str(" = ");
            write_attr(&mut self.out, v);
        }
        if !attrs.is_empty() {
            self.out.push('}');
        }
        for (i, v) in node.outputs.iter().flatten().enumerate() {
            self.out.push_str(if i == 0 { " : " } else { ", " });
            self.value_type(*v);
        }
        if !node.name.is_empty() {
            self.out.push_str(" loc(");
            write_quoted(&mut self.out, node.name.as_bytes());
            self.out.push(')');
        }
        if !node.regions.is_empty() {
            self.out.push_str(" {\n");
            let names = kind.region_names();
            for (i, r) in node.regions.iter().enumerate() {
                self.indent(depth + 1);
                match names.get(i) {
                    Some(name) => self.out.push_str(name),
                    None => {
                        let _ = write!(self.out, "<extra region {i}>");
                    }
                }
                self.out.push('(');
                for (j, &p) in r.params.iter().enumerate() {
                    if j > 0 {
                        self.out.push_str(", ");
                    }
                    self.param(p, false);
                }
                self.out.push_str(") {\n");
                self.region_body(r, "yield", depth + 2);
                self.indent(depth + 1);
                self.out.push_str("}\n");
            }
            self.indent(depth);
            self.out.push('}');
        }
        self.out.push('\n');
    }
}
