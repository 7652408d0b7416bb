//! Text names of operations, functions and types, in both directions.

use crate::ir::*;

/// The text name of a unary operation.
pub(crate) fn unop_name(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "neg",
        UnOp::Abs => "abs",
        UnOp::Not => "not",
        UnOp::Floor => "floor",
        UnOp::Ceil => "ceil",
        UnOp::Round => "round",
        UnOp::Trunc => "trunc",
        UnOp::Sqrt => "sqrt",
        UnOp::IsNan => "isnan",
    }
}

/// The text name of a binary operation.
pub(crate) fn binop_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Rem => "rem",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::Xor => "xor",
        BinOp::Shl => "shl",
        BinOp::Shr => "shr",
    }
}

/// The text name of a comparison.
pub(crate) fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
    }
}

/// The text name of a runtime math function.
pub(crate) fn math_name(f: MathFn) -> &'static str {
    match f {
        MathFn::Exp => "exp",
        MathFn::Log => "log",
        MathFn::Pow => "pow",
        MathFn::Tanh => "tanh",
        MathFn::Erf => "erf",
        MathFn::Sin => "sin",
        MathFn::Cos => "cos",
        MathFn::Tan => "tan",
        MathFn::Asin => "asin",
        MathFn::Acos => "acos",
        MathFn::Atan => "atan",
        MathFn::Sinh => "sinh",
        MathFn::Cosh => "cosh",
        MathFn::Asinh => "asinh",
        MathFn::Acosh => "acosh",
        MathFn::Atanh => "atanh",
        MathFn::Softplus => "softplus",
        MathFn::Rint => "rint",
    }
}

/// Every scalar type.
const SCALAR_TYPES: [ScalarType; 11] = [
    ScalarType::Bool,
    ScalarType::I8,
    ScalarType::I16,
    ScalarType::I32,
    ScalarType::I64,
    ScalarType::U8,
    ScalarType::U16,
    ScalarType::U32,
    ScalarType::U64,
    ScalarType::F32,
    ScalarType::F64,
];

const UNOPS: [UnOp; 9] = [UnOp::Neg, UnOp::Abs, UnOp::Not, UnOp::Floor, UnOp::Ceil, UnOp::Round, UnOp::Trunc, UnOp::Sqrt, UnOp::IsNan];

const BINOPS: [BinOp; 12] = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem, BinOp::Min, BinOp::Max, BinOp::And, BinOp::Or, BinOp::Xor, BinOp::Shl, BinOp::Shr];

const CMPOPS: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

const MATH_FNS: [MathFn; 18] = [
    MathFn::Exp,
    MathFn::Log,
    MathFn::Pow,
    MathFn::Tanh,
    MathFn::Erf,
    MathFn::Sin,
    MathFn::Cos,
    MathFn::Tan,
    MathFn::Asin,
    MathFn::Acos,
    MathFn::Atan,
    MathFn::Sinh,
    MathFn::Cosh,
    MathFn::Asinh,
    MathFn::Acosh,
    MathFn::Atanh,
    MathFn::Softplus,
    MathFn::Rint,
];

/// The scalar type spelled `name`.
pub(super) fn scalar_type(name: &str) -> Option<ScalarType> {
    SCALAR_TYPES.into_iter().find(|t| t.name() == name)
}

/// The element type spelled `name`: a scalar type or one of [`ElemType::NARROW`] (`f16`,
/// `f8e4m3fn`, `i4`, ...).
pub(super) fn elem_type(name: &str) -> Option<ElemType> {
    ElemType::NARROW.into_iter().find(|e| e.name() == name).or_else(|| scalar_type(name).map(ElemType::Scalar))
}

/// A function-style operation of an expression, by its text name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Func {
    Unary(UnOp),
    Binary(BinOp),
    Cmp(CmpOp),
    Select,
    Math(MathFn),
}

/// The operation spelled `name` in `name(args)`; `cast`, `bitcast` and `load` are not here.
pub(super) fn func(name: &str) -> Option<Func> {
    None.or_else(|| UNOPS.into_iter().find(|&o| unop_name(o) == name).map(Func::Unary))
        .or_else(|| BINOPS.into_iter().find(|&o| binop_name(o) == name).map(Func::Binary))
        .or_else(|| CMPOPS.into_iter().find(|&o| cmp_name(o) == name).map(Func::Cmp))
        .or_else(|| MATH_FNS.into_iter().find(|&f| math_name(f) == name).map(Func::Math))
        .or_else(|| (name == "select").then_some(Func::Select))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_invert() {
        let mut all: Vec<&str> = UNOPS.iter().map(|&o| unop_name(o)).collect();
        all.extend(BINOPS.iter().map(|&o| binop_name(o)));
        all.extend(CMPOPS.iter().map(|&o| cmp_name(o)));
        all.extend(MATH_FNS.iter().map(|&f| math_name(f)));
        all.extend(["select", "cast", "bitcast", "load", "true", "false"]);
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "a name is used twice");
        for t in SCALAR_TYPES {
            assert_eq!(scalar_type(t.name()), Some(t));
        }
        // Runtime routines are looked up only after `loop.call`, so they need only differ from
        // each other, which `crate::call`'s tests check.
        for e in ElemType::NARROW.into_iter().chain([ElemType::Scalar(ScalarType::U16)]) {
            assert_eq!(elem_type(e.name()), Some(e));
            // The text name is the tensor IR's, so a constant's dtype names its buffer's type.
            assert_eq!(kiln_tir::DType::from_name(e.name()).map(|d| d.name()), Some(e.name()));
        }
    }
}
