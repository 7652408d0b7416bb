//! Everything else: random generators, EyeLike, losses, NonMaxSuppression, GridSample,
//! AffineGrid, string ops, ImageDecoder, TfIdfVectorizer.

use crate::dim::Dim;
use crate::dtype::DType;
use crate::op::{LossReduction, Multinomial, PixelFormat, StringNormalizer, TfIdfVectorizer};
use crate::types::TensorType;

use super::common::{Cx, Res, attr_err, known, positive, set, shape_err, tt, unify};

/// Checks a generated dtype is a float type.
fn float_out(dtype: DType) -> Res<DType> {
    set::FLOAT.check(0, dtype).map_err(|_| attr_err(format!("dtype {dtype} is not a float type")))
}

/// RandomNormal, RandomUniform: `shape` and `dtype` attributes, no inputs.
pub(super) fn random(cx: &mut Cx<'_, '_>, dtype: DType, shape: &[i64]) -> Res<Vec<TensorType>> {
    cx.arity(0, 0)?;
    let dims = shape.iter().map(|&d| known(d, "shape value")).collect::<Res<_>>()?;
    Ok(vec![tt(float_out(dtype)?, dims)])
}

/// RandomNormalLike, RandomUniformLike: the input's shape, `dtype` or the input's type.
pub(super) fn random_like(cx: &mut Cx<'_, '_>, dtype: Option<DType>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let x = cx.ty(0)?;
    Ok(vec![tt(float_out(dtype.unwrap_or(x.dtype))?, x.shape.clone())])
}

/// Bernoulli: the input's shape, `dtype` or the input's type.
pub(super) fn bernoulli(cx: &mut Cx<'_, '_>, dtype: Option<DType>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let d = cx.check(0, set::FLOAT)?;
    let out = dtype.unwrap_or(d);
    if !set::NUMERIC.contains(out) && out != DType::Bool {
        return Err(attr_err(format!("dtype {out} is not numeric or bool")));
    }
    Ok(vec![tt(out, cx.ty(0)?.shape.clone())])
}

/// Multinomial: `[batch, sample_size]` of `dtype` (i32 or i64).
pub(super) fn multinomial(cx: &mut Cx<'_, '_>, a: &Multinomial) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::FLOAT)?;
    cx.rank_is(0, 2, "input")?;
    set::INDEX.check(0, a.dtype).map_err(|_| attr_err(format!("dtype {} must be i32 or i64", a.dtype)))?;
    let n = positive(a.sample_size, "sample_size")?;
    Ok(vec![tt(a.dtype, vec![cx.ty(0)?.shape[0].clone(), Dim::Known(n)])])
}

/// EyeLike: a 2-D input's shape, `dtype` or the input's type.
pub(super) fn eye_like(cx: &mut Cx<'_, '_>, dtype: Option<DType>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.rank_is(0, 2, "input")?;
    let x = cx.ty(0)?;
    let out = dtype.unwrap_or(x.dtype);
    if !set::NUMERIC.contains(out) && out != DType::Bool {
        return Err(attr_err(format!("dtype {out} is not numeric or bool")));
    }
    Ok(vec![tt(out, x.shape.clone())])
}

/// Whether a loss keeps one value per sample (`none`) or reduces to a scalar.
fn per_sample(reduction: LossReduction) -> bool {
    reduction == LossReduction::None
}

/// Checks `[N, C, d...]` scores against `[N, d...]` targets and a `[C]` weight.
fn check_loss_shapes(cx: &Cx<'_, '_>) -> Res<()> {
    cx.rank_at_least(0, 2, "input")?;
    let (x, t) = (cx.ty(0)?, cx.ty(1)?);
    if t.rank() + 1 != x.rank() {
        return Err(shape_err(format!("target {t} must have one axis fewer than the input {x}")));
    }
    unify(&x.shape[0], &t.shape[0], "input and target differ in batch size")?;
    for (i, (a, b)) in x.shape[2..].iter().zip(&t.shape[1..]).enumerate() {
        unify(a, b, &format!("input and target differ on spatial axis {i}"))?;
    }
    if let Some(w) = cx.opt(2) {
        match &w.shape[..] {
            [c] => {
                unify(&x.shape[1], c, "weight length differs from the class count")?;
            }
            _ => return Err(shape_err(format!("weight must be 1-D, found {w}"))),
        }
    }
    Ok(())
}

/// NegativeLogLikelihoodLoss: the target's shape, or a scalar when reduced.
pub(super) fn nll_loss(cx: &mut Cx<'_, '_>, reduction: LossReduction) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check(1, set::INDEX)?;
    cx.same(0, 2)?;
    check_loss_shapes(cx)?;
    let shape = if per_sample(reduction) { cx.ty(1)?.shape.clone() } else { Vec::new() };
    Ok(vec![tt(d, shape)])
}

/// SoftmaxCrossEntropyLoss: the loss (like NegativeLogLikelihoodLoss) and the log
/// probabilities (the scores' shape).
pub(super) fn softmax_cross_entropy(cx: &mut Cx<'_, '_>, reduction: LossReduction) -> Res<Vec<TensorType>> {
    cx.arity(2, 3)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check(1, set::INDEX)?;
    cx.same(0, 2)?;
    check_loss_shapes(cx)?;
    let shape = if per_sample(reduction) { cx.ty(1)?.shape.clone() } else { Vec::new() };
    Ok(vec![tt(d, shape), cx.ty(0)?.clone()])
}

/// NonMaxSuppression: i64 `[selected, 3]`.
pub(super) fn non_max_suppression(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 5)?;
    cx.check(0, set::F32)?;
    cx.check(1, set::F32)?;
    cx.check_opt(2, set::I64)?;
    cx.check_opt(3, set::F32)?;
    cx.check_opt(4, set::F32)?;
    cx.rank_is(0, 3, "boxes")?;
    cx.rank_is(1, 3, "scores")?;
    let (boxes, scores) = (cx.ty(0)?, cx.ty(1)?);
    if matches!(boxes.shape[2], Dim::Known(n) if n != 4) {
        return Err(shape_err(format!("boxes must be [batch, boxes, 4], found {boxes}")));
    }
    unify(&boxes.shape[0], &scores.shape[0], "boxes and scores differ in batch size")?;
    unify(&boxes.shape[1], &scores.shape[2], "boxes and scores differ in box count")?;
    let selected = cx.fresh();
    Ok(vec![tt(DType::I64, vec![selected, Dim::Known(3)])])
}

/// GridSample: `[N, C, grid spatial...]`.
pub(super) fn grid_sample(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    cx.check(1, set::FLOAT)?;
    cx.rank_at_least(0, 3, "X")?;
    let (x, g) = (cx.ty(0)?, cx.ty(1)?);
    let r = x.rank();
    if g.rank() != r {
        return Err(shape_err(format!("grid {g} must have the input's rank {r}")));
    }
    unify(&g.shape[r - 1], &Dim::Known(r as u64 - 2), "grid's last dim differs from the number of spatial axes")?;
    let n = unify(&x.shape[0], &g.shape[0], "input and grid differ in batch size")?;
    let mut shape = vec![n, x.shape[1].clone()];
    shape.extend(g.shape[1..r - 1].iter().cloned());
    Ok(vec![tt(x.dtype, shape)])
}

/// AffineGrid: `[N, H, W, 2]` or `[N, D, H, W, 3]` from the size input.
pub(super) fn affine_grid(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(2, 2)?;
    let d = cx.check(0, set::FLOAT)?;
    cx.check(1, set::I64)?;
    cx.rank_is(0, 3, "theta")?;
    let theta = cx.ty(0)?;
    let len = match cx.vector_len(1, "size")? {
        Dim::Known(n @ (4 | 5)) => n as usize,
        n => return Err(shape_err(format!("size must hold 4 or 5 values, found {n}"))),
    };
    let spatial = len - 2;
    let (rows, cols) = (spatial as u64, spatial as u64 + 1);
    unify(&theta.shape[1], &Dim::Known(rows), "theta's rows differ from the spatial rank")?;
    unify(&theta.shape[2], &Dim::Known(cols), "theta's columns differ from the spatial rank plus one")?;
    let mut shape = Vec::with_capacity(len);
    match cx.ints(1) {
        Some(v) if v.len() != len => return Err(shape_err(format!("size holds {} values, its type says {len}", v.len()))),
        Some(v) => {
            shape.push(unify(&theta.shape[0], &known(v[0], "batch size")?, "theta and size differ in batch size")?);
            for &s in &v[2..] {
                shape.push(known(s, "size value")?);
            }
        }
        None => {
            shape.push(theta.shape[0].clone());
            shape.extend(cx.fresh_dims(spatial));
        }
    }
    shape.push(Dim::Known(rows));
    Ok(vec![tt(d, shape)])
}

/// StringNormalizer: `[C]` or `[1, C]`; stop words make the count unknown.
pub(super) fn string_normalizer(cx: &mut Cx<'_, '_>, a: &StringNormalizer) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::STRING)?;
    let x = cx.ty(0)?;
    let mut shape = x.shape.clone();
    match shape.len() {
        1 | 2 => {}
        _ => return Err(shape_err(format!("input must be [C] or [1, C], found {x}"))),
    }
    if !a.stopwords.is_empty() {
        let last = shape.len() - 1;
        shape[last] = cx.fresh();
    }
    Ok(vec![tt(DType::String, shape)])
}

/// StringSplit: the substrings (one more axis, of a fresh size) and their i64 counts.
pub(super) fn string_split(cx: &mut Cx<'_, '_>) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::STRING)?;
    let x = cx.ty(0)?;
    let mut parts = x.shape.clone();
    parts.push(cx.fresh());
    Ok(vec![tt(DType::String, parts), tt(DType::I64, x.shape.clone())])
}

/// ImageDecoder: u8 `[H, W, channels]` with fresh height and width.
pub(super) fn image_decoder(cx: &mut Cx<'_, '_>, pixel_format: PixelFormat) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    cx.check(0, set::INT8)?;
    cx.rank_is(0, 1, "encoded_stream")?;
    let channels = match pixel_format {
        PixelFormat::Rgb | PixelFormat::Bgr => 3,
        PixelFormat::Grayscale => 1,
    };
    let (h, w) = (cx.fresh(), cx.fresh());
    Ok(vec![tt(DType::U8, vec![h, w, Dim::Known(channels)])])
}

/// TfIdfVectorizer: f32 `[max(ngram_indexes) + 1]`, per row for 2-D input.
pub(super) fn tf_idf(cx: &mut Cx<'_, '_>, a: &TfIdfVectorizer) -> Res<Vec<TensorType>> {
    cx.arity(1, 1)?;
    let d = cx.ty(0)?.dtype;
    if !matches!(d, DType::String | DType::I32 | DType::I64) {
        return Err(super::InferError::DType { input: 0, found: d, expected: "string, i32 or i64".into() });
    }
    let x = cx.ty(0)?;
    let max = a.ngram_indexes.iter().copied().max().unwrap_or(-1);
    let width = Dim::Known(u64::try_from(max.saturating_add(1)).map_err(|_| attr_err("ngram_indexes must not be negative"))?);
    let shape = match &x.shape[..] {
        [_] => vec![width],
        [n, _] => vec![n.clone(), width],
        _ => return Err(shape_err(format!("input must be [C] or [N, C], found {x}"))),
    };
    Ok(vec![tt(DType::F32, shape)])
}
