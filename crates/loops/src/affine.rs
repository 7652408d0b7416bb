//! Index expressions as affine forms over loop variables.

use crate::ir::*;

/// `Σ coeffs[v]·v + constant` over variables, with no zero coefficient.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affine {
    /// Each variable with its non-zero coefficient, in first-seen order.
    pub coeffs: Vec<(Var, i128)>,
    /// The constant term.
    pub constant: i128,
}

impl Affine {
    /// The constant `c`.
    pub fn constant(c: i128) -> Affine {
        Affine { coeffs: Vec::new(), constant: c }
    }

    /// The variable `v`.
    pub fn var(v: Var) -> Affine {
        Affine { coeffs: vec![(v, 1)], constant: 0 }
    }

    /// `k` times this form, unless a term overflows.
    pub fn scaled(&self, k: i128) -> Option<Affine> {
        let coeffs = self.coeffs.iter().map(|&(v, c)| Some((v, c.checked_mul(k)?))).collect::<Option<Vec<_>>>()?;
        let coeffs = coeffs.into_iter().filter(|&(_, c)| c != 0).collect();
        Some(Affine { coeffs, constant: self.constant.checked_mul(k)? })
    }

    /// The sum of two forms, unless a term overflows.
    pub fn plus(&self, other: &Affine) -> Option<Affine> {
        let mut coeffs = self.coeffs.clone();
        for &(v, c) in &other.coeffs {
            match coeffs.iter_mut().find(|(w, _)| *w == v) {
                Some((_, d)) => *d = d.checked_add(c)?,
                None => coeffs.push((v, c)),
            }
        }
        coeffs.retain(|&(_, c)| c != 0);
        Some(Affine { coeffs, constant: self.constant.checked_add(other.constant)? })
    }

    /// The coefficient of `v` (0 when it does not occur).
    pub fn coeff(&self, v: Var) -> i128 {
        self.coeffs.iter().find(|(w, _)| *w == v).map_or(0, |&(_, c)| c)
    }

    /// `e` as an affine form, each variable's form given by `var` (`None`: not affine); `None`
    /// when `e` is not affine (a load, a division, a product of two variables) or overflows.
    pub fn of(e: &Expr, var: &impl Fn(Var) -> Option<Affine>) -> Option<Affine> {
        match e {
            Expr::Const(Scalar::Int(t, v)) if t.is_signed_int() => Some(Affine::constant(i128::from(*v))),
            Expr::Var(v) => var(*v),
            Expr::Binary(BinOp::Add, a, b) => Affine::of(a, var)?.plus(&Affine::of(b, var)?),
            Expr::Binary(BinOp::Sub, a, b) => Affine::of(a, var)?.plus(&Affine::of(b, var)?.scaled(-1)?),
            Expr::Binary(BinOp::Mul, a, b) => {
                let (x, y) = (Affine::of(a, var)?, Affine::of(b, var)?);
                match (x.coeffs.is_empty(), y.coeffs.is_empty()) {
                    (true, _) => y.scaled(x.constant),
                    (_, true) => x.scaled(y.constant),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}
