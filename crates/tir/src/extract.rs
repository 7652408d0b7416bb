//! A part of a graph as a graph of its own, holding only the values and nodes the part reaches.

use std::fmt;

use crate::graph::{Graph, Node, NodeId, Region, Value, ValueDef, ValueId};

/// A value the part reads that it neither defines, takes as a parameter nor finds constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreachable {
    /// The value, in the whole graph's numbering.
    pub value: ValueId,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the part reads {}, which it neither defines nor takes as a parameter", self.value)
    }
}

impl std::error::Error for Unreachable {}

impl Graph {
    /// The top-level `nodes` of this graph (with their regions) as a graph that takes `params`
    /// and returns `results`. Values and nodes are renumbered densely, in the order they are
    /// met, so the part's size is that of what it holds, not of the whole graph; the top-level
    /// constants it reads come along (their bytes shared). A parameter without a name is named
    /// after its id in this graph. Assumptions are dropped: a part is cut from a bound graph.
    ///
    /// # Errors
    ///
    /// When `nodes` or `results` read a value that is neither among `params`, nor a constant,
    /// nor defined by an earlier node of the part.
    pub fn extract(&self, params: &[ValueId], nodes: &[NodeId], results: &[ValueId]) -> Result<Graph, Unreachable> {
        let mut x = Extractor { g: self, values: vec![None; self.values.len()], out: Graph { notes: self.notes.clone(), ..Graph::default() }, consts: Vec::new() };
        let params = params.iter().map(|&v| x.param(v, true)).collect();
        let nodes = nodes.iter().map(|&n| x.node(n)).collect::<Result<_, _>>()?;
        let results = results.iter().map(|&v| x.read(v)).collect::<Result<_, _>>()?;
        let consts = std::mem::take(&mut x.consts);
        x.out.body = Region { params, consts, nodes, results };
        x.out.values.shrink_to_fit();
        x.out.nodes.shrink_to_fit();
        Ok(x.out)
    }
}

/// The state of one extraction: the new id of each value met so far.
struct Extractor<'g> {
    g: &'g Graph,
    values: Vec<Option<ValueId>>,
    out: Graph,
    /// Top-level constants read so far, in the new numbering.
    consts: Vec<ValueId>,
}

impl Extractor<'_> {
    /// Copies value `v` with definition `def`.
    fn copy(&mut self, v: ValueId, def: ValueDef) -> ValueId {
        let Value { ty, name, .. } = self.g.value(v);
        let id = self.out.add_value(ty.clone(), name.clone(), def);
        self.values[v.index()] = Some(id);
        id
    }

    /// Copies `v` as a parameter, named after its old id when it has no name and `top`.
    fn param(&mut self, v: ValueId, top: bool) -> ValueId {
        let id = self.copy(v, ValueDef::Param);
        if top && self.out.values[id.index()].name.is_empty() {
            self.out.values[id.index()].name = v.to_string();
        }
        id
    }

    /// Copies constant `v`, keeping its bytes shared.
    fn constant(&mut self, v: ValueId) -> ValueId {
        let def = self.g.value(v).def.clone();
        self.copy(v, def)
    }

    /// The new id of a value read: one met before, or a top-level constant met now.
    fn read(&mut self, v: ValueId) -> Result<ValueId, Unreachable> {
        if let Some(id) = self.values.get(v.index()).copied().flatten() {
            return Ok(id);
        }
        match self.g.values.get(v.index()).map(|val| &val.def) {
            Some(ValueDef::Const(_)) => {
                let id = self.constant(v);
                self.consts.push(id);
                Ok(id)
            }
            _ => Err(Unreachable { value: v }),
        }
    }

    /// Copies node `n`, its regions included, after the values it reads.
    fn node(&mut self, n: NodeId) -> Result<NodeId, Unreachable> {
        let node = self.g.node(n);
        let inputs = node.inputs.iter().map(|v| v.map(|v| self.read(v)).transpose()).collect::<Result<_, _>>()?;
        let id = NodeId(self.out.nodes.len() as u32);
        self.out.nodes.push(Node { op: node.op.clone(), name: node.name.clone(), inputs, outputs: Vec::new(), regions: Vec::new() });
        let regions = node.regions.iter().map(|r| self.region(r)).collect::<Result<_, _>>()?;
        let outputs = node.outputs.iter().enumerate().map(|(i, v)| v.map(|v| self.copy(v, ValueDef::Node { node: id, output: i as u32 }))).collect();
        let copied = &mut self.out.nodes[id.index()];
        copied.regions = regions;
        copied.outputs = outputs;
        Ok(id)
    }

    /// Copies a nested region: its parameters and constants, then its nodes and results.
    fn region(&mut self, r: &Region) -> Result<Region, Unreachable> {
        let params = r.params.iter().map(|&v| self.param(v, false)).collect();
        let consts = r.consts.iter().map(|&v| self.constant(v)).collect();
        let nodes = r.nodes.iter().map(|&n| self.node(n)).collect::<Result<_, _>>()?;
        let results = r.results.iter().map(|&v| self.read(v)).collect::<Result<_, _>>()?;
        Ok(Region { params, consts, nodes, results })
    }
}

#[cfg(test)]
mod tests {
    use crate::text::parse;

    #[test]
    fn a_part_holds_only_what_it_reaches() {
        let g = parse(
            "graph @main(%0: f32[2] \"x\", %1: f32[2] \"y\") -> (f32[2] \"e\") {
  %2 = const dense<f32[2]: [1.0, 2.0]>
  %3 = const dense<f32[2]: [3.0, 4.0]>
  %4 = tensor.add(%0, %2) : f32[2]
  %5 = tensor.mul(%4, %1) : f32[2]
  %6 = tensor.sub(%5, %3) : f32[2]
  return %6
}",
        )
        .unwrap();
        let (a, b, e) = (g.body.nodes[0], g.body.nodes[1], g.body.nodes[2]);
        let b_in = g.node(b).inputs.iter().flatten().copied().collect::<Vec<_>>();
        let part = g.extract(&b_in, &[b, g.body.nodes[2]], &g.node(e).outputs.iter().flatten().copied().collect::<Vec<_>>()).unwrap();
        crate::verify::verify(&part).unwrap();
        assert_eq!(part.body.nodes.len(), 2);
        assert_eq!(part.body.consts.len(), 1, "only %d is read");
        assert_eq!(part.values.len(), 2 + 1 + 2, "two params, one constant, two node outputs");
        assert!(part.body.params.iter().all(|&p| !part.value(p).name.is_empty()));
        // Without %a among the parameters, Mul reads a value the part does not have.
        let err = g.extract(&[b_in[1]], &[b], &[]).unwrap_err();
        assert_eq!(err.value, g.node(a).outputs[0].unwrap());
    }
}
