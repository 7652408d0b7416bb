//! Signal processing: DFT, STFT, the window generators and MelWeightMatrix.
//!
//! Complex values are a trailing axis of 2 (re, im); a trailing axis of 1 is a real signal.
//! Transforms are direct `O(n²)` sums accumulated in `f64`, with the twiddle factors
//! `e^{2πij/n}` read from a constant table indexed by `(k·m) mod n`, so no trigonometry runs
//! in the kernel. The inverse one-sided DFT (irfft) follows numpy: it reads the first
//! `n/2 + 1` bins and ignores the imaginary parts of the DC and Nyquist bins.

use kiln_tir::{DType, NodeId, Tensor, TensorData};

use super::{bind, const_scalar, expect_dims, float_type, load_as, local, store, Body};
use kiln_loops::builder::linear;
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

const F64: ScalarType = ScalarType::F64;

/// A constant table of `(cos, sin)(2πj/n)` for `j` in `0..n`, interleaved.
fn twiddles(cx: &mut Lowerer<'_>, n: NodeId, len: u64) -> BufId {
    let mut bytes = Vec::with_capacity(16 * len as usize);
    for j in 0..len {
        let angle = 2.0 * std::f64::consts::PI * j as f64 / len as f64;
        bytes.extend_from_slice(&angle.cos().to_le_bytes());
        bytes.extend_from_slice(&angle.sin().to_le_bytes());
    }
    let tensor = Tensor { dtype: DType::F64, shape: vec![len, 2], data: TensorData::Raw(bytes.into()) };
    let name = format!("{}_twiddles", cx.node(n).name);
    cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(F64), len: 2 * len, kind: BufferKind::Const(tensor) })
}

/// `(cos, sin)(2π·(k·m mod n)/n)` from the table.
fn twiddle(table: BufId, k: Expr, m: Expr, len: u64) -> (Expr, Expr) {
    let j = (k * m) % len as i64;
    (Expr::load(table, j.clone() * 2), Expr::load(table, j * 2 + 1))
}

/// A complex (or real) operand viewed as a signal: element `(idx..., part)`.
struct Complex<'a> {
    x: &'a Operand,
    strides: Vec<i64>,
}

impl Complex<'_> {
    fn new(x: &Operand) -> Complex<'_> {
        Complex { x, strides: x.strides() }
    }

    /// True if it has an imaginary part.
    fn is_complex(&self) -> bool {
        self.x.dims.last() == Some(&2)
    }

    /// The real and imaginary parts (the latter 0 for a real signal) at `idx` (all but the
    /// trailing axis), as `f64`.
    fn at(&self, idx: &[Expr]) -> (Expr, Option<Expr>) {
        let flat = linear(idx, &self.strides);
        let re = load_as(self.x, flat.clone(), F64);
        let im = self.is_complex().then(|| load_as(self.x, flat + 1, F64));
        (re, im)
    }
}

/// `a + b` where `None` is 0.
fn add_opt(a: Expr, b: Option<Expr>) -> Expr {
    match b {
        Some(b) => a + b,
        None => a,
    }
}

/// `a - b` where `None` is 0.
fn sub_opt(a: Expr, b: Option<Expr>) -> Expr {
    match b {
        Some(b) => a - b,
        None => a,
    }
}

/// Lowers DFT.
pub(super) fn dft(cx: &mut Lowerer<'_>, n: NodeId, inverse: bool, onesided: bool) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    float_type(cx, n, &x, "input")?;
    let rank = x.rank();
    if rank < 2 || !matches!(x.dims[rank - 1], 1 | 2) {
        return Err(cx.unsupported(n, format!("invalid model: input shape {:?}", x.dims)));
    }
    let axis = const_scalar(cx, n, 2, "axis")?.unwrap_or(-2);
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a >= rank as i64 - 1 {
        return Err(cx.unsupported(n, format!("invalid model: axis {axis} for rank {rank}")));
    }
    let a = a as usize;
    let signal = x.dims[a];
    let len = match const_scalar(cx, n, 1, "dft_length")? {
        Some(l) if l < 1 => return Err(cx.unsupported(n, format!("invalid model: dft_length {l}"))),
        Some(l) => l as u64,
        None if inverse && onesided => 2 * signal.saturating_sub(1),
        None => signal,
    };
    let (bins, parts) = match (inverse, onesided) {
        (false, true) => (len / 2 + 1, 2),
        (true, true) => (len, 1),
        _ => (len, 2),
    };
    let y = cx.required_output(n, 0)?;
    let mut want = x.dims.clone();
    want[a] = bins;
    want[rank - 1] = parts;
    expect_dims(cx, n, &y, &want)?;
    if y.numel() == 0 {
        return Ok(());
    }
    if len == 0 {
        return Err(cx.unsupported(n, "invalid model: a DFT of length 0"));
    }
    let table = twiddles(cx, n, len);
    let src = Complex::new(&x);
    let ys = y.strides();
    let scale = if inverse { 1.0 / len as f64 } else { 1.0 };
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&y.dims[..rank - 1], |k, o| {
        let mut s = Vec::new();
        let at = |m: Expr| {
            let mut idx = o.to_vec();
            idx[a] = m;
            idx.push(Expr::idx(0));
            idx
        };
        let out = |part: i64| {
            let mut idx = o.to_vec();
            idx.push(Expr::idx(part));
            linear(&idx, &ys)
        };
        let bin = o[a].clone();
        if inverse && onesided {
            // irfft: bin 0 once, bins 1..n/2 (exclusive) twice as their conjugates, and the
            // Nyquist bin of an even length once; only real parts of bins 0 and n/2 count.
            let used = signal.min(len / 2 + 1);
            let acc = local(k, &mut s, F64, Expr::float(F64, 0.0));
            if used > 0 {
                s.push(Stmt::Assign(acc, src.at(&at(Expr::idx(0))).0));
            }
            let full = used.saturating_sub(1).min((len - 1) / 2);
            s.extend(k.nest(&[full], |_, j| {
                let kk = j[0].clone() + 1;
                let (re, im) = src.at(&at(kk.clone()));
                let (c, sn) = twiddle(table, kk, bin.clone(), len);
                let term = sub_opt(re * c, im.map(|im| im * sn));
                vec![Stmt::Assign(acc, Expr::Var(acc) + Expr::float(F64, 2.0) * term)]
            }));
            if len % 2 == 0 && len / 2 < used {
                let nyq = Expr::idx((len / 2) as i64);
                let (c, _) = twiddle(table, nyq.clone(), bin.clone(), len);
                s.push(Stmt::Assign(acc, Expr::Var(acc) + src.at(&at(nyq)).0 * c));
            }
            s.push(store(&y, out(0), Expr::Var(acc) * Expr::float(F64, scale), F64));
            return s;
        }
        let re_acc = local(k, &mut s, F64, Expr::float(F64, 0.0));
        let im_acc = local(k, &mut s, F64, Expr::float(F64, 0.0));
        s.extend(k.nest(&[signal.min(len)], |k, m| {
            let mut s = Vec::new();
            let (re, im) = src.at(&at(m[0].clone()));
            let re = bind(k, &mut s, F64, re);
            let im = im.map(|im| bind(k, &mut s, F64, im));
            let (c, sn) = twiddle(table, bin.clone(), m[0].clone(), len);
            let c = bind(k, &mut s, F64, c);
            let sn = bind(k, &mut s, F64, sn);
            // Forward: (re + i·im)(c − i·sn); inverse: (re + i·im)(c + i·sn).
            let (new_re, new_im) = if inverse {
                (sub_opt(re.clone() * c.clone(), im.clone().map(|im| im * sn.clone())), add_opt(re * sn, im.map(|im| im * c)))
            } else {
                (add_opt(re.clone() * c.clone(), im.clone().map(|im| im * sn.clone())), sub_opt(im.map(|im| im * c).unwrap_or(Expr::float(F64, 0.0)), Some(re * sn)))
            };
            s.push(Stmt::Assign(re_acc, Expr::Var(re_acc) + new_re));
            s.push(Stmt::Assign(im_acc, Expr::Var(im_acc) + new_im));
            s
        }));
        s.push(store(&y, out(0), Expr::Var(re_acc) * Expr::float(F64, scale), F64));
        s.push(store(&y, out(1), Expr::Var(im_acc) * Expr::float(F64, scale), F64));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}

/// Lowers STFT: the forward DFT of every windowed frame.
pub(super) fn stft(cx: &mut Lowerer<'_>, n: NodeId, onesided: bool) -> Result<(), LowerError> {
    let x = cx.required(n, 0)?;
    float_type(cx, n, &x, "signal")?;
    let window = cx.input(n, 2)?;
    if x.rank() != 3 || !matches!(x.dims[2], 1 | 2) {
        return Err(cx.unsupported(n, format!("invalid model: signal shape {:?}", x.dims)));
    }
    let (batch, length) = (x.dims[0], x.dims[1]);
    let Some(step) = const_scalar(cx, n, 1, "frame_step")? else {
        return Err(cx.unsupported(n, "invalid model: frame_step is missing"));
    };
    let frame = match (const_scalar(cx, n, 3, "frame_length")?, &window) {
        (Some(l), _) => l,
        (None, Some(w)) => w.dims.first().copied().unwrap_or(0) as i64,
        (None, None) => length as i64,
    };
    if step < 1 || frame < 1 || frame as u64 > length {
        return Err(cx.unsupported(n, format!("invalid model: frame_step {step}, frame_length {frame} for a signal of {length}")));
    }
    let frame = frame as u64;
    if let Some(w) = window.as_ref().filter(|w| w.dims != [frame]) {
        return Err(cx.unsupported(n, format!("invalid model: window shape {:?} for frame length {frame}", w.dims)));
    }
    let frames = (length - frame) / step as u64 + 1;
    let bins = if onesided { frame / 2 + 1 } else { frame };
    let y = cx.required_output(n, 0)?;
    expect_dims(cx, n, &y, &[batch, frames, bins, 2])?;
    if y.numel() == 0 {
        return Ok(());
    }
    let table = twiddles(cx, n, frame);
    let src = Complex::new(&x);
    let ys = y.strides();
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&[batch, frames, bins], |k, o| {
        let mut s = Vec::new();
        let re_acc = local(k, &mut s, F64, Expr::float(F64, 0.0));
        let im_acc = local(k, &mut s, F64, Expr::float(F64, 0.0));
        s.extend(k.nest(&[frame], |k, m| {
            let mut s = Vec::new();
            let pos = o[1].clone() * step + m[0].clone();
            let (re, im) = src.at(&[o[0].clone(), pos, Expr::idx(0)]);
            let w = window.as_ref().map(|w| bind(k, &mut s, F64, load_as(w, m[0].clone(), F64)));
            let weigh = |v: Expr| match &w {
                Some(w) => v * w.clone(),
                None => v,
            };
            let re = bind(k, &mut s, F64, weigh(re));
            let im = im.map(|im| bind(k, &mut s, F64, weigh(im)));
            let (c, sn) = twiddle(table, o[2].clone(), m[0].clone(), frame);
            let c = bind(k, &mut s, F64, c);
            let sn = bind(k, &mut s, F64, sn);
            let new_re = add_opt(re.clone() * c.clone(), im.clone().map(|im| im * sn.clone()));
            let new_im = sub_opt(im.map(|im| im * c).unwrap_or(Expr::float(F64, 0.0)), Some(re * sn));
            s.push(Stmt::Assign(re_acc, Expr::Var(re_acc) + new_re));
            s.push(Stmt::Assign(im_acc, Expr::Var(im_acc) + new_im));
            s
        }));
        let at = |part: i64| linear(&[o[0].clone(), o[1].clone(), o[2].clone(), Expr::idx(part)], &ys);
        s.push(store(&y, at(0), Expr::Var(re_acc), F64));
        s.push(store(&y, at(1), Expr::Var(im_acc), F64));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}

/// Which window generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Window {
    /// `sin²(πi/N)`.
    Hann,
    /// `α − β·cos(2πi/N)`, `α = 25/46`, `β = 1 − α`.
    Hamming,
    /// `0.42 − 0.5·cos(2πi/N) + 0.08·cos(4πi/N)`.
    Blackman,
}

/// Lowers HannWindow, HammingWindow and BlackmanWindow: `N` is the size when periodic, one
/// less when symmetric. Values are computed in `f64` and converted to the output type.
pub(super) fn window(cx: &mut Lowerer<'_>, n: NodeId, kind: Window, periodic: bool) -> Result<(), LowerError> {
    let y = cx.required_output(n, 0)?;
    if y.rank() != 1 {
        return Err(cx.unsupported(n, format!("output shape {:?}", y.dims)));
    }
    let size = y.dims[0];
    let period = if periodic { size as f64 } else { size as f64 - 1.0 };
    let pi = std::f64::consts::PI;
    let c = |v: f64| Expr::float(F64, v);
    let mut b = Body::new(cx, n);
    let nest = b.k.nest(&[size], |k, i| {
        let mut s = Vec::new();
        let fi = bind(k, &mut s, F64, i[0].clone().cast(F64));
        // `fi · (m·π) / N`, the angle of harmonic m.
        let angle = |m: f64| fi.clone() * c(m * pi) / c(period);
        let v = match kind {
            Window::Hann => {
                let sn = bind(k, &mut s, F64, angle(1.0).math(MathFn::Sin));
                sn.clone() * sn
            }
            Window::Hamming => {
                let alpha = 25.0 / 46.0;
                c(alpha) - angle(2.0).math(MathFn::Cos) * c(1.0 - alpha)
            }
            Window::Blackman => angle(2.0).math(MathFn::Cos) * c(-0.5) + angle(4.0).math(MathFn::Cos) * c(0.08) + c(0.42),
        };
        s.push(store(&y, i[0].clone(), v, F64));
        s
    });
    b.stmts.extend(nest);
    b.push(cx);
    Ok(())
}

/// Lowers MelWeightMatrix: triangular filters between `num_mel_bins + 2` frequencies spaced
/// evenly on the mel scale, each rounded down to a spectrogram bin, as ONNX's reference does
/// (including its `f32` steps: the edge frequencies' `log1p` and the product by 2595). The
/// bins are computed into a scratch row first; a bin the reference would write outside the
/// matrix (or wrap around, for a negative one) is a run-time error.
pub(super) fn mel_weight_matrix(cx: &mut Lowerer<'_>, n: NodeId) -> Result<(), LowerError> {
    let scalars: Vec<Operand> = (0..5).map(|i| cx.required(n, i)).collect::<Result<_, _>>()?;
    if scalars.iter().any(|s| s.numel() != 1) {
        return Err(cx.unsupported(n, "invalid model: the inputs must be scalars"));
    }
    if scalars[..3].iter().any(|s| s.ty().is_float()) || scalars[3..].iter().any(|s| !s.ty().is_float()) {
        return Err(cx.unsupported(n, "invalid model: input types"));
    }
    let y = cx.required_output(n, 0)?;
    if y.rank() != 2 {
        return Err(cx.unsupported(n, format!("output shape {:?}", y.dims)));
    }
    let (bins, mels) = (y.dims[0], y.dims[1]);
    let name = format!("{}_bins", cx.node(n).name);
    let edges = cx.program.add_buffer(Buffer { name, elem: ElemType::Scalar(ScalarType::I64), len: mels + 2, kind: BufferKind::Temp });
    let rate_error = cx.error(n, "sample_rate is 0");
    let size_error = cx.error(n, "dft_length does not match the output shape");
    let bin_error = cx.error(n, "a filter's frequency falls outside the spectrogram bins");
    let c = |v: f64| Expr::float(F64, v);
    let f32c = |v: f64| Expr::float(ScalarType::F32, v);
    let mut b = Body::new(cx, n);
    let s = &mut b.stmts;
    let k = &mut b.k;
    let dft_len = bind(k, s, ScalarType::I64, load_as(&scalars[1], Expr::idx(0), ScalarType::I64));
    s.push(Stmt::Check { cond: (dft_len.clone() / 2 + 1).cmp(CmpOp::Eq, Expr::idx(bins as i64)), error: size_error });
    let rate = bind(k, s, ScalarType::I64, load_as(&scalars[2], Expr::idx(0), ScalarType::I64));
    s.push(Stmt::Check { cond: rate.clone().cmp(CmpOp::Ne, Expr::idx(0)), error: rate_error });
    // 2595 · log1p(hz / 700) in f32, then divided by ln 10 in f64.
    let mut mel = |x: &Operand| {
        let hz = load_as(x, Expr::idx(0), ScalarType::F32) / f32c(700.0);
        let log1p = (hz.cast(F64) + c(1.0)).math(MathFn::Log).cast(ScalarType::F32);
        let scaled = (f32c(2595.0) * log1p).cast(F64) / c(std::f64::consts::LN_10);
        bind(k, s, F64, scaled)
    };
    let low = mel(&scalars[3]);
    let high = mel(&scalars[4]);
    let step = bind(k, s, F64, (high - low.clone()) / c((mels + 2) as f64));
    let scale = bind(k, s, F64, (dft_len.clone() + 1).cast(F64));
    let rate_f = bind(k, s, F64, rate.cast(F64));
    let fill = k.nest(&[mels + 2], |k, i| {
        let mut s = Vec::new();
        let m = i[0].clone().cast(F64) * step.clone() + low.clone();
        let hz = bind(k, &mut s, F64, c(700.0) * ((m / c(2595.0) * c(std::f64::consts::LN_10)).math(MathFn::Exp) - c(1.0)));
        let bin = bind(k, &mut s, ScalarType::I64, (scale.clone() * hz / rate_f.clone()).un(UnOp::Floor).cast(ScalarType::I64));
        // Centres are written at; the last frequency only bounds a range from above.
        let limit = i[0].clone().cmp(CmpOp::Eq, Expr::idx((mels + 1) as i64)).select(Expr::idx(bins as i64), Expr::idx(bins as i64 - 1));
        let ok = bin.clone().cmp(CmpOp::Ge, Expr::idx(0)).bin(BinOp::And, bin.clone().cmp(CmpOp::Le, limit));
        s.push(Stmt::Check { cond: ok, error: bin_error });
        s.push(Stmt::Store { buf: edges, index: i[0].clone(), value: bin });
        s
    });
    s.extend(fill);
    let fill = k.nest(&[bins, mels], |k, o| {
        let (j, i) = (o[0].clone(), o[1].clone());
        let mut s = Vec::new();
        let lo = bind(k, &mut s, ScalarType::I64, Expr::load(edges, i.clone()));
        let mid = bind(k, &mut s, ScalarType::I64, Expr::load(edges, i.clone() + 1));
        let hi = bind(k, &mut s, ScalarType::I64, Expr::load(edges, i + 2));
        let f = |e: Expr| e.cast(F64);
        let (rise, fall) = (mid.clone() - lo.clone(), hi.clone() - mid.clone());
        let up = rise.clone().cmp(CmpOp::Eq, Expr::idx(0)).select(
            j.clone().cmp(CmpOp::Eq, mid.clone()).select(c(1.0), c(0.0)),
            j.clone().cmp(CmpOp::Ge, lo.clone()).bin(BinOp::And, j.clone().cmp(CmpOp::Le, mid.clone())).select(f(j.clone() - lo) / f(rise), c(0.0)),
        );
        let down = fall.clone().cmp(CmpOp::Gt, Expr::idx(0)).bin(BinOp::And, j.clone().cmp(CmpOp::Ge, mid).bin(BinOp::And, j.clone().cmp(CmpOp::Lt, hi.clone())));
        let value = down.select(f(hi - j) / f(fall), up);
        s.push(store(&y, o[0].clone() * mels as i64 + o[1].clone(), value, F64));
        s
    });
    s.extend(fill);
    b.push(cx);
    Ok(())
}
