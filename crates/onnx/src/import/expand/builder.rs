//! The builder expansions write their nodes with: fresh value names, constants, and reading
//! the expanded node's inputs, attributes and types.

use kiln_tir::op::AttrValue;
use kiln_tir::{DType, Tensor, TensorData, TensorType};

use super::{Call, Node};

/// Writes the generated nodes, naming intermediate values after the expanded node.
pub(super) struct Builder<'a> {
    pub(super) call: &'a Call<'a>,
    pub(super) ty: &'a dyn Fn(&str) -> Option<TensorType>,
    pub(super) nodes: Vec<Node>,
    pub(super) next: usize,
}

impl Builder<'_> {
    /// A new intermediate value name.
    pub(super) fn tmp(&mut self) -> String {
        self.next += 1;
        format!("{}/kiln{}.{}", self.call.name, self.call.id, self.next)
    }

    pub(super) fn push(&mut self, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>, outputs: Vec<String>) {
        self.nodes.push(Node {
            op_type,
            name: format!("{}/{}{}", self.call.name, op_type, self.nodes.len()),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs,
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        });
    }

    /// A node with one new output, whose name it returns.
    pub(super) fn op(&mut self, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>) -> String {
        let out = self.tmp();
        self.push(op_type, inputs, attrs, vec![out.clone()]);
        out
    }

    /// A node writing the expanded node's output `k`.
    pub(super) fn output(&mut self, k: usize, op_type: &'static str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>) {
        let out = self.call.outputs.get(k).cloned().unwrap_or_default();
        if !out.is_empty() {
            self.push(op_type, inputs, attrs, vec![out]);
        }
    }

    /// Whether output `k` is asked for.
    pub(super) fn wants(&self, k: usize) -> bool {
        self.call.outputs.get(k).is_some_and(|o| !o.is_empty())
    }

    pub(super) fn constant(&mut self, t: Tensor) -> String {
        let out = self.tmp();
        self.push("Constant", &[], vec![("value", AttrValue::Tensor(t))], vec![out.clone()]);
        out
    }

    /// A scalar constant of float type `dtype`.
    pub(super) fn scalar(&mut self, dtype: DType, v: f32) -> Result<String, String> {
        let bytes: Vec<u8> = match dtype {
            DType::F32 => v.to_le_bytes().to_vec(),
            DType::F64 => f64::from(v).to_le_bytes().to_vec(),
            other => return Err(format!("{} on a {other} input", self.call.op_type)),
        };
        Ok(self.constant(Tensor { dtype, shape: Vec::new(), data: TensorData::Raw(bytes.into()) }))
    }

    /// Required input `k`.
    pub(super) fn input(&self, k: usize) -> Result<String, String> {
        self.optional(k).ok_or_else(|| format!("{} without its input {k}", self.call.op_type))
    }

    /// Optional input `k`, if given.
    pub(super) fn optional(&self, k: usize) -> Option<String> {
        self.call.inputs.get(k).filter(|s| !s.is_empty()).cloned()
    }

    /// Input `x`, plus optional input `bias` when given.
    pub(super) fn input_plus_bias(&mut self, x: usize, bias: usize) -> Result<String, String> {
        let x = self.input(x)?;
        Ok(match self.optional(bias) {
            Some(bias) => self.op("Add", &[&x, &bias], vec![]),
            None => x,
        })
    }

    pub(super) fn type_of(&self, name: &str) -> Result<TensorType, String> {
        (self.ty)(name).ok_or_else(|| format!("{} input {name:?} has no known type", self.call.op_type))
    }

    pub(super) fn rank(&self, name: &str) -> Result<usize, String> {
        Ok(self.type_of(name)?.rank())
    }

    pub(super) fn dtype(&self, name: &str) -> Result<DType, String> {
        Ok(self.type_of(name)?.dtype)
    }

    pub(super) fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.call.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub(super) fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(i)) => Ok(*i),
            Some(other) => Err(format!("attribute `{name}` should be an int, found {}", other.kind())),
        }
    }

    pub(super) fn float(&self, name: &str, default: f32) -> Result<f32, String> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(f)) => Ok(*f),
            Some(other) => Err(format!("attribute `{name}` should be a float, found {}", other.kind())),
        }
    }

    /// `x` with its last two axes swapped.
    pub(super) fn transpose_last_two(&mut self, x: &str) -> Result<String, String> {
        let rank = self.rank(x)?;
        if rank < 2 {
            return Err(format!("{} transposes a rank-{rank} input", self.call.op_type));
        }
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(rank - 2, rank - 1);
        Ok(self.op("Transpose", &[x], vec![("perm", AttrValue::Ints(perm))]))
    }

    /// Dim `axis` of `x` as a scalar int64.
    pub(super) fn dim(&mut self, x: &str, axis: i64) -> String {
        let d = self.op("Shape", &[x], vec![("start", AttrValue::Int(axis)), ("end", AttrValue::Int(axis + 1))]);
        let axes = self.constant(Tensor::from_i64s(&[1], &[0]));
        self.op("Squeeze", &[&d, &axes], vec![])
    }

    /// `0, 1, ..., n - 1` for a scalar int64 `n`.
    pub(super) fn range(&mut self, n: &str) -> String {
        let zero = self.constant(Tensor::from_i64s(&[], &[0]));
        let one = self.constant(Tensor::from_i64s(&[], &[1]));
        self.op("Range", &[&zero, n, &one], vec![])
    }

    /// Output 0 is `y` plus optional input `bias`.
    pub(super) fn finish_bias(&mut self, y: &str, bias: usize) -> Result<(), String> {
        match self.optional(bias) {
            Some(bias) => self.output(0, "Add", &[y, &bias], vec![]),
            None => self.output(0, "Identity", &[y], vec![]),
        }
        Ok(())
    }
}
