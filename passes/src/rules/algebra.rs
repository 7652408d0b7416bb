//! Algebraic identities and canonical forms, limited to what is exact in the element type:
//! no float reassociation, only rewrites whose result is bit-identical (up to the sign of a
//! zero, which the conformance tolerance ignores).

use egg::Id;
use kiln_tir::op::{Add, Mul};
use kiln_tir::{DType, Op, Tensor};

use super::{Hit, Rule, Topic, add, add_constant, dtype, elements, root, same_type, splat, value};
use crate::analysis::Egraph;

pub(super) fn rules() -> Vec<Rule> {
    let r = |name, algebra, pattern, apply| Rule {
        name,
        algebra,
        topic: Topic::Algebra,
        pattern,
        apply,
    };
    vec![
        r(
            "add-commute",
            "a + b -> b + a",
            "(add ?a ?b)",
            commute as fn(&mut Egraph, &Hit<'_>) -> Option<Id>,
        ),
        r("mul-commute", "a * b -> b * a", "(mul ?a ?b)", commute),
        r("mul-one", "x * 1 -> x", "(mul ?x ?c)", mul_one),
        r("add-zero", "x + 0 -> x", "(add ?x ?c)", add_zero),
        r("sub-zero", "x - 0 -> x", "(sub ?x ?c)", add_zero),
        r("div-one", "x / 1 -> x", "(div ?x ?c)", mul_one),
        r("neg-neg", "-(-x) -> x", "(neg (neg ?x))", |_, hit| {
            Some(hit.var("?x"))
        }),
        r(
            "sub-const-as-add",
            "x - c -> x + (-c)",
            "(sub ?x ?c)",
            sub_const,
        ),
        r(
            "div-pow2-as-mul",
            "x / 2^k -> x * 2^-k",
            "(div ?x ?c)",
            div_pow2,
        ),
        r(
            "mul-int-consts",
            "(x * a) * b -> x * (a * b) for integers",
            "(mul (mul ?x ?a) ?b)",
            int_reassoc,
        ),
    ]
}

fn commute(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (a, b) = (hit.var("?a"), hit.var("?b"));
    let (op, _, node) = root(eg, hit, &[Some(a), Some(b)])?;
    add(eg, hit.rule, op, &[Some(b), Some(a)], &[&node])
}

/// `x ∘ c → x` when `c` is the operation's identity and does not broadcast `x`.
fn mul_one(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, c) = (hit.var("?x"), hit.var("?c"));
    (splat(eg, c)? == 1.0 && same_type(eg, x, hit.class)).then_some(x)
}

fn add_zero(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, c) = (hit.var("?x"), hit.var("?c"));
    (splat(eg, c)? == 0.0 && same_type(eg, x, hit.class)).then_some(x)
}

/// Negates a float or integer constant (integers wrap, as `Sub` does).
fn negate(t: &Tensor) -> Option<Tensor> {
    let raw = t.raw()?;
    let bytes: Vec<u8> = match t.dtype {
        DType::F32 => raw
            .chunks_exact(4)
            .flat_map(|c| (-f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
            .collect(),
        DType::F64 => raw
            .chunks_exact(8)
            .flat_map(|c| (-f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).to_le_bytes())
            .collect(),
        DType::I64 => raw
            .chunks_exact(8)
            .flat_map(|c| {
                i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))
                    .wrapping_neg()
                    .to_le_bytes()
            })
            .collect(),
        DType::I32 => raw
            .chunks_exact(4)
            .flat_map(|c| {
                i32::from_le_bytes([c[0], c[1], c[2], c[3]])
                    .wrapping_neg()
                    .to_le_bytes()
            })
            .collect(),
        _ => return None,
    };
    Some(Tensor {
        dtype: t.dtype,
        shape: t.shape.clone(),
        data: kiln_tir::TensorData::Raw(bytes.into()),
    })
}

fn sub_const(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, c) = (hit.var("?x"), hit.var("?c"));
    let neg = negate(value(eg, c)?)?;
    let (.., node) = root(eg, hit, &[Some(x), Some(c)])?;
    let nc = add_constant(eg, neg);
    add(
        eg,
        hit.rule,
        Op::Add(Add {}),
        &[Some(x), Some(nc)],
        &[&node],
    )
}

fn div_pow2(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, c) = (hit.var("?x"), hit.var("?c"));
    let t = value(eg, c)?;
    if !matches!(t.dtype, DType::F32 | DType::F64) {
        return None;
    }
    let v = elements(t)?;
    // 1/c is exact, and x/c == x*(1/c), when c is a normal power of two whose reciprocal is
    // normal too.
    let pow2 = |x: f64| {
        x != 0.0 && x.is_finite() && (x.abs().log2().fract() == 0.0) && x.abs().log2().abs() < 126.0
    };
    if !v.iter().all(|&x| pow2(x)) {
        return None;
    }
    let recip: Vec<f64> = v.iter().map(|x| 1.0 / x).collect();
    let rt = match t.dtype {
        DType::F32 => Tensor::from_f32s(
            &t.shape,
            &recip.iter().map(|&x| x as f32).collect::<Vec<_>>(),
        ),
        _ => Tensor {
            dtype: DType::F64,
            shape: t.shape.clone(),
            data: kiln_tir::TensorData::Raw(
                recip
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>()
                    .into(),
            ),
        },
    };
    let (.., node) = root(eg, hit, &[Some(x), Some(c)])?;
    let rc = add_constant(eg, rt);
    add(
        eg,
        hit.rule,
        Op::Mul(Mul {}),
        &[Some(x), Some(rc)],
        &[&node],
    )
}

fn int_reassoc(eg: &mut Egraph, hit: &Hit<'_>) -> Option<Id> {
    let (x, a, b) = (hit.var("?x"), hit.var("?a"), hit.var("?b"));
    if !matches!(dtype(eg, hit.class)?, DType::I64 | DType::I32) {
        return None;
    }
    let (va, vb) = (value(eg, a)?.clone(), value(eg, b)?.clone());
    let ab = kiln_eval::eval_op(&Op::Mul(Mul {}), &[Some(&va), Some(&vb)], 1)
        .ok()?
        .pop()?;
    let (.., node) = root(eg, hit, &[None, Some(b)])?;
    let c = add_constant(eg, ab);
    add(eg, hit.rule, Op::Mul(Mul {}), &[Some(x), Some(c)], &[&node])
}
