//! Folding of computations on weights.
//!
//! Exporters often rearrange weights in the graph instead of in the file: PyTorch's GRU and
//! LSTM export slices the gate blocks of each weight matrix and concatenates them in ONNX's
//! order, tf2onnx transposes kernels, and quantizers dequantize every int8 weight with a
//! `DequantizeLinear`. Such a node reads only constants, so its result is the same on every run;
//! [`fold_weights`] computes it once, with the reference evaluator, and the node becomes a
//! constant. Later stages then see plain weights: products and convolutions get them packed
//! ahead, and no kernel recomputes them per run.
//!
//! Only cheap, size-preserving ops fold (data movement, casts, dequantization, element-wise
//! arithmetic), so folding costs about one pass over the weights: a result may not hold more
//! elements than the node's inputs together, and all results together may not take more bytes
//! than the graph's constants did (plus [`SLACK_BYTES`]).

use kiln_tir::{DType, Graph, Op, OpKind, Tensor, TensorData, ValueDef};

/// Ops that fold on constants of any size.
const WEIGHT_OPS: &[OpKind] = &[
    OpKind::Identity,
    OpKind::Reshape,
    OpKind::Flatten,
    OpKind::Squeeze,
    OpKind::Unsqueeze,
    OpKind::Transpose,
    OpKind::Slice,
    OpKind::Concat,
    OpKind::Split,
    OpKind::Gather,
    OpKind::Cast,
    OpKind::DequantizeLinear,
    OpKind::Add,
    OpKind::Sub,
    OpKind::Mul,
    OpKind::Div,
    OpKind::Neg,
    OpKind::Reciprocal,
    OpKind::Sqrt,
    OpKind::Abs,
    OpKind::Min,
    OpKind::Max,
    OpKind::Clip,
    OpKind::Where,
    OpKind::Expand,
    OpKind::Tile,
];

/// Results may exceed the graph's constant bytes by this much in all.
pub const SLACK_BYTES: u64 = 64 << 20;

/// A result this small folds even when it holds more elements than its inputs.
const SMALL_ELEMENTS: u64 = 4096;

/// Folds every node of the top region whose inputs are all constants and whose op is in
/// [`WEIGHT_OPS`], in order (so chains fold whole); returns how many folded. Folded nodes'
/// outputs become constants in place and the nodes leave the region.
pub fn fold_weights(g: &mut Graph) -> usize {
    let constants: u64 = g
        .values
        .iter()
        .filter_map(|v| match &v.def {
            ValueDef::Const(t) => Some(t.byte_len()),
            _ => None,
        })
        .sum();
    let mut budget = constants.saturating_add(SLACK_BYTES);
    let mut folded = 0;
    let mut kept = Vec::with_capacity(g.body.nodes.len());
    for n in std::mem::take(&mut g.body.nodes) {
        match fold(g, n, &mut budget) {
            true => folded += 1,
            false => kept.push(n),
        }
    }
    g.body.nodes = kept;
    folded
}

/// Folds node `n` if it qualifies and its results fit `budget`, which they then use up.
fn fold(g: &mut Graph, n: kiln_tir::NodeId, budget: &mut u64) -> bool {
    let node = g.node(n);
    if !WEIGHT_OPS.contains(&node.op.kind()) || !node.regions.is_empty() || node.inputs.iter().all(Option::is_none) {
        return false;
    }
    let mut inputs = Vec::with_capacity(node.inputs.len());
    let mut input_elements = 0u64;
    for input in &node.inputs {
        match input {
            None => inputs.push(None),
            Some(v) => {
                let Some(t) = g.const_value(*v) else { return false };
                if t.raw().is_none() {
                    return false;
                }
                input_elements = input_elements.saturating_add(t.numel().unwrap_or(u64::MAX));
                inputs.push(Some(t));
            }
        }
    }
    let mut out_bytes = 0u64;
    for out in node.outputs.iter().flatten() {
        let ty = g.ty(*out);
        let (Some(elements), Some(_)) = (ty.numel(), ty.known_dims()) else { return false };
        if elements > input_elements.max(SMALL_ELEMENTS) {
            return false;
        }
        out_bytes = out_bytes.saturating_add(ty.dtype.storage_bytes(elements).unwrap_or(u64::MAX));
    }
    if out_bytes > *budget {
        return false;
    }
    let first_out = node.outputs.first().copied().flatten().map(|v| g.ty(v).clone());
    let fast = dequantize_fast(&node.op, &inputs).or_else(|| movement_fast(&node.op, &inputs, first_out.as_ref()?));
    let results = match fast {
        Some(t) => vec![t],
        None => match crate::eval_op(&node.op, &inputs, node.outputs.len()) {
            Ok(r) => r,
            Err(_) => return false,
        },
    };
    // The evaluator's answer must agree with inference, or the fold is not trusted.
    let agrees = results.len() == node.outputs.len() && node.outputs.iter().zip(&results).all(|(o, r)| o.is_none_or(|v| *g.ty(v) == r.ty()));
    if !agrees {
        return false;
    }
    *budget -= out_bytes;
    let outputs = node.outputs.clone();
    for (out, t) in outputs.into_iter().zip(results) {
        if let Some(v) = out {
            g.values[v.index()].def = ValueDef::Const(t);
            g.body.consts.push(v);
        }
    }
    true
}

/// DequantizeLinear of 8-bit integers with an `f32` scale per tensor or per axis, straight into
/// `f32` bytes: the evaluator's `f64` detour allocates several times the weights. `x − zero`
/// is exact in `f32` and the product rounds once, so this is the evaluator's result bit for bit.
fn dequantize_fast(op: &Op, inputs: &[Option<&Tensor>]) -> Option<Tensor> {
    let Op::DequantizeLinear(a) = op else { return None };
    let (x, scale) = (inputs.first().copied().flatten()?, inputs.get(1).copied().flatten()?);
    let zero = inputs.get(2).copied().flatten();
    let signed = match x.dtype {
        DType::I8 => true,
        DType::U8 => false,
        _ => return None,
    };
    if scale.dtype != DType::F32 || zero.is_some_and(|z| z.dtype != x.dtype) || a.block_size > 0 || a.output_dtype.is_some_and(|d| d != DType::F32) {
        return None;
    }
    let int = |b: u8| if signed { f32::from(b as i8) } else { f32::from(b) };
    let scales: Vec<f32> = scale.raw()?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let zeros: Vec<f32> = match zero {
        Some(z) => z.raw()?.iter().map(|&b| int(b)).collect(),
        None => vec![0.0; scales.len()],
    };
    let raw = x.raw()?;
    // Elements per scale: all of them (per tensor), or the extent of the dims after the axis.
    let run = if scales.len() == 1 && scale.shape.len() <= 1 {
        raw.len()
    } else {
        let rank = x.shape.len() as i64;
        let axis = usize::try_from(if a.axis < 0 { a.axis + rank } else { a.axis }).ok()?;
        if scale.shape != [*x.shape.get(axis)?] {
            return None;
        }
        x.shape[axis + 1..].iter().product::<u64>() as usize
    };
    if zeros.len() != scales.len() || run == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len() * 4);
    for (k, chunk) in raw.chunks(run).enumerate() {
        let (s, z) = (scales[k % scales.len()], zeros[k % zeros.len()]);
        out.extend(chunk.iter().flat_map(|&b| ((int(b) - z) * s).to_le_bytes()));
    }
    Some(Tensor { dtype: DType::F32, shape: x.shape.clone(), data: TensorData::Raw(out.into()) })
}

/// Reshapes, Concat and Slice on the raw bytes of types with whole bytes per element: the
/// evaluator's `f64` detour converts every element twice (PyTorch's GRU export slices and
/// concatenates each weight matrix a dozen times). `out` is the node's inferred first output,
/// whose dims a reshape takes; the caller checks every result's type against inference.
fn movement_fast(op: &Op, inputs: &[Option<&Tensor>], out: &kiln_tir::TensorType) -> Option<Tensor> {
    let x = inputs.first().copied().flatten()?;
    let size = x.dtype.storage_bytes(1)?;
    (size > 0 && x.dtype.storage_bytes(2)? == 2 * size).then_some(())?;
    let size = usize::try_from(size).ok()?;
    let dims: Vec<usize> = x.shape.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    let (shape, data): (Vec<u64>, TensorData) = match op {
        // The same bytes, shared.
        Op::Identity(_) | Op::Reshape(_) | Op::Flatten(_) | Op::Squeeze(_) | Op::Unsqueeze(_) => (out.known_dims()?, x.data.clone()),
        Op::Concat(c) => {
            let parts: Vec<&Tensor> = inputs.iter().map(|t| t.filter(|t| t.dtype == x.dtype && t.shape.len() == x.shape.len())).collect::<Option<_>>()?;
            let rank = i64::try_from(dims.len()).ok()?;
            let axis = usize::try_from(if c.axis < 0 { c.axis + rank } else { c.axis }).ok().filter(|&a| a < dims.len())?;
            let outer: usize = dims[..axis].iter().product();
            let mut shape = x.shape.clone();
            shape[axis] = parts.iter().map(|t| t.shape[axis]).sum();
            let mut runs = Vec::with_capacity(parts.len());
            for t in &parts {
                (t.shape[..axis] == x.shape[..axis] && t.shape[axis + 1..] == x.shape[axis + 1..]).then_some(())?;
                let inner: usize = t.shape[axis..].iter().map(|&d| usize::try_from(d).ok()).product::<Option<usize>>()?;
                runs.push((t.raw()?, inner.checked_mul(size)?));
            }
            let mut bytes = Vec::with_capacity(runs.iter().map(|r| r.0.len()).sum());
            for o in 0..outer {
                for &(raw, run) in &runs {
                    bytes.extend_from_slice(raw.get(o * run..(o + 1) * run)?);
                }
            }
            (shape, TensorData::Raw(bytes.into()))
        }
        Op::Slice(_) => {
            let arg = |i: usize| inputs.get(i).copied().flatten().map(|t| t.to_i64s());
            let (starts, ends) = (arg(1)??, arg(2)??);
            let rank = dims.len();
            let axes: Vec<usize> = match arg(3) {
                Some(axes) => axes?.iter().map(|&a| usize::try_from(if a < 0 { a + rank as i64 } else { a }).ok().filter(|&a| a < rank)).collect::<Option<_>>()?,
                None => (0..starts.len()).collect(),
            };
            let steps = match arg(4) {
                Some(steps) => steps?,
                None => vec![1; starts.len()],
            };
            (ends.len() == starts.len() && axes.len() == starts.len() && steps.len() == starts.len()).then_some(())?;
            let (shape, walk_steps, base) = crate::layout::slice_walk("Slice", &dims, &starts, &ends, &axes, &steps).ok()?;
            let TensorData::Raw(raw) = &x.data else { return None };
            (shape.iter().map(|&d| d as u64).collect(), TensorData::Raw(slice_runs(raw, size, &shape, &walk_steps, base)?))
        }
        _ => return None,
    };
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let TensorData::Raw(bytes) = &data else { return None };
    (x.dtype.storage_bytes(numel)? == bytes.len() as u64).then_some(())?;
    Some(Tensor { dtype: x.dtype, shape, data })
}

/// The elements of `raw` (`size` bytes each) that an output of `shape` reads, output axis `d`
/// stepping `steps[d]` elements from element `base`, copied a contiguous run at a time: the
/// trailing axes whose step is the extent of the axes after them read whole rows. A result
/// that is one run shares `raw`'s bytes.
fn slice_runs(raw: &bytes::Bytes, size: usize, shape: &[usize], steps: &[isize], base: isize) -> Option<bytes::Bytes> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    if n == 0 {
        return Some(bytes::Bytes::new());
    }
    // Axes `inner..` are contiguous, reading `run` elements from each start.
    let (mut inner, mut run) = (shape.len(), 1usize);
    while inner > 0 && (shape[inner - 1] == 1 || steps[inner - 1] == run as isize) {
        inner -= 1;
        run *= shape[inner];
    }
    let bytes_at = |start: isize| -> Option<&[u8]> {
        let start = usize::try_from(start).ok()?.checked_mul(size)?;
        raw.get(start..start.checked_add(run * size)?)
    };
    if run == n {
        bytes_at(base)?;
        let start = base as usize * size;
        return Some(raw.slice(start..start + run * size));
    }
    let mut out = Vec::with_capacity(n.checked_mul(size)?);
    for offset in crate::array::offsets(&shape[..inner], &steps[..inner], base) {
        out.extend_from_slice(bytes_at(offset)?);
    }
    Some(out.into())
}

#[cfg(test)]
mod tests {
    use kiln_tir::text::parse;

    use super::*;

    #[test]
    fn weight_chains_fold_and_activations_do_not() {
        let mut g = parse(
            "graph @main(%0: f32[2, 3]) -> (f32[2, 3]) {
  %1 = const dense<f32[3, 2]: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]>
  %2 = tensor.transpose(%1) {perm = [1, 0]} : f32[2, 3]
  %3 = tensor.neg(%2) : f32[2, 3]
  %4 = tensor.add(%0, %3) : f32[2, 3]
  return %4
}",
        )
        .expect("parses");
        assert_eq!(fold_weights(&mut g), 2);
        assert_eq!(g.body.nodes.len(), 1);
        let negated = g.node(g.body.nodes[0]).inputs[1].and_then(|v| g.const_value(v)).and_then(|t| t.raw()).expect("the add reads a folded constant");
        let values: Vec<f32> = negated.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(values, vec![-1.0, -3.0, -5.0, -2.0, -4.0, -6.0]);
    }

    #[test]
    fn fast_dequantization_is_the_evaluators() {
        let x = Tensor { dtype: DType::I8, shape: vec![3, 2, 2], data: TensorData::Raw(vec![0u8, 1, 127, 128, 255, 7, 9, 200, 3, 4, 5, 6].into()) };
        let scale = Tensor::from_f32s(&[3], &[0.37, 1e-3, 12.5]);
        let zero = Tensor { dtype: DType::I8, shape: vec![3], data: TensorData::Raw(vec![0u8, 250, 3].into()) };
        for (axis, scale, zero) in [(0, scale.clone(), Some(zero)), (0, Tensor::from_f32s(&[], &[0.37]), None)] {
            let op = Op::DequantizeLinear(kiln_tir::op::DequantizeLinear { axis, block_size: 0, output_dtype: None });
            let inputs = [Some(&x), Some(&scale), zero.as_ref()];
            let fast = dequantize_fast(&op, &inputs).expect("takes the fast path");
            let slow = crate::eval_op(&op, &inputs, 1).expect("evaluates").remove(0);
            assert!(slow.raw().is_some_and(|b| b.len() == 48), "{slow:?}");
            assert_eq!(fast.raw(), slow.raw());
        }
    }

    #[test]
    fn fast_movement_is_the_evaluators() {
        let f32s: Vec<f32> = (0..60).map(|i| i as f32 * 0.5 - 7.0).collect();
        let x = Tensor::from_f32s(&[3, 4, 5], &f32s);
        let bytes = Tensor { dtype: DType::I8, shape: vec![3, 4, 5], data: TensorData::Raw((0..60u8).map(|v| v.wrapping_mul(37)).collect::<Vec<u8>>().into()) };
        let i64s = |v: &[i64]| Tensor::from_i64s(&[v.len() as u64], v);
        let slice = Op::Slice(kiln_tir::op::Slice {});
        for x in [&x, &bytes] {
            // Slices: plain, negative indices, clamped ends, negative and large steps, no axes,
            // empty, whole rows (one run, and a run per outer index).
            let cases: [(&[i64], &[i64], Option<&[i64]>, Option<&[i64]>); 10] = [
                (&[1, 0], &[3, 5], Some(&[0, 2]), None),
                (&[-2], &[100], Some(&[-1]), None),
                (&[3, -1], &[0, -100], Some(&[1, 2]), Some(&[-1, -2])),
                (&[0, 1, 0], &[3, 4, 5], None, Some(&[2, 2, 3])),
                (&[2], &[1], Some(&[0]), None),
                (&[-100], &[i64::MAX], Some(&[2]), Some(&[7])),
                (&[5], &[-100], Some(&[2]), Some(&[i64::MIN])),
                (&[1], &[3], Some(&[0]), None),
                (&[1], &[3], Some(&[1]), None),
                (&[1, 0], &[2, 3], Some(&[0, 1]), None),
            ];
            for (starts, ends, axes, steps) in cases {
                let (starts, ends, axes, steps) = (i64s(starts), i64s(ends), axes.map(i64s), steps.map(i64s));
                let inputs = [Some(x), Some(&starts), Some(&ends), axes.as_ref(), steps.as_ref()];
                let slow = crate::eval_op(&slice, &inputs, 1).expect("evaluates").remove(0);
                let fast = movement_fast(&slice, &inputs, &slow.ty()).expect("takes the fast path");
                assert_eq!((fast.shape.clone(), fast.raw()), (slow.shape.clone(), slow.raw()), "{starts:?} {ends:?} {axes:?} {steps:?}");
            }
            // Rows 1 and 2 of the outermost axis are one run of the input's bytes: shared.
            let (starts, ends, axes) = (i64s(&[1]), i64s(&[3]), i64s(&[0]));
            let rows = movement_fast(&slice, &[Some(x), Some(&starts), Some(&ends), Some(&axes)], &kiln_tir::TensorType::known(x.dtype, &[2, 4, 5])).expect("takes the fast path");
            let (whole, part) = (x.raw().unwrap(), rows.raw().unwrap());
            assert_eq!(part.as_ptr(), whole[20 * x.dtype.storage_bytes(1).unwrap() as usize..].as_ptr());
            // Concat along each axis, and reshapes.
            let y = Tensor { dtype: x.dtype, shape: x.shape.clone(), data: TensorData::Raw(x.raw().unwrap().iter().rev().copied().collect::<Vec<u8>>().into()) };
            for axis in [-3, 0, 1, 2] {
                let op = Op::Concat(kiln_tir::op::Concat { axis });
                let inputs = [Some(x), Some(&y), Some(x)];
                let slow = crate::eval_op(&op, &inputs, 1).expect("evaluates").remove(0);
                let fast = movement_fast(&op, &inputs, &slow.ty()).expect("takes the fast path");
                assert_eq!((fast.shape.clone(), fast.raw()), (slow.shape.clone(), slow.raw()), "axis {axis}");
            }
            let shape = i64s(&[5, 12]);
            let op = Op::Reshape(kiln_tir::op::Reshape { allowzero: 0 });
            let slow = crate::eval_op(&op, &[Some(x), Some(&shape)], 1).expect("evaluates").remove(0);
            let fast = movement_fast(&op, &[Some(x), Some(&shape)], &slow.ty()).expect("takes the fast path");
            assert_eq!((fast.shape.clone(), fast.raw()), (slow.shape.clone(), slow.raw()));
        }
    }

    #[test]
    fn growing_ops_and_heavy_ops_stay_nodes() {
        let mut g = parse(
            "graph @main() -> (f32[8192], f32[2, 2]) {
  %0 = const dense<f32[1]: [1.0]>
  %1 = const dense<i64[1]: [8192]>
  %2 = tensor.expand(%0, %1) : f32[8192]
  %3 = const dense<f32[2, 2]: [1.0, 2.0, 3.0, 4.0]>
  %4 = tensor.matmul(%3, %3) : f32[2, 2]
  return %2, %4
}",
        )
        .expect("parses");
        assert_eq!(fold_weights(&mut g), 0);
        assert_eq!(g.body.nodes.len(), 2);
    }
}

