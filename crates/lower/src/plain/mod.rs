//! Plain loop IR for every runtime call (DESIGN decision 3): what a target without kiln's
//! runtime runs — an object file for another architecture, a freestanding build.
//!
//! [`expand_calls`] replaces each call of the table that has a `kiln_runtime` kernel with the
//! loop nest its row's doc describes. Element for element the expressions are the row's
//! formulas; sums run in index order, so a result can differ from the kernel's (which blocks
//! and vectorizes its sums) by rounding. Copies stay calls, which the code generator makes
//! `memmove`; `should_stop` becomes "never": without the runtime nothing can ask a run to stop.
//! Calls that read weights packed for the runtime's kernels cannot appear, because scheduling
//! packs only for a target that has them.

mod gemm;
mod rows;
mod window;

use kiln_loops::call::{Addr, Call};
use kiln_loops::ir::*;

use crate::LowerError;

/// Replaces every runtime call of `program` but copies with plain loop IR.
pub fn expand_calls(program: &mut Program) -> Result<(), LowerError> {
    for kernel in &mut program.kernels {
        let body = std::mem::take(&mut kernel.body);
        kernel.body = block(kernel, body).map_err(|reason| LowerError::Unsupported { node: kernel.name.clone(), op: "call", reason })?;
    }
    Ok(())
}

fn block(k: &mut Kernel, body: Vec<Stmt>) -> Result<Vec<Stmt>, String> {
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        match s {
            Stmt::For { var, extent, body } => out.push(Stmt::For { var, extent, body: block(k, body)? }),
            Stmt::If { cond, then, otherwise } => out.push(Stmt::If { cond, then: block(k, then)?, otherwise: block(k, otherwise)? }),
            Stmt::Call(call) => out.extend(expand(k, call)?),
            other => out.push(other),
        }
    }
    Ok(out)
}

fn expand(k: &mut Kernel, call: Call) -> Result<Vec<Stmt>, String> {
    Ok(match call {
        Call::Copy(_) => vec![Stmt::Call(call)],
        Call::ShouldStop(c) => vec![Stmt::Store { buf: c.flag.buf, index: c.flag.index, value: Expr::Const(Scalar::Bool(false)) }],
        Call::Sgemm(c) => gemm::sgemm(k, &c)?,
        Call::SgemmFused(c) => gemm::sgemm_fused(k, &c)?,
        Call::Epilogue(c) => gemm::epilogue(k, &c)?,
        Call::Conv2d(c) => window::conv2d(k, &c)?,
        Call::DwConv2d(c) => window::dwconv2d(k, &c)?,
        Call::DwConv2dRequantize(c) => window::dwconv2d_requantize(k, &c)?,
        Call::Im2col(c) => window::im2col(k, &c)?,
        Call::Im2colBytes(c) => window::im2col_bytes(k, &c)?,
        Call::MaxPool2d(c) => window::maxpool2d(k, &c)?,
        Call::Softmax(c) => rows::softmax(k, &c)?,
        Call::TopK(c) => topk(k, &c)?,
        Call::LayerNorm(c) => rows::layernorm(k, &c)?,
        Call::Requantize(c) => requantize(k, &c)?,
        Call::Qgemm(c) => qgemm(k, &c, &|_, _, v| v)?,
        Call::QgemmRequantize(c) => {
            let along = int(&c.scale_mode, "scale_mode")?;
            if !(0..=2).contains(&along) {
                return Err(format!("qgemm_requantize with scale mode {along}"));
            }
            let zero = Expr::float(ScalarType::F64, int(&c.zero, "zero")? as f64);
            let ty = if int(&c.y_signed, "y_signed")? != 0 { ScalarType::I8 } else { ScalarType::U8 };
            let requantize = |i: &Expr, j: &Expr, v: Expr| {
                let at_ = match along {
                    0 => Expr::idx(0),
                    1 => i.clone(),
                    _ => j.clone(),
                };
                let scale = at(&c.scales, at_).cast(ScalarType::F64);
                (v.cast(ScalarType::F64) * scale + zero.clone()).un(UnOp::Round).cast(ty)
            };
            qgemm(k, &c.product(), &requantize)?
        }
        other @ (Call::SgemmPacked(_) | Call::Conv2dPacked(_) | Call::Conv2dNchwc(_) | Call::MaxPool2dNchwc(_) | Call::ToNchwc(_) | Call::FromNchwc(_)) => {
            return Err(format!("kiln bug: `{}` reads a layout of the runtime's kernels, on a target without them", other.kind().name()));
        }
    })
}

/// The selection loops the lowering writes for a TopK of another type, on `f32`.
fn topk(k: &mut Kernel, c: &kiln_loops::call::TopK) -> Result<Vec<Stmt>, String> {
    use crate::reduce::topk::{End, Shape, selection};
    let end = if int(&c.largest, "largest")? != 0 { End::Largest } else { End::Smallest };
    let [outer, len, inner, kk] = [(&c.outer, "outer"), (&c.len, "len"), (&c.inner, "inner"), (&c.k, "k")].map(|(e, name)| size(e, name));
    let shape = Shape { outer: outer?, len: len?, inner: inner?, k: kk?, end, t: ScalarType::F32 };
    Ok(selection(k, &c.x, Some(&c.y), Some(&c.indices), shape))
}

/// `y[r, c] = sat(round(x[r, c] · s[r mod period] + zero))` in `f64`, saturated to `i8` or
/// `u8` by the float-to-integer cast (NaN to 0), as the runtime's routine computes it.
fn requantize(k: &mut Kernel, c: &kiln_loops::call::Requantize) -> Result<Vec<Stmt>, String> {
    let (rows, cols, period) = (size(&c.rows, "rows")?, size(&c.cols, "cols")?, size(&c.period, "period")?);
    if period == 0 {
        return Err("requantize with a scale period of 0".into());
    }
    let zero = Expr::float(ScalarType::F64, int(&c.zero, "zero")? as f64);
    let ty = if int(&c.signed, "signed")? != 0 { ScalarType::I8 } else { ScalarType::U8 };
    Ok(k.nest(&[rows, cols], |_, rc| {
        let off = rc[0].clone() * cols as i64 + rc[1].clone();
        let scale = at(&c.s, rc[0].clone().bin(BinOp::Rem, Expr::idx(period as i64))).cast(ScalarType::F64);
        let v = (at(&c.x, off.clone()).cast(ScalarType::F64) * scale + zero.clone()).un(UnOp::Round);
        vec![put(&c.y, off, v.cast(ty))]
    }))
}

/// `C = (A − za)·(B − zb) + bias` in `i32`, one element at a time, the sum in `k`'s order
/// after the bias (wrapping, as the runtime's: the order of wrapping sums does not matter),
/// stored as `out(i, j, sum)` makes it (the sum itself, or `qgemm_requantize`'s 8-bit level).
/// The zero points' loads take their buffers' types, which the verifier holds to the
/// signedness flags.
fn qgemm(kernel: &mut Kernel, c: &kiln_loops::call::Qgemm, out: &dyn Fn(&Expr, &Expr, Expr) -> Expr) -> Result<Vec<Stmt>, String> {
    let [m, n, k, lda, ldb, ldc] = [(&c.m, "m"), (&c.n, "n"), (&c.k, "k"), (&c.lda, "lda"), (&c.ldb, "ldb"), (&c.ldc, "ldc")].map(|(e, name)| size(e, name));
    let (m, n, k, lda, ldb, ldc) = (m?, n?, k?, lda? as i64, ldb? as i64, ldc? as i64);
    let (a_zeros, b_zeros) = (size(&c.a_zeros, "a_zeros")?, size(&c.b_zeros, "b_zeros")?);
    let bias_mode = int(&c.bias_mode, "bias_mode")?;
    let packed = int(&c.b_packed, "b_packed")? != 0;
    // A packed `B` holds `b − 128` for an unsigned matrix: its zero point moves with it.
    let b_shift = if packed && int(&c.b_signed, "b_signed")? == 0 { 128 } else { 0 };
    let groups = k.div_ceil(4) as i64;
    if !(0..=2).contains(&bias_mode) {
        return Err(format!("qgemm with bias mode {bias_mode}"));
    }
    let i32t = ScalarType::I32;
    let zero = |z: &Addr, count: u64, at_: Expr| match count {
        0 => Expr::int(i32t, 0),
        1 => at(z, Expr::idx(0)).cast(i32t),
        _ => at(z, at_).cast(i32t),
    };
    // Element (l, j) of B: row-major, or in the packed panels (`kiln_runtime::qgemm::pack_b`).
    let b_index = |l: Expr, j: Expr| {
        if packed {
            let panel = j.clone().bin(BinOp::Div, Expr::idx(16));
            let group = l.clone().bin(BinOp::Div, Expr::idx(4));
            ((panel * groups + group) * 16 + j.bin(BinOp::Rem, Expr::idx(16))) * 4 + l.bin(BinOp::Rem, Expr::idx(4))
        } else {
            l * ldb + j
        }
    };
    Ok(kernel.nest(&[m, n], |kernel, ij| {
        let (i, j) = (ij[0].clone(), ij[1].clone());
        let (za, zb) = (zero(&c.za, a_zeros, i.clone()), zero(&c.zb, b_zeros, j.clone()) - Expr::int(i32t, b_shift));
        let bias = match bias_mode {
            1 => at(&c.bias, i.clone()),
            2 => at(&c.bias, j.clone()),
            _ => Expr::int(i32t, 0),
        };
        let (init, acc) = local(kernel, i32t, bias);
        let sum = kernel.nest(&[k], |_, l| {
            let l = l[0].clone();
            let a = at(&c.a, i.clone() * lda + l.clone()).cast(i32t) - za.clone();
            let b = at(&c.b, b_index(l, j.clone())).cast(i32t) - zb.clone();
            vec![Stmt::Assign(acc, Expr::Var(acc) + a * b)]
        });
        let mut stmts = vec![init];
        stmts.extend(sum);
        stmts.push(put(&c.c, i.clone() * ldc + j.clone(), out(&i, &j, Expr::Var(acc))));
        stmts
    }))
}

/// The value of a constant integer operand.
fn int(e: &Expr, name: &str) -> Result<i64, String> {
    match e {
        Expr::Const(Scalar::Int(_, v)) => Ok(*v),
        _ => Err(format!("operand `{name}` is computed at run time; plain loops need it constant")),
    }
}

/// The value of a constant size operand: an integer from 0 up.
fn size(e: &Expr, name: &str) -> Result<u64, String> {
    u64::try_from(int(e, name)?).map_err(|_| format!("operand `{name}` is negative"))
}

/// Element `off` past `a`.
fn at(a: &Addr, off: Expr) -> Expr {
    Expr::load(a.buf, a.index.clone() + off)
}

/// Stores `value` at element `off` past `a`.
fn put(a: &Addr, off: Expr, value: Expr) -> Stmt {
    Stmt::Store { buf: a.buf, index: a.index.clone() + off, value }
}

/// Binds `value` to a new variable of type `ty`: the statement and the variable's expression.
fn bind(k: &mut Kernel, ty: ScalarType, value: Expr) -> (Stmt, Expr) {
    let v = k.var(ty);
    (Stmt::Let(v, value), Expr::Var(v))
}

/// A mutable local of type `ty` starting at `init`.
fn local(k: &mut Kernel, ty: ScalarType, init: Expr) -> (Stmt, Var) {
    let v = k.var(ty);
    (Stmt::Local(v, init), v)
}

/// `alpha · x`, without the product when `alpha` is the constant 1.
fn scale(alpha: &Expr, x: Expr) -> Expr {
    match alpha {
        Expr::Const(Scalar::F32(a)) if *a == 1.0 => x,
        _ => alpha.clone() * x,
    }
}

/// Activation `code` of the call table (0 none, 1 relu, 2 clip, 3 leaky_relu, 4 sigmoid, 5
/// tanh, 6 hard_swish, 7 gelu, 8 gelu_tanh, 9 and 10 quantize to `u8` or `u16` and back, 11
/// silu) of
/// `v`, which should be a variable: it is read several times.
fn activation(code: i64, alpha: &Expr, beta: &Expr, v: Expr) -> Result<Expr, String> {
    let f = Expr::f32;
    Ok(match code {
        0 => v,
        1 => v.max(f(0.0)),
        2 => v.max(alpha.clone()).min(beta.clone()),
        3 => v.clone().cmp(CmpOp::Gt, f(0.0)).select(v.clone(), v * alpha.clone()),
        4 => f(1.0) / (f(1.0) + v.un(UnOp::Neg).math(MathFn::Exp)),
        5 => v.math(MathFn::Tanh),
        6 => v.clone() * (v * f(1.0 / 6.0) + f(0.5)).min(f(1.0)).max(f(0.0)),
        7 => (f(0.5) * v.clone()) * (f(1.0) + (v * f(std::f32::consts::FRAC_1_SQRT_2)).math(MathFn::Erf)),
        8 => {
            let y = f(0.797_884_6) * (v.clone() + f(0.044_715) * (v.clone() * v.clone()) * v.clone());
            (f(0.5) * v) * (f(1.0) + y.math(MathFn::Tanh))
        }
        9 | 10 => {
            let top = f(if code == 9 { 255.0 } else { 65535.0 });
            let q = (v / alpha.clone()).un(UnOp::Round) + beta.clone();
            let above = q.clone().cmp(CmpOp::Ge, f(0.0)).select(q, f(0.0));
            let level = above.clone().cmp(CmpOp::Gt, top.clone()).select(top, above);
            (level - beta.clone()) * alpha.clone()
        }
        11 => v.clone() * (f(1.0) / (f(1.0) + v.un(UnOp::Neg).math(MathFn::Exp))),
        _ => return Err(format!("activation code {code} is not one of the call table's")),
    })
}

#[cfg(test)]
mod tests;
