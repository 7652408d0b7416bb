//! The interpreter's runtime calls: each routine's operands evaluated by name, then the
//! runtime's own code run on copies of the buffer spans it addresses, so compiled code and the
//! interpreter compute the same values. The windowed routines (convolutions, pooling) and the
//! blocked layout's are in `windowed.rs`.

use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
use kiln_runtime::qdwconv::QDwConv2d;
use kiln_runtime::qgemm::{QBias, QScale, Qgemm, Requant};
use kiln_runtime::requantize::Requantize;
use kiln_runtime::gemm::{PackedLayout, Sgemm, SgemmFused, Transpose};
use kiln_runtime::norm::LayerNorm;
use kiln_runtime::softmax::Softmax;
use kiln_runtime::topk::TopK;
use kiln_runtime::window::Window;

use super::{InterpError, Machine, Val};
use crate::call;
use crate::ir::*;

/// The integer operands `$field` of call `$c` of routine `$name`, evaluated in order.
macro_rules! ints {
    ($m:ident, $name:expr, $c:ident; $($field:ident),* $(,)?) => {
        [$($m.int($name, stringify!($field), &$c.$field)?),*]
    };
}

/// The `f32` operands `$field` of call `$c` of routine `$name`, evaluated in order.
macro_rules! floats {
    ($m:ident, $name:expr, $c:ident; $($field:ident),* $(,)?) => {
        [$($m.float($name, stringify!($field), &$c.$field)?),*]
    };
}

pub(super) use ints;

impl Machine<'_> {
    /// Integer operand `operand` of `routine`: any integer type, extended to `i64` as compiled
    /// code extends it; another type is a fault.
    pub(super) fn int(&mut self, routine: &str, operand: &str, e: &Expr) -> Result<i64, InterpError> {
        match self.expr(e)? {
            Val::Int(_, v) => Ok(v),
            other => self.fault(format!("{routine} operand `{operand}` is {}, not an integer", other.ty().name())),
        }
    }

    /// `f32` operand `operand` of `routine`; another type is a fault.
    pub(super) fn float(&mut self, routine: &str, operand: &str, e: &Expr) -> Result<f32, InterpError> {
        match self.expr(e)? {
            Val::F32(x) => Ok(x),
            other => self.fault(format!("{routine} operand `{operand}` is {}, not f32", other.ty().name())),
        }
    }

    /// A windowed routine's window operands (`call::Conv2d::window`'s order), evaluated; a
    /// negative size is a fault.
    pub(super) fn window(&mut self, routine: &str, operands: [&Expr; 12]) -> Result<Window, InterpError> {
        const NAMES: [&str; 12] = ["ih", "iw", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw"];
        let mut sizes = [0; 12];
        for (i, e) in operands.into_iter().enumerate() {
            sizes[i] = self.int(routine, NAMES[i], e)?;
        }
        match Window::from_args(sizes) {
            Some(win) => Ok(win),
            None => self.fault(format!("{routine} with a negative window size in {sizes:?}")),
        }
    }

    /// Count operands: negative ones are a fault.
    pub(super) fn counts<const N: usize>(&self, routine: &str, counts: [i64; N]) -> Result<[usize; N], InterpError> {
        match counts.map(usize::try_from) {
            c if c.iter().all(Result::is_ok) => Ok(c.map(|c| c.unwrap_or(0))),
            _ => self.fault(format!("{routine} with a negative size in {counts:?}")),
        }
    }

    pub(super) fn call(&mut self, call: &Call) -> Result<(), InterpError> {
        match call {
            Call::Sgemm(c) => self.sgemm(c),
            Call::SgemmPacked(c) => self.sgemm_packed(c),
            Call::SgemmFused(c) => self.sgemm_fused(c),
            Call::DwConv2d(c) => self.dwconv2d(c),
            Call::Conv2d(c) => self.conv2d("conv2d", [&c.x, &c.w, &c.b, &c.z, &c.y], c.ints(), [&c.alpha, &c.beta], None),
            Call::Conv2dPacked(c) => {
                let width = self.int("conv2d_packed", "width", &c.width)?;
                self.conv2d("conv2d_packed", [&c.x, &c.w, &c.b, &c.z, &c.y], c.ints(), [&c.alpha, &c.beta], Some(width))
            }
            Call::Conv2dNchwc(c) => self.conv2d_nchwc(c),
            Call::Epilogue(c) => self.epilogue(c),
            Call::Im2col(c) => self.im2col(c),
            Call::MaxPool2d(c) => self.maxpool2d(c),
            Call::MaxPool2dNchwc(c) => self.maxpool2d_nchwc(c),
            Call::ToNchwc(c) => self.reorder("to_nchwc", true, [&c.x, &c.y], [&c.batch, &c.channels, &c.pixels]),
            Call::FromNchwc(c) => self.reorder("from_nchwc", false, [&c.x, &c.y], [&c.batch, &c.channels, &c.pixels]),
            Call::Copy(c) => self.copy(c),
            Call::Requantize(c) => self.requantize(c),
            Call::Qgemm(c) => self.qgemm(c),
            Call::QgemmRequantize(c) => self.qgemm_requantize(c),
            Call::DwConv2dRequantize(c) => self.dwconv2d_requantize(c),
            Call::Im2colBytes(c) => self.im2col_bytes(c),
            Call::LayerNorm(c) => self.layernorm(c),
            Call::Softmax(c) => self.softmax(c),
            Call::TopK(c) => self.topk(c),
            Call::ShouldStop(c) => self.should_stop(c),
        }
    }

    fn should_stop(&mut self, c: &call::ShouldStop) -> Result<(), InterpError> {
        let i = self.index(&c.flag.index)?;
        let (at, _, elem) = self.slot(c.flag.buf, i)?;
        if elem.bits() != 8 {
            return self.fault(format!("should_stop with a flag of {} elements", elem.name()));
        }
        let stop = u8::from(kiln_runtime::stop::reason().is_some());
        match self.memory[c.flag.buf.0 as usize].get_mut(at) {
            Some(b) => *b = stop,
            None => return self.fault(format!("{:?} has less memory than its length", c.flag.buf)),
        }
        Ok(())
    }

    fn sgemm(&mut self, c: &call::Sgemm) -> Result<(), InterpError> {
        let name = "sgemm";
        let [m, n, k, lda, ldb, ldc, ta, tb] = ints!(self, name, c; m, n, k, lda, ldb, ldc, trans_a, trans_b);
        let [alpha, beta] = floats!(self, name, c; alpha, beta);
        let (ai, bi, ci) = (self.index(&c.a.index)?, self.index(&c.b.index)?, self.index(&c.c.index)?);
        // The runtime's kernel computes the product, so compiled code and the interpreter
        // agree by construction; the interpreter checks the operands' extents and types.
        if m <= 0 || n <= 0 {
            return Ok(());
        }
        if lda < 0 || ldb < 0 || ldc < 0 {
            return self.fault(format!("sgemm with a negative leading dimension ({lda}, {ldb}, {ldc})"));
        }
        let transpose = |t: i64| if t != 0 { Transpose::Yes } else { Transpose::No };
        let g = Sgemm { m: m as usize, n: n as usize, k: k.max(0) as usize, lda: lda as usize, ldb: ldb as usize, ldc: ldc as usize, trans_a: transpose(ta), trans_b: transpose(tb), alpha, beta };
        let a = self.f32_span(name, c.a.buf, ai, g.a_len())?;
        let b = self.f32_span(name, c.b.buf, bi, g.b_len())?;
        let mut c_span = self.f32_span(name, c.c.buf, ci, g.c_len())?;
        g.run(&a, &b, &mut c_span);
        self.store_f32_span(c.c.buf, ci, &c_span)
    }

    fn sgemm_packed(&mut self, c: &call::SgemmPacked) -> Result<(), InterpError> {
        let name = "sgemm_packed";
        let [m, n, k, lda, ldc, ta, nr, kc] = ints!(self, name, c; m, n, k, lda, ldc, trans_a, nr, kc);
        let [alpha, beta] = floats!(self, name, c; alpha, beta);
        let (ai, bi, ci) = (self.index(&c.a.index)?, self.index(&c.b.index)?, self.index(&c.c.index)?);
        if m <= 0 || n <= 0 || nr <= 0 || kc <= 0 {
            return Ok(());
        }
        if lda < 0 || ldc < 0 {
            return self.fault(format!("sgemm_packed with a negative leading dimension ({lda}, {ldc})"));
        }
        let trans_a = if ta != 0 { Transpose::Yes } else { Transpose::No };
        let g = Sgemm { m: m as usize, n: n as usize, k: k.max(0) as usize, lda: lda as usize, ldb: 0, ldc: ldc as usize, trans_a, trans_b: Transpose::No, alpha, beta };
        let layout = PackedLayout { nr: nr as usize, kc: kc as usize };
        let a = self.f32_span(name, c.a.buf, ai, g.a_len())?;
        let b = self.f32_span(name, c.b.buf, bi, layout.len(g.k, g.n))?;
        let mut c_span = self.f32_span(name, c.c.buf, ci, g.c_len())?;
        g.run_packed(&a, &b, layout, &mut c_span);
        self.store_f32_span(c.c.buf, ci, &c_span)
    }

    fn sgemm_fused(&mut self, c: &call::SgemmFused) -> Result<(), InterpError> {
        let name = "sgemm_fused";
        let ints = ints!(self, name, c; m, n, k, lda, ldb, ldc, trans_a, trans_b, nr, kc, bias_mode, period, residual, act);
        let floats = floats!(self, name, c; alpha, beta, act_alpha, act_beta);
        // Compiled code does nothing for what the runtime refuses; the interpreter, a test
        // oracle, says so.
        let Some(f) = SgemmFused::from_args(ints, floats).filter(SgemmFused::is_valid) else {
            return self.fault(format!("sgemm_fused with invalid sizes or codes {ints:?}"));
        };
        let [ai, bi, ci, bsi, zi] = [&c.a, &c.b, &c.c, &c.bias, &c.z].map(|a| self.index(&a.index));
        let (ai, bi, ci, bsi, zi) = (ai?, bi?, ci?, bsi?, zi?);
        // The product writes C before Z is read: compiled code would read the new values.
        if f.residual && c.z.buf == c.c.buf && zi < ci + f.gemm.c_len() as i64 && ci < zi + f.z_len() as i64 {
            return self.fault("sgemm_fused with Z overlapping C");
        }
        // The runtime's routine computes it, as for sgemm; unused operands are not read.
        let a = self.f32_span(name, c.a.buf, ai, f.gemm.a_len())?;
        let b = self.f32_span(name, c.b.buf, bi, f.b_len())?;
        let bias = self.f32_span(name, c.bias.buf, bsi, f.bias_len())?;
        let z = self.f32_span(name, c.z.buf, zi, f.z_len())?;
        let mut c_span = self.f32_span(name, c.c.buf, ci, f.gemm.c_len())?;
        f.run(&a, &b, &mut c_span, &bias, &z);
        self.store_f32_span(c.c.buf, ci, &c_span)
    }

    fn epilogue(&mut self, c: &call::Epilogue) -> Result<(), InterpError> {
        let name = "epilogue";
        let [rows, cols, mode, period, residual, code] = ints!(self, name, c; rows, cols, bias_mode, period, residual, act);
        let [alpha, beta] = floats!(self, name, c; alpha, beta);
        // Compiled code does nothing for what the runtime refuses; the interpreter, a test
        // oracle, says so.
        let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
            return self.fault(format!("epilogue with a negative size ({rows} × {cols})"));
        };
        let bias = match (mode, usize::try_from(period)) {
            (0, _) => Bias::None,
            (1, Ok(period)) if period > 0 => Bias::PerRow { period },
            (2, _) => Bias::PerColumn,
            _ => return self.fault(format!("epilogue with bias mode {mode} and period {period}")),
        };
        let Some(act) = Activation::from_code(code, alpha, beta) else {
            return self.fault(format!("epilogue with activation code {code}"));
        };
        let e = Epilogue { rows, cols, bias, residual: residual != 0, act };
        if !e.is_valid() {
            return self.fault(format!("epilogue with invalid sizes {e:?}"));
        }
        let (yi, bi, zi) = (self.index(&c.y.index)?, self.index(&c.b.index)?, self.index(&c.z.index)?);
        // The runtime's routine computes it, as for sgemm; unused operands are not read.
        let b = self.f32_span(name, c.b.buf, bi, e.bias_len())?;
        let z = self.f32_span(name, c.z.buf, zi, e.z_len())?;
        let mut y_span = self.f32_span(name, c.y.buf, yi, e.y_len())?;
        e.run(&mut y_span, &b, &z);
        self.store_f32_span(c.y.buf, yi, &y_span)
    }

    fn copy(&mut self, c: &call::Copy) -> Result<(), InterpError> {
        let n = self.int("copy", "n", &c.n)?;
        if n <= 0 {
            return Ok(());
        }
        let (dst, src) = (c.dst.buf, c.src.buf);
        let (di, si) = (self.index(&c.dst.index)?, self.index(&c.src.index)?);
        // The bytes as they are, as the runtime copies them (bounds through `slot`).
        let (d0, _, de) = self.slot(dst, di)?;
        let (s0, _, se) = self.slot(src, si)?;
        self.slot(dst, di + n - 1)?;
        self.slot(src, si + n - 1)?;
        if de != se || de.is_packed() {
            return self.fault(format!("copy between {} and {} elements", se.name(), de.name()));
        }
        let bytes = n as usize * (de.bits() / 8) as usize;
        let Some(from) = self.memory[src.0 as usize].get(s0..s0 + bytes).map(<[u8]>::to_vec) else {
            return self.fault(format!("{src:?} has less memory than its length"));
        };
        let Some(to) = self.memory[dst.0 as usize].get_mut(d0..d0 + bytes) else {
            return self.fault(format!("{dst:?} has less memory than its length"));
        };
        to.copy_from_slice(&from);
        Ok(())
    }

    fn requantize(&mut self, c: &call::Requantize) -> Result<(), InterpError> {
        let name = "requantize";
        let [rows, cols, period, zero, signed, int_x] = ints!(self, name, c; rows, cols, period, zero, signed, int_x);
        let [rows, cols, period] = self.counts(name, [rows, cols, period])?;
        let (Ok(zero), true) = (i32::try_from(zero), period > 0) else {
            return self.fault(format!("requantize with period {period} and zero point {zero}"));
        };
        let q = Requantize { rows, cols, period, zero, signed: signed != 0, int_x: int_x != 0 };
        let Some(n) = q.len() else {
            return self.fault(format!("requantize of {rows} × {cols} elements"));
        };
        if n == 0 {
            return Ok(());
        }
        let (xi, si, yi) = (self.index(&c.x.index)?, self.index(&c.s.index)?, self.index(&c.y.index)?);
        let (_, _, xe) = self.slot(c.x.buf, xi)?;
        if xe != ElemType::Scalar(if q.int_x { ScalarType::I32 } else { ScalarType::F32 }) {
            return self.fault(format!("requantize from {} elements with int_x {int_x}", xe.name()));
        }
        let x = self.byte_span(name, &c.x, n, 32)?;
        let s = self.f32_span(name, c.s.buf, si, period.min(rows))?;
        // The runtime's routine computes it; the bytes go where `slot` says `y`'s elements are.
        let (y0, _, ye) = self.slot(c.y.buf, yi)?;
        self.slot(c.y.buf, yi + n as i64 - 1)?;
        if ye.bits() != 8 {
            return self.fault(format!("requantize into {} elements", ye.name()));
        }
        let mut y = vec![0u8; n];
        q.run(&x, &s, &mut y);
        let Some(to) = self.memory[c.y.buf.0 as usize].get_mut(y0..y0 + n) else {
            return self.fault(format!("{:?} has less memory than its length", c.y.buf));
        };
        to.copy_from_slice(&y);
        Ok(())
    }

    fn qgemm(&mut self, c: &call::Qgemm) -> Result<(), InterpError> {
        let Some((q, [a, b, za, zb], bias)) = self.qgemm_operands("qgemm", c)? else { return Ok(()) };
        // `C`'s span as it is: the routine leaves the elements between rows alone.
        let (_, _, ec) = q.extents();
        let mut out: Vec<i32> = self.byte_span("qgemm", &c.c, ec, 32)?.chunks_exact(4).map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]])).collect();
        q.run(&a, &b, &mut out, &za, &zb, &bias);
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.put_bytes(&c.c, &bytes)
    }

    fn qgemm_requantize(&mut self, c: &call::QgemmRequantize) -> Result<(), InterpError> {
        let name = "qgemm_requantize";
        let [scale_mode, zero, y_signed] = ints!(self, name, c; scale_mode, zero, y_signed);
        let (Some(along), Ok(zero)) = (QScale::from_code(scale_mode), i32::try_from(zero)) else {
            return self.fault(format!("qgemm_requantize with scale mode {scale_mode} and zero point {zero}"));
        };
        let Some((q, [a, b, za, zb], bias)) = self.qgemm_operands(name, &c.product())? else { return Ok(()) };
        let r = Requant { scales: along, zero, signed: y_signed != 0 };
        let si = self.index(&c.scales.index)?;
        let scales = self.f32_span(name, c.scales.buf, si, r.scales_len(q.m, q.n))?;
        let (_, _, ey) = q.extents();
        let mut y = self.byte_span(name, &c.y, ey, 8)?;
        q.run_requantized(&a, &b, &mut y, &za, &zb, &bias, &scales, &r);
        self.put_bytes(&c.y, &y)
    }

    fn im2col_bytes(&mut self, c: &call::Im2colBytes) -> Result<(), InterpError> {
        let name = "im2col_bytes";
        let counts = ints!(self, name, c; channels);
        let [pad] = ints!(self, name, c; pad);
        let win = self.window(name, c.window())?;
        let [channels] = self.counts(name, counts)?;
        let g = kiln_runtime::im2col::bytes::Im2colBytes { channels, win, pad: pad as u8 };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !g.is_valid() {
            return self.fault(format!("{name} with invalid sizes {g:?}"));
        }
        if g.col_len() == 0 {
            return Ok(());
        }
        let x = self.byte_span(name, &c.x, g.x_len(), 8)?;
        let mut col = self.byte_span(name, &c.col, g.col_len(), 8)?;
        g.run(&x, &mut col);
        self.put_bytes(&c.col, &col)
    }

    fn dwconv2d_requantize(&mut self, c: &call::DwConv2dRequantize) -> Result<(), InterpError> {
        let name = "dwconv2d_requantize";
        let counts = ints!(self, name, c; planes, channels);
        let win = self.window(name, c.window())?;
        let [x_signed, x_zero, bias_mode, zero, y_signed] = ints!(self, name, c; x_signed, x_zero, bias_mode, zero, y_signed);
        let [planes, channels] = self.counts(name, counts)?;
        let (Ok(x_zero), Ok(zero), true) = (i32::try_from(x_zero), i32::try_from(zero), (0..=1).contains(&bias_mode)) else {
            return self.fault(format!("{name} with zero points {x_zero} and {zero}, bias mode {bias_mode}"));
        };
        let q = QDwConv2d { planes, channels, win, x_signed: x_signed != 0, x_zero, bias: bias_mode != 0, zero, y_signed: y_signed != 0 };
        if !q.is_valid() {
            return self.fault(format!("{name} with invalid sizes {q:?}"));
        }
        let (ex, ew, ec, ey) = q.extents();
        if ey == 0 {
            return Ok(());
        }
        let x = self.byte_span(name, &c.x, ex, 8)?;
        let (wi, si) = (self.index(&c.w.index)?, self.index(&c.scales.index)?);
        let w = self.f32_span(name, c.w.buf, wi, ew)?;
        let scales = self.f32_span(name, c.scales.buf, si, ec)?;
        let bias: Vec<i32> = if q.bias { self.byte_span(name, &c.bias, ec, 32)?.chunks_exact(4).map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]])).collect() } else { Vec::new() };
        let mut y = vec![0u8; ey];
        q.run(&x, &w, &bias, &scales, &mut y);
        self.put_bytes(&c.y, &y)
    }

    /// The sizes of integer product `c` and the bytes of its operands `A`, `B`, `za`, `zb`, and
    /// its bias; `None` when its result is empty.
    #[allow(clippy::type_complexity)]
    fn qgemm_operands(&mut self, name: &str, c: &call::Qgemm) -> Result<Option<(Qgemm, [Vec<u8>; 4], Vec<i32>)>, InterpError> {
        let sizes = ints!(self, name, c; m, n, k, lda, ldb, ldc, a_zeros, b_zeros);
        let [m, n, k, lda, ldb, ldc, a_zeros, b_zeros] = self.counts(name, sizes)?;
        let [a_signed, b_signed, bias_mode, b_packed] = ints!(self, name, c; a_signed, b_signed, bias_mode, b_packed);
        let Some(bias) = QBias::from_code(bias_mode) else {
            return self.fault(format!("{name} with bias mode {bias_mode}"));
        };
        let q = Qgemm { m, n, k, lda, ldb, ldc, a_signed: a_signed != 0, b_signed: b_signed != 0, a_zeros, b_zeros, bias, b_packed: b_packed != 0 };
        if !q.is_valid() {
            return self.fault(format!("{name} with inconsistent sizes {q:?}"));
        }
        let (ea, eb, ec) = q.extents();
        if ec == 0 {
            return Ok(None);
        }
        let [a, b, za, zb] = [(&c.a, ea), (&c.b, eb), (&c.za, a_zeros), (&c.zb, b_zeros)].map(|(at, len)| self.byte_span(name, at, len, 8));
        let operands = [a?, b?, za?, zb?];
        let bias: Vec<i32> = self.byte_span(name, &c.bias, q.bias_len(), 32)?.chunks_exact(4).map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]])).collect();
        Ok(Some((q, operands, bias)))
    }

    /// Writes `bytes` over the elements from address `at` on.
    fn put_bytes(&mut self, at: &call::Addr, bytes: &[u8]) -> Result<(), InterpError> {
        let i = self.index(&at.index)?;
        let (start, _, _) = self.slot(at.buf, i)?;
        let Some(to) = self.memory[at.buf.0 as usize].get_mut(start..start + bytes.len()) else {
            return self.fault(format!("{:?} has less memory than its length", at.buf));
        };
        to.copy_from_slice(bytes);
        Ok(())
    }

    /// The bytes of `len` consecutive elements of `bits`-bit type from address `at`, bounds-
    /// and width-checked (for routine `what`).
    fn byte_span(&mut self, what: &str, at: &call::Addr, len: usize, bits: u32) -> Result<Vec<u8>, InterpError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let start = self.index(&at.index)?;
        let (b0, _, elem) = self.slot(at.buf, start)?;
        self.slot(at.buf, start.saturating_add(i64::try_from(len - 1).unwrap_or(i64::MAX)))?;
        if elem.bits() != bits || elem.is_packed() {
            return self.fault(format!("{what} on {:?} of {}, not {bits}-bit elements", at.buf, elem.name()));
        }
        let n = len * bits as usize / 8;
        match self.memory[at.buf.0 as usize].get(b0..b0 + n) {
            Some(bytes) => Ok(bytes.to_vec()),
            None => self.fault(format!("{:?} has less memory than its length", at.buf)),
        }
    }

    fn layernorm(&mut self, c: &call::LayerNorm) -> Result<(), InterpError> {
        let name = "layernorm";
        let [rows, cols, bias, rms] = ints!(self, name, c; rows, cols, bias, rms);
        let [epsilon] = floats!(self, name, c; epsilon);
        let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
            return self.fault(format!("layernorm with a negative size ({rows} × {cols})"));
        };
        let g = LayerNorm { rows, cols, epsilon, bias: bias != 0, rms: rms != 0 };
        if !g.is_valid() {
            return self.fault(format!("layernorm with invalid sizes {g:?}"));
        }
        if g.is_empty() {
            return Ok(());
        }
        let [xi, si, bi, yi] = [&c.x, &c.scale, &c.b, &c.y].map(|a| self.index(&a.index));
        let (xi, si, bi, yi) = (xi?, si?, bi?, yi?);
        // The runtime's routine computes it, as for softmax; an unused bias is not read.
        let x = self.f32_span(name, c.x.buf, xi, g.len())?;
        let scale = self.f32_span(name, c.scale.buf, si, cols)?;
        let bias = self.f32_span(name, c.b.buf, bi, g.bias_len())?;
        let mut y_span = self.f32_span(name, c.y.buf, yi, g.len())?;
        g.run(&x, &scale, &bias, &mut y_span);
        self.store_f32_span(c.y.buf, yi, &y_span)
    }

    fn topk(&mut self, c: &call::TopK) -> Result<(), InterpError> {
        let name = "topk";
        let counts = ints!(self, name, c; outer, len, inner, k);
        let [largest] = ints!(self, name, c; largest);
        let [outer, len, inner, k] = self.counts(name, counts)?;
        let t = TopK { outer, len, inner, k, largest: largest != 0 };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        let (true, Some(nx), Some(ny)) = (t.is_valid(), t.x_len(), t.y_len()) else {
            return self.fault(format!("{name} with invalid sizes {t:?}"));
        };
        if ny == 0 {
            return Ok(());
        }
        let (xi, yi) = (self.index(&c.x.index)?, self.index(&c.y.index)?);
        // The runtime's routine computes it, as for softmax.
        let x = self.f32_span(name, c.x.buf, xi, nx)?;
        let mut y = self.f32_span(name, c.y.buf, yi, ny)?;
        let bytes = self.byte_span(name, &c.indices, ny, 64)?;
        let mut indices: Vec<i64> = bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())).collect();
        t.run(&x, &mut y, &mut indices);
        self.store_f32_span(c.y.buf, yi, &y)?;
        let bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
        self.put_bytes(&c.indices, &bytes)
    }

    fn softmax(&mut self, c: &call::Softmax) -> Result<(), InterpError> {
        let [rows, cols] = ints!(self, "softmax", c; rows, cols);
        let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
            return self.fault(format!("softmax with a negative size ({rows} × {cols})"));
        };
        let s = Softmax { rows, cols };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !s.is_valid() {
            return self.fault(format!("softmax with invalid sizes {s:?}"));
        }
        let xi = self.index(&c.x.index)?;
        // The runtime's routine computes it, as for sgemm.
        let mut x_span = self.f32_span("softmax", c.x.buf, xi, s.len())?;
        s.run(&mut x_span);
        self.store_f32_span(c.x.buf, xi, &x_span)
    }
}
