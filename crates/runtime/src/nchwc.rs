//! The blocked channel layout NCHW16c: a tensor of `c` channels of `h × w` pixels is held as
//! `⌈c/16⌉` blocks of `h·w` pixels of 16 channels, `[c/16][h][w][c mod 16]`. A pixel's 16
//! channels are one 64-byte line, so a kernel that puts output channels in vector lanes loads
//! and stores whole lines, and one that broadcasts input channels reads 16 consecutive floats
//! per pixel. The lanes past the last channel of the last block are padding: [`to_blocked`]
//! writes zeros there and no kernel reads them.
//!
//! Why: a 1×1 convolution of NCHW planes is `W · X` with `X`'s rows a plane apart and each
//! output tile a few rows of a few lines each, a plane apart. In this layout it computes tiles
//! of pixels × output channels whose every read and write is a run of whole lines
//! ([`conv`]); a depthwise one is 16 channels per vector whatever the plane's size
//! ([`dwconv`]); a max pool too ([`pool`]).

pub mod conv;
pub mod dwconv;
#[cfg(target_arch = "x86_64")]
mod line;
pub mod maxpool;
pub mod winograd;

use crate::epilogue::{Activation, QuantDequant};
use crate::gemm::Isa;

#[cfg(test)]
mod tests;

/// The kernel the blocked routines run for `isa`: itself when the CPU has it, else the portable
/// loops.
pub(crate) fn usable(isa: Isa) -> Isa {
    if isa.available() { isa } else { Isa::Portable }
}

/// Channels per block: the lanes of an AVX-512 vector.
pub const LANES: usize = 16;

/// Whether the blocked routines apply `act` (in registers): none, Relu, Clip, HardSwish or a
/// quantize-dequantize pair.
pub(crate) fn applies(act: Activation) -> bool {
    matches!(act, Activation::None | Activation::Relu | Activation::Clip { .. } | Activation::HardSwish | Activation::QuantDequantU8 { .. } | Activation::QuantDequantU16 { .. })
}

/// The activation of the blocked routines on one float, with the same selects as
/// [`line::Line::activate`].
pub(crate) fn activate_one(s: f32, act: Activation) -> f32 {
    match act {
        Activation::Relu => if s > 0.0 || s.is_nan() { s } else { 0.0 },
        Activation::Clip { min, max } => {
            let u = if s > min || s.is_nan() { s } else { min };
            if u < max || u.is_nan() { u } else { max }
        }
        Activation::HardSwish => act.apply(s),
        _ => if QuantDequant::of(act).is_some() { act.apply(s) } else { s },
    }
}

/// Floats of a blocked tensor of `channels` planes of `pixels` pixels.
pub fn blocked_len(channels: usize, pixels: usize) -> usize {
    channels.div_ceil(LANES) * LANES * pixels
}

/// Lays `channels` NCHW planes of `pixels` floats out blocked, the padding lanes zero.
///
/// # Panics
///
/// If `x` or `y` is shorter than the layouts need.
pub fn to_blocked(x: &[f32], channels: usize, pixels: usize, y: &mut [f32]) {
    let x = &x[..channels * pixels];
    let y = &mut y[..blocked_len(channels, pixels)];
    for (b, block) in y.chunks_exact_mut(LANES * pixels).enumerate() {
        for (p, px) in block.chunks_exact_mut(LANES).enumerate() {
            for (l, v) in px.iter_mut().enumerate() {
                let c = b * LANES + l;
                *v = if c < channels { x[c * pixels + p] } else { 0.0 };
            }
        }
    }
}

/// The inverse of [`to_blocked`]: `channels` NCHW planes of `pixels` floats from a blocked
/// tensor.
///
/// # Panics
///
/// If `x` or `y` is shorter than the layouts need.
pub fn from_blocked(x: &[f32], channels: usize, pixels: usize, y: &mut [f32]) {
    let x = &x[..blocked_len(channels, pixels)];
    for (c, plane) in y[..channels * pixels].chunks_exact_mut(pixels).enumerate() {
        let block = &x[c / LANES * LANES * pixels..];
        for (p, v) in plane.iter_mut().enumerate() {
            *v = block[p * LANES + c % LANES];
        }
    }
}

/// [`to_blocked`] for generated code: `batch` images of `channels` planes of `pixels` floats
/// at `x` into `batch` blocked images at `y`. Nothing happens when a size is negative.
///
/// # Safety
///
/// `x` readable for `batch·channels·pixels` floats, `y` writable for `batch·`[`blocked_len`]
/// floats, not overlapping. Alignment is not required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_to_nchwc(x: *const f32, y: *mut f32, batch: i64, channels: i64, pixels: i64) {
    let [Ok(batch), Ok(channels), Ok(pixels)] = [batch, channels, pixels].map(usize::try_from) else { return };
    let (plain, blocked) = (channels * pixels, blocked_len(channels, pixels));
    for n in 0..batch {
        // SAFETY: image `n` of each operand, by the caller's contract.
        unsafe { to_blocked(std::slice::from_raw_parts(x.add(n * plain), plain), channels, pixels, std::slice::from_raw_parts_mut(y.add(n * blocked), blocked)) }
    }
}

/// [`from_blocked`] for generated code: `batch` blocked images at `x` into `batch` images of
/// `channels` planes of `pixels` floats at `y`. Nothing happens when a size is negative.
///
/// # Safety
///
/// `x` readable for `batch·`[`blocked_len`] floats, `y` writable for `batch·channels·pixels`,
/// not overlapping. Alignment is not required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_from_nchwc(x: *const f32, y: *mut f32, batch: i64, channels: i64, pixels: i64) {
    let [Ok(batch), Ok(channels), Ok(pixels)] = [batch, channels, pixels].map(usize::try_from) else { return };
    let (plain, blocked) = (channels * pixels, blocked_len(channels, pixels));
    for n in 0..batch {
        // SAFETY: image `n` of each operand, by the caller's contract.
        unsafe { from_blocked(std::slice::from_raw_parts(x.add(n * blocked), blocked), channels, pixels, std::slice::from_raw_parts_mut(y.add(n * plain), plain)) }
    }
}
