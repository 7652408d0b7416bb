//! Matrix products: MatMul, Gemm, MatMulInteger, and the row-update kernel they and Conv share.

use kiln_tir::Op;
use kiln_tir::op::Gemm;

use crate::args::Args;
use crate::array::{Arr, Buf, broadcast_index, broadcast_shape, broadcast_to, numel};
use crate::error::{Result, invalid, unsupported};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::MatMul(_) => a.arr(0).and_then(|x| Ok(vec![matmul(a.op, &x, &a.arr(1)?)?])),
        Op::MatMulInteger(_) => matmul_integer(a),
        Op::Gemm(o) => gemm(a, o),
        _ => return None,
    })
}

/// `y += alpha * x` over the common length.
///
/// Written as an unrolled `while` loop over indices: without optimizations, iterator adapters
/// and ranges cost a function call per step, while plain indexing is inline.
pub(crate) fn axpy(y: &mut [f64], alpha: f64, x: &[f64]) {
    let n = y.len().min(x.len());
    let mut j = 0;
    while j + 8 <= n {
        y[j] += alpha * x[j];
        y[j + 1] += alpha * x[j + 1];
        y[j + 2] += alpha * x[j + 2];
        y[j + 3] += alpha * x[j + 3];
        y[j + 4] += alpha * x[j + 4];
        y[j + 5] += alpha * x[j + 5];
        y[j + 6] += alpha * x[j + 6];
        y[j + 7] += alpha * x[j + 7];
        j += 8;
    }
    while j < n {
        y[j] += alpha * x[j];
        j += 1;
    }
}

/// `c[m, n] += a[m, k] * b[k, n]` for row-major slices.
pub(crate) fn gemm_f64(c: &mut [f64], a: &[f64], b: &[f64], m: usize, k: usize, n: usize) {
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            axpy(row, a[i * k + p], &b[p * n..(p + 1) * n]);
        }
    }
}

/// The same product on integers, wrapping.
fn gemm_i128(c: &mut [i128], a: &[i128], b: &[i128], m: usize, k: usize, n: usize) {
    for i in 0..m {
        for p in 0..k {
            let s = a[i * k + p];
            for j in 0..n {
                c[i * n + j] = c[i * n + j].wrapping_add(s.wrapping_mul(b[p * n + j]));
            }
        }
    }
}

/// numpy `matmul`: batched, broadcasting over leading dims, 1-D operands promoted and the
/// promoted axis removed from the result.
pub(crate) fn matmul(op: &'static str, x: &Arr, y: &Arr) -> Result<Arr> {
    if x.dtype != y.dtype {
        return Err(invalid(op, format!("operand types {} and {} differ", x.dtype, y.dtype)));
    }
    let (xr, yr) = (x.shape.len(), y.shape.len());
    if xr == 0 || yr == 0 {
        return Err(invalid(op, "operands must have rank 1 or more"));
    }
    let xs: Vec<usize> = if xr == 1 { vec![1, x.shape[0]] } else { x.shape.clone() };
    let ys: Vec<usize> = if yr == 1 { vec![y.shape[0], 1] } else { y.shape.clone() };
    let (m, k) = (xs[xs.len() - 2], xs[xs.len() - 1]);
    let (k2, n) = (ys[ys.len() - 2], ys[ys.len() - 1]);
    if k != k2 {
        return Err(invalid(op, format!("inner dims differ: {:?} x {:?}", x.shape, y.shape)));
    }
    let (xb, yb) = (&xs[..xs.len() - 2], &ys[..ys.len() - 2]);
    let batch = broadcast_shape(op, xb, yb)?;
    let (xi, yi) = (broadcast_index(op, xb, &batch)?, broadcast_index(op, yb, &batch)?);
    let mut shape = batch.clone();
    if xr > 1 {
        shape.push(m);
    }
    if yr > 1 {
        shape.push(n);
    }
    let total = numel(op, &[numel(op, &batch)?, m, n])?;
    let buf = match (&x.buf, &y.buf) {
        (Buf::F(p), Buf::F(q)) => {
            let mut out = vec![0.0; total];
            for (bi, (&pa, &pb)) in xi.iter().zip(&yi).enumerate() {
                gemm_f64(&mut out[bi * m * n..(bi + 1) * m * n], &p[pa * m * k..(pa + 1) * m * k], &q[pb * k * n..(pb + 1) * k * n], m, k, n);
            }
            Buf::F(out)
        }
        (Buf::I(p), Buf::I(q)) => {
            let mut out = vec![0; total];
            for (bi, (&pa, &pb)) in xi.iter().zip(&yi).enumerate() {
                gemm_i128(&mut out[bi * m * n..(bi + 1) * m * n], &p[pa * m * k..(pa + 1) * m * k], &q[pb * k * n..(pb + 1) * k * n], m, k, n);
            }
            Buf::I(out)
        }
        _ => return Err(unsupported(op, format!("element type {}", x.dtype))),
    };
    Ok(Arr { dtype: x.dtype, shape, buf })
}

/// `MatMulInteger(A, B, a_zero_point?, b_zero_point?)`: int32 product of zero-point-shifted
/// 8-bit operands. Zero points are scalars or per-row (A) / per-column (B) vectors.
fn matmul_integer(a: &Args) -> Result<Vec<Arr>> {
    let shift = |i: usize, zp: usize, per_row: bool| -> Result<Arr> {
        let x = a.arr(i)?;
        let Some(z) = a.opt_arr(zp)? else { return Ok(Arr { dtype: kiln_tir::DType::I32, ..x }) };
        let zv = z.i(a.op)?;
        let v = x.i(a.op)?;
        let rank = x.shape.len();
        let (rows, cols) = (if rank >= 2 { x.shape[rank - 2] } else { 1 }, x.shape.last().copied().unwrap_or(1));
        let shifted = v
            .iter()
            .enumerate()
            .map(|(e, &val)| {
                let zi = if zv.len() == 1 { 0 } else if per_row { (e / cols.max(1)) % rows.max(1) } else { e % cols.max(1) };
                zv.get(zi).map(|&zp| val - zp).ok_or_else(|| invalid(a.op, "zero point length does not match"))
            })
            .collect::<Result<_>>()?;
        Ok(Arr::ints(kiln_tir::DType::I32, x.shape.clone(), shifted))
    };
    let (x, y) = (shift(0, 2, true)?, shift(1, 3, false)?);
    Ok(vec![matmul(a.op, &x, &y)?])
}

/// A 2-D float operand, transposed if asked.
fn matrix(op: &'static str, x: &Arr, transpose: bool) -> Result<(usize, usize, Vec<f64>)> {
    let [r, c] = x.shape[..] else {
        return Err(invalid(op, format!("operand must be 2-D, has shape {:?}", x.shape)));
    };
    let v = x.f(op)?;
    if !transpose {
        return Ok((r, c, v.to_vec()));
    }
    let mut t = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = v[i * c + j];
        }
    }
    Ok((c, r, t))
}

fn gemm(a: &Args, o: &Gemm) -> Result<Vec<Arr>> {
    let (x, y) = (a.arr(0)?, a.arr(1)?);
    if x.dtype != y.dtype {
        return Err(invalid(a.op, format!("operand types {} and {} differ", x.dtype, y.dtype)));
    }
    let (m, k, pa) = matrix(a.op, &x, o.transA != 0)?;
    let (k2, n, pb) = matrix(a.op, &y, o.transB != 0)?;
    if k != k2 {
        return Err(invalid(a.op, format!("inner dims differ: {m}x{k} times {k2}x{n}")));
    }
    let mut out = vec![0.0; numel(a.op, &[m, n])?];
    gemm_f64(&mut out, &pa, &pb, m, k, n);
    let alpha = f64::from(o.alpha);
    out.iter_mut().for_each(|v| *v *= alpha);
    if let Some(c) = a.opt_arr(2)? {
        let beta = f64::from(o.beta);
        let c = broadcast_to(a.op, &c, &[m, n])?;
        for (v, &cv) in out.iter_mut().zip(c.f(a.op)?) {
            *v += beta * cv;
        }
    }
    Ok(vec![Arr::floats(x.dtype, vec![m, n], out)])
}
