//! Conveniences for building loop IR: expression constructors, arithmetic operators on
//! [`Expr`], and loop nests.

use std::ops;

use crate::ir::*;

impl Expr {
    /// An `i64` constant (indices, extents).
    pub fn idx(v: i64) -> Expr {
        Expr::Const(Scalar::index(v))
    }

    /// An `f32` constant.
    pub fn f32(v: f32) -> Expr {
        Expr::Const(Scalar::F32(v))
    }

    /// A constant of `ty` holding `v` (floats exactly as `f64` → `ty` rounding gives).
    pub fn float(ty: ScalarType, v: f64) -> Expr {
        match ty {
            ScalarType::F32 => Expr::Const(Scalar::F32(v as f32)),
            ScalarType::F64 => Expr::Const(Scalar::F64(v)),
            ScalarType::Bool => Expr::Const(Scalar::Bool(v != 0.0)),
            t => Expr::Const(Scalar::Int(t, v as i64)),
        }
    }

    /// An integer constant of `ty` (bit pattern for unsigned types).
    pub fn int(ty: ScalarType, v: i64) -> Expr {
        match ty {
            ScalarType::Bool => Expr::Const(Scalar::Bool(v != 0)),
            ScalarType::F32 => Expr::Const(Scalar::F32(v as f32)),
            ScalarType::F64 => Expr::Const(Scalar::F64(v as f64)),
            t => Expr::Const(Scalar::Int(t, v)),
        }
    }

    /// Element `index` of `buf`.
    pub fn load(buf: BufId, index: Expr) -> Expr {
        Expr::Load { buf, index: Box::new(index) }
    }

    /// `op(self)`.
    pub fn un(self, op: UnOp) -> Expr {
        Expr::Unary(op, Box::new(self))
    }

    /// `op(self, rhs)`.
    pub fn bin(self, op: BinOp, rhs: Expr) -> Expr {
        Expr::Binary(op, Box::new(self), Box::new(rhs))
    }

    /// `self op rhs` as a `bool`.
    pub fn cmp(self, op: CmpOp, rhs: Expr) -> Expr {
        Expr::Cmp(op, Box::new(self), Box::new(rhs))
    }

    /// `self ? a : b`.
    pub fn select(self, a: Expr, b: Expr) -> Expr {
        Expr::Select(Box::new(self), Box::new(a), Box::new(b))
    }

    /// Converts to `ty`.
    pub fn cast(self, ty: ScalarType) -> Expr {
        Expr::Cast(ty, CastMode::Default, Box::new(self))
    }

    /// A runtime math function of `self`.
    pub fn math(self, f: MathFn) -> Expr {
        Expr::Math(f, vec![self])
    }

    /// `min(self, rhs)`.
    pub fn min(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Min, rhs)
    }

    /// `max(self, rhs)`.
    pub fn max(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Max, rhs)
    }
}

impl From<Var> for Expr {
    fn from(v: Var) -> Expr {
        Expr::Var(v)
    }
}

macro_rules! expr_ops {
    ($($trait:ident $method:ident $op:ident),*) => {
        $(
            impl ops::$trait for Expr {
                type Output = Expr;
                fn $method(self, rhs: Expr) -> Expr {
                    fold_index(BinOp::$op, self, rhs)
                }
            }
            impl ops::$trait<i64> for Expr {
                type Output = Expr;
                fn $method(self, rhs: i64) -> Expr {
                    fold_index(BinOp::$op, self, Expr::idx(rhs))
                }
            }
        )*
    };
}

expr_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem);

/// Builds `a op b`, folding `i64` constants and the identities `x+0`, `x*1`, `x*0`, so index
/// expressions stay small in the printed IR and in generated code.
fn fold_index(op: BinOp, a: Expr, b: Expr) -> Expr {
    use Scalar::Int;
    use ScalarType::I64;
    match (op, &a, &b) {
        (_, Expr::Const(Int(I64, x)), Expr::Const(Int(I64, y))) => {
            let v = match op {
                BinOp::Add => x.wrapping_add(*y),
                BinOp::Sub => x.wrapping_sub(*y),
                BinOp::Mul => x.wrapping_mul(*y),
                BinOp::Div if *y != 0 => x.wrapping_div(*y),
                BinOp::Rem if *y != 0 => x.wrapping_rem(*y),
                _ => return a.bin(op, b),
            };
            Expr::idx(v)
        }
        (BinOp::Add | BinOp::Sub, _, Expr::Const(Int(I64, 0))) => a,
        (BinOp::Add, Expr::Const(Int(I64, 0)), _) => b,
        (BinOp::Mul | BinOp::Div, _, Expr::Const(Int(I64, 1))) => a,
        (BinOp::Mul, Expr::Const(Int(I64, 1)), _) => b,
        (BinOp::Mul, _, Expr::Const(Int(I64, 0))) | (BinOp::Mul, Expr::Const(Int(I64, 0)), _) => Expr::idx(0),
        _ => a.bin(op, b),
    }
}

/// Row-major strides of `dims` (in elements).
pub fn strides(dims: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as i64;
    }
    s
}

/// The flat index `Σ idx[i]·stride[i]`.
pub fn linear(idx: &[Expr], strides: &[i64]) -> Expr {
    idx.iter().zip(strides).fold(Expr::idx(0), |acc, (i, &s)| acc + i.clone() * s)
}

/// The flat index into an input of shape `input` broadcast (numpy rules, aligned right) to the
/// output index `out_idx`: broadcast axes contribute nothing.
pub fn broadcast_index(out_idx: &[Expr], input: &[u64]) -> Expr {
    let st = strides(input);
    let skip = out_idx.len() - input.len();
    input.iter().enumerate().fold(Expr::idx(0), |acc, (i, &d)| if d == 1 { acc } else { acc + out_idx[skip + i].clone() * st[i] })
}

impl Kernel {
    /// Wraps the statements `body` builds in a loop nest over `dims` (outermost first); the
    /// closure gets the index variables as expressions.
    pub fn nest(&mut self, dims: &[u64], body: impl FnOnce(&mut Kernel, &[Expr]) -> Vec<Stmt>) -> Vec<Stmt> {
        let vars: Vec<Var> = dims.iter().map(|_| self.var(ScalarType::I64)).collect();
        let idx: Vec<Expr> = vars.iter().map(|&v| Expr::Var(v)).collect();
        let mut stmts = body(self, &idx);
        for (&v, &extent) in vars.iter().zip(dims).rev() {
            stmts = vec![Stmt::For { var: v, extent, body: stmts }];
        }
        stmts
    }
}
