//! Resize: nearest, linear and cubic interpolation with every coordinate transformation,
//! antialiasing, `exclude_outside`, `tf_crop_and_resize` extrapolation, `axes` and the
//! aspect-ratio policies, following the ONNX reference (`onnx/reference/ops/op_resize.py`).
//!
//! Interpolation is separable: along a resized axis `d` the source coordinate `x` comes from
//! the coordinate transformation, and tap `j` (an input index, clamped to the edge when read)
//! has weight `K((j − x)·s)`, where `K` is the triangle or the cubic kernel and `s` is
//! `min(scale, 1)` with antialiasing, else 1. The taps are the `2·⌈R/s⌉` integers nearest `x`
//! (`R` is the kernel's radius), which is exactly the reference's window. Weights are
//! renormalized to sum to one with antialiasing or `exclude_outside` (which zeroes taps outside
//! the input). Each resized axis's taps (input offsets and weights, computed in `f64`) are
//! tabulated once per output coordinate before the element loops.
//!
//! `f32` linear and cubic resizes then run as the reference does, one axis at a time, in
//! `f32` as onnxruntime computes: the last axis first, whose taps are gathers, then the
//! others, whose passes read whole rows at a time and run in vectors. Other types and modes
//! compute each output element directly in `f64`, as the tensor product of the per-axis taps.
//!
//! Axes whose size and scale do not change are copied. Scales and sizes may be run-time
//! inputs: the coordinate arithmetic then reads them, and a check confirms they produce the
//! static output shape.

use kiln_tir::op::{AspectPolicy, CoordTransform, NearestMode, Resize, ResizeMode};
use kiln_tir::{NodeId, Op};

use super::layout::store;
use super::{Body, and, clamp, convert, float_param, int_param, norm_axis, or, tensor_scalar};
use kiln_loops::builder::{linear, strides};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Lowers `n` if it is a Resize.
pub fn lower(cx: &mut Lowerer<'_>, n: NodeId) -> Result<bool, LowerError> {
    let Op::Resize(attrs) = &cx.node(n).op else { return Ok(false) };
    let attrs = attrs.clone();
    resize(cx, n, &attrs)?;
    Ok(true)
}

/// An `f64` constant.
fn f(v: f64) -> Expr {
    Expr::Const(Scalar::F64(v))
}

/// `a op b` on `f64` expressions.
fn fb(a: Expr, op: BinOp, b: Expr) -> Expr {
    a.bin(op, b)
}

/// How one axis is resampled.
enum Plan {
    /// Output coordinate = input coordinate.
    Copy,
    /// A resized axis.
    Resized(Resampled),
}

/// The loop-invariant values of one resized axis (constants or preamble variables).
struct Resampled {
    /// Input and output sizes.
    input: u64,
    output: u64,
    /// The scale factor (`f64`).
    scale: Expr,
    /// `scale · input` as a float, which the coordinate transformations use.
    width: Expr,
    /// For `tf_crop_and_resize`: `roi_end − roi_start` and `roi_start · (input − 1)`, in `f64`.
    roi: Option<(Expr, Expr)>,
    /// Number of taps and the kernel's scale `s` (linear and cubic).
    taps: u64,
    kscale: Expr,
}

/// A lower bound on a run-time scale that maps `input` to `output` elements (`floor(s·in)`
/// for scales, `floor(s·in + ½)` for sizes under an aspect-ratio policy), with a margin for
/// rounding; it sizes the antialiasing window.
fn scale_bound(policy_sizes: bool, input: u64, output: u64) -> f64 {
    let lo = if policy_sizes { (output as f64 - 0.5) / input as f64 } else { output as f64 / input as f64 };
    lo * (1.0 - 1e-9)
}

fn resize(cx: &mut Lowerer<'_>, n: NodeId, a: &Resize) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    let Some(y) = cx.output(n, 0)? else { return Ok(()) };
    let r = x.rank();
    if y.rank() != r {
        return Err(cx.unsupported(n, "invalid model: output rank"));
    }
    let (mode, ctm) = (a.mode, a.coordinate_transformation_mode);
    let radius = match mode {
        ResizeMode::Nearest if a.antialias != 0 => return Err(cx.unsupported(n, "antialias with nearest mode")),
        ResizeMode::Nearest => 0.0,
        ResizeMode::Linear => 1.0,
        ResizeMode::Cubic => 2.0,
        m => return Err(cx.unsupported(n, format!("mode `{}`", m.as_str()))),
    };
    let axes: Vec<usize> = if a.axes.is_empty() { (0..r).collect() } else { a.axes.iter().map(|&ax| norm_axis(cx, n, ax, r)).collect::<Result<_, _>>()? };
    if (1..axes.len()).any(|i| axes[..i].contains(&axes[i])) {
        return Err(cx.unsupported(n, "invalid model: repeated axis"));
    }
    let mut b = Body::new(cx, n);
    let present = |cx: &mut Lowerer<'_>, i: usize| -> Result<bool, LowerError> { Ok(cx.input(n, i)?.is_some_and(|o| o.numel() > 0)) };
    let scales = if present(cx, 2)? { float_param(cx, n, 2, &mut b)? } else { None };
    let sizes = if present(cx, 3)? { int_param(cx, n, 3, &mut b)? } else { None };
    let mut scale = vec![f(1.0); r];
    let mut bound = vec![1.0f64; r];
    let bad_len = |cx: &Lowerer<'_>| cx.unsupported(n, "invalid model: scales or sizes do not match the axes");
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(bad_len(cx));
            }
            for (j, &d) in axes.iter().enumerate() {
                let s = b.bind(ScalarType::F64, s[j].clone());
                let out = fb(s.clone(), BinOp::Mul, f(x.dims[d] as f64)).un(UnOp::Floor);
                b.check(cx, n, out.cmp(CmpOp::Eq, f(y.dims[d] as f64)), "scales do not match the output shape")?;
                bound[d] = scale_bound(false, x.dims[d], y.dims[d]);
                scale[d] = s;
            }
        }
        (None, Some(s)) => {
            if s.len() != axes.len() {
                return Err(bad_len(cx));
            }
            match a.keep_aspect_ratio_policy {
                AspectPolicy::Stretch => {
                    for (j, &d) in axes.iter().enumerate() {
                        b.check(cx, n, s[j].clone().cmp(CmpOp::Eq, Expr::idx(y.dims[d] as i64)), "sizes do not match the output shape")?;
                        scale[d] = f(y.dims[d] as f64 / x.dims[d] as f64);
                        bound[d] = y.dims[d] as f64 / x.dims[d] as f64;
                    }
                }
                policy => {
                    let op = if policy == AspectPolicy::NotLarger { BinOp::Min } else { BinOp::Max };
                    let ratios = axes.iter().enumerate().map(|(j, &d)| fb(s[j].clone().cast(ScalarType::F64), BinOp::Div, f(x.dims[d] as f64)));
                    let common = ratios.reduce(|p, q| p.bin(op, q)).unwrap_or_else(|| f(1.0));
                    let common = b.bind(ScalarType::F64, common);
                    for &d in &axes {
                        let out = fb(fb(common.clone(), BinOp::Mul, f(x.dims[d] as f64)), BinOp::Add, f(0.5)).un(UnOp::Floor);
                        b.check(cx, n, out.cmp(CmpOp::Eq, f(y.dims[d] as f64)), "sizes do not match the output shape")?;
                        scale[d] = common.clone();
                        bound[d] = scale_bound(true, x.dims[d], y.dims[d]);
                    }
                }
            }
        }
        _ => return Err(cx.unsupported(n, "invalid model: exactly one of scales and sizes must be given")),
    }
    if y.numel() == 0 {
        b.push(cx);
        return Ok(());
    }
    if x.numel() == 0 {
        return Err(cx.unsupported(n, "invalid model: resizing an empty input to a non-empty output"));
    }
    let roi = if ctm == CoordTransform::TfCropAndResize { Some(roi(cx, n, &axes, &x, &mut b)?) } else { None };
    let mut plans = Vec::with_capacity(r);
    for d in 0..r {
        let (input, output) = (x.dims[d], y.dims[d]);
        let Some(j) = axes.iter().position(|&ax| ax == d) else {
            if input != output {
                return Err(cx.unsupported(n, "invalid model: an axis not resized changes size"));
            }
            plans.push(Plan::Copy);
            continue;
        };
        let s = scale[d].clone();
        // A unit scale is the identity in every mode (the reference skips such axes too). A
        // run-time scale takes the general path, which computes the same.
        let unit = fb(s.clone(), BinOp::Sub, f(1.0)).un(UnOp::Abs).cmp(CmpOp::Le, f(1e-9));
        if input == output && roi.is_none() && super::fold(unit) == Expr::Const(Scalar::Bool(true)) {
            plans.push(Plan::Copy);
            continue;
        }
        let width = b.bind(ScalarType::F64, fb(s.clone(), BinOp::Mul, f(input as f64)));
        let (kscale, taps) = if a.antialias != 0 && radius > 0.0 {
            let ks = b.bind(ScalarType::F64, s.clone().min(f(1.0)));
            let lo = match super::fold(ks.clone()) {
                Expr::Const(Scalar::F64(v)) => v,
                _ => bound[d].min(1.0),
            };
            if lo.is_nan() || lo <= 0.0 {
                return Err(cx.unsupported(n, "invalid model: non-positive scale"));
            }
            let start = (-radius / lo).floor() + 1.0;
            let taps = 2.0 - 2.0 * start;
            if taps.is_nan() || taps > 4096.0 {
                return Err(cx.unsupported(n, "antialias footprint is too large"));
            }
            (ks, taps as u64)
        } else {
            (f(1.0), (2.0 * radius) as u64)
        };
        let roi = roi.as_ref().map(|rv| rv[j].clone());
        plans.push(Plan::Resized(Resampled { input, output, scale: s, width, roi, taps, kscale }));
    }
    let ty = y.ty();
    let ev = a.extrapolation_value as f64;
    let extrapolated = super::fold(if ty.is_float() { f(ev).cast(ty) } else { f(ev).un(UnOp::Round).cast(ty) });
    let xs = x.strides();
    let opts = Opts { mode, ctm, nearest: a.nearest_mode, cubic_a: a.cubic_coeff_a as f64, exclude: a.exclude_outside != 0, antialias: a.antialias != 0 };
    if let Some(order) = separable(&opts, &plans, &x, &y) {
        let mut dims = x.dims.clone();
        let mut src = x.buf;
        for (i, &d) in order.iter().enumerate() {
            let Plan::Resized(p) = &plans[d] else { continue };
            let t = table(cx, n, &mut b, &opts, p, d, strides(&dims)[d], ScalarType::F32);
            let mut out = dims.clone();
            out[d] = y.dims[d];
            let dst = if i + 1 == order.len() {
                y.buf
            } else {
                let name = format!("{}_pass{i}", cx.node(n).name);
                cx.program.add_buffer(Buffer { name, elem: x.elem, len: out.iter().product(), kind: BufferKind::Temp })
            };
            let stmts = pass(&mut b.k, (src, &dims), (dst, &out), d, &t);
            b.stmts.extend(stmts);
            (src, dims) = (dst, out);
        }
        b.push(cx);
        return Ok(());
    }
    let tables: Vec<Option<Table>> = plans
        .iter()
        .enumerate()
        .map(|(d, plan)| match plan {
            Plan::Copy => None,
            Plan::Resized(p) => Some(table(cx, n, &mut b, &opts, p, d, xs[d], ScalarType::F64)),
        })
        .collect();
    // A few taps per axis are read once per output row or column into `let`s, and their tensor
    // product is summed as one expression; an antialiasing footprint is looped over.
    let resized = tables.iter().flatten();
    let looped = resized.clone().any(|t| t.taps > 4) || resized.map(|t| t.taps).product::<u64>() > 64;
    let e = Element { x: &x, y: &y, ty, xs, ys: y.strides(), dims: y.dims.clone(), tables: &tables, looped, extrapolated };
    let nest = e.level(&mut b.k, 0, &mut Vec::new(), Expr::idx(0), &mut vec![Vec::new(); r], Expr::Const(Scalar::Bool(false)));
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}

/// One resized axis's taps for each output coordinate, in scratch buffers: each tap's input
/// offset (its index clamped to the edge, times the axis's stride) and weight (renormalized
/// where the mode says; none for nearest), and with `tf_crop_and_resize` whether the
/// coordinate falls outside the input.
struct Table {
    taps: u64,
    /// The largest offset, to which reads are clamped again (the verifier sees a load).
    max_offset: i64,
    offset: BufId,
    weight: Option<BufId>,
    outside: Option<BufId>,
}

/// Computes axis `d`'s [`Table`] ahead of the element loops, its weights (computed in `f64`)
/// stored as `weight_ty`.
#[allow(clippy::too_many_arguments)]
fn table(cx: &mut Lowerer<'_>, n: NodeId, b: &mut Body, o: &Opts, p: &Resampled, d: usize, stride: i64, weight_ty: ScalarType) -> Table {
    let taps = if o.mode == ResizeMode::Nearest { 1 } else { p.taps };
    let node = cx.node(n).name.clone();
    let mut temp = |what: &str, elem: ScalarType, len: u64| {
        cx.program.add_buffer(Buffer { name: format!("{node}_{what}{d}"), elem: ElemType::Scalar(elem), len, kind: BufferKind::Temp })
    };
    let offset = temp("offset", ScalarType::I64, p.output * taps);
    let weights = (o.mode != ResizeMode::Nearest).then(|| temp("weight", weight_ty, p.output * taps));
    let outside = p.roi.is_some().then(|| temp("outside", ScalarType::Bool, p.output));
    let last = p.input as i64 - 1;
    b.nest(&[p.output], |k, i| {
        let at = i[0].clone();
        let mut s = Vec::new();
        let xo = let_(k, &mut s, ScalarType::F64, source_coord(o, p, at.clone().cast(ScalarType::F64)));
        if let Some(buf) = outside {
            let off = or(xo.clone().cmp(CmpOp::Lt, f(0.0)), xo.clone().cmp(CmpOp::Gt, f(last as f64)));
            s.push(Stmt::Store { buf, index: at.clone(), value: off });
        }
        let Some(weights) = weights else {
            let j = nearest(o.nearest, xo).cast(ScalarType::I64);
            s.push(Stmt::Store { buf: offset, index: at, value: clamp(j, Expr::idx(0), Expr::idx(last)) * stride });
            return s;
        };
        let first = let_(k, &mut s, ScalarType::I64, xo.clone().un(UnOp::Ceil).cast(ScalarType::I64) - (taps / 2) as i64);
        let tap = |k: &mut Kernel, s: &mut Vec<Stmt>, t: &Expr| {
            let j = let_(k, s, ScalarType::I64, first.clone() + t.clone());
            (j.clone(), weight(k, s, o, p, &xo, &j))
        };
        // With antialiasing or `exclude_outside`, the weights are divided by their sum.
        let total = if o.exclude || o.antialias {
            let sum = k.var(ScalarType::F64);
            s.push(Stmt::Local(sum, f(0.0)));
            let lp = k.nest(&[taps], |k, t| {
                let mut s = Vec::new();
                let (_, w) = tap(k, &mut s, &t[0]);
                s.push(Stmt::Assign(sum, fb(Expr::Var(sum), BinOp::Add, w)));
                s
            });
            s.extend(lp);
            let total = Expr::Var(sum).cmp(CmpOp::Eq, f(0.0)).select(f(1.0), Expr::Var(sum));
            Some(let_(k, &mut s, ScalarType::F64, total))
        } else {
            None
        };
        let lp = k.nest(&[taps], |k, t| {
            let mut s = Vec::new();
            let (j, mut w) = tap(k, &mut s, &t[0]);
            if let Some(total) = &total {
                w = fb(w, BinOp::Div, total.clone());
            }
            let index = at.clone() * taps as i64 + t[0].clone();
            s.push(Stmt::Store { buf: offset, index: index.clone(), value: clamp(j, Expr::idx(0), Expr::idx(last)) * stride });
            s.push(Stmt::Store { buf: weights, index, value: super::fold(w.cast(weight_ty)) });
            s
        });
        s.extend(lp);
        s
    });
    Table { taps, max_offset: last * stride, offset, weight: weights, outside }
}

/// The order in which to resample the axes one at a time, for nearest resizes (copies, of any
/// type) and `f32` linear and cubic ones (not `tf_crop_and_resize`, nor wide antialiasing
/// footprints): the last axis first, where the taps are gathers, then the others inward out,
/// whose passes read whole rows and run in vectors. `None` keeps the one-pass `f64` form, which
/// other types and modes take.
fn separable(o: &Opts, plans: &[Plan], x: &Operand, y: &Operand) -> Option<Vec<usize>> {
    let ty = y.ty();
    let copies = o.mode == ResizeMode::Nearest;
    if o.ctm == CoordTransform::TfCropAndResize || !(copies || (ty == ScalarType::F32 && x.ty() == ScalarType::F32)) {
        return None;
    }
    let resized: Vec<usize> = (0..plans.len()).rev().filter(|&d| matches!(&plans[d], Plan::Resized(_))).collect();
    let narrow = resized.iter().all(|&d| matches!(&plans[d], Plan::Resized(p) if p.taps <= 16));
    // No pass may be larger than both ends (one axis shrunk far, another grown far): its
    // intermediate would cost more than the one-pass form saves.
    let mut dims = x.dims.clone();
    let bound = x.numel().max(y.numel());
    let small = resized.iter().all(|&d| {
        if let Plan::Resized(p) = &plans[d] {
            dims[d] = p.output;
        }
        dims.iter().try_fold(1u64, |acc, &v| acc.checked_mul(v)).is_some_and(|len| len <= bound)
    });
    (narrow && small && !resized.is_empty()).then_some(resized)
}

/// One pass of a separable resize: `dst` (of shape `out`) from `src` (of shape `dims`, equal
/// but along axis `d`), each element the `f32` sum of `t`'s weighted taps along `d`, or with
/// nearest (no weights) a copy of its one tap.
fn pass(k: &mut Kernel, (src, dims): (BufId, &[u64]), (dst, out): (BufId, &[u64]), d: usize, t: &Table) -> Vec<Stmt> {
    let (is, os) = (strides(dims), strides(out));
    // The taps are read once per coordinate along `d`, outside the loops of the axes inside it.
    k.nest(&out[..=d], |k, outer| {
        let mut s = Vec::new();
        let taps: Vec<Tap> = (0..t.taps as i64)
            .map(|j| {
                let at = outer[d].clone() * t.taps as i64 + j;
                let offset = let_(k, &mut s, ScalarType::I64, clamp(Expr::load(t.offset, at.clone()), Expr::idx(0), Expr::idx(t.max_offset)));
                (offset, t.weight.map(|w| let_(k, &mut s, ScalarType::F32, Expr::load(w, at))))
            })
            .collect();
        s.extend(k.nest(&out[d + 1..], |_, inner| {
            let o: Vec<Expr> = outer.iter().chain(inner).cloned().collect();
            let base = o.iter().enumerate().filter(|&(e, _)| e != d).fold(Expr::idx(0), |acc, (e, i)| acc + i.clone() * is[e]);
            let value = match taps.as_slice() {
                [(offset, None)] => Expr::load(src, base + offset.clone()),
                _ => taps.iter().fold(Expr::float(ScalarType::F32, 0.0), |acc, (offset, w)| {
                    acc + w.clone().unwrap_or_else(|| Expr::float(ScalarType::F32, 1.0)) * Expr::load(src, base.clone() + offset.clone())
                }),
            };
            vec![Stmt::Store { buf: dst, index: linear(&o, &os), value }]
        }));
        s
    })
}

/// The element loops: one per output axis, each reading its axis's taps.
struct Element<'a> {
    x: &'a Operand,
    y: &'a Operand,
    ty: ScalarType,
    xs: Vec<i64>,
    ys: Vec<i64>,
    dims: Vec<u64>,
    tables: &'a [Option<Table>],
    /// Whether the taps are looped over in the innermost body rather than read per axis.
    looped: bool,
    extrapolated: Expr,
}

/// One tap read from a table: the input offset and the weight (none for nearest).
type Tap = (Expr, Option<Expr>);

impl Element<'_> {
    /// The loop over output axis `d` and those inside it, given the outer axes' indices, the
    /// input offset of the copied axes so far, each outer resized axis's taps, and whether an
    /// outer coordinate is outside the input.
    fn level(&self, k: &mut Kernel, d: usize, o: &mut Vec<Expr>, src: Expr, taps: &mut Vec<Vec<Tap>>, outside: Expr) -> Vec<Stmt> {
        if d == self.dims.len() {
            return self.element(k, o, src, taps, outside);
        }
        k.nest(&[self.dims[d]], |k, i| {
            let od = i[0].clone();
            let mut s = Vec::new();
            let (mut src, mut outside) = (src, outside);
            match &self.tables[d] {
                None => src = src + od.clone() * self.xs[d],
                Some(t) => {
                    if let Some(buf) = t.outside {
                        outside = let_(k, &mut s, ScalarType::Bool, or(outside, Expr::load(buf, od.clone())));
                    }
                    if !self.looped {
                        taps[d] = (0..t.taps as i64)
                            .map(|j| {
                                let at = od.clone() * t.taps as i64 + j;
                                let offset = let_(k, &mut s, ScalarType::I64, clamp(Expr::load(t.offset, at.clone()), Expr::idx(0), Expr::idx(t.max_offset)));
                                (offset, t.weight.map(|w| let_(k, &mut s, ScalarType::F64, Expr::load(w, at))))
                            })
                            .collect();
                    }
                }
            }
            o.push(od);
            s.extend(self.level(k, d + 1, o, src, taps, outside));
            o.pop();
            s
        })
    }

    /// One output element: `Σ Π w · X[taps]` over the tensor product of every resized axis's
    /// taps (outer axes first, as the reference sums), or the nearest input element.
    fn element(&self, k: &mut Kernel, o: &[Expr], src: Expr, taps: &[Vec<Tap>], outside: Expr) -> Vec<Stmt> {
        let at = linear(o, &self.ys);
        let read = |src: Expr| convert(Expr::load(self.x.buf, src), self.x.ty(), ScalarType::F64);
        let round = |v: Expr| if self.ty.is_float() { v.cast(self.ty) } else { v.un(UnOp::Round).cast(self.ty) };
        let body = if self.looped {
            let acc = k.var(ScalarType::F64);
            let mut s = vec![Stmt::Local(acc, f(0.0))];
            s.extend(self.loop_taps(k, o, 0, f(1.0), src, acc));
            s.push(store(self.y, at.clone(), round(Expr::Var(acc))));
            s
        } else {
            // The tensor product, outer axes first; a weightless tap is nearest's one.
            let mut terms: Vec<Tap> = vec![(src, None)];
            for axis in taps.iter().filter(|t| !t.is_empty()) {
                terms = terms
                    .iter()
                    .flat_map(|(src, w)| {
                        axis.iter().map(move |(offset, wj)| {
                            let w = match (w, wj) {
                                (Some(w), Some(wj)) => Some(fb(w.clone(), BinOp::Mul, wj.clone())),
                                (None, wj) => wj.clone(),
                                (w, None) => w.clone(),
                            };
                            (src.clone() + offset.clone(), w)
                        })
                    })
                    .collect();
            }
            let value = match terms.as_slice() {
                [(src, None)] => Expr::load(self.x.buf, src.clone()),
                _ => round(terms.into_iter().fold(f(0.0), |acc, (src, w)| fb(acc, BinOp::Add, fb(w.unwrap_or_else(|| f(1.0)), BinOp::Mul, read(src))))),
            };
            vec![store(self.y, at.clone(), value)]
        };
        match super::fold(outside) {
            Expr::Const(Scalar::Bool(false)) => body,
            cond => vec![Stmt::If { cond, then: vec![store(self.y, at, self.extrapolated.clone())], otherwise: body }],
        }
    }

    /// The tap loops of the resized axes from `d` inward, with the weight product and input
    /// offset so far, adding each term to `acc`.
    fn loop_taps(&self, k: &mut Kernel, o: &[Expr], d: usize, w: Expr, src: Expr, acc: Var) -> Vec<Stmt> {
        let Some(t) = self.tables.get(d) else {
            let v = fb(w, BinOp::Mul, convert(Expr::load(self.x.buf, src), self.x.ty(), ScalarType::F64));
            return vec![Stmt::Assign(acc, fb(Expr::Var(acc), BinOp::Add, v))];
        };
        let Some(t) = t else { return self.loop_taps(k, o, d + 1, w, src, acc) };
        k.nest(&[t.taps], |k, j| {
            let mut s = Vec::new();
            let at = o[d].clone() * t.taps as i64 + j[0].clone();
            let offset = clamp(Expr::load(t.offset, at.clone()), Expr::idx(0), Expr::idx(t.max_offset));
            let w = match t.weight {
                Some(buf) => let_(k, &mut s, ScalarType::F64, super::fold(fb(w, BinOp::Mul, Expr::load(buf, at)))),
                None => w,
            };
            s.extend(self.loop_taps(k, o, d + 1, w, src + offset, acc));
            s
        })
    }
}

/// The attributes the element code needs.
struct Opts {
    mode: ResizeMode,
    ctm: CoordTransform,
    nearest: NearestMode,
    cubic_a: f64,
    exclude: bool,
    antialias: bool,
}

/// Binds `e` to a fresh `let`.
fn let_(k: &mut Kernel, stmts: &mut Vec<Stmt>, ty: ScalarType, e: Expr) -> Expr {
    let v = k.var(ty);
    stmts.push(Stmt::Let(v, e));
    Expr::Var(v)
}

/// The roi as per-axis (`end − start`, `start · (input − 1)`) pairs in `f64`, computed in the
/// roi's own float type as numpy does.
fn roi(cx: &mut Lowerer<'_>, n: NodeId, axes: &[usize], x: &Operand, b: &mut Body) -> Result<Vec<(Expr, Expr)>, LowerError> {
    let Some(op) = cx.input(n, 1)? else { return Err(cx.unsupported(n, "invalid model: tf_crop_and_resize needs a roi")) };
    let k = axes.len();
    if op.numel() != 2 * k as u64 {
        return Err(cx.unsupported(n, "invalid model: roi length"));
    }
    let rty = if op.ty() == ScalarType::F64 { ScalarType::F64 } else { ScalarType::F32 };
    let vals: Vec<Expr> = match cx.const_input(n, 1) {
        Some(t) => (0..2 * k).map(|i| tensor_scalar(t, i, rty)).collect::<Option<_>>().ok_or_else(|| cx.unsupported(n, "roi of unsupported type"))?,
        None => (0..2 * k).map(|i| b.bind(rty, convert(Expr::load(op.buf, Expr::idx(i as i64)), op.ty(), rty))).collect(),
    };
    Ok(axes
        .iter()
        .enumerate()
        .map(|(j, &d)| {
            let (s, e) = (vals[j].clone(), vals[k + j].clone());
            let span = b.bind(ScalarType::F64, convert(e.bin(BinOp::Sub, s.clone()), rty, ScalarType::F64));
            let off = b.bind(ScalarType::F64, convert(s.bin(BinOp::Mul, Expr::float(rty, x.dims[d] as f64 - 1.0)), rty, ScalarType::F64));
            (span, off)
        })
        .collect())
}

/// The source coordinate of output coordinate `yc` (an `f64`) along a resized axis.
fn source_coord(o: &Opts, p: &Resampled, yc: Expr) -> Expr {
    let input = p.input as f64;
    let half = fb(fb(fb(yc.clone(), BinOp::Add, f(0.5)), BinOp::Div, p.scale.clone()), BinOp::Sub, f(0.5));
    let width_is_one = p.width.clone().cmp(CmpOp::Eq, f(1.0));
    match o.ctm {
        CoordTransform::AlignCorners => {
            width_is_one.select(f(0.0), fb(fb(yc, BinOp::Mul, f(input - 1.0)), BinOp::Div, fb(p.width.clone(), BinOp::Sub, f(1.0))))
        }
        CoordTransform::Asymmetric => fb(yc, BinOp::Div, p.scale.clone()),
        CoordTransform::TfCropAndResize => {
            let (span, off) = p.roi.clone().unwrap_or((f(1.0), f(0.0)));
            let centre = fb(fb(span.clone(), BinOp::Mul, f(input - 1.0)), BinOp::Div, f(2.0));
            let along = fb(fb(fb(yc, BinOp::Mul, span), BinOp::Mul, f(input - 1.0)), BinOp::Div, fb(p.width.clone(), BinOp::Sub, f(1.0)));
            fb(width_is_one.select(centre, along), BinOp::Add, off)
        }
        CoordTransform::PytorchHalfPixel => width_is_one.select(f(-0.5), half),
        CoordTransform::HalfPixel => half,
        CoordTransform::HalfPixelSymmetric => {
            let adjustment = fb(f(p.output as f64), BinOp::Div, p.width.clone());
            let offset = fb(f(input / 2.0), BinOp::Mul, fb(f(1.0), BinOp::Sub, adjustment));
            fb(offset, BinOp::Add, half)
        }
    }
}

/// The nearest input coordinate to `x` (an `f64`, as an `f64`) under `mode`.
fn nearest(mode: NearestMode, x: Expr) -> Expr {
    let fl = x.clone().un(UnOp::Floor);
    let ratio = fb(x.clone(), BinOp::Sub, fl.clone());
    let up = fb(fl.clone(), BinOp::Add, f(1.0));
    match mode {
        NearestMode::Floor => fl,
        NearestMode::Ceil => x.un(UnOp::Ceil),
        NearestMode::RoundPreferFloor => ratio.cmp(CmpOp::Gt, f(0.5)).select(up, fl),
        NearestMode::RoundPreferCeil => ratio.cmp(CmpOp::Ge, f(0.5)).select(up, fl),
    }
}

/// The interpolation kernel at distance `t ≥ 0` (a variable).
fn kernel(o: &Opts, t: Expr) -> Expr {
    match o.mode {
        ResizeMode::Cubic => {
            let a = o.cubic_a;
            let near = fb(fb(fb(fb(f(a + 2.0), BinOp::Mul, t.clone()), BinOp::Sub, f(a + 3.0)), BinOp::Mul, fb(t.clone(), BinOp::Mul, t.clone())), BinOp::Add, f(1.0));
            let far = fb(fb(fb(fb(fb(f(a), BinOp::Mul, t.clone()), BinOp::Sub, f(5.0 * a)), BinOp::Mul, t.clone()), BinOp::Add, f(8.0 * a)), BinOp::Mul, t.clone());
            let far = fb(far, BinOp::Sub, f(4.0 * a));
            t.clone().cmp(CmpOp::Le, f(1.0)).select(near, t.cmp(CmpOp::Lt, f(2.0)).select(far, f(0.0)))
        }
        _ => fb(f(1.0), BinOp::Sub, t).max(f(0.0)),
    }
}

/// The weight of tap `j` (an `i64`) of a resized axis, before normalization.
fn weight(k: &mut Kernel, stmts: &mut Vec<Stmt>, o: &Opts, p: &Resampled, x: &Expr, j: &Expr) -> Expr {
    let dist = fb(fb(j.clone().cast(ScalarType::F64), BinOp::Sub, x.clone()), BinOp::Mul, p.kscale.clone()).un(UnOp::Abs);
    let t = let_(k, stmts, ScalarType::F64, super::fold(dist));
    let w = kernel(o, t);
    if o.exclude { and(j.clone().cmp(CmpOp::Ge, Expr::idx(0)), j.clone().cmp(CmpOp::Lt, Expr::idx(p.input as i64))).select(w, f(0.0)) } else { w }
}
