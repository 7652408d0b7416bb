//! Unary, binary and comparison operators and `Select` on every scalar type, with operands
//! from memory (every pair of interesting values) and from constants (the code generator
//! special-cases constant shift amounts and divisors).

use kiln_loops::*;

use crate::harness::{samples, Harness, Tol, TYPES};

const BINOPS: [BinOp; 12] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Rem,
    BinOp::Min,
    BinOp::Max,
    BinOp::And,
    BinOp::Or,
    BinOp::Xor,
    BinOp::Shl,
    BinOp::Shr,
];

const UNOPS: [UnOp; 9] = [UnOp::Neg, UnOp::Abs, UnOp::Not, UnOp::Floor, UnOp::Ceil, UnOp::Round, UnOp::Trunc, UnOp::Sqrt, UnOp::IsNan];

const CMPOPS: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

/// Whether the interpreter defines `op` on `t`.
fn binop_defined(op: BinOp, t: ScalarType) -> bool {
    match t {
        ScalarType::Bool => matches!(op, BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Min | BinOp::Max | BinOp::Mul),
        ScalarType::F32 | ScalarType::F64 => matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::Min | BinOp::Max),
        _ => true,
    }
}

fn unop_defined(op: UnOp, t: ScalarType) -> bool {
    match t {
        ScalarType::Bool => op == UnOp::Not,
        ScalarType::F32 | ScalarType::F64 => op != UnOp::Not,
        _ => matches!(op, UnOp::Neg | UnOp::Abs | UnOp::Not),
    }
}

fn is_int_div(op: BinOp, t: ScalarType) -> bool {
    matches!(op, BinOp::Div | BinOp::Rem) && !t.is_float() && t != ScalarType::Bool
}

fn tol_for(op: BinOp, t: ScalarType) -> Tol {
    if t.is_float() && matches!(op, BinOp::Min | BinOp::Max) { Tol::ZeroSign } else { Tol::Exact }
}

#[test]
fn binary_operators_on_every_type() {
    for t in TYPES {
        let s = samples(t);
        // Every ordered pair of samples.
        let (xs, ys): (Vec<u64>, Vec<u64>) = s.iter().flat_map(|&x| s.iter().map(move |&y| (x, y))).unzip();
        let mut h = Harness::new();
        let a = h.input_of(t, &xs);
        let b = h.input_of(t, &ys);
        let n = xs.len() as u64;
        for op in BINOPS.into_iter().filter(|&op| binop_defined(op, t)) {
            let out = h.output_tol(ElemType::Scalar(t), n, tol_for(op, t));
            let k = crate::harness::map_kernel(&format!("{}_{op:?}", t.name()), n, |_, i| {
                let x = Expr::load(a, i.clone());
                let y = Expr::load(b, i.clone());
                let value = x.bin(op, y);
                if is_int_div(op, t) {
                    // The interpreter rejects a zero divisor; lowering guards it, and so does this test.
                    let nonzero = Expr::load(b, i.clone()).cmp(CmpOp::Ne, Expr::int(t, 0));
                    vec![Stmt::If { cond: nonzero, then: vec![Stmt::Store { buf: out, index: i, value }], otherwise: vec![] }]
                } else {
                    vec![Stmt::Store { buf: out, index: i, value }]
                }
            });
            h.push(k);
        }
        h.run().unwrap();
    }
}

#[test]
fn binary_operators_with_constant_right_operands() {
    for t in TYPES {
        let s = samples(t);
        let mut h = Harness::new();
        let a = h.input_of(t, &s);
        let n = s.len() as u64;
        for op in BINOPS.into_iter().filter(|&op| binop_defined(op, t)) {
            let consts: Vec<u64> = s.iter().copied().filter(|&c| !(is_int_div(op, t) && c == 0)).collect();
            let out = h.output_tol(ElemType::Scalar(t), n * consts.len() as u64, tol_for(op, t));
            let k = crate::harness::map_kernel(&format!("{}_{op:?}_const", t.name()), n, |_, i| {
                consts
                    .iter()
                    .enumerate()
                    .map(|(j, &c)| {
                        let c = constant(t, c);
                        Stmt::Store { buf: out, index: i.clone() + (j as i64 * n as i64), value: Expr::load(a, i.clone()).bin(op, c) }
                    })
                    .collect()
            });
            h.push(k);
        }
        h.run().unwrap();
    }
}

/// The constant of type `t` with bit pattern `bits`.
pub fn constant(t: ScalarType, bits: u64) -> Expr {
    Expr::Const(match t {
        ScalarType::Bool => Scalar::Bool(bits != 0),
        ScalarType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
        ScalarType::F64 => Scalar::F64(f64::from_bits(bits)),
        t => Scalar::Int(t, bits as i64),
    })
}

#[test]
fn unary_operators_on_every_type() {
    for t in TYPES {
        let s = samples(t);
        let mut h = Harness::new();
        let a = h.input_of(t, &s);
        let n = s.len() as u64;
        for op in UNOPS.into_iter().filter(|&op| unop_defined(op, t)) {
            let elem = if op == UnOp::IsNan { ScalarType::Bool } else { t };
            let out = h.output(ElemType::Scalar(elem), n);
            h.push(crate::harness::map_kernel(&format!("{}_{op:?}", t.name()), n, |_, i| {
                vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i).un(op) }]
            }));
        }
        h.run().unwrap();
    }
}

#[test]
fn comparisons_and_select_on_every_type() {
    for t in TYPES {
        let s = samples(t);
        let (xs, ys): (Vec<u64>, Vec<u64>) = s.iter().flat_map(|&x| s.iter().map(move |&y| (x, y))).unzip();
        let mut h = Harness::new();
        let a = h.input_of(t, &xs);
        let b = h.input_of(t, &ys);
        let n = xs.len() as u64;
        for op in CMPOPS {
            let out = h.output(ElemType::Scalar(ScalarType::Bool), n);
            h.push(crate::harness::map_kernel(&format!("{}_{op:?}", t.name()), n, |_, i| {
                vec![Stmt::Store { buf: out, index: i.clone(), value: Expr::load(a, i.clone()).cmp(op, Expr::load(b, i)) }]
            }));
        }
        // max-by-comparison through Select: a < b ? b : a.
        let out = h.output(ElemType::Scalar(t), n);
        h.push(crate::harness::map_kernel(&format!("{}_select", t.name()), n, |_, i| {
            let x = Expr::load(a, i.clone());
            let y = Expr::load(b, i.clone());
            vec![Stmt::Store { buf: out, index: i, value: x.clone().cmp(CmpOp::Lt, y.clone()).select(y, x) }]
        }));
        h.run().unwrap();
    }
}

#[test]
fn integer_arithmetic_wraps_at_the_type_width() {
    // 100 + 100 in i8 is -56; 200 * 2 in u8 is 144; -128 / -1 in i8 is -128; MIN % -1 is 0.
    let mut h = Harness::new();
    let t = ScalarType::I8;
    let a = h.input_of(t, &[100, 0x80, 0x80, 0x7f]);
    let out = h.output(ElemType::Scalar(t), 16);
    let mut k = Kernel::new("wrap");
    let stmts = (0..4)
        .flat_map(|j| {
            let x = Expr::load(a, Expr::idx(j));
            [
                Stmt::Store { buf: out, index: Expr::idx(4 * j), value: x.clone().bin(BinOp::Add, x.clone()) },
                Stmt::Store { buf: out, index: Expr::idx(4 * j + 1), value: x.clone().bin(BinOp::Div, Expr::int(t, -1)) },
                Stmt::Store { buf: out, index: Expr::idx(4 * j + 2), value: x.clone().bin(BinOp::Rem, Expr::int(t, -1)) },
                Stmt::Store { buf: out, index: Expr::idx(4 * j + 3), value: x.clone().un(UnOp::Abs).un(UnOp::Neg) },
            ]
        })
        .collect();
    k.body = stmts;
    h.push(k);
    h.run().unwrap();
}
