//! Fusion: Conv and matrix products absorb their bias, residual addend and activation into one
//! kernel (`fused_conv`, `fused_matmul`). The ops exporters decompose are recognized in
//! `recognize.rs`.
//!
//! The epilogue order is fixed: `act(product + bias + Z)`. A bias or residual is absorbed only
//! while no activation is, so the order of the graph's adds does not matter.

use egg::Id;
use kiln_tir::op::{Activation, FusedConv, FusedMatMul, GeluApprox};
use kiln_tir::{DType, Op, OpKind, Tensor};

use super::{
    Hit, Rule, Topic, add, add_constant, constant, dtype, f32s, find, pick, root, same_type, splat,
    ty,
};
use crate::analysis::Egraph;
use crate::lang::ENode;

type Apply = fn(&mut Egraph, &Hit<'_>) -> Option<Id>;

pub(super) fn rules() -> Vec<Rule> {
    let r = |name, algebra, pattern, apply: Apply| Rule {
        name,
        algebra,
        topic: Topic::Fusion,
        pattern,
        apply,
    };
    vec![
        r(
            "gemm-as-matmul",
            "gemm(a, b) -> fused_matmul(a, b)",
            "(gemm ?a ?b)",
            gemm,
        ),
        r(
            "gemm-bias-as-matmul",
            "gemm(a, b, c[N]) -> fused_matmul(a, b, c)",
            "(gemm ?a ?b ?c)",
            gemm,
        ),
        r(
            "matmul-bias",
            "mm(a, b) + c[N] -> fused_matmul(a, b, c)",
            "(add ?m ?c)",
            matmul_bias,
        ),
        r(
            "matmul-residual",
            "mm(a, b, c) + z -> fused_matmul(a, b, c, z)",
            "(add ?m ?z)",
            matmul_residual,
        ),
        r(
            "matmul-relu",
            "relu(mm(...)) -> fused_matmul<relu>(...)",
            "(relu ?m)",
            matmul_act,
        ),
        r(
            "matmul-leaky-relu",
            "leaky_relu<α>(mm(...)) -> fused_matmul<leaky_relu α>(...)",
            "(leaky_relu ?m)",
            matmul_act,
        ),
        r(
            "matmul-sigmoid",
            "sigmoid(mm(...)) -> fused_matmul<sigmoid>(...)",
            "(sigmoid ?m)",
            matmul_act,
        ),
        r(
            "matmul-tanh",
            "tanh(mm(...)) -> fused_matmul<tanh>(...)",
            "(tanh ?m)",
            matmul_act,
        ),
        r(
            "matmul-hard-swish",
            "hard_swish(mm(...)) -> fused_matmul<hard_swish>(...)",
            "(hard_swish ?m)",
            matmul_act,
        ),
        r(
            "matmul-gelu",
            "gelu(mm(...)) -> fused_matmul<gelu>(...)",
            "(gelu ?m)",
            matmul_act,
        ),
        r(
            "matmul-silu",
            "mm(...) · sigmoid(mm(...)) -> fused_matmul<silu>(...) (the same product twice)",
            "(mul ?m (sigmoid ?n))",
            matmul_silu,
        ),
        r(
            "matmul-clip",
            "clip(mm(...), lo, hi) -> fused_matmul<clip lo hi>(...)",
            "(clip ?m ?lo ?hi)",
            matmul_act,
        ),
        r(
            "matmul-quant-dequant",
            "dequantize(quantize(mm(...), s, z), s, z) -> fused_matmul<quant_dequant s z>(...)",
            "(dequantize_linear (quantize_linear ?m ?s ?z) ?ds ?dz)",
            matmul_quant_dequant,
        ),
        r(
            "matmul-quant-dequant-no-zero",
            "dequantize(quantize(mm(...), s), s) -> fused_matmul<quant_dequant s 0>(...)",
            "(dequantize_linear (quantize_linear ?m ?s) ?ds)",
            matmul_quant_dequant,
        ),
        r(
            "conv-bias",
            "conv(x, w, b) + c[1,M,1,1] -> conv(x, w, b + c)",
            "(add ?m ?c)",
            conv_bias,
        ),
        r(
            "conv-residual",
            "conv(x, w, b) + z -> fused_conv(x, w, b, z)",
            "(add ?m ?z)",
            conv_residual,
        ),
        r(
            "conv-relu",
            "relu(conv(...)) -> fused_conv<relu>(...)",
            "(relu ?m)",
            conv_act,
        ),
        r(
            "conv-leaky-relu",
            "leaky_relu<α>(conv(...)) -> fused_conv<leaky_relu α>(...)",
            "(leaky_relu ?m)",
            conv_act,
        ),
        r(
            "conv-sigmoid",
            "sigmoid(conv(...)) -> fused_conv<sigmoid>(...)",
            "(sigmoid ?m)",
            conv_act,
        ),
        r(
            "conv-tanh",
            "tanh(conv(...)) -> fused_conv<tanh>(...)",
            "(tanh ?m)",
            conv_act,
        ),
        r(
            "conv-hard-swish",
            "hard_swish(conv(...)) -> fused_conv<hard_swish>(...)",
            "(hard_swish ?m)",
            conv_act,
        ),
        r(
            "conv-gelu",
            "gelu(conv(...)) -> fused_conv<gelu>(...)",
            "(gelu ?m)",
            conv_act,
        ),
        r(
            "conv-silu",
            "conv(...) · sigmoid(conv(...)) -> fused_conv<silu>(...) (the same convolution twice)",
            "(mul ?m (sigmoid ?n))",
            conv_silu,
        ),
        r(
            "conv-clip",
            "clip(conv(...), lo, hi) -> fused_conv<clip lo hi>(...)",
            "(clip ?m ?lo ?hi)",
            conv_act,
        ),
        r(
            "conv-quant-dequant",
            "dequantize(quantize(conv(...), s, z), s, z) -> fused_conv<quant_dequant s z>(...)",
            "(dequantize_linear (quantize_linear ?m ?s ?z) ?ds ?dz)",
            conv_quant_dequant,
        ),
        r(
            "conv-quant-dequant-no-zero",
            "dequantize(quantize(conv(...), s), s) -> fused_conv<quant_dequant s 0>(...)",
            "(dequantize_linear (quantize_linear ?m ?s) ?ds)",
            conv_quant_dequant,
        ),
    ]
}

// ---- matrix products ----

/// A product in a class, seen as a `fused_matmul`: attributes, `[a, b, bias, z]`, and the
/// node it came from.
pub(super) struct Product {
    pub(super) op: FusedMatMul,
    pub(super) args: [Option<Id>; 4],
    pub(super) node: ENode,
}

pub(super) fn is_f32(eg: &Egraph, id: Id) -> bool {
    dtype(eg, id) == Some(DType::F32)
}

pub(super) fn as_product(eg: &mut Egraph, class: Id) -> Option<Product> {
    if !is_f32(eg, class) {
        return None;
    }
    if let Some((Op::FusedMatMul(op), args, node)) = find(eg, class, OpKind::FusedMatMul) {
        let arg = |i: usize| args.get(i).copied().flatten();
        return Some(Product {
            op,
            args: [arg(0), arg(1), arg(2), arg(3)],
            node,
        });
    }
    if let Some((_, args, node)) = find(eg, class, OpKind::MatMul) {
        return Some(Product {
            op: FusedMatMul::default(),
            args: [args[0], args[1], None, None],
            node,
        });
    }
    let (Op::Gemm(g), args, node) = find(eg, class, OpKind::Gemm)? else {
        return None;
    };
    if g.alpha != 1.0 || g.transA != 0 {
        return None;
    }
    let n = *ty(eg, class)?.known_dims()?.last()?;
    let bias = match args.get(2).copied().flatten() {
        None => None,
        Some(_) if g.beta == 0.0 => None,
        Some(c) if g.beta == 1.0 => Some(vector(eg, c, n)?),
        Some(_) => return None,
    };
    Some(Product {
        op: FusedMatMul {
            transB: g.transB,
            ..Default::default()
        },
        args: [args[0], args[1], bias, None],
        node,
    })
}

/// Class `c` as a vector of `n` elements: itself when it is `[n]`, or a reshaped copy of a
/// constant whose other axes are all 1.
fn vector(eg: &mut Egraph, c: Id, n: u64) -> Option<Id> {
    let dims = ty(eg, c)?.known_dims()?;
    if dims == [n] {
        return Some(c);
    }
    if dims.iter().product::<u64>() != n || dims.last() != Some(&n) {
        return None;
    }
    let mut t = constant(eg, c)?.clone();
    t.shape = vec![n];
    Some(add_constant(eg, t))
}

fn build_product(eg: &mut Egraph, hit: &Hit<'_>, p: Product, consumed: &[&ENode]) -> Option<Id> {
    let mut all = vec![&p.node];
    all.extend_from_slice(consumed);
    add(eg, hit.rule, Op::FusedMatMul(p.op), &p.args, &all)
}

fn gemm(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (Op::Gemm(_), ..) = find(eg, hit.class, OpKind::Gemm)? else {
        return None;
    };
    let p = as_product(eg, hit.class)?;
    (p.node.kind() == Some(OpKind::Gemm)).then(|| build_product(eg, hit, p, &[]))?
}

fn matmul_bias(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (m, c) = (hit.var("?m"), hit.var("?c"));
    let mut p = as_product(eg, m)?;
    if p.args[2].is_some()
        || p.args[3].is_some()
        || p.op.activation != Activation::None
        || !same_type(eg, m, hit.class)
    {
        return None;
    }
    let n = *ty(eg, m)?.known_dims()?.last()?;
    p.args[2] = Some(vector(eg, c, n)?);
    let (.., add_node) = root(eg, hit, &[Some(m), Some(c)])?;
    build_product(eg, hit, p, &[&add_node])
}

fn matmul_residual(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (m, z) = (hit.var("?m"), hit.var("?z"));
    let mut p = as_product(eg, m)?;
    if p.args[3].is_some()
        || p.op.activation != Activation::None
        || !same_type(eg, m, z)
        || !same_type(eg, m, hit.class)
    {
        return None;
    }
    p.args[3] = Some(z);
    let (.., add_node) = root(eg, hit, &[Some(m), Some(z)])?;
    build_product(eg, hit, p, &[&add_node])
}

/// The activation the matched root applies, with its `alpha`/`beta`, and its node.
fn activation(eg: &Egraph, hit: &Hit<'_>) -> Option<(Activation, f32, f32, ENode)> {
    let m = Some(hit.var("?m"));
    let args = if hit.root == Some(OpKind::Clip) {
        vec![m, Some(hit.var("?lo")), Some(hit.var("?hi"))]
    } else {
        vec![m]
    };
    let (op, _, node) = root(eg, hit, &args)?;
    let (act, alpha, beta) = match op {
        Op::Relu(_) => (Activation::Relu, 0.0, 0.0),
        Op::LeakyRelu(l) => (Activation::LeakyRelu, l.alpha, 0.0),
        Op::Sigmoid(_) => (Activation::Sigmoid, 0.0, 0.0),
        Op::Tanh(_) => (Activation::Tanh, 0.0, 0.0),
        Op::HardSwish(_) => (Activation::HardSwish, 0.0, 0.0),
        Op::Gelu(g) => (
            if g.approximate == GeluApprox::Tanh {
                Activation::GeluTanh
            } else {
                Activation::Gelu
            },
            0.0,
            0.0,
        ),
        Op::Clip(_) => {
            let bound = |name: &str| splat(eg, hit.var(name)).map(|v| v as f32);
            (Activation::Clip, bound("?lo")?, bound("?hi")?)
        }
        _ => return None,
    };
    Some((act, alpha, beta, node))
}

fn matmul_act(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let mut p = as_product(eg, hit.var("?m"))?;
    if p.op.activation != Activation::None {
        return None;
    }
    let (act, alpha, beta, node) = activation(eg, hit)?;
    (p.op.activation, p.op.alpha, p.op.beta) = (act, alpha, beta);
    build_product(eg, hit, p, &[&node])
}

/// The SiLU `m · sigmoid(m)` the matched root computes, as its Mul and Sigmoid nodes. The
/// pattern names the sigmoid's operand `?n` apart (see the rules' test
/// `no_pattern_repeats_a_variable`) and this checks it is `?m`.
fn silu(eg: &Egraph, hit: &Hit<'_>) -> Option<[ENode; 2]> {
    let m = hit.var("?m");
    if eg.find(hit.var("?n")) != eg.find(m) || !same_type(eg, m, hit.class) {
        return None;
    }
    let (Op::Mul(_), args, mul) = root(eg, hit, &[Some(m), None])? else {
        return None;
    };
    let (.., sigmoid) = pick(eg, args.get(1).copied().flatten()?, OpKind::Sigmoid, |n| n.args.first().is_some_and(|&a| eg.find(a) == eg.find(m)))?;
    Some([mul, sigmoid])
}

fn matmul_silu(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let [mul, sigmoid] = silu(eg, hit)?;
    let mut p = as_product(eg, hit.var("?m"))?;
    if p.op.activation != Activation::None {
        return None;
    }
    (p.op.activation, p.op.alpha, p.op.beta) = (Activation::Silu, 0.0, 0.0);
    build_product(eg, hit, p, &[&mul, &sigmoid])
}

fn matmul_quant_dequant(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let mut p = as_product(eg, hit.var("?m"))?;
    let (act, alpha, beta, [dq, q]) = quant_dequant(eg, hit)?;
    if !subsumes((act, alpha, beta), (p.op.activation, p.op.alpha, p.op.beta)) {
        return None;
    }
    (p.op.activation, p.op.alpha, p.op.beta) = (act, alpha, beta);
    build_product(eg, hit, p, &[&q, &dq])
}

// ---- quantize-dequantize pairs ----

/// The QuantizeLinear → DequantizeLinear pair the matched root computes on `?m`, as the
/// activation `quant_dequant_u8` or `_u16` with its scale and zero point, and the two nodes.
/// Both ops take one `f32` scale (the same value) and one zero point (the same, or none), in
/// `f32`, whole-tensor, to an 8- or 16-bit integer. An `i8` or `i16` pair becomes the `u8` or
/// `u16` one with the zero point moved up by 128 or 32768: the same levels, the same values.
fn quant_dequant(eg: &Egraph, hit: &Hit<'_>) -> Option<(Activation, f32, f32, [ENode; 2])> {
    let (m, s, ds) = (hit.var("?m"), hit.var("?s"), hit.var("?ds"));
    let (z, dz) = (hit.opt_var("?z"), hit.opt_var("?dz"));
    let dq_args: Vec<Option<Id>> = [None, Some(ds)].into_iter().chain(dz.map(Some)).collect();
    let (Op::DequantizeLinear(d), dargs, dq) = root(eg, hit, &dq_args)? else {
        return None;
    };
    let want: Vec<Id> = [Some(m), Some(s), z].into_iter().flatten().map(|c| eg.find(c)).collect();
    let (Op::QuantizeLinear(qo), _, q) = pick(eg, (*dargs.first()?)?, OpKind::QuantizeLinear, |n| {
        n.args.iter().map(|&a| eg.find(a)).eq(want.iter().copied())
    })?
    else {
        return None;
    };
    let f32_precision = qo.precision == 0 || qo.precision == i64::from(DType::F32.onnx_code());
    if qo.block_size > 0 || d.block_size > 0 || !f32_precision || !is_f32(eg, m) || !is_f32(eg, hit.class) {
        return None;
    }
    let one_f32 = |c: Id| f32s(eg, c).filter(|v| v.len() == 1).map(|v| v[0]);
    let scale = one_f32(s)?;
    if !(scale.is_finite() && scale > 0.0) || one_f32(ds)?.to_bits() != scale.to_bits() {
        return None;
    }
    let zero = |c: Option<Id>| -> Option<(Option<DType>, i64)> {
        match c {
            None => Some((None, 0)),
            Some(c) => {
                let t = constant(eg, c)?;
                match t.to_i64s()?.as_slice() {
                    [v] => Some((Some(t.dtype), *v)),
                    _ => None,
                }
            }
        }
    };
    let (zt, zv) = zero(z)?;
    if zero(dz)? != (zt, zv) {
        return None;
    }
    let levels = dtype(eg, (*dargs.first()?)?)?;
    if zt.is_some_and(|t| t != levels) {
        return None;
    }
    let (act, shift) = match levels {
        DType::U8 => (Activation::QuantDequantU8, 0),
        DType::I8 => (Activation::QuantDequantU8, 128),
        DType::U16 => (Activation::QuantDequantU16, 0),
        DType::I16 => (Activation::QuantDequantU16, 32768),
        _ => return None,
    };
    Some((act, scale, (zv + shift) as f32, [dq, q]))
}

/// Whether the quantize-dequantize pair `qd` (activation, scale, zero point) gives the same
/// values after the activation `prev` as without it: `prev` is none, or Relu or Clip whose
/// lower bound (Relu's 0) falls to level 0 and whose upper bound, if any, to the top level.
/// Exporters that keep the Relu before a quantizer write this; the pair alone computes it.
fn subsumes(qd: (Activation, f32, f32), prev: (Activation, f32, f32)) -> bool {
    let (act, scale, zero_point) = qd;
    let top = if act == Activation::QuantDequantU8 { 255.0 } else { 65535.0 };
    // The level of `v` before clamping, in the runtime's `f32` arithmetic.
    let level = |v: f32| (v / scale).round_ties_even() + zero_point;
    match prev.0 {
        Activation::None => true,
        Activation::Relu => level(0.0) <= 0.0,
        Activation::Clip => level(prev.1) <= 0.0 && level(prev.2) >= top,
        _ => false,
    }
}

// ---- convolutions ----

struct Convolution {
    op: FusedConv,
    args: [Option<Id>; 4],
    node: ENode,
}

fn as_conv(eg: &Egraph, class: Id) -> Option<Convolution> {
    if !is_f32(eg, class) {
        return None;
    }
    if let Some((Op::FusedConv(op), args, node)) = find(eg, class, OpKind::FusedConv) {
        let arg = |i: usize| args.get(i).copied().flatten();
        return Some(Convolution {
            op,
            args: [arg(0), arg(1), arg(2), arg(3)],
            node,
        });
    }
    let (Op::Conv(c), args, node) = find(eg, class, OpKind::Conv)? else {
        return None;
    };
    let op = FusedConv {
        auto_pad: c.auto_pad,
        dilations: c.dilations,
        group: c.group,
        kernel_shape: c.kernel_shape,
        pads: c.pads,
        strides: c.strides,
        ..Default::default()
    };
    Some(Convolution {
        op,
        args: [
            args.first().copied().flatten(),
            args.get(1).copied().flatten(),
            args.get(2).copied().flatten(),
            None,
        ],
        node,
    })
}

fn build_conv(eg: &mut Egraph, hit: &Hit<'_>, c: Convolution, consumed: &[&ENode]) -> Option<Id> {
    let mut all = vec![&c.node];
    all.extend_from_slice(consumed);
    add(eg, hit.rule, Op::FusedConv(c.op), &c.args, &all)
}

fn conv_bias(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (m, b) = (hit.var("?m"), hit.var("?c"));
    let mut c = as_conv(eg, m)?;
    if c.op.activation != Activation::None || !same_type(eg, m, hit.class) {
        return None;
    }
    let out = ty(eg, m)?.known_dims()?;
    let bd = ty(eg, b)?.known_dims()?;
    let channels = *out.get(1)?;
    // The addend must vary along the channel axis only: [M, 1, ...] or [1, M, 1, ...].
    let lead = out.len().checked_sub(bd.len())?;
    let per_channel = lead <= 1
        && bd
            .iter()
            .enumerate()
            .all(|(i, &d)| if i + lead == 1 { d == channels } else { d == 1 });
    if !per_channel {
        return None;
    }
    let add_v = f32s(eg, b)?;
    let sum: Vec<f32> = match c.args[2] {
        Some(old) => f32s(eg, old)?
            .iter()
            .zip(&add_v)
            .map(|(x, y)| x + y)
            .collect(),
        None => add_v,
    };
    c.args[2] = Some(add_constant(eg, Tensor::from_f32s(&[channels], &sum)));
    let (.., add_node) = root(eg, hit, &[Some(m), Some(b)])?;
    build_conv(eg, hit, c, &[&add_node])
}

fn conv_residual(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (m, z) = (hit.var("?m"), hit.var("?z"));
    let mut c = as_conv(eg, m)?;
    if c.args[3].is_some()
        || c.op.activation != Activation::None
        || !same_type(eg, m, z)
        || !same_type(eg, m, hit.class)
    {
        return None;
    }
    c.args[3] = Some(z);
    let (.., add_node) = root(eg, hit, &[Some(m), Some(z)])?;
    build_conv(eg, hit, c, &[&add_node])
}

fn conv_act(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let mut c = as_conv(eg, hit.var("?m"))?;
    if c.op.activation != Activation::None {
        return None;
    }
    let (act, alpha, beta, node) = activation(eg, hit)?;
    (c.op.activation, c.op.alpha, c.op.beta) = (act, alpha, beta);
    build_conv(eg, hit, c, &[&node])
}

fn conv_silu(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let [mul, sigmoid] = silu(eg, hit)?;
    let mut c = as_conv(eg, hit.var("?m"))?;
    if c.op.activation != Activation::None {
        return None;
    }
    (c.op.activation, c.op.alpha, c.op.beta) = (Activation::Silu, 0.0, 0.0);
    build_conv(eg, hit, c, &[&mul, &sigmoid])
}

fn conv_quant_dequant(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let mut c = as_conv(eg, hit.var("?m"))?;
    let (act, alpha, beta, [dq, q]) = quant_dequant(eg, hit)?;
    if !subsumes((act, alpha, beta), (c.op.activation, c.op.alpha, c.op.beta)) {
        return None;
    }
    (c.op.activation, c.op.alpha, c.op.beta) = (act, alpha, beta);
    add(eg, hit.rule, Op::FusedConv(c.op), &c.args, &[&c.node, &q, &dq])
}
