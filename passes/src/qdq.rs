//! Quantized operators recovered from QDQ graphs.
//!
//! Quantizers that write the QDQ format (onnxruntime's static quantizer, TensorRT's and
//! PyTorch's QAT exports) leave every product in `f32` between a DequantizeLinear of each
//! 8-bit operand and a QuantizeLinear of the result: `Q(Conv(DQ(x), DQ(w), DQ(b)))`. The
//! integers are the meaning; the floats are how the format spells it. [`integer_operators`]
//! rewrites each such convolution into QLinearConv and each such MatMul into QLinearMatMul,
//! which lowering runs on the integer kernels: the accumulator is the exact `i32` one, rounded
//! once by the requantization, as onnxruntime computes these graphs.
//!
//! It runs at binding, before [`kiln_eval::fold_weights`] turns the weights' DequantizeLinear
//! into `f32` constants. A rewrite needs every parameter constant and in the forms the
//! QLinear ops take (per tensor, or per output channel for the weights and the bias); a Relu
//! or Clip between the product and the QuantizeLinear is dropped only when the quantization
//! alone clamps the same way. Anything else stays as it is and runs in `f32`.

use kiln_tir::op::{QLinearConv, QLinearMatMul};
use kiln_tir::{DType, Graph, NodeId, Op, Tensor, TensorData, ValueDef, ValueId};

/// Rewrites the top region's quantized convolutions and products; returns how many.
pub fn integer_operators(g: &mut Graph) -> usize {
    let mut rewritten = 0;
    let nodes = g.body.nodes.clone();
    let mut dropped: Vec<NodeId> = Vec::new();
    // Counted once: a rewrite changes only the counts of values later rewrites do not ask about
    // (its product's output, and the operands it now reads directly).
    let uses = uses(g);
    for q in nodes {
        if let Some(removed) = rewrite(g, q, &uses) {
            rewritten += 1;
            dropped.extend(removed);
        }
    }
    if rewritten > 0 {
        g.body.nodes.retain(|n| !dropped.contains(n));
        remove_dead_dequantizers(g);
    }
    rewritten
}

/// How many times each value is read: by nodes of every region, and as a region's result.
fn uses(g: &Graph) -> Vec<u32> {
    let mut count = vec![0u32; g.values.len()];
    for n in g.all_nodes() {
        for v in g.node(n).inputs.iter().flatten() {
            count[v.index()] += 1;
        }
        for r in &g.node(n).regions {
            for v in &r.results {
                count[v.index()] += 1;
            }
        }
    }
    for v in &g.body.results {
        count[v.index()] += 1;
    }
    count
}

/// The node defining `v` in the top region, if a node does.
fn producer(g: &Graph, v: ValueId) -> Option<NodeId> {
    match g.value(v).def {
        ValueDef::Node { node, .. } => g.body.nodes.contains(&node).then_some(node),
        _ => None,
    }
}

/// A DequantizeLinear's operands: the integers, the scale and the zero point.
struct Dequantized {
    ints: ValueId,
    scale: ValueId,
    zero: Option<ValueId>,
    /// The scale's elements.
    scales: Vec<f32>,
    /// Its axis, normalized; meaningful when the scale has more than one element.
    axis: usize,
}

fn is_8bit(t: DType) -> bool {
    matches!(t, DType::U8 | DType::I8)
}

/// The elements of a constant `f32` tensor.
fn f32s(t: &Tensor) -> Option<Vec<f32>> {
    if t.dtype != DType::F32 {
        return None;
    }
    let raw = t.raw()?;
    (raw.len() as u64 == t.numel()? * 4).then(|| raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// `v` as the output of a DequantizeLinear of `want` integers (an 8-bit type when `None`) to
/// `f32`, with a constant, finite, positive scale and a constant zero point of the integers'
/// type, or none.
fn dequantized(g: &Graph, v: ValueId, want: Option<DType>) -> Option<Dequantized> {
    let n = g.node(producer(g, v)?);
    let Op::DequantizeLinear(d) = &n.op else { return None };
    let (ints, scale) = (n.inputs.first().copied().flatten()?, n.inputs.get(1).copied().flatten()?);
    let zero = n.inputs.get(2).copied().flatten();
    let ty = g.ty(ints);
    let kind_ok = match want {
        Some(t) => ty.dtype == t,
        None => is_8bit(ty.dtype),
    };
    if !kind_ok || d.block_size > 0 || g.ty(v).dtype != DType::F32 {
        return None;
    }
    let scales = f32s(g.const_value(scale)?)?;
    if scales.is_empty() || scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return None;
    }
    if let Some(z) = zero {
        let t = g.const_value(z)?;
        if t.dtype != ty.dtype || t.numel()? != scales.len() as u64 {
            return None;
        }
    }
    let rank = ty.shape.len() as i64;
    let axis = if d.axis < 0 { d.axis + rank } else { d.axis };
    if scales.len() > 1 && !(0..rank).contains(&axis) {
        return None;
    }
    Some(Dequantized { ints, scale, zero, scales, axis: axis.max(0) as usize })
}

/// The QuantizeLinear node `q` to 8 bits with one constant scale and zero point, and what it
/// quantizes.
struct Quantizer {
    input: ValueId,
    scale: f32,
    zero: i64,
    levels: (i64, i64),
}

fn quantizer(g: &Graph, q: NodeId) -> Option<Quantizer> {
    let n = g.node(q);
    let Op::QuantizeLinear(op) = &n.op else { return None };
    let input = n.inputs.first().copied().flatten()?;
    let out = n.outputs.first().copied().flatten()?;
    let f32_precision = op.precision == 0 || op.precision == i64::from(DType::F32.onnx_code());
    if op.block_size > 0 || !f32_precision || g.ty(input).dtype != DType::F32 {
        return None;
    }
    let levels = match g.ty(out).dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        _ => return None,
    };
    let scale = match f32s(g.const_value(n.inputs.get(1).copied().flatten()?)?)?.as_slice() {
        [s] if s.is_finite() && *s > 0.0 => *s,
        _ => return None,
    };
    let zero = match n.inputs.get(2).copied().flatten() {
        None => 0,
        Some(z) => match g.const_value(z)?.to_i64s()?.as_slice() {
            [z] => *z,
            _ => return None,
        },
    };
    Some(Quantizer { input, scale, zero, levels })
}

/// Whether `act` (Relu, or Clip with constant bounds) before `q` changes nothing: every value
/// it moves lands on the level the quantizer's own saturation gives it.
fn subsumed(g: &Graph, act: NodeId, q: &Quantizer) -> bool {
    let level = |v: f32| ((v / q.scale).round_ties_even() as i64 + q.zero).clamp(q.levels.0, q.levels.1);
    let n = g.node(act);
    let bound = |i: usize| -> Option<Option<f32>> {
        match n.inputs.get(i).copied().flatten() {
            None => Some(None),
            Some(v) => match f32s(g.const_value(v)?)?.as_slice() {
                [b] => Some(Some(*b)),
                _ => None,
            },
        }
    };
    match &n.op {
        Op::Relu(_) => level(0.0) == q.levels.0,
        Op::Clip(_) => match (bound(1), bound(2)) {
            (Some(lo), Some(hi)) => lo.is_none_or(|lo| level(lo) == q.levels.0) && hi.is_none_or(|hi| level(hi) == q.levels.1),
            _ => false,
        },
        _ => false,
    }
}

/// Rewrites the QuantizeLinear `q` and the product it quantizes into one QLinear op in `q`'s
/// place; returns the nodes that left the region.
fn rewrite(g: &mut Graph, q: NodeId, uses: &[u32]) -> Option<Vec<NodeId>> {
    let quant = quantizer(g, q)?;
    let single = |v: ValueId| uses[v.index()] == 1;
    let mut removed = Vec::new();
    // An activation the quantizer makes redundant.
    let mut product_out = quant.input;
    let mut p = producer(g, product_out)?;
    if matches!(g.node(p).op, Op::Relu(_) | Op::Clip(_)) {
        if !single(product_out) || !subsumed(g, p, &quant) {
            return None;
        }
        removed.push(p);
        product_out = g.node(p).inputs.first().copied().flatten()?;
        p = producer(g, product_out)?;
    }
    if !single(product_out) {
        return None;
    }
    let node = g.node(p);
    let (op, inputs) = match &node.op {
        Op::Conv(c) => {
            let x = dequantized(g, node.inputs.first().copied().flatten()?, None)?;
            let w = dequantized(g, node.inputs.get(1).copied().flatten()?, None)?;
            let m = g.const_value(w.ints)?.shape.first().copied()?;
            // Per tensor for the input; per tensor or per output channel for the weights.
            if x.scales.len() != 1 || !(w.scales.len() == 1 || (w.scales.len() as u64 == m && w.axis == 0)) {
                return None;
            }
            let bias = match node.inputs.get(2).copied().flatten() {
                None => None,
                Some(b) => Some(integer_bias(g, b, x.scales[0], &w.scales, m)?),
            };
            let op = Op::QLinearConv(QLinearConv {
                auto_pad: c.auto_pad,
                dilations: c.dilations.clone(),
                group: c.group,
                kernel_shape: c.kernel_shape.clone(),
                pads: c.pads.clone(),
                strides: c.strides.clone(),
            });
            (op, vec![Some(x.ints), Some(x.scale), x.zero, Some(w.ints), Some(w.scale), w.zero, None, None, bias])
        }
        Op::MatMul(_) => {
            let a = dequantized(g, node.inputs.first().copied().flatten()?, None)?;
            let b = dequantized(g, node.inputs.get(1).copied().flatten()?, None)?;
            // Per tensor, or per column of a 2-D `B`.
            let b_rank = g.ty(b.ints).shape.len();
            if a.scales.len() != 1 || !(b.scales.len() == 1 || (b_rank == 2 && b.axis == 1)) {
                return None;
            }
            (Op::QLinearMatMul(QLinearMatMul {}), vec![Some(a.ints), Some(a.scale), a.zero, Some(b.ints), Some(b.scale), b.zero, None, None])
        }
        // A Gemm is the product `A·B`, or `A·Bᵀ` of a constant `B` (a classifier's weights, one
        // scale per output row), whose integers are transposed here; its bias, when it has one,
        // the `i32` integers of scale `a_scale·b_scale` (kiln's ninth QLinearMatMul input).
        Op::Gemm(gm) if gm.alpha == 1.0 && gm.transA == 0 => {
            let a = dequantized(g, node.inputs.first().copied().flatten()?, None)?;
            let b = dequantized(g, node.inputs.get(1).copied().flatten()?, None)?;
            let per_column = if gm.transB != 0 { 0 } else { 1 };
            let b_shape = &g.ty(b.ints).shape;
            if a.scales.len() != 1 || !(b.scales.len() == 1 || b.axis == per_column) || b_shape.len() != 2 {
                return None;
            }
            let n = b_shape[per_column].known()?;
            let bias = match node.inputs.get(2).copied().flatten() {
                None => None,
                Some(c) if gm.beta == 1.0 => Some(integer_bias(g, c, a.scales[0], &b.scales, n)?),
                Some(_) => return None,
            };
            let b_ints = if gm.transB != 0 { transposed_constant(g, b.ints)? } else { b.ints };
            (Op::QLinearMatMul(QLinearMatMul {}), vec![Some(a.ints), Some(a.scale), a.zero, Some(b_ints), Some(b.scale), b.zero, None, None, bias])
        }
        _ => return None,
    };
    removed.push(p);
    // The zero points QLinear ops require: absent ones are zeros of their operands' types.
    let mut inputs = inputs;
    let (y_scale, y_zero) = quant_inputs(g, q);
    for (zero, of) in [(2, 0), (5, 3)] {
        if inputs[zero].is_none()
            && let Some(v) = inputs[of]
        {
            let dtype = g.ty(v).dtype;
            inputs[zero] = Some(zero_point(g, dtype));
        }
    }
    inputs[6] = y_scale;
    inputs[7] = y_zero;
    // An absent bias (QLinearMatMul's optional ninth input) is left out, not spelled empty.
    if inputs.len() == 9 && inputs[8].is_none() {
        inputs.truncate(8);
    }
    let name = g.node(p).name.clone();
    let node = &mut g.nodes[q.index()];
    node.op = op;
    node.inputs = inputs;
    node.name = name;
    Some(removed)
}

/// A new constant holding the transpose of the 2-D 8-bit constant `v`.
fn transposed_constant(g: &mut Graph, v: ValueId) -> Option<ValueId> {
    let t = g.const_value(v)?;
    let (&[rows, cols], Some(raw)) = (&t.shape[..], t.raw()) else { return None };
    let (rows, cols) = (usize::try_from(rows).ok()?, usize::try_from(cols).ok()?);
    if !is_8bit(t.dtype) || raw.len() != rows.checked_mul(cols)? {
        return None;
    }
    let bytes = transposed_bytes(raw, rows, cols);
    let t = Tensor { dtype: t.dtype, shape: vec![cols as u64, rows as u64], data: TensorData::Raw(bytes.into()) };
    let name = format!("{}.transposed", g.value(v).name);
    let id = g.add_value(t.ty(), name, ValueDef::Const(t));
    g.body.consts.push(id);
    Some(id)
}

/// The `cols × rows` transpose of the row-major `rows × cols` bytes `raw`: 8 × 8 blocks as
/// eight `u64` rows transposed by three rounds of masked swaps, the edges byte by byte.
fn transposed_bytes(raw: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; raw.len()];
    let (rows8, cols8) = (rows - rows % 8, cols - cols % 8);
    for r0 in (0..rows8).step_by(8) {
        for c0 in (0..cols8).step_by(8) {
            let mut x = [0u64; 8];
            for (i, v) in x.iter_mut().enumerate() {
                let at = (r0 + i) * cols + c0;
                *v = u64::from_le_bytes(raw[at..at + 8].try_into().expect("eight bytes"));
            }
            for (shift, mask) in [(8, 0x00ff_00ff_00ff_00ffu64), (16, 0x0000_ffff_0000_ffff), (32, 0x0000_0000_ffff_ffff)] {
                let step = shift / 8;
                for i in (0..8).filter(|i| i & step == 0) {
                    let t = ((x[i] >> shift) ^ x[i + step]) & mask;
                    x[i + step] ^= t;
                    x[i] ^= t << shift;
                }
            }
            for (j, v) in x.iter().enumerate() {
                let at = (c0 + j) * rows + r0;
                out[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    for r in 0..rows {
        let from = if r < rows8 { cols8 } else { 0 };
        for c in from..cols {
            out[c * rows + r] = raw[r * cols + c];
        }
    }
    out
}

/// The quantizer's scale and zero point inputs, the zero point made explicit (QLinear ops
/// require it).
fn quant_inputs(g: &mut Graph, q: NodeId) -> (Option<ValueId>, Option<ValueId>) {
    let n = g.node(q);
    let (scale, zero) = (n.inputs.get(1).copied().flatten(), n.inputs.get(2).copied().flatten());
    let out = n.outputs.first().copied().flatten();
    let zero = zero.or_else(|| out.map(|o| zero_point(g, g.ty(o).dtype)));
    (scale, zero)
}

/// A scalar zero of 8-bit type `dtype`: the zero point a DequantizeLinear or QuantizeLinear
/// without one means.
fn zero_point(g: &mut Graph, dtype: DType) -> ValueId {
    let t = Tensor { dtype, shape: Vec::new(), data: TensorData::Raw(vec![0u8].into()) };
    let v = g.add_value(t.ty(), "", ValueDef::Const(t));
    g.body.consts.push(v);
    v
}

/// The bias `b` of a quantized convolution as QLinearConv's `i32` vector: `b` dequantizes `i32`
/// integers with zero point 0 and scale `x_scale·w_scale[m]` (rounded to `f32`, as quantizers
/// compute it, within a relative 2^-20 for others).
fn integer_bias(g: &Graph, b: ValueId, x_scale: f32, w_scales: &[f32], m: u64) -> Option<ValueId> {
    let d = dequantized_i32(g, b)?;
    let scales = d.scales;
    if g.ty(d.ints).shape.len() != 1 || g.const_value(d.ints)?.numel()? != m || !(scales.len() == 1 || scales.len() as u64 == m) {
        return None;
    }
    if let Some(z) = d.zero
        && g.const_value(z)?.to_i64s()?.iter().any(|&z| z != 0)
    {
        return None;
    }
    let close = (0..m as usize).all(|i| {
        let want = x_scale * w_scales[if w_scales.len() == 1 { 0 } else { i }];
        let have = scales[if scales.len() == 1 { 0 } else { i }];
        ((have - want) / want).abs() <= 1.0 / (1 << 20) as f32
    });
    close.then_some(d.ints)
}

fn dequantized_i32(g: &Graph, v: ValueId) -> Option<Dequantized> {
    let d = dequantized(g, v, Some(DType::I32))?;
    g.const_value(d.ints)?;
    Some(d)
}

/// Removes DequantizeLinear nodes whose outputs nobody reads any more (the rewritten products'
/// weights, say), so no stage computes them.
fn remove_dead_dequantizers(g: &mut Graph) {
    let uses = uses(g);
    let dead = |n: &NodeId| {
        let node = g.node(*n);
        matches!(node.op, Op::DequantizeLinear(_)) && node.outputs.iter().flatten().all(|v| uses[v.index()] == 0)
    };
    let keep: Vec<NodeId> = g.body.nodes.iter().copied().filter(|n| !dead(n)).collect();
    g.body.nodes = keep;
}

#[cfg(test)]
mod tests {
    /// Every byte lands where the definition puts it, on whole and partial blocks.
    #[test]
    fn transposed_bytes_match_the_definition() {
        for (rows, cols) in [(0, 0), (0, 5), (1, 1), (3, 5), (8, 8), (9, 17), (16, 8), (24, 13), (40, 64)] {
            let raw: Vec<u8> = (0..rows * cols).map(|i| (i * 37 % 251) as u8).collect();
            let got = super::transposed_bytes(&raw, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(got[c * rows + r], raw[r * cols + c], "{rows}×{cols} at ({r}, {c})");
                }
            }
        }
    }
}
