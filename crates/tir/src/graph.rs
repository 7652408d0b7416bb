//! Graphs: values, nodes and nested regions, addressed by typed ids.

use std::fmt;

use crate::op::Op;
use crate::tensor::Tensor;
use crate::types::TensorType;

/// A value (an SSA tensor); prints as `%N`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A node; indexes [`Graph::nodes`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ValueId {
    /// The index into [`Graph::values`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Debug for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// What defines a value.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueDef {
    /// A parameter of a region (a graph input, or a body argument of If/Loop/Scan).
    Param,
    /// A constant: an ONNX initializer or `Constant` node, or a folded value.
    Const(Tensor),
    /// Output `output` of a node.
    Node {
        /// The defining node.
        node: NodeId,
        /// Which of its outputs.
        output: u32,
    },
}

/// A value's record.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The value's type.
    pub ty: TensorType,
    /// The ONNX name it was imported from (graph inputs and outputs keep it in the text form;
    /// it may be empty for values kiln created).
    pub name: String,
    /// What defines it.
    pub def: ValueDef,
}

/// A node: one op applied to values.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The operation and its attributes.
    pub op: Op,
    /// The ONNX node name, kept for error messages and provenance.
    pub name: String,
    /// Inputs by position; `None` is an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs by position; `None` is an optional output nobody asked for.
    pub outputs: Vec<Option<ValueId>>,
    /// Nested regions (If branches, Loop and Scan bodies), in the order
    /// [`crate::OpKind::region_names`] lists them.
    pub regions: Vec<Region>,
}

/// A block of nodes with parameters and results. Nodes may use values of enclosing regions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Region {
    /// Parameters (graph inputs at the top level).
    pub params: Vec<ValueId>,
    /// Constants defined in this region.
    pub consts: Vec<ValueId>,
    /// Nodes in execution order.
    pub nodes: Vec<NodeId>,
    /// Results (graph outputs at the top level).
    pub results: Vec<ValueId>,
}

/// What inference assumed at one node to go on before binding.
#[derive(Clone, Debug, PartialEq)]
pub struct Assumption {
    /// The node.
    pub node: NodeId,
    /// What it assumed.
    pub what: Assumed,
}

/// An assumption of inference, checked once symbols and shape-deciding inputs are bound.
#[derive(Clone, Debug, PartialEq)]
pub enum Assumed {
    /// The two dims broadcast: they are equal, or one of them is 1.
    Broadcast(crate::Dim, crate::Dim),
    /// An `If` output whose branches differ in rank was typed as the then branch's; binding
    /// must make the condition a constant, so that only one branch remains.
    Branch {
        /// The output.
        output: usize,
        /// The then branch's result type.
        then: TensorType,
        /// The else branch's.
        otherwise: TensorType,
    },
}

impl std::fmt::Display for Assumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Assumed::Broadcast(a, b) => write!(f, "{a} broadcasts with {b}"),
            Assumed::Branch { output, then, otherwise } => {
                write!(f, "output {output} is the then branch's {then}, not the else branch's {otherwise}, until the condition is known")
            }
        }
    }
}

/// A whole model in tensor IR.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Every value, indexed by [`ValueId`].
    pub values: Vec<Value>,
    /// Every node of every region, indexed by [`NodeId`].
    pub nodes: Vec<Node>,
    /// The top-level region.
    pub body: Region,
    /// What inference assumed about symbolic dims, in node order; re-derived by each
    /// inference, and empty once every shape is static.
    pub assumptions: Vec<Assumption>,
    /// What the importer set aside, for `kiln dump` (declared shapes that contradict
    /// inference, ...): one sentence each.
    pub notes: Vec<String>,
}

impl Graph {
    /// Adds a value and returns its id.
    pub fn add_value(&mut self, ty: TensorType, name: impl Into<String>, def: ValueDef) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value { ty, name: name.into(), def });
        id
    }

    /// Adds a node with fresh output values of the given types (`None` for absent optional
    /// outputs) and returns it. The caller places the node id in a region.
    pub fn add_node(&mut self, op: Op, name: impl Into<String>, inputs: Vec<Option<ValueId>>, outputs: Vec<Option<(TensorType, String)>>, regions: Vec<Region>) -> NodeId {
        let node = NodeId(self.nodes.len() as u32);
        let outputs = outputs
            .into_iter()
            .enumerate()
            .map(|(i, o)| o.map(|(ty, name)| self.add_value(ty, name, ValueDef::Node { node, output: i as u32 })))
            .collect();
        self.nodes.push(Node { op, name: name.into(), inputs, outputs, regions });
        node
    }

    /// The value record for `id`. Panics on a foreign id, which is a kiln bug, not user input.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    /// The node record for `id`. Panics on a foreign id, which is a kiln bug, not user input.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The type of `id`.
    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.value(id).ty
    }

    /// The constant behind `id`, if it is one.
    pub fn const_value(&self, id: ValueId) -> Option<&Tensor> {
        match &self.value(id).def {
            ValueDef::Const(t) => Some(t),
            _ => None,
        }
    }

    /// Graph inputs (the top region's parameters).
    pub fn inputs(&self) -> &[ValueId] {
        &self.body.params
    }

    /// Graph outputs (the top region's results).
    pub fn outputs(&self) -> &[ValueId] {
        &self.body.results
    }

    /// Every node of the graph, regions included, in a pre-order walk.
    pub fn all_nodes(&self) -> Vec<NodeId> {
        let mut out = Vec::new();
        fn walk(g: &Graph, r: &Region, out: &mut Vec<NodeId>) {
            for &n in &r.nodes {
                out.push(n);
                for sub in &g.node(n).regions {
                    walk(g, sub, out);
                }
            }
        }
        walk(self, &self.body, &mut out);
        out
    }
}
