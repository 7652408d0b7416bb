//! Convolution, pooling, normalization, products, recurrent and attention layers,
//! quantization and signal ops.

use super::{Arg, infer, infer1, int, ty};
use crate::dtype::DType;
use crate::op::*;

fn conv(auto_pad: AutoPad, pads: &[i64], strides: &[i64], dilations: &[i64]) -> Op {
    Op::Conv(Conv { auto_pad, pads: pads.to_vec(), strides: strides.to_vec(), dilations: dilations.to_vec(), ..Default::default() })
}

#[test]
fn conv_same_upper_with_dilation() {
    let c = conv(AutoPad::SameUpper, &[], &[], &[2, 2]);
    assert_eq!(infer1(c.clone(), &[ty("f32[1, 3, 10, 10]"), ty("f32[8, 3, 3, 3]")]), "f32[1, 8, 10, 10]");
    assert_eq!(infer1(c, &[ty("f32[n, 3, h, w]"), ty("f32[8, 3, 3, 3]")]), "f32[n, 8, h, w]");
    let strided = conv(AutoPad::SameLower, &[], &[2, 2], &[2, 2]);
    assert_eq!(infer1(strided.clone(), &[ty("f32[1, 3, 9, 10]"), ty("f32[8, 3, 3, 3]")]), "f32[1, 8, 5, 5]");
    assert_eq!(infer1(strided, &[ty("f32[1, 3, h, 10]"), ty("f32[8, 3, 3, 3]")]), "f32[1, 8, u1, 5]");
}

#[test]
fn conv_explicit_pads_strides_dilations() {
    let c = conv(AutoPad::Notset, &[1, 1, 1, 1], &[2, 2], &[2, 2]);
    assert_eq!(infer1(c, &[ty("f32[1, 3, 10, 10]"), ty("f32[8, 3, 3, 3]"), ty("f32[8]")]), "f32[1, 8, 4, 4]");
    let c = conv(AutoPad::Notset, &[1, 1, 1, 1], &[], &[2, 2]);
    assert_eq!(infer1(c, &[ty("f32[b, 3, h, w]"), ty("f32[8, 3, 3, 3]")]), "f32[b, 8, h-2, w-2]");
    let valid = conv(AutoPad::Valid, &[], &[], &[]);
    assert_eq!(infer1(valid.clone(), &[ty("f32[1, 3, 7]"), ty("f32[4, 3, 3]")]), "f32[1, 4, 5]");
    assert_eq!(infer1(valid, &[ty("f32[1, 3, 2]"), ty("f32[4, 3, 3]")]), "error: window of 3 (kernel 3, dilation 1) exceeds padded input 2 on spatial axis 0");
}

#[test]
fn conv_groups_and_errors() {
    let g = |group| Op::Conv(Conv { group, ..Default::default() });
    assert_eq!(infer1(g(2), &[ty("f32[1, 4, 5, 5]"), ty("f32[6, 2, 3, 3]")]), "f32[1, 6, 3, 3]");
    assert_eq!(infer1(g(3), &[ty("f32[1, 4, 5, 5]"), ty("f32[6, 2, 3, 3]")]), "error: input has 4 channels but weight expects 2 x group 3");
    assert_eq!(infer1(g(1), &[ty("f32[1, 4, 5, 5]"), ty("f32[6, 4, 3]")]), "error: weight f32[6, 4, 3] must have the input's rank 4");
    assert!(infer1(g(1), &[ty("f32[1, 4, 5, 5]"), ty("f32[6, 4, 3, 3]"), ty("f32[5]")]).starts_with("error: bias size differs"));
    let q = Op::QLinearConv(QLinearConv::default());
    let args = [ty("u8[1, 2, 4, 4]"), ty("f32[]"), ty("u8[]"), ty("i8[3, 2, 2, 2]"), ty("f32[]"), ty("i8[]"), ty("f32[]"), ty("i8[]")];
    assert_eq!(infer1(q, &args), "i8[1, 3, 3, 3]");
    assert_eq!(infer1(Op::ConvInteger(ConvInteger::default()), &[ty("u8[1, 1, 3, 3]"), ty("u8[1, 1, 2, 2]")]), "i32[1, 1, 2, 2]");
}

#[test]
fn conv_transpose_sizes() {
    let ct = |a: ConvTranspose| Op::ConvTranspose(a);
    let strided = ConvTranspose { strides: vec![3, 2], output_padding: vec![1, 1], ..Default::default() };
    assert_eq!(infer1(ct(strided), &[ty("f32[1, 1, 3, 3]"), ty("f32[1, 2, 3, 3]")]), "f32[1, 2, 10, 8]");
    let sym = ConvTranspose { strides: vec![2, 2], ..Default::default() };
    assert_eq!(infer1(ct(sym), &[ty("f32[1, 1, h, w]"), ty("f32[1, 2, 3, 3]")]), "f32[1, 2, h*2+1, w*2+1]");
    let shaped = ConvTranspose { strides: vec![3, 2], output_shape: vec![10, 8], ..Default::default() };
    assert_eq!(infer1(ct(shaped), &[ty("f32[1, 1, 3, 3]"), ty("f32[1, 2, 3, 3]")]), "f32[1, 2, 10, 8]");
    let same = ConvTranspose { strides: vec![2, 2], auto_pad: AutoPad::SameUpper, ..Default::default() };
    assert_eq!(infer1(ct(same), &[ty("f32[1, 1, 3, h]"), ty("f32[1, 2, 3, 3]")]), "f32[1, 2, 6, h*2]");
    let grouped = ConvTranspose { group: 2, ..Default::default() };
    assert_eq!(infer1(ct(grouped), &[ty("f32[1, 4, 3]"), ty("f32[4, 3, 2]")]), "f32[1, 6, 4]");
}

#[test]
fn pooling_ceil_mode() {
    let pool =
        |ceil_mode, pads: &[i64]| Op::MaxPool(MaxPool { kernel_shape: vec![2, 2], strides: vec![2, 2], ceil_mode, pads: pads.to_vec(), ..Default::default() });
    assert_eq!(infer1(pool(1, &[]), &[ty("f32[1, 1, 5, 5]")]), "f32[1, 1, 3, 3]");
    assert_eq!(infer1(pool(0, &[]), &[ty("f32[1, 1, 5, 5]")]), "f32[1, 1, 2, 2]");
    assert_eq!(infer(pool(1, &[]), &[ty("f32[1, 1, 5, 5]")], 2), "f32[1, 1, 3, 3]; i64[1, 1, 3, 3]");
    assert_eq!(infer(pool(1, &[]), &[ty("f32[1, 1, 5, 5]")], 3), "error: expected at most 2 outputs, found 3");
    // The last window would start in the end padding, so ceil mode drops it.
    let last = Op::AveragePool(AveragePool { kernel_shape: vec![1], strides: vec![2], ceil_mode: 1, pads: vec![0, 1], ..Default::default() });
    assert_eq!(infer1(last, &[ty("f32[1, 1, 3]")]), "f32[1, 1, 2]");
    let same = Op::AveragePool(AveragePool { kernel_shape: vec![3], auto_pad: AutoPad::SameUpper, ..Default::default() });
    assert_eq!(infer1(same, &[ty("f32[b, c, len]")]), "f32[b, c, len]");
    assert_eq!(infer1(Op::GlobalAveragePool(GlobalAveragePool {}), &[ty("f32[b, 64, 7, 7]")]), "f32[b, 64, 1, 1]");
    let missing = Op::LpPool(LpPool { kernel_shape: vec![2], ..Default::default() });
    assert_eq!(infer1(missing, &[ty("f32[1, 1, 5, 5]")]), "error: kernel_shape has 1 values for 2 spatial axes");
}

#[test]
fn normalizations() {
    let bn = Op::BatchNormalization(BatchNormalization::default());
    let args = [ty("f32[n, 3, h, w]"), ty("f32[3]"), ty("f32[3]"), ty("f32[3]"), ty("f32[3]")];
    assert_eq!(infer1(bn.clone(), &args), "f32[n, 3, h, w]");
    assert_eq!(infer(bn.clone(), &args, 3), "f32[n, 3, h, w]; f32[3]; f32[3]");
    let bad = [ty("f32[n, 3, h, w]"), ty("f32[4]"), ty("f32[3]"), ty("f32[3]"), ty("f32[3]")];
    assert_eq!(infer1(bn, &bad), "error: input 1 (`scale`) has a size other than the channel count: 3 != 4");
    let ln = Op::LayerNormalization(LayerNormalization::default());
    assert_eq!(infer(ln, &[ty("f16[b, s, 64]"), ty("f16[64]")], 3), "f16[b, s, 64]; f32[b, s, 1]; f32[b, s, 1]");
    let ln1 = Op::LayerNormalization(LayerNormalization { axis: 1, ..Default::default() });
    assert_eq!(infer(ln1, &[ty("f32[b, s, 64]"), ty("f32[s, 64]")], 2), "f32[b, s, 64]; f32[b, 1, 1]");
    let gn = Op::GroupNormalization(GroupNormalization { num_groups: 4, ..Default::default() });
    assert_eq!(infer1(gn, &[ty("f32[1, 6, 2]"), ty("f32[6]"), ty("f32[6]")]), "error: 6 channels do not divide into 4 groups");
    let rms = Op::RMSNormalization(RMSNormalization::default());
    assert_eq!(infer1(rms, &[ty("bf16[b, 8]"), ty("bf16[8]")]), "bf16[b, 8]");
    assert_eq!(infer1(Op::InstanceNormalization(InstanceNormalization::default()), &[ty("f32[1, 2, 3]"), ty("f32[2]"), ty("f32[2]")]), "f32[1, 2, 3]");
}

#[test]
fn matmul_promotes_vectors_and_broadcasts_batches() {
    let mm = || Op::MatMul(MatMul {});
    assert_eq!(infer1(mm(), &[ty("f32[3]"), ty("f32[3]")]), "f32[]");
    assert_eq!(infer1(mm(), &[ty("f32[3]"), ty("f32[3, 4]")]), "f32[4]");
    assert_eq!(infer1(mm(), &[ty("f32[2, 3]"), ty("f32[3]")]), "f32[2]");
    assert_eq!(infer1(mm(), &[ty("f32[b, 1, 2, 3]"), ty("f32[5, 3, 4]")]), "f32[b, 5, 2, 4]");
    assert_eq!(infer1(mm(), &[ty("f32[b, s, 768]"), ty("f32[768, 3072]")]), "f32[b, s, 3072]");
    assert_eq!(infer1(mm(), &[ty("f32[2, 3]"), ty("f32[4, 5]")]), "error: inner dims of [2, 3] and [4, 5] differ: 3 != 4");
    assert_eq!(infer1(mm(), &[ty("f32[]"), ty("f32[4, 5]")]), "error: matmul operands must have rank at least 1, found [] and [4, 5]");
    assert_eq!(infer1(Op::MatMulInteger(MatMulInteger {}), &[ty("u8[2, 3]"), ty("i8[3, 4]")]), "i32[2, 4]");
}

#[test]
fn gemm_transposes_and_checks_c() {
    let gemm = |t_a, t_b| Op::Gemm(Gemm { transA: t_a, transB: t_b, ..Default::default() });
    assert_eq!(infer1(gemm(1, 1), &[ty("f32[4, m]"), ty("f32[6, 4]"), ty("f32[6]")]), "f32[m, 6]");
    assert_eq!(infer1(gemm(0, 0), &[ty("f32[2, 4]"), ty("f32[4, 6]"), ty("f32[2, 1]")]), "f32[2, 6]");
    assert_eq!(infer1(gemm(0, 0), &[ty("f32[2, 4]"), ty("f32[4, 6]"), ty("f32[2]")]), "error: C of shape [2] does not broadcast to [2, 6]");
    assert_eq!(infer1(gemm(0, 0), &[ty("f32[2, 4, 1]"), ty("f32[4, 6]")]), "error: input 0 (`A`) must have rank 2, found f32[2, 4, 1]");
}

#[test]
fn einsum_equations() {
    let e = |eq: &str| Op::Einsum(Einsum { equation: eq.to_string() });
    assert_eq!(infer1(e("ij,jk->ik"), &[ty("f32[2, 3]"), ty("f32[3, 4]")]), "f32[2, 4]");
    assert_eq!(infer1(e("bij,bjk->bik"), &[ty("f32[b, 2, 3]"), ty("f32[b, 3, 4]")]), "f32[b, 2, 4]");
    assert_eq!(infer1(e("...ij->...ji"), &[ty("f32[b, h, 2, 3]")]), "f32[b, h, 3, 2]");
    assert_eq!(infer1(e("ij,jk"), &[ty("f32[2, 3]"), ty("f32[3, 4]")]), "f32[2, 4]");
    assert_eq!(infer1(e("ii->i"), &[ty("f32[3, 3]")]), "f32[3]");
    assert_eq!(infer1(e("i,i"), &[ty("f32[3]"), ty("f32[3]")]), "f32[]");
    assert_eq!(infer1(e("...i,...i->..."), &[ty("f32[a, 1, 3]"), ty("f32[5, 3]")]), "f32[a, 5]");
    assert_eq!(infer1(e("ij->k"), &[ty("f32[2, 3]")]), "error: einsum output label `k` is not in any operand");
    assert_eq!(infer1(e("ij,jk->ik"), &[ty("f32[2, 3]"), ty("f32[4, 5]")]), "error: einsum label `j` has sizes 3 and 4");
    assert_eq!(infer1(e("ij->ij"), &[ty("f32[2, 3, 4]")]), "error: operand 0 of shape [2, 3, 4] does not fit einsum term ij");
    assert_eq!(infer1(e("i$->i"), &[ty("f32[2, 3]")]), "error: einsum term `i$` is not letters with at most one `...`");
}

#[test]
fn recurrent_layers() {
    let lstm = Op::LSTM(LSTM { hidden_size: Some(20), ..Default::default() });
    let args = [ty("f32[seq, b, 10]"), ty("f32[1, 80, 10]"), ty("f32[1, 80, 20]")];
    assert_eq!(infer(lstm, &args, 3), "f32[seq, 1, b, 20]; f32[1, b, 20]; f32[1, b, 20]");
    let gru = Op::GRU(GRU { layout: 1, direction: RnnDirection::Bidirectional, ..Default::default() });
    let args = [ty("f32[b, seq, 10]"), ty("f32[2, 60, 10]"), ty("f32[2, 60, 20]")];
    assert_eq!(infer(gru, &args, 2), "f32[b, seq, 2, 20]; f32[b, 2, 20]");
    // A direction ONNX does not name is rejected when the op is built, before inference.
    let sideways = OpKind::RNN.with_attrs(vec![("direction".into(), AttrValue::Str("sideways".into()))]);
    assert_eq!(
        sideways.unwrap_err().to_string(),
        "attribute `direction`: `sideways` is not one of `forward`, `reverse`, `bidirectional`"
    );
}

#[test]
fn attention_layers() {
    let a = Op::Attention(Attention { q_num_heads: Some(4), kv_num_heads: Some(2), ..Default::default() });
    let args = [ty("f32[2, 5, 32]"), ty("f32[2, 7, 16]"), ty("f32[2, 7, 24]"), Arg::Missing, ty("f32[2, 2, 3, 8]"), ty("f32[2, 2, 3, 12]")];
    assert_eq!(infer(a, &args, 4), "f32[2, 5, 48]; f32[2, 2, 10, 8]; f32[2, 2, 10, 12]; f32[2, 4, 5, 10]");
    let a4 = Op::Attention(Attention::default());
    let args = [ty("f32[b, 4, s, 8]"), ty("f32[b, 2, t, 8]"), ty("f32[b, 2, t, 12]")];
    assert_eq!(infer(a4, &args, 4), "f32[b, 4, s, 12]; f32[b, 2, t, 8]; f32[b, 2, t, 12]; f32[b, 4, s, t]");
    let a3 = Op::Attention(Attention::default());
    assert_eq!(infer1(a3, &[ty("f32[2, 5, 32]"), ty("f32[2, 7, 16]"), ty("f32[2, 7, 24]")]), "error: `kv_num_heads` is required for 3-D inputs");
    let la = Op::LinearAttention(LinearAttention { q_num_heads: 4, kv_num_heads: 2, update_rule: UpdateRule::Linear, ..Default::default() });
    assert_eq!(infer(la, &[ty("f32[b, t, 32]"), ty("f32[b, t, 16]"), ty("f32[b, t, 24]")], 2), "f32[b, t, 48]; f32[b, 2, 8, 12]");
    let rope = Op::RotaryEmbedding(RotaryEmbedding::default());
    assert_eq!(infer1(rope, &[ty("f32[b, h, s, 64]"), ty("f32[s, 32]"), ty("f32[s, 32]")]), "f32[b, h, s, 64]");
    let causal = Op::CausalConvWithState(CausalConvWithState::default());
    assert_eq!(infer(causal, &[ty("f32[b, 5, l]"), ty("f32[5, 1, 4]")], 2), "f32[b, 5, l]; f32[b, 5, 3]");
}

#[test]
fn quantization() {
    let q = |output_dtype| Op::QuantizeLinear(QuantizeLinear { output_dtype, ..Default::default() });
    assert_eq!(infer1(q(None), &[ty("f32[n, 4]"), ty("f32[]"), ty("i8[]")]), "i8[n, 4]");
    assert_eq!(infer1(q(None), &[ty("f32[n, 4]"), ty("f32[]")]), "u8[n, 4]");
    assert_eq!(infer1(q(Some(DType::I4)), &[ty("f32[n, 4]"), ty("f32[]")]), "i4[n, 4]");
    assert_eq!(infer1(q(Some(DType::U8)), &[ty("f32[4]"), ty("f32[]"), ty("i8[]")]), "error: output_dtype u8 differs from the zero point's type i8");
    let dq = Op::DequantizeLinear(DequantizeLinear::default());
    assert_eq!(infer1(dq.clone(), &[ty("i8[n, 4]"), ty("f16[4]"), ty("i8[4]")]), "f16[n, 4]");
    assert_eq!(infer1(dq, &[ty("i8[n, 4]"), ty("f32[3]")]), "error: scale length differs from axis 1 of the input: 4 != 3");
    assert_eq!(infer(Op::DynamicQuantizeLinear(DynamicQuantizeLinear {}), &[ty("f32[n]")], 3), "u8[n]; f32[]; u8[]");
}

#[test]
fn signal_ops() {
    let dft = Op::DFT(DFT { onesided: 1, inverse: 0 });
    assert_eq!(infer1(dft, &[ty("f32[1, 16, 1]")]), "f32[1, 9, 2]");
    let idft = Op::DFT(DFT { onesided: 1, inverse: 1 });
    assert_eq!(infer1(idft, &[ty("f32[1, 9, 2]"), Arg::Missing, int(1)]), "f32[1, 16, 1]");
    let stft = Op::STFT(STFT { onesided: 1 });
    assert_eq!(infer1(stft, &[ty("f32[1, 128, 1]"), int(8), ty("f32[16]")]), "f32[1, 15, 9, 2]");
    let hann = Op::HannWindow(HannWindow { output_datatype: DType::F64, periodic: 1 });
    assert_eq!(infer1(hann.clone(), &[int(10)]), "f64[10]");
    assert_eq!(infer1(hann, &[ty("i64[]")]), "f64[u1]");
    let mel = Op::MelWeightMatrix(MelWeightMatrix::default());
    assert_eq!(infer1(mel, &[int(8), int(16), int(8000), super::float(0.0), super::float(4000.0)]), "f32[9, 8]");
}
