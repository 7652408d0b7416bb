//! The verifier's checks of runtime calls: each routine's signature, its constant codes and
//! the extent every buffer address spans from its base.

use super::{Cx, Range};
use crate::ir::*;
use crate::text::names::runtime_fn_name;

/// `sgemm`'s scalars: m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta; `sgemm_packed`'s
/// have the same types: m, n, k, lda, ldc, trans_a, nr, kc, alpha, beta.
const SGEMM_SCALARS: [ScalarType; 10] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, I64, I64, F32, F32]
};

/// `sgemm_fused`'s scalars: m, n, k, lda, ldb, ldc, trans_a, trans_b, nr, kc, bias, period,
/// residual, act, alpha, beta, act_alpha, act_beta.
const SGEMM_FUSED_SCALARS: [ScalarType; 18] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, F32, F32, F32, F32]
};

/// `epilogue`'s scalars: rows, cols, bias, period, residual, act, alpha, beta.
const EPILOGUE_SCALARS: [ScalarType; 8] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, F32, F32]
};

/// `conv2d`'s scalars: 19 sizes, flags and codes, then alpha, beta.
const CONV2D_SCALARS: [ScalarType; 21] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, F32, F32]
};

/// `conv2d_packed`'s scalars: `conv2d`'s 19 integers and the panel width, then alpha, beta.
const CONV2D_PACKED_SCALARS: [ScalarType; 22] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, F32, F32]
};

/// `conv2d_nchwc`'s scalars: `conv2d_packed`'s with `x_blocked` after the panel width.
const CONV2D_NCHWC_SCALARS: [ScalarType; 23] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, F32, F32]
};

/// `layernorm`'s scalars: rows, cols, bias, rms, epsilon.
const LAYERNORM_SCALARS: [ScalarType; 5] = {
    use ScalarType::{F32, I64};
    [I64, I64, I64, I64, F32]
};

impl<'a> Cx<'a> {
    /// Checks a runtime call's signature, constant codes and the extent each address spans
    /// (invariants 9, 11 and 12 of the module doc).
    pub(super) fn call(&mut self, f: RuntimeFn, args: &'a [Arg]) {
        let name = runtime_fn_name(f);
        // The f32 buffer addresses (one of them written), then the scalars.
        let (addresses, written, scalars, signature): (usize, usize, &[ScalarType], &str) = match f {
            RuntimeFn::Sgemm | RuntimeFn::SgemmPacked => (3, 2, &SGEMM_SCALARS, "3 addresses, 8 i64, 2 f32"),
            RuntimeFn::SgemmFused => (5, 2, &SGEMM_FUSED_SCALARS, "5 addresses, 14 i64, 4 f32"),
            RuntimeFn::DwConv2d => (3, 2, &[ScalarType::I64; 15], "3 addresses, 15 i64"),
            RuntimeFn::Conv2d => (5, 4, &CONV2D_SCALARS, "5 addresses, 19 i64, 2 f32"),
            RuntimeFn::Conv2dPacked => (5, 4, &CONV2D_PACKED_SCALARS, "5 addresses, 20 i64, 2 f32"),
            RuntimeFn::Conv2dNchwc => (5, 4, &CONV2D_NCHWC_SCALARS, "5 addresses, 21 i64, 2 f32"),
            RuntimeFn::Epilogue => (3, 0, &EPILOGUE_SCALARS, "3 addresses, 6 i64, 2 f32"),
            RuntimeFn::Im2col | RuntimeFn::MaxPool2d | RuntimeFn::MaxPool2dNchwc => (2, 1, &[ScalarType::I64; 13], "2 addresses, 13 i64"),
            RuntimeFn::ToNchwc | RuntimeFn::FromNchwc => (2, 1, &[ScalarType::I64; 3], "2 addresses, 3 i64"),
            RuntimeFn::Softmax => (1, 0, &[ScalarType::I64; 2], "1 address, 2 i64"),
            RuntimeFn::LayerNorm => (4, 3, &LAYERNORM_SCALARS, "4 addresses, 4 i64, 1 f32"),
            RuntimeFn::Copy => (2, 0, &[ScalarType::I64; 1], "2 addresses, 1 i64"),
        };
        if args.len() != addresses + scalars.len() {
            self.err(format!("{name} takes {} arguments ({signature}), not {}", addresses + scalars.len(), args.len()));
        }
        let mut addrs: Vec<(BufId, &Buffer, Range)> = Vec::new();
        let mut ints = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let want = match i.checked_sub(addresses) {
                None => None,
                Some(j) => match scalars.get(j) {
                    Some(&t) => Some(t),
                    // Arguments past the signature are only counted (above).
                    None => continue,
                },
            };
            match (a, want) {
                (Arg::Addr(buf, index), None) => {
                    let r = self.index(index, &format!("{name} address"));
                    if let Some(b) = self.buffer(*buf) {
                        if f == RuntimeFn::Copy {
                            // Any element type with whole bytes, the same for both operands.
                            if b.elem.is_packed() {
                                self.err(format!("copy argument {i} is @{} of packed {} elements", buf.0, b.elem.name()));
                            }
                            if let Some((first, fb, _)) = addrs.first()
                                && fb.elem != b.elem
                            {
                                self.err(format!("copy from @{} of {} elements into @{} of {}", buf.0, b.elem.name(), first.0, fb.elem.name()));
                            }
                        } else if b.elem != ElemType::Scalar(ScalarType::F32) {
                            self.err(format!("{name} argument {i} is @{} of {} elements, not f32", buf.0, b.elem.name()));
                        }
                        if i == written {
                            self.writable(*buf, b);
                        }
                        addrs.push((*buf, b, r));
                    }
                }
                (Arg::Value(e), Some(want)) => {
                    if let Some(got) = self.expr(e)
                        && got != want
                    {
                        self.err(format!("{name} argument {i} is {}, not {}", got.name(), want.name()));
                    }
                    if want == ScalarType::I64 {
                        ints.push(self.range(e).as_constant());
                    }
                }
                (Arg::Addr(..), Some(_)) => self.err(format!("{name} argument {i} is an address, not a value")),
                (Arg::Value(_), None) => self.err(format!("{name} argument {i} is a value, not a buffer address")),
            }
        }
        if addrs.len() != addresses {
            return;
        }
        // The last element each operand's extent reaches past its base address (negative: the
        // operand is not addressed), when the sizes are constants and the call addresses
        // anything.
        let spans: Vec<(i128, &str)> = match (f, &ints[..]) {
            (RuntimeFn::Sgemm, &[Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc), Some(ta), Some(tb)]) if m > 0 && n > 0 && k > 0 && lda >= 0 && ldb >= 0 && ldc >= 0 => {
                let (m, n, k, lda, ldb, ldc) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldb), i128::from(ldc));
                let span_a = if ta != 0 { (k - 1) * lda + m - 1 } else { (m - 1) * lda + k - 1 };
                let span_b = if tb != 0 { (n - 1) * ldb + k - 1 } else { (k - 1) * ldb + n - 1 };
                let span_c = (m - 1) * ldc + n - 1;
                vec![(span_a, "sgemm reads A"), (span_b, "sgemm reads B"), (span_c, "sgemm writes C")]
            }
            (RuntimeFn::SgemmPacked, &[Some(m), Some(n), Some(k), Some(lda), Some(ldc), Some(ta), Some(nr), Some(kc)]) if m > 0 && n > 0 && k > 0 && lda >= 0 && ldc >= 0 => {
                if nr <= 0 || kc <= 0 {
                    // The runtime does nothing with an empty layout.
                    return;
                }
                let (m, n, k, lda, ldc, nr) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldc), i128::from(nr));
                let span_a = if ta != 0 { (k - 1) * lda + m - 1 } else { (m - 1) * lda + k - 1 };
                let span_b = k * ((n + nr - 1) / nr * nr) - 1;
                let span_c = (m - 1) * ldc + n - 1;
                vec![(span_a, "sgemm_packed reads A"), (span_b, "sgemm_packed reads the packed B"), (span_c, "sgemm_packed writes C")]
            }
            (RuntimeFn::SgemmFused, &[Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc), Some(ta), Some(tb), Some(nr), kc, mode, period, residual, act]) if m > 0 && n > 0 && k > 0 && lda >= 0 && ldb >= 0 && ldc >= 0 => {
                if let Some(mode) = mode.filter(|m| !(0..=2).contains(m)) {
                    self.err(format!("sgemm_fused bias mode {mode} does not exist (0 none, 1 per row, 2 per column)"));
                }
                if let Some(act) = act.filter(|a| !(0..=8).contains(a)) {
                    self.err(format!("sgemm_fused activation code {act} does not exist"));
                }
                if nr > 0 && kc.is_some_and(|kc| kc <= 0) {
                    // The runtime does nothing with an empty layout.
                    return;
                }
                let (m, n, k, lda, ldb, ldc, nr) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldb), i128::from(ldc), i128::from(nr));
                let span_a = if ta != 0 { (k - 1) * lda + m - 1 } else { (m - 1) * lda + k - 1 };
                let span_b = match (nr > 0, tb != 0) {
                    (true, _) => k * ((n + nr - 1) / nr * nr) - 1,
                    (false, true) => (n - 1) * ldb + k - 1,
                    (false, false) => (k - 1) * ldb + n - 1,
                };
                let span_c = (m - 1) * ldc + n - 1;
                // As for `epilogue`: an operand counts as read unless a constant flag says not.
                let bias = bias_span(mode, period, m, n);
                let z = if residual == Some(0) { -1 } else { span_c };
                vec![(span_a, "sgemm_fused reads A"), (span_b, "sgemm_fused reads B"), (span_c, "sgemm_fused writes C"), (bias, "sgemm_fused reads the bias"), (z, "sgemm_fused reads Z")]
            }
            (RuntimeFn::DwConv2d, &[Some(planes), Some(channels), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), ..]) => {
                // Each operand is `count` planes of `a·b` elements; a zero extent addresses
                // nothing, and so does the whole call when the output is empty.
                let extent = |count: i64, a: i64, b: i64| {
                    let n = i128::from(count) * i128::from(a);
                    // `count·a` past `i64` (sizes the runtime refuses) could overflow the product.
                    if count < 0 || a < 0 || b < 0 || n > i128::from(i64::MAX) { None } else { Some(n * i128::from(b) - 1) }
                };
                match (extent(planes, h, w), extent(channels, kh, kw), extent(planes, oh, ow)) {
                    (Some(x), Some(k), Some(y)) if y >= 0 => vec![(x, "dwconv2d reads X"), (k, "dwconv2d reads W"), (y, "dwconv2d writes Y")],
                    _ => return,
                }
            }
            (RuntimeFn::Conv2d | RuntimeFn::Conv2dPacked, &[Some(batch), Some(channels), Some(out_channels), Some(groups), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), _, _, _, _, _, _, bias, residual, act, ref width @ ..]) => {
                if let Some(act) = act.filter(|a| !(0..=8).contains(a)) {
                    self.err(format!("{name} activation code {act} does not exist"));
                }
                // Nothing is addressed when the output is empty or the groups do not divide the
                // channels (which the runtime refuses).
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                if groups <= 0 || channels % groups != 0 || out_channels % groups != 0 {
                    return;
                }
                let (Some(x), Some(mut wk), Some(y)) = (product(&[batch, channels, h, w]), product(&[out_channels, channels / groups, kh, kw]), product(&[batch, out_channels, oh, ow])) else { return };
                if y == 0 {
                    return;
                }
                if f == RuntimeFn::Conv2dPacked {
                    // Each group's kernels in whole panels of `width` output channels.
                    let Some(&Some(width)) = width.first() else {
                        return self.err(format!("{name} needs a constant panel width"));
                    };
                    if width <= 0 {
                        return self.err(format!("{name} panel width {width} is not positive"));
                    }
                    let mg = out_channels / groups;
                    let panels = (i128::from(mg) + i128::from(width) - 1) / i128::from(width);
                    let Some(per_group) = product(&[channels / groups, kh, kw]) else { return };
                    wk = i128::from(groups) * panels * i128::from(width) * per_group;
                }
                let flag = |f: Option<i64>, span: i128| if f == Some(0) { -1 } else { span };
                let what = if f == RuntimeFn::Conv2d {
                    ["conv2d reads X", "conv2d reads W", "conv2d reads the bias", "conv2d reads Z", "conv2d writes Y"]
                } else {
                    ["conv2d_packed reads X", "conv2d_packed reads the packed W", "conv2d_packed reads the bias", "conv2d_packed reads Z", "conv2d_packed writes Y"]
                };
                let spans = [x - 1, wk - 1, flag(bias, i128::from(out_channels) - 1), flag(residual, y - 1), y - 1];
                spans.into_iter().zip(what).collect()
            }
            (RuntimeFn::Conv2dNchwc, &[Some(batch), Some(channels), Some(out_channels), Some(groups), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), _, _, _, _, _, _, bias, residual, act, width, x_blocked]) => {
                if let Some(act) = act.filter(|a| !(0..=2).contains(a)) {
                    self.err(format!("{name} activation code {act} is not none, relu or clip"));
                }
                let Some(width) = width else { return self.err(format!("{name} needs a constant panel width")) };
                // One group (panels of 64 output channels), or depthwise (blocks of 16).
                let depthwise = groups == channels && out_channels == channels && groups > 1;
                let packed = if depthwise { 16 } else { 64 };
                if width != 0 && width != packed {
                    return self.err(format!("{name} panel width {width} is not 0 or {packed}"));
                }
                // Nothing is addressed with other groups or an empty output (which the runtime
                // refuses).
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                if groups != 1 && !depthwise {
                    return;
                }
                let blocks = |c: i64| (i128::from(c) + 15) / 16 * 16;
                let (Some(x), Some(wk), Some(y)) = (product(&[batch, h, w]), product(&[out_channels, channels / groups.max(1), kh, kw]), product(&[batch, oh, ow])) else { return };
                // NCHW planes when `x_blocked` is a constant 0; blocked otherwise.
                let (x, y) = (x * if x_blocked == Some(0) { i128::from(channels) } else { blocks(channels) }, y * blocks(out_channels));
                if y == 0 || channels < 0 || out_channels < 0 {
                    return;
                }
                let (kh, kw) = (i128::from(kh), i128::from(kw));
                let wk = match (width, depthwise) {
                    (0, _) => wk,
                    (_, true) => blocks(channels) * kh * kw,
                    (_, false) => (i128::from(out_channels) + 63) / 64 * 64 * i128::from(channels) * kh * kw,
                };
                let flag = |f: Option<i64>, span: i128| if f == Some(0) { -1 } else { span };
                let what = ["conv2d_nchwc reads X", "conv2d_nchwc reads W", "conv2d_nchwc reads the bias", "conv2d_nchwc reads Z", "conv2d_nchwc writes Y"];
                let spans = [x - 1, wk - 1, flag(bias, i128::from(out_channels) - 1), flag(residual, y - 1), y - 1];
                spans.into_iter().zip(what).collect()
            }
            (RuntimeFn::MaxPool2dNchwc, &[Some(planes), Some(h), Some(w), Some(oh), Some(ow), ..]) => {
                // `⌈planes/16⌉·16` lanes of `h·w` pixels read, of `oh·ow` written.
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                let (Some(x), Some(y)) = (product(&[planes, h, w]), product(&[planes, oh, ow])) else { return };
                if y == 0 {
                    return;
                }
                let lanes = (i128::from(planes) + 15) / 16 * 16;
                let (x, y) = (x / i128::from(planes) * lanes, y / i128::from(planes) * lanes);
                vec![(x - 1, "maxpool2d_nchwc reads X"), (y - 1, "maxpool2d_nchwc writes Y")]
            }
            (RuntimeFn::ToNchwc | RuntimeFn::FromNchwc, &[Some(batch), Some(channels), Some(pixels)]) => {
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                let Some(plain) = product(&[batch, channels, pixels]) else { return };
                if plain == 0 {
                    return;
                }
                let blocked = plain / i128::from(channels) * ((i128::from(channels) + 15) / 16 * 16);
                if f == RuntimeFn::ToNchwc {
                    vec![(plain - 1, "to_nchwc reads X"), (blocked - 1, "to_nchwc writes Y")]
                } else {
                    vec![(blocked - 1, "from_nchwc reads X"), (plain - 1, "from_nchwc writes Y")]
                }
            }
            (RuntimeFn::Epilogue, &[Some(rows), Some(cols), mode, period, residual, act]) => {
                if let Some(mode) = mode.filter(|m| !(0..=2).contains(m)) {
                    self.err(format!("epilogue bias mode {mode} does not exist (0 none, 1 per row, 2 per column)"));
                }
                if let (Some(1), Some(period)) = (mode, period.filter(|&p| p <= 0)) {
                    self.err(format!("epilogue with a bias per row of period {period}"));
                }
                if let Some(act) = act.filter(|a| !(0..=8).contains(a)) {
                    self.err(format!("epilogue activation code {act} does not exist"));
                }
                if rows <= 0 || cols <= 0 || i128::from(rows) * i128::from(cols) > i128::from(i64::MAX) {
                    return;
                }
                let (rows, cols) = (i128::from(rows), i128::from(cols));
                // An operand counts as read unless its flag is a constant that says it is not.
                let bias = bias_span(mode, period, rows, cols);
                let z = if residual == Some(0) { -1 } else { rows * cols - 1 };
                vec![(rows * cols - 1, "epilogue writes Y"), (bias, "epilogue reads the bias"), (z, "epilogue reads Z")]
            }
            (RuntimeFn::Im2col, &[Some(channels), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), ..]) => {
                // `channels` planes of `h·w` read, `channels·kh·kw` rows of `oh·ow` written;
                // nothing is addressed when the matrix is empty (or sizes are nonsense, which
                // the runtime refuses).
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                let (Some(x), Some(col)) = (product(&[channels, h, w]), product(&[channels, kh, kw, oh, ow])) else { return };
                if col == 0 {
                    return;
                }
                vec![(x - 1, "im2col reads X"), (col - 1, "im2col writes the matrix")]
            }
            (RuntimeFn::MaxPool2d, &[Some(planes), Some(h), Some(w), Some(oh), Some(ow), ..]) => {
                // `planes` planes of `h·w` read, of `oh·ow` written; nothing is addressed when
                // the output is empty.
                let product = |v: &[i64]| v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) });
                let (Some(x), Some(y)) = (product(&[planes, h, w]), product(&[planes, oh, ow])) else { return };
                if y == 0 {
                    return;
                }
                vec![(x - 1, "maxpool2d reads X"), (y - 1, "maxpool2d writes Y")]
            }
            (RuntimeFn::Copy, &[Some(n)]) => {
                if n <= 0 {
                    return;
                }
                vec![(i128::from(n) - 1, "copy writes its destination"), (i128::from(n) - 1, "copy reads its source")]
            }
            (RuntimeFn::LayerNorm, &[Some(rows), Some(cols), bias, rms]) => {
                // Nothing is addressed when the matrix is empty (or a size negative).
                if rows <= 0 || cols <= 0 {
                    return;
                }
                let (n, cols) = (i128::from(rows) * i128::from(cols), i128::from(cols));
                let bias = if bias == Some(0) || rms.is_some_and(|r| r != 0) { -1 } else { cols - 1 };
                vec![(n - 1, "layernorm reads X"), (cols - 1, "layernorm reads the scale"), (bias, "layernorm reads the bias"), (n - 1, "layernorm writes Y")]
            }
            (RuntimeFn::Softmax, &[Some(rows), Some(cols)]) => {
                // Nothing is addressed when the matrix is empty (or a size negative).
                if rows <= 0 || cols <= 0 {
                    return;
                }
                vec![(i128::from(rows) * i128::from(cols) - 1, "softmax reads and writes X")]
            }
            _ => return,
        };
        for ((id, buf, r), (span, what)) in addrs.iter().zip(spans) {
            if span < 0 {
                continue;
            }
            let widened = if r.known() { Range::make(r.lo, r.hi + span, r.exact, r.vars.clone()) } else { Range::TOP };
            self.bounds(what, *id, buf, &widened);
        }
    }
}

/// The last element an epilogue's bias reaches (−1: not read) over a `rows × cols` matrix, by
/// its mode (0 none, 1 per row of `period`, 2 per column) when constant: a bias per row of
/// unknown period spans every row's, and one of unknown mode the most either mode reads.
fn bias_span(mode: Option<i64>, period: Option<i64>, rows: i128, cols: i128) -> i128 {
    match (mode, period) {
        (Some(0), _) => -1,
        (Some(1), Some(period)) => i128::from(period).min(rows) - 1,
        (Some(1), None) => rows - 1,
        (Some(2), _) => cols - 1,
        _ => rows.max(cols) - 1,
    }
}
