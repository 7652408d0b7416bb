//! kiln's fused ops, FusedConv and FusedMatMul, evaluated as the chain of standard ops the
//! optimizer replaced: Conv or MatMul (with B transposed first when `transB` is set), Add of
//! the bias, Add of the residual addend, then the activation. Every step rounds to the element
//! type as the unfused graph does, so the evaluator is an oracle for the fused kernels.

use kiln_tir::op::{
    Activation, Add, Cast, Clip, Conv, DequantizeLinear, FusedConv, FusedMatMul, Gelu, GeluApprox,
    HardSwish, LeakyRelu, MatMul, QuantizeLinear, Relu, Sigmoid, Tanh, Transpose,
};
use kiln_tir::{DType, Op, Tensor, TensorData};

use crate::args::Args;
use crate::array::Arr;
use crate::error::{Result, invalid};

/// Evaluates `op` if it is one of kiln's fused ops.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    let y = match op {
        Op::FusedConv(o) => fused_conv(a, o),
        Op::FusedMatMul(o) => fused_matmul(a, o),
        _ => return None,
    };
    Some(y.and_then(|y| Ok(vec![Arr::from_tensor(a.op, &y)?])))
}

/// The single output of `op` on `inputs`.
fn apply(op: Op, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
    Ok(crate::dispatch(&op, inputs, 1)?.remove(0))
}

fn fused_conv(a: &Args, o: &FusedConv) -> Result<Tensor> {
    let conv = Conv {
        auto_pad: o.auto_pad,
        dilations: o.dilations.clone(),
        group: o.group,
        kernel_shape: o.kernel_shape.clone(),
        pads: o.pads.clone(),
        strides: o.strides.clone(),
    };
    // Conv takes the bias itself; it is a vector over the output channels there too.
    let y = apply(
        Op::Conv(conv),
        &[Some(a.tensor(0)?), Some(a.tensor(1)?), a.opt_tensor(2)],
    )?;
    finish(a, y, o.activation, o.alpha, o.beta)
}

fn fused_matmul(a: &Args, o: &FusedMatMul) -> Result<Tensor> {
    let mut b = a.tensor(1)?.clone();
    if o.transB != 0 {
        let rank = b.shape.len() as i64;
        if rank < 2 {
            return Err(invalid(
                a.op,
                format!("transB needs B of rank 2 or more, B has rank {rank}"),
            ));
        }
        let mut perm: Vec<i64> = (0..rank).collect();
        perm.swap(rank as usize - 2, rank as usize - 1);
        b = apply(Op::Transpose(Transpose { perm }), &[Some(&b)])?;
    }
    let mut y = apply(Op::MatMul(MatMul {}), &[Some(a.tensor(0)?), Some(&b)])?;
    if let Some(bias) = a.opt_tensor(2) {
        // The bias runs along the output's last axis, which is how Add broadcasts a vector.
        if bias.shape.len() != 1 || bias.shape.last() != Some(y.shape.last().unwrap_or(&1)) {
            return Err(invalid(
                a.op,
                format!(
                    "bias {:?} is not a vector over the last axis of the product {:?}",
                    bias.shape, y.shape
                ),
            ));
        }
        // A scalar product (two vectors) takes a one-element bias and stays a scalar.
        let bias = Tensor {
            shape: if y.shape.is_empty() {
                Vec::new()
            } else {
                bias.shape.clone()
            },
            ..bias.clone()
        };
        y = apply(Op::Add(Add {}), &[Some(&y), Some(&bias)])?;
    }
    finish(a, y, o.activation, o.alpha, o.beta)
}

/// Adds the residual addend (input 3) to `y` and applies the activation.
fn finish(a: &Args, mut y: Tensor, act: Activation, alpha: f32, beta: f32) -> Result<Tensor> {
    if let Some(z) = a.opt_tensor(3) {
        if z.shape != y.shape {
            return Err(invalid(
                a.op,
                format!(
                    "residual addend {:?} differs from the output {:?}",
                    z.shape, y.shape
                ),
            ));
        }
        y = apply(Op::Add(Add {}), &[Some(&y), Some(z)])?;
    }
    let op = match act {
        Activation::None => return Ok(y),
        Activation::Clip => {
            // Clip's bounds are tensors of the element type; casting the f32 attributes
            // rounds them as storing them in the graph would.
            let bound = |v: f32| {
                apply(
                    Op::Cast(Cast {
                        to: y.dtype,
                        ..Cast::default()
                    }),
                    &[Some(&Tensor::from_f32s(&[], &[v]))],
                )
            };
            let (lo, hi) = (bound(alpha)?, bound(beta)?);
            return apply(Op::Clip(Clip {}), &[Some(&y), Some(&lo), Some(&hi)]);
        }
        Activation::Relu => Op::Relu(Relu {}),
        Activation::LeakyRelu => Op::LeakyRelu(LeakyRelu { alpha }),
        Activation::Sigmoid => Op::Sigmoid(Sigmoid {}),
        Activation::Tanh => Op::Tanh(Tanh {}),
        Activation::HardSwish => Op::HardSwish(HardSwish {}),
        Activation::Gelu => Op::Gelu(Gelu {
            approximate: GeluApprox::None,
        }),
        Activation::GeluTanh => Op::Gelu(Gelu {
            approximate: GeluApprox::Tanh,
        }),
        Activation::Silu => {
            let sigmoid = apply(Op::Sigmoid(Sigmoid {}), &[Some(&y)])?;
            return apply(Op::Mul(kiln_tir::op::Mul {}), &[Some(&y), Some(&sigmoid)]);
        }
        Activation::QuantDequantU8 => return quant_dequant(a, &y, DType::U8, alpha, beta),
        Activation::QuantDequantU16 => return quant_dequant(a, &y, DType::U16, alpha, beta),
    };
    apply(op, &[Some(&y)])
}

/// QuantizeLinear of `y` to `to` (`u8` or `u16`) with scale `scale` and zero point
/// `zero_point`, then DequantizeLinear back.
fn quant_dequant(a: &Args, y: &Tensor, to: DType, scale: f32, zero_point: f32) -> Result<Tensor> {
    let top = if to == DType::U8 { 255.0 } else { 65535.0 };
    if !(0.0..=top).contains(&zero_point) || zero_point.fract() != 0.0 {
        return Err(invalid(
            a.op,
            format!("zero point {zero_point} is not a {} value", to.name()),
        ));
    }
    let z = zero_point as u16;
    let bytes = if to == DType::U8 {
        vec![z as u8]
    } else {
        z.to_le_bytes().to_vec()
    };
    let zero = Tensor {
        dtype: to,
        shape: Vec::new(),
        data: TensorData::Raw(bytes.into()),
    };
    // The scale in the product's type, so both ops compute in it (f32 or f64).
    let scale = apply(
        Op::Cast(Cast {
            to: y.dtype,
            ..Cast::default()
        }),
        &[Some(&Tensor::from_f32s(&[], &[scale]))],
    )?;
    let q = apply(
        Op::QuantizeLinear(QuantizeLinear::default()),
        &[Some(y), Some(&scale), Some(&zero)],
    )?;
    apply(
        Op::DequantizeLinear(DequantizeLinear::default()),
        &[Some(&q), Some(&scale), Some(&zero)],
    )
}
