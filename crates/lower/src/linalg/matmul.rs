//! MatMul (numpy semantics: 1-D promotion, batch dims broadcast), kiln's FusedMatMul and Gemm.
//!
//! FusedMatMul is MatMul with `B` optionally transposed in its last two axes, a bias over the
//! output's last axis and the [`Epilogue`]. In `f32`, one product (a shared `B`, `A`'s batches
//! stacked) is one `sgemm_fused` call, which applies the bias (per column), the residual addend
//! and the activation to each block of the product as the runtime finishes it; batched products
//! (and a bias along rows, when `B` is a vector) are `sgemm` calls writing the bare product
//! (`beta = 0`) and then one call of the runtime's `epilogue` over the output viewed as
//! `[rows, last axis]`. Other float types add the bias and apply the epilogue in each element's
//! store. Gemm's `C` is written into the output first and accumulated with `beta`.

use kiln_tir::NodeId;
use kiln_tir::op::{FusedMatMul, Gemm};

use super::{BiasIndex, Epilogue, Sgemm, accumulate, is_f32, zero};
use kiln_loops::builder::{broadcast_index, linear, strides};
use kiln_loops::ir::*;
use crate::elementwise::{ElemResult, Scope};
use crate::{LowerError, Lowerer, Operand};

/// The shape of a (batched) matrix product `[..., m, k] · [..., k, n]`.
pub(super) struct MatShape {
    /// `A`'s batch dims (empty for a 1-D or 2-D `A`).
    pub a_batch: Vec<u64>,
    /// `B`'s batch dims.
    pub b_batch: Vec<u64>,
    /// The broadcast batch dims of the result.
    pub batch: Vec<u64>,
    /// Rows of the product.
    pub m: u64,
    /// The contracted extent.
    pub k: u64,
    /// Columns of the product.
    pub n: u64,
    /// `B` is stored transposed in its last two axes (`[..., n, k]`).
    pub trans_b: bool,
}

impl MatShape {
    /// The product shape of `a` and `b` (1-D operands are promoted as numpy does), or why
    /// they do not multiply.
    pub fn new(a: &[u64], b: &[u64]) -> Result<MatShape, String> {
        let (a_batch, m, ka) = match a {
            [] => return Err("a scalar operand".into()),
            [k] => (Vec::new(), 1, *k),
            [batch @ .., m, k] => (batch.to_vec(), *m, *k),
        };
        let (b_batch, kb, n) = match b {
            [] => return Err("a scalar operand".into()),
            [k] => (Vec::new(), *k, 1),
            [batch @ .., k, n] => (batch.to_vec(), *k, *n),
        };
        if ka != kb {
            return Err(format!("inner dimensions differ ({ka} and {kb})"));
        }
        let rank = a_batch.len().max(b_batch.len());
        let dim = |v: &[u64], i: usize| {
            if i + v.len() >= rank {
                v[i + v.len() - rank]
            } else {
                1
            }
        };
        let mut batch = Vec::with_capacity(rank);
        for i in 0..rank {
            let (x, y) = (dim(&a_batch, i), dim(&b_batch, i));
            batch.push(match (x, y) {
                _ if x == y => x,
                (1, _) => y,
                (_, 1) => x,
                _ => return Err(format!("batch dimensions {x} and {y} do not broadcast")),
            });
        }
        Ok(MatShape {
            a_batch,
            b_batch,
            batch,
            m,
            k: ka,
            n,
            trans_b: false,
        })
    }

    /// The shape of `a · bᵀ`, `b` transposed in its last two axes (it needs two).
    pub fn new_trans_b(a: &[u64], b: &[u64]) -> Result<MatShape, String> {
        let mut bt = b.to_vec();
        let r = bt.len();
        if r < 2 {
            return Err(format!("transB needs B of rank 2 or more, B is {b:?}"));
        }
        bt.swap(r - 2, r - 1);
        Ok(MatShape {
            trans_b: true,
            ..MatShape::new(a, &bt)?
        })
    }

    /// The row stride of `B` as stored.
    pub fn ldb(&self) -> u64 {
        if self.trans_b { self.k } else { self.n }
    }

    /// Element count of the result.
    pub fn numel(&self) -> u64 {
        self.batch.iter().product::<u64>() * self.m * self.n
    }

    /// Offset of the `A` matrix for batch index `bi`.
    pub fn a_offset(&self, bi: &[Expr]) -> Expr {
        broadcast_index(bi, &self.a_batch) * (self.m * self.k) as i64
    }

    /// Offset of the `B` matrix for batch index `bi`.
    pub fn b_offset(&self, bi: &[Expr]) -> Expr {
        broadcast_index(bi, &self.b_batch) * (self.k * self.n) as i64
    }

    /// Offset of the result matrix for batch index `bi`.
    pub fn y_offset(&self, bi: &[Expr]) -> Expr {
        linear(bi, &strides(&self.batch)) * (self.m * self.n) as i64
    }
}

/// Loads of one operand element: gets the flat element index into the operand and the result
/// index `(batch..., i, j)`.
pub(super) type LoadFn<'a> = &'a dyn Fn(Expr, &[Expr]) -> Expr;

/// The stored result of a product element: gets the sum, the result index `(batch..., i, j)`
/// and the element's flat index; statements it needs go into the scope.
pub(super) type FinishFn<'a> = &'a dyn Fn(&mut Scope<'_>, Expr, &[Expr], &Expr) -> ElemResult;

/// The sum itself as the stored result.
pub(super) fn plain(_: &mut Scope<'_>, acc: Expr, _: &[Expr], _: &Expr) -> ElemResult {
    Ok(acc)
}

/// A batched matrix product as a plain loop nest: `y[b, i, j] = finish(Σ_p a(b, i, p)·b(b, p, j), (b, i, j))`;
/// an `Err` is `finish`'s.
pub(super) fn matmul_nest(
    k: &mut Kernel,
    s: &MatShape,
    acc_ty: ScalarType,
    load_a: LoadFn<'_>,
    load_b: LoadFn<'_>,
    y: BufId,
    finish: FinishFn<'_>,
) -> Result<Vec<Stmt>, String> {
    let mut dims = s.batch.clone();
    dims.extend([s.m, s.n]);
    let nb = s.batch.len();
    // Element (p, j) of op(B) is at p·n + j, or at j·k + p when B is stored transposed.
    let (b_col, b_step) = if s.trans_b {
        (s.k as i64, 1)
    } else {
        (1, s.n as i64)
    };
    let mut result = Ok(());
    let stmts = k.nest(&dims, |k, idx| {
        let (bi, i, j) = (&idx[..nb], &idx[nb], &idx[nb + 1]);
        let (a0, b0) = (
            s.a_offset(bi) + i.clone() * s.k as i64,
            s.b_offset(bi) + j.clone() * b_col,
        );
        let (acc, body) = accumulate(k, acc_ty, zero(acc_ty), &[s.k], |_, p| {
            let x = load_a(a0.clone() + p[0].clone(), idx);
            let w = load_b(b0.clone() + p[0].clone() * b_step, idx);
            x * w
        });
        let at = s.y_offset(bi) + i.clone() * s.n as i64 + j.clone();
        let mut sc = Scope { k, stmts: body };
        match finish(&mut sc, Expr::Var(acc), idx, &at) {
            Ok(value) => sc.stmts.push(Stmt::Store {
                buf: y,
                index: at,
                value,
            }),
            Err(why) => result = Err(why),
        }
        sc.stmts
    });
    result.map(|()| stmts)
}

/// MatMul.
pub(super) fn matmul(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    matmul_kernel(cx, n, None)
}

/// FusedMatMul: `act(A · op(B) + bias + Z)`.
pub(super) fn fused_matmul(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    f: &FusedMatMul,
) -> Result<(), LowerError> {
    matmul_kernel(cx, n, Some(f))
}

/// MatMul, or FusedMatMul when `fused` gives its attributes.
fn matmul_kernel(
    cx: &mut Lowerer<'_>,
    n: NodeId,
    fused: Option<&FusedMatMul>,
) -> Result<(), LowerError> {
    let (a, b, y) = (
        cx.required(n, 0)?,
        cx.required(n, 1)?,
        cx.required_output(n, 0)?,
    );
    let shape = if fused.is_some_and(|f| f.transB != 0) {
        MatShape::new_trans_b(&a.dims, &b.dims)
    } else {
        MatShape::new(&a.dims, &b.dims)
    };
    let s = shape.map_err(|e| cx.unsupported(n, e))?;
    if s.numel() != y.numel() || a.elem != b.elem || a.elem != y.elem {
        return Err(cx.unsupported(n, "operand types do not match the product"));
    }
    let (bias, epilogue) = match fused {
        Some(f) => {
            if !y.ty().is_float() {
                return Err(cx.unsupported(n, "FusedMatMul is defined on floats"));
            }
            let z = cx.input(n, 3)?;
            (
                cx.input(n, 2)?,
                Epilogue::new(z.as_ref(), f.activation, f.alpha, f.beta, &y)
                    .map_err(|e| cx.unsupported(n, e))?,
            )
        }
        None => (None, Epilogue::NONE),
    };
    // The bias runs along the output's last axis: columns, or rows when B is a vector.
    let cols = y.dims.last().copied().unwrap_or(1);
    if bias
        .as_ref()
        .is_some_and(|c| c.dims != [cols] || c.elem != y.elem)
    {
        return Err(cx.unsupported(n, "the bias must be a vector over the output's last axis"));
    }
    let mut k = cx.kernel(n);
    if is_f32(&a) {
        let b_batches: u64 = s.b_batch.iter().product();
        let a_batches: u64 = s.a_batch.iter().product();
        let batches: u64 = s.batch.iter().product();
        let product = |s: &MatShape, rows: u64, ao: Expr, bo: Expr, yo: Expr| {
            Sgemm {
                a: (a.buf, ao),
                b: (b.buf, bo),
                c: (y.buf, yo),
                m: rows,
                n: s.n,
                k: s.k,
                lda: s.k,
                ldb: s.ldb(),
                ldc: s.n,
                trans_a: false,
                trans_b: s.trans_b,
                alpha: 1.0,
                beta: 0.0,
            }
        };
        let rows = y.numel().checked_div(cols).unwrap_or(0);
        let bias = bias.as_ref().map(|c| (c.buf, BiasIndex::PerColumn));
        let has_epilogue = bias.is_some() || !epilogue.is_empty();
        if b_batches == 1 && a_batches == batches {
            // One shared right-hand matrix: the batches of A stack into one tall product.
            let g = product(&s, batches * s.m, Expr::idx(0), Expr::idx(0), Expr::idx(0));
            // Its epilogue runs on each block of the product while it is in cache, unless the
            // bias runs along rows (B a vector) or the addend is the output itself.
            if has_epilogue && cols == s.n && epilogue.z != Some(y.buf) {
                k.body.push(epilogue.fused_sgemm(g, bias));
            } else {
                k.body.push(g.call());
                k.body.extend(epilogue.call(&y, bias, rows, cols));
            }
        } else {
            let calls = k.nest(&s.batch, |_, bi| {
                vec![product(&s, s.m, s.a_offset(bi), s.b_offset(bi), s.y_offset(bi)).call()]
            });
            k.body.extend(calls);
            k.body.extend(epilogue.call(&y, bias, rows, cols));
        }
    } else {
        let (ab, bb, ty) = (a.buf, b.buf, y.ty());
        // The bias index is the output's last index: i when B is a vector (then n = 1), else j.
        let last = if b.rank() == 1 { 2 } else { 1 };
        let bias_buf = bias.as_ref().map(|c| c.buf);
        let finish = |sc: &mut Scope<'_>, acc: Expr, idx: &[Expr], at: &Expr| {
            let v = match bias_buf {
                Some(c) => acc + Expr::load(c, idx[idx.len() - last].clone()),
                None => acc,
            };
            epilogue.apply(sc, v, at, ty)
        };
        k.body = matmul_nest(
            &mut k,
            &s,
            a.ty(),
            &|i, _| Expr::load(ab, i),
            &|i, _| Expr::load(bb, i),
            y.buf,
            &finish,
        )
        .map_err(|e| cx.unsupported(n, e))?;
    }
    cx.push(k);
    Ok(())
}

/// Gemm: `Y = alpha·op(A)·op(B) + beta·C`, `C` broadcast to `[M, N]`.
pub(super) fn gemm(cx: &mut Lowerer<'_>, n: NodeId, attrs: &Gemm) -> Result<(), LowerError> {
    let (a, b, y) = (
        cx.required(n, 0)?,
        cx.required(n, 1)?,
        cx.required_output(n, 0)?,
    );
    let c = cx.input(n, 2)?.filter(|_| attrs.beta != 0.0);
    let (ta, tb) = (attrs.transA != 0, attrs.transB != 0);
    let (Ok([a0, a1]), Ok([b0, b1])) = (
        <[u64; 2]>::try_from(&a.dims[..]),
        <[u64; 2]>::try_from(&b.dims[..]),
    ) else {
        return Err(cx.unsupported(n, "A and B must be matrices"));
    };
    let (m, ka) = if ta { (a1, a0) } else { (a0, a1) };
    let (kb, nn) = if tb { (b1, b0) } else { (b0, b1) };
    if ka != kb || y.dims != [m, nn] || a.elem != b.elem || a.elem != y.elem {
        return Err(cx.unsupported(n, "operand shapes or types do not match"));
    }
    if c.as_ref().is_some_and(|c| {
        c.rank() > 2
            || c.elem != y.elem
            || c.dims
                .iter()
                .rev()
                .zip([nn, m])
                .any(|(&d, want)| d != 1 && d != want)
    }) {
        return Err(cx.unsupported(n, "C does not broadcast to [M, N]"));
    }
    let c_load = |c: &Operand, i: &Expr, j: &Expr| {
        Expr::load(c.buf, broadcast_index(&[i.clone(), j.clone()], &c.dims))
    };
    let mut k = cx.kernel(n);
    if is_f32(&a) {
        if let Some(c) = &c {
            let fill = k.nest(&[m, nn], |_, idx| {
                vec![Stmt::Store {
                    buf: y.buf,
                    index: idx[0].clone() * nn as i64 + idx[1].clone(),
                    value: c_load(c, &idx[0], &idx[1]),
                }]
            });
            k.body.extend(fill);
        }
        let beta = if c.is_some() { attrs.beta } else { 0.0 };
        k.body.push(
            Sgemm {
                a: (a.buf, Expr::idx(0)),
                b: (b.buf, Expr::idx(0)),
                c: (y.buf, Expr::idx(0)),
                m,
                n: nn,
                k: ka,
                lda: a1,
                ldb: b1,
                ldc: nn,
                trans_a: ta,
                trans_b: tb,
                alpha: attrs.alpha,
                beta,
            }
            .call(),
        );
    } else {
        let ty = a.ty();
        let scale = |v: f32| -> Option<Expr> {
            if ty.is_float() {
                Some(Expr::float(ty, f64::from(v)))
            } else if v.fract() == 0.0 {
                Some(Expr::int(ty, v as i64))
            } else {
                None
            }
        };
        let (Some(alpha), Some(beta)) = (scale(attrs.alpha), scale(attrs.beta)) else {
            return Err(cx.unsupported(n, "a fractional alpha or beta on an integer Gemm"));
        };
        let body = k.nest(&[m, nn], |k, idx| {
            let (i, j) = (&idx[0], &idx[1]);
            let (acc, mut body) = accumulate(k, ty, zero(ty), &[ka], |_, p| {
                let p = &p[0];
                let ai = if ta {
                    p.clone() * a1 as i64 + i.clone()
                } else {
                    i.clone() * a1 as i64 + p.clone()
                };
                let bi = if tb {
                    j.clone() * b1 as i64 + p.clone()
                } else {
                    p.clone() * b1 as i64 + j.clone()
                };
                Expr::load(a.buf, ai) * Expr::load(b.buf, bi)
            });
            let mut value = if attrs.alpha == 1.0 {
                Expr::Var(acc)
            } else {
                alpha * Expr::Var(acc)
            };
            if let Some(c) = &c {
                let cv = c_load(c, i, j);
                value = value + if attrs.beta == 1.0 { cv } else { beta * cv };
            }
            body.push(Stmt::Store {
                buf: y.buf,
                index: i.clone() * nn as i64 + j.clone(),
                value,
            });
            body
        });
        k.body = body;
    }
    cx.push(k);
    Ok(())
}
