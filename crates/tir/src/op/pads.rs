//! The padding of a sliding window (convolution and pooling): `auto_pad` and `pads` resolved
//! to explicit pads. Inference, the evaluator and lowering all call [`window_pads`], so the
//! three agree on where `SAME_UPPER` and `SAME_LOWER` put the odd element.

use super::attr::AutoPad;

/// One spatial axis of a sliding window: what `SAME_UPPER` and `SAME_LOWER` padding depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowAxis {
    /// The input's size along the axis.
    pub input: u64,
    /// The kernel's size along the axis.
    pub kernel: u64,
    /// The stride (at least 1).
    pub stride: u64,
    /// The dilation (at least 1).
    pub dilation: u64,
}

/// Why a window's pads cannot be resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadsError {
    /// `pads` has `len` values where twice the spatial rank are needed.
    Count {
        /// Values given.
        len: usize,
        /// Spatial axes.
        rank: usize,
    },
    /// A pad is negative.
    Negative(i64),
    /// `SAME_UPPER` or `SAME_LOWER` without the axes' sizes (a size is not known yet).
    Unknown,
}

/// The explicit pads of a window over `rank` spatial axes, begin pads then end pads as ONNX
/// lists them.
///
/// `NOTSET` takes `pads` (empty: no padding); `VALID` pads nothing; `SAME_UPPER` and
/// `SAME_LOWER` pad so that the output has `ceil(input / stride)` positions, splitting the
/// total in two with the odd element at the end (`SAME_UPPER`) or the beginning
/// (`SAME_LOWER`). Only those two read `axes`, which must then hold every axis.
pub fn window_pads(auto_pad: AutoPad, pads: &[i64], rank: usize, axes: Option<&[WindowAxis]>) -> Result<Vec<u64>, PadsError> {
    match auto_pad {
        AutoPad::Notset if pads.is_empty() => Ok(vec![0; 2 * rank]),
        AutoPad::Notset if pads.len() != 2 * rank => Err(PadsError::Count { len: pads.len(), rank }),
        AutoPad::Notset => pads.iter().map(|&p| u64::try_from(p).map_err(|_| PadsError::Negative(p))).collect(),
        AutoPad::Valid => Ok(vec![0; 2 * rank]),
        AutoPad::SameUpper | AutoPad::SameLower => {
            let axes = axes.filter(|a| a.len() == rank).ok_or(PadsError::Unknown)?;
            let mut out = vec![0; 2 * rank];
            for (i, a) in axes.iter().enumerate() {
                // Signed and wide, so a zero-sized input or kernel cannot wrap.
                let stride = i128::from(a.stride.max(1));
                let outputs = i128::from(a.input.div_ceil(a.stride.max(1)));
                let span = (i128::from(a.kernel) - 1) * i128::from(a.dilation) + 1;
                let total = ((outputs - 1) * stride + span - i128::from(a.input)).max(0);
                let total = u64::try_from(total).unwrap_or(u64::MAX);
                let small = total / 2;
                (out[i], out[rank + i]) = if auto_pad == AutoPad::SameUpper { (small, total - small) } else { (total - small, small) };
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(input: u64, kernel: u64, stride: u64) -> WindowAxis {
        WindowAxis { input, kernel, stride, dilation: 1 }
    }

    #[test]
    fn same_puts_the_odd_element_by_its_name() {
        // 5 positions, kernel 4, stride 1: 3 pads in all.
        let axes = [axis(5, 4, 1)];
        assert_eq!(window_pads(AutoPad::SameUpper, &[], 1, Some(&axes)), Ok(vec![1, 2]));
        assert_eq!(window_pads(AutoPad::SameLower, &[], 1, Some(&axes)), Ok(vec![2, 1]));
        // Stride 2 over 5: 3 outputs reach 2·2 + 3 = 7, two past the input.
        assert_eq!(window_pads(AutoPad::SameUpper, &[], 1, Some(&[axis(5, 3, 2)])), Ok(vec![1, 1]));
        assert_eq!(window_pads(AutoPad::SameUpper, &[], 1, None), Err(PadsError::Unknown));
    }

    #[test]
    fn explicit_pads_are_checked() {
        assert_eq!(window_pads(AutoPad::Notset, &[], 2, None), Ok(vec![0; 4]));
        assert_eq!(window_pads(AutoPad::Notset, &[1, 2], 1, None), Ok(vec![1, 2]));
        assert_eq!(window_pads(AutoPad::Notset, &[1, 2, 3], 1, None), Err(PadsError::Count { len: 3, rank: 1 }));
        assert_eq!(window_pads(AutoPad::Notset, &[1, -2], 1, None), Err(PadsError::Negative(-2)));
        assert_eq!(window_pads(AutoPad::Valid, &[1, 2], 1, None), Ok(vec![0, 0]));
    }
}
