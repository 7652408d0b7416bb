//! No op panics, whatever its inputs: every op of the table is fed odd ranks, empty and huge
//! dims, omitted inputs and odd constants, with default and with hostile attributes.

use super::{Arg, int, ints, raw, run_with, t};
use crate::dtype::DType;
use crate::infer::RegionSig;
use crate::op::{AttrValue, Op, OpKind};

fn inputs() -> Vec<Vec<Arg>> {
    let types = ["f32[]", "f32[0]", "f32[1, 1, 1, 1]", "f32[2, 3, 4, 5]", "f32[18446744073709551615, 2]", "f32[n, 3, h, w]", "i64[3]", "bool[2]"];
    let mut sets: Vec<Vec<Arg>> = vec![Vec::new()];
    for a in types {
        sets.push(vec![Arg::Ty(t(a))]);
        for b in types {
            sets.push(vec![Arg::Ty(t(a)), Arg::Ty(t(b))]);
            sets.push(vec![Arg::Ty(t(a)), Arg::Ty(t(b)), Arg::Ty(t(b)), Arg::Missing, Arg::Ty(t(a))]);
        }
        let odd_consts = [
            ints(&[i64::MIN, -1, i64::MAX]),
            ints(&[]),
            int(-7),
            int(i64::MAX),
            ints(&[0, 0, 0, 0]),
            raw(DType::F32, &[2], [f32::NAN.to_le_bytes(), f32::INFINITY.to_le_bytes()].concat()),
            raw(DType::F16, &[1], vec![0x00, 0x7c]),
            raw(DType::I64, &[2], vec![1, 2, 3]),
        ];
        for c in odd_consts {
            sets.push(vec![Arg::Ty(t(a)), c, ints(&[1, -1]), ints(&[3]), ints(&[-2])]);
        }
    }
    sets
}

/// Variants of the op with one attribute set to a hostile value.
fn hostile_variants(kind: OpKind) -> Vec<Op> {
    const NAMES: &[&str] = &[
        "axis",
        "axes",
        "perm",
        "kernel_shape",
        "strides",
        "pads",
        "dilations",
        "group",
        "blocksize",
        "keepdims",
        "batch_dims",
        "num_outputs",
        "start",
        "end",
        "size",
        "num_groups",
        "hidden_size",
        "layout",
        "q_num_heads",
        "kv_num_heads",
        "num_heads",
        "output_shape",
        "output_padding",
        "pooled_shape",
        "sample_size",
        "num_scan_inputs",
        "scan_input_axes",
        "scan_output_axes",
        "block_size",
        "output_height",
        "output_width",
        "ngram_indexes",
        "shape",
        "batch_axis",
        "time_axis",
        "offset_group",
        "p",
        "ceil_mode",
        "transA",
        "transB",
        "allowzero",
        "noop_with_empty_axes",
        "onesided",
        "inverse",
        "rotary_embedding_dim",
    ];
    let values = [AttrValue::Int(-3), AttrValue::Int(i64::MAX), AttrValue::Ints(vec![0, -1, i64::MAX, i64::MIN]), AttrValue::Ints(vec![])];
    let base: Vec<(String, AttrValue)> = kind.default_op().attrs().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let mut out = Vec::new();
    for name in NAMES {
        for v in &values {
            let mut attrs: Vec<(String, AttrValue)> = base.iter().filter(|(k, _)| k != name).cloned().collect();
            attrs.push((name.to_string(), v.clone()));
            if let Ok(op) = kind.with_attrs(attrs) {
                out.push(op);
            }
        }
    }
    out
}

#[test]
fn no_op_panics_on_odd_inputs() {
    let sets = inputs();
    let region = RegionSig { params: vec![t("i64[]"), t("bool[]")], results: vec![t("bool[]"), t("f32[2]")] };
    for &kind in OpKind::ALL {
        let mut ops = vec![kind.default_op()];
        ops.extend(hostile_variants(kind));
        let regions = vec![region.clone(); kind.region_names().len()];
        for op in &ops {
            for args in &sets {
                for outputs in [0, 1, 3] {
                    // Any result is fine; returning at all is the test.
                    let _ = run_with(op, args, &regions, outputs);
                }
            }
        }
    }
}

#[test]
fn no_op_panics_when_a_constant_disagrees_with_its_type() {
    use crate::dim::Dim;
    use crate::infer::{InferInput, infer_op};
    use crate::tensor::Tensor;
    let data = t("f32[2, 3, 4, 5]");
    let claimed = [t("i64[4]"), t("i64[]"), t("i64[1]"), t("i64[8]")];
    let values = [Tensor::from_i64s(&[2], &[1, 2]), Tensor::from_i64s(&[0], &[]), Tensor::from_i64s(&[5], &[1, 2, 3, 4, 5])];
    let region = RegionSig { params: vec![t("i64[]"), t("bool[]")], results: vec![t("bool[]"), t("f32[2]")] };
    for &kind in OpKind::ALL {
        let op = kind.default_op();
        let regions = vec![region.clone(); kind.region_names().len()];
        for ty in &claimed {
            for value in &values {
                for pos in 0..5 {
                    let mut inputs: Vec<Option<InferInput<'_>>> = vec![Some(InferInput { ty: &data, value: None }); 5];
                    inputs[pos] = Some(InferInput { ty, value: Some(value) });
                    let mut fresh = || Dim::sym("u");
                    let _ = infer_op(&op, &inputs, &regions, 1, &mut fresh);
                }
            }
        }
    }
}
