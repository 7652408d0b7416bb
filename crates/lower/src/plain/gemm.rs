//! Matrix products and the fused ops' epilogue as loops.

use kiln_loops::call::{Addr, Epilogue, Sgemm, SgemmFused};
use kiln_loops::ir::*;

use super::{activation, at, bind, int, local, put, scale, size};

/// The operands a plain and a fused product share.
struct Product<'c> {
    a: &'c Addr,
    b: &'c Addr,
    c: &'c Addr,
    m: u64,
    n: u64,
    k: u64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    trans_a: bool,
    trans_b: bool,
    alpha: &'c Expr,
    beta: &'c Expr,
}

/// What happens to each element of `C` after the product: the fused ops' epilogue.
struct After<'c> {
    bias: Option<(&'c Addr, i64, u64)>,
    z: Option<&'c Addr>,
    act: i64,
    act_alpha: &'c Expr,
    act_beta: &'c Expr,
}

impl After<'_> {
    const NONE: After<'static> = After { bias: None, z: None, act: 0, act_alpha: &ZERO, act_beta: &ZERO };
}

const ZERO: Expr = Expr::Const(Scalar::F32(0.0));

/// The [`Product`] operands of a call (`sgemm` and `sgemm_fused` name them alike).
macro_rules! product_operands {
    ($c:expr) => {
        Product {
            a: &$c.a,
            b: &$c.b,
            c: &$c.c,
            m: size(&$c.m, "m")?,
            n: size(&$c.n, "n")?,
            k: size(&$c.k, "k")?,
            lda: int(&$c.lda, "lda")?,
            ldb: int(&$c.ldb, "ldb")?,
            ldc: int(&$c.ldc, "ldc")?,
            trans_a: int(&$c.trans_a, "trans_a")? != 0,
            trans_b: int(&$c.trans_b, "trans_b")? != 0,
            alpha: &$c.alpha,
            beta: &$c.beta,
        }
    };
}

pub(super) fn sgemm(kernel: &mut Kernel, c: &Sgemm) -> Result<Vec<Stmt>, String> {
    let p = product_operands!(c);
    product(kernel, &p, &After::NONE)
}

pub(super) fn sgemm_fused(kernel: &mut Kernel, c: &SgemmFused) -> Result<Vec<Stmt>, String> {
    if int(&c.nr, "nr")? != 0 {
        return Err("kiln bug: `sgemm_fused` with packed weights on a target without the runtime".into());
    }
    let p = product_operands!(c);
    let after = After {
        bias: bias(&c.bias, int(&c.bias_mode, "bias_mode")?, &c.period)?,
        z: (int(&c.residual, "residual")? != 0).then_some(&c.z),
        act: int(&c.act, "act")?,
        act_alpha: &c.act_alpha,
        act_beta: &c.act_beta,
    };
    product(kernel, &p, &after)
}

/// The bias of an epilogue: `(address, mode, period)` for mode 1 (per row) or 2 (per column).
fn bias<'c>(b: &'c Addr, mode: i64, period: &Expr) -> Result<Option<(&'c Addr, i64, u64)>, String> {
    Ok(match mode {
        0 => None,
        1 => Some((b, 1, size(period, "period")?.max(1))),
        2 => Some((b, 2, 0)),
        _ => return Err(format!("bias mode {mode} is not 0, 1 or 2")),
    })
}

/// `C = after(alpha·op(A)·op(B) + beta·C)`, one element at a time, the sum in `k`'s order.
fn product(kernel: &mut Kernel, p: &Product<'_>, after: &After<'_>) -> Result<Vec<Stmt>, String> {
    let beta_zero = matches!(p.beta, Expr::Const(Scalar::F32(b)) if *b == 0.0);
    let mut error = None;
    let body = kernel.nest(&[p.m, p.n], |kernel, ij| {
        let (i, j) = (ij[0].clone(), ij[1].clone());
        let (init, acc) = local(kernel, ScalarType::F32, Expr::f32(0.0));
        let sum = kernel.nest(&[p.k], |_, l| {
            let l = l[0].clone();
            let a = if p.trans_a { l.clone() * p.lda + i.clone() } else { i.clone() * p.lda + l.clone() };
            let b = if p.trans_b { j.clone() * p.ldb + l } else { l * p.ldb + j.clone() };
            vec![Stmt::Assign(acc, Expr::Var(acc) + at(p.a, a) * at(p.b, b))]
        });
        let c_off = i.clone() * p.ldc + j.clone();
        let mut stmts = vec![init];
        stmts.extend(sum);
        let mut value = scale(p.alpha, Expr::Var(acc));
        if !beta_zero {
            // C is read only when beta is not 0, as the kernel does: it may hold anything.
            value = p.beta.clone().cmp(CmpOp::Eq, Expr::f32(0.0)).select(value.clone(), value + scale(p.beta, at(p.c, c_off.clone())));
        }
        match finish(kernel, after, value, &i, &j, &c_off, acc) {
            Ok(s) => stmts.extend(s),
            Err(e) => error = Some(e),
        }
        stmts.push(put(p.c, c_off, Expr::Var(acc)));
        stmts
    });
    match error {
        Some(e) => Err(e),
        None => Ok(body),
    }
}

/// Statements that turn `value` (element `(i, j)`, at `off` in `C`'s layout) into the final
/// element, `act(value + bias + z)`, assigned to the local `acc`.
#[allow(clippy::too_many_arguments)]
fn finish(kernel: &mut Kernel, after: &After<'_>, value: Expr, i: &Expr, j: &Expr, off: &Expr, acc: Var) -> Result<Vec<Stmt>, String> {
    let mut v = value;
    if let Some((b, mode, period)) = after.bias {
        v = v + if mode == 1 { at(b, i.clone() % period as i64) } else { at(b, j.clone()) };
    }
    if let Some(z) = after.z {
        v = v + at(z, off.clone());
    }
    let (s, x) = bind(kernel, ScalarType::F32, v);
    let acc_value = activation(after.act, after.act_alpha, after.act_beta, x)?;
    Ok(vec![s, Stmt::Assign(acc, acc_value)])
}

pub(super) fn epilogue(kernel: &mut Kernel, c: &Epilogue) -> Result<Vec<Stmt>, String> {
    let (rows, cols) = (size(&c.rows, "rows")?, size(&c.cols, "cols")?);
    let after = After {
        bias: bias(&c.b, int(&c.bias_mode, "bias_mode")?, &c.period)?,
        z: (int(&c.residual, "residual")? != 0).then_some(&c.z),
        act: int(&c.act, "act")?,
        act_alpha: &c.alpha,
        act_beta: &c.beta,
    };
    let mut error = None;
    let body = kernel.nest(&[rows, cols], |kernel, rc| {
        let (r, col) = (rc[0].clone(), rc[1].clone());
        let off = r.clone() * cols as i64 + col.clone();
        let (init, acc) = local(kernel, ScalarType::F32, at(&c.y, off.clone()));
        let mut stmts = vec![init];
        match finish(kernel, &after, Expr::Var(acc), &r, &col, &off, acc) {
            Ok(s) => stmts.extend(s),
            Err(e) => error = Some(e),
        }
        stmts.push(put(&c.y, off, Expr::Var(acc)));
        stmts
    });
    match error {
        Some(e) => Err(e),
        None => Ok(body),
    }
}
