use super::*;

#[test]
fn every_symbol_is_exported_by_the_runtime() {
    let exported: Vec<&str> = kiln_runtime::symbols().into_iter().map(|(name, _)| name).collect();
    for &f in RuntimeFn::ALL {
        assert!(exported.contains(&f.symbol()), "{} is not in kiln_runtime::symbols()", f.symbol());
    }
}

#[test]
fn names_invert_and_operands_are_distinct() {
    for &f in RuntimeFn::ALL {
        assert_eq!(RuntimeFn::from_name(f.name()), Some(f));
        let mut names: Vec<&str> = f.signature().iter().map(|o| o.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), f.signature().len(), "{} names an operand twice", f.name());
        // Every routine writes through one address, but topk: its values and their indices.
        let written = if f == RuntimeFn::TopK { 2 } else { 1 };
        assert_eq!(f.signature().iter().filter(|o| o.kind.writes()).count(), written, "{}", f.name());
    }
    assert_eq!(RuntimeFn::from_name("gemm"), None);
}

/// Arguments of `f`'s signature: each address `@0[i]`, each value `i`.
fn args(f: RuntimeFn) -> Vec<Arg> {
    f.signature().iter().enumerate().map(|(i, o)| if o.kind.is_addr() { Arg::Addr(Addr::at(BufId(0), i as i64)) } else { Arg::Value(Expr::idx(i as i64)) }).collect()
}

#[test]
fn operands_round_trip_in_signature_order() {
    for &f in RuntimeFn::ALL {
        let call = Call::from_operands(f, args(f)).unwrap();
        assert_eq!(call.kind(), f);
        let viewed: Vec<Arg> = call.operands().into_iter().map(|o| match o {
            Operand::Addr(a) => Arg::Addr(a.clone()),
            Operand::Value(e) => Arg::Value(e.clone()),
        }).collect();
        assert_eq!(viewed, args(f));
        assert_eq!(call.into_operands(), args(f));
    }
    let call = Call::from_operands(RuntimeFn::Softmax, args(RuntimeFn::Softmax)).unwrap();
    assert_eq!(call, Call::from(Softmax { x: Addr::at(BufId(0), 0), rows: Expr::idx(1), cols: Expr::idx(2) }));
}

#[test]
fn wrong_operands_are_named() {
    let mut short = args(RuntimeFn::Softmax);
    short.pop();
    assert_eq!(Call::from_operands(RuntimeFn::Softmax, short).unwrap_err(), "softmax takes 3 operands (x, rows, cols), not 2");
    let mut swapped = args(RuntimeFn::Copy);
    swapped.swap(1, 2);
    assert_eq!(Call::from_operands(RuntimeFn::Copy, swapped).unwrap_err(), "copy operand `src` must be a buffer address");
}

#[test]
fn rewrites_keep_the_operands_they_share() {
    let conv = match Call::from_operands(RuntimeFn::Conv2d, args(RuntimeFn::Conv2d)).unwrap() {
        Call::Conv2d(c) => *c,
        other => panic!("{other:?}"),
    };
    let blocked = conv.clone().nchwc(Expr::idx(64), Expr::idx(1));
    assert_eq!((blocked.ints(), &blocked.alpha, &blocked.w), (conv.ints(), &conv.alpha, &conv.w));
    let packed = conv.clone().packed(Addr::at(BufId(1), 0), Expr::idx(16));
    assert_eq!((packed.ints(), &packed.w, &packed.width), (conv.ints(), &Addr::at(BufId(1), 0), &Expr::idx(16)));
}

#[test]
fn a_call_is_a_pointer_and_a_tag() {
    // The operands are boxed: a `Stmt::Call` is no larger than the other statements (a
    // `conv2d_nchwc`'s operands alone are about a kilobyte).
    assert!(std::mem::size_of::<Call>() <= 2 * std::mem::size_of::<usize>());
}
