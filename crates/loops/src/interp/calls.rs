//! The interpreter's runtime calls: each routine's arguments checked and evaluated, then the
//! runtime's own code run on copies of the buffer spans it addresses, so compiled code and the
//! interpreter compute the same values.

use kiln_runtime::conv::Conv2d;
use kiln_runtime::dwconv::DwConv2d;
use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
use kiln_runtime::gemm::{PackedLayout, Sgemm, SgemmFused, Transpose};
use kiln_runtime::im2col::Im2col;
use kiln_runtime::maxpool::MaxPool2d;
use kiln_runtime::nchwc;
use kiln_runtime::norm::LayerNorm;
use kiln_runtime::softmax::Softmax;

use super::{InterpError, Machine, Val};
use crate::ir::*;
use kiln_runtime::window::Window;

impl Machine<'_> {
    /// A call's scalar arguments evaluated: its integers and its `f32` values, each in order; an
    /// address or a value of another type is the fault `what`.
    fn scalars(&mut self, args: &[Arg], what: &str) -> Result<(Vec<i64>, Vec<f32>), InterpError> {
        let (mut ints, mut floats) = (Vec::new(), Vec::new());
        for arg in args {
            let Arg::Value(e) = arg else { return self.fault(what) };
            match self.expr(e)? {
                Val::Int(_, v) => ints.push(v),
                Val::F32(x) => floats.push(x),
                _ => return self.fault(what),
            }
        }
        Ok((ints, floats))
    }

    /// A call's arguments that must all be integers, evaluated; anything else is the fault
    /// `what`.
    fn integers(&mut self, args: &[Arg], what: &str) -> Result<Vec<i64>, InterpError> {
        match self.scalars(args, what)? {
            (ints, floats) if floats.is_empty() => Ok(ints),
            _ => self.fault(what),
        }
    }

    /// A windowed routine's integers (`name`'s): `N` counts, the window's 12 sizes (`h, w, oh,
    /// ow, kh, kw, sh, sw, ph, pw, dh, dw`) and `R` flags, in that order; a wrong count or a
    /// negative count or size is a fault.
    fn windowed<const N: usize, const R: usize>(&self, ints: &[i64], name: &str) -> Result<([usize; N], Window, [i64; R]), InterpError> {
        let split = ints.split_first_chunk::<N>().and_then(|(counts, rest)| Some((counts, rest.split_first_chunk::<12>()?)));
        let Some((counts, (win, flags))) = split.filter(|(_, (_, flags))| flags.len() == R) else {
            return self.fault(format!("{name} takes {N} counts, 12 window sizes and {R} flags, not {} integers", ints.len()));
        };
        let counts = counts.map(usize::try_from);
        let (Some(win), true) = (Window::from_args(*win), counts.iter().all(Result::is_ok)) else {
            return self.fault(format!("{name} with a negative size in {ints:?}"));
        };
        let flags = <[i64; R]>::try_from(flags).unwrap_or([0; R]);
        Ok((counts.map(|c| c.unwrap_or(0)), win, flags))
    }

    pub(super) fn call(&mut self, f: RuntimeFn, args: &[Arg]) -> Result<(), InterpError> {
        match f {
            RuntimeFn::Sgemm => {
                let [Arg::Addr(a, ai), Arg::Addr(b, bi), Arg::Addr(c, ci), rest @ ..] = args else {
                    return self.fault("sgemm takes three buffer addresses first");
                };
                let (ints, floats) = self.scalars(rest, "sgemm scalar arguments")?;
                let (&[m, n, k, lda, ldb, ldc, ta, tb], &[alpha, beta]) = (&ints[..], &floats[..]) else {
                    return self.fault("sgemm takes m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta");
                };
                let (ai, bi, ci) = (self.index(ai)?, self.index(bi)?, self.index(ci)?);
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
                let a = self.f32_span("sgemm", *a, ai, g.a_len())?;
                let b = self.f32_span("sgemm", *b, bi, g.b_len())?;
                let mut c_span = self.f32_span("sgemm", *c, ci, g.c_len())?;
                g.run(&a, &b, &mut c_span);
                self.store_f32_span(*c, ci, &c_span)?;
                Ok(())
            }
            RuntimeFn::SgemmPacked => {
                let [Arg::Addr(a, ai), Arg::Addr(b, bi), Arg::Addr(c, ci), rest @ ..] = args else {
                    return self.fault("sgemm_packed takes three buffer addresses first");
                };
                let (ints, floats) = self.scalars(rest, "sgemm_packed scalar arguments")?;
                let (&[m, n, k, lda, ldc, ta, nr, kc], &[alpha, beta]) = (&ints[..], &floats[..]) else {
                    return self.fault("sgemm_packed takes m, n, k, lda, ldc, trans_a, nr, kc, alpha, beta");
                };
                let (ai, bi, ci) = (self.index(ai)?, self.index(bi)?, self.index(ci)?);
                if m <= 0 || n <= 0 || nr <= 0 || kc <= 0 {
                    return Ok(());
                }
                if lda < 0 || ldc < 0 {
                    return self.fault(format!("sgemm_packed with a negative leading dimension ({lda}, {ldc})"));
                }
                let trans_a = if ta != 0 { Transpose::Yes } else { Transpose::No };
                let g = Sgemm { m: m as usize, n: n as usize, k: k.max(0) as usize, lda: lda as usize, ldb: 0, ldc: ldc as usize, trans_a, trans_b: Transpose::No, alpha, beta };
                let layout = PackedLayout { nr: nr as usize, kc: kc as usize };
                let a = self.f32_span("sgemm_packed", *a, ai, g.a_len())?;
                let b = self.f32_span("sgemm_packed", *b, bi, layout.len(g.k, g.n))?;
                let mut c_span = self.f32_span("sgemm_packed", *c, ci, g.c_len())?;
                g.run_packed(&a, &b, layout, &mut c_span);
                self.store_f32_span(*c, ci, &c_span)?;
                Ok(())
            }
            RuntimeFn::SgemmFused => {
                let [Arg::Addr(a, ai), Arg::Addr(b, bi), Arg::Addr(c, ci), Arg::Addr(bias, bsi), Arg::Addr(z, zi), rest @ ..] = args else {
                    return self.fault("sgemm_fused takes five buffer addresses first");
                };
                let (ints, floats) = self.scalars(rest, "sgemm_fused scalar arguments")?;
                let (Ok(ints), Ok(floats)) = (<[i64; 14]>::try_from(&ints[..]), <[f32; 4]>::try_from(&floats[..])) else {
                    return self.fault("sgemm_fused takes m, n, k, lda, ldb, ldc, trans_a, trans_b, nr, kc, bias, period, residual, act, alpha, beta, act_alpha, act_beta");
                };
                // Compiled code does nothing for what the runtime refuses; the interpreter, a
                // test oracle, says so.
                let Some(f) = SgemmFused::from_args(ints, floats).filter(SgemmFused::is_valid) else {
                    return self.fault(format!("sgemm_fused with invalid sizes or codes {ints:?}"));
                };
                let (ai, bi, ci, bsi, zi) = (self.index(ai)?, self.index(bi)?, self.index(ci)?, self.index(bsi)?, self.index(zi)?);
                // The product writes C before Z is read: compiled code would read the new values.
                if f.residual && z == c && zi < ci + f.gemm.c_len() as i64 && ci < zi + f.z_len() as i64 {
                    return self.fault("sgemm_fused with Z overlapping C");
                }
                // The runtime's routine computes it, as for sgemm; unused operands are not read.
                let a = self.f32_span("sgemm_fused", *a, ai, f.gemm.a_len())?;
                let b = self.f32_span("sgemm_fused", *b, bi, f.b_len())?;
                let bias = self.f32_span("sgemm_fused", *bias, bsi, f.bias_len())?;
                let z = self.f32_span("sgemm_fused", *z, zi, f.z_len())?;
                let mut c_span = self.f32_span("sgemm_fused", *c, ci, f.gemm.c_len())?;
                f.run(&a, &b, &mut c_span, &bias, &z);
                self.store_f32_span(*c, ci, &c_span)?;
                Ok(())
            }
            RuntimeFn::DwConv2d => {
                let [Arg::Addr(x, xi), Arg::Addr(w, wi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault("dwconv2d takes three buffer addresses first");
                };
                let ints = self.integers(rest, "dwconv2d takes integer sizes")?;
                let ([planes, channels], win, [accumulate]) = self.windowed(&ints, "dwconv2d")?;
                let d = DwConv2d { planes, channels, win, accumulate: accumulate != 0 };
                // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
                if !d.is_valid() {
                    return self.fault(format!("dwconv2d with invalid sizes {d:?}"));
                }
                let (xi, wi, yi) = (self.index(xi)?, self.index(wi)?, self.index(yi)?);
                // The runtime's kernel computes the convolution, as for sgemm.
                let x = self.f32_span("dwconv2d", *x, xi, d.x_len())?;
                let w = self.f32_span("dwconv2d", *w, wi, d.w_len())?;
                let mut y_span = self.f32_span("dwconv2d", *y, yi, d.y_len())?;
                d.run(&x, &w, &mut y_span);
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::Conv2d | RuntimeFn::Conv2dPacked => {
                let name = if f == RuntimeFn::Conv2d { "conv2d" } else { "conv2d_packed" };
                let [Arg::Addr(x, xi), Arg::Addr(w, wi), Arg::Addr(b, bi), Arg::Addr(z, zi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault(format!("{name} takes five buffer addresses first"));
                };
                let (ints, floats) = self.scalars(rest, &format!("{name} scalar arguments"))?;
                let &[alpha, beta] = &floats[..] else {
                    return self.fault(format!("{name} takes alpha and beta last"));
                };
                // The packed call's panel width follows the activation code.
                let (ints, width) = match (f, ints.split_last()) {
                    (RuntimeFn::Conv2dPacked, Some((&width, ints))) => (ints, Some(width)),
                    _ => (&ints[..], None),
                };
                let ([batch, channels, out_channels, groups], win, [bias, residual, code]) = self.windowed(ints, name)?;
                let Some(act) = Activation::from_code(code, alpha, beta) else {
                    return self.fault(format!("{name} with activation code {code}"));
                };
                let c = Conv2d { batch, channels, out_channels, groups, win, bias: bias != 0, residual: residual != 0, act };
                // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
                if !c.is_valid() {
                    return self.fault(format!("{name} with invalid sizes {c:?}"));
                }
                let width = match width.map(usize::try_from) {
                    None => None,
                    Some(Ok(width)) if width > 0 => Some(width),
                    Some(_) => return self.fault(format!("{name} with panel width {}", width.unwrap_or(0))),
                };
                let (xi, wi, bi, zi, yi) = (self.index(xi)?, self.index(wi)?, self.index(bi)?, self.index(zi)?, self.index(yi)?);
                // The runtime's routine computes the convolution, as for sgemm; unused operands
                // are not read.
                let x = self.f32_span(name, *x, xi, c.x_len())?;
                let w_len = match width {
                    Some(width) if c.w_len() > 0 => c.packed_len(width),
                    _ => c.w_len(),
                };
                let w = self.f32_span(name, *w, wi, w_len)?;
                let b = self.f32_span(name, *b, bi, c.bias_len())?;
                let z = self.f32_span(name, *z, zi, c.z_len())?;
                let mut y_span = self.f32_span(name, *y, yi, c.y_len())?;
                match width {
                    Some(width) => c.run_packed_with(kiln_runtime::gemm::Isa::detected(), &x, &w, width, &b, &z, &mut y_span),
                    None => c.run(&x, &w, &b, &z, &mut y_span),
                }
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::Epilogue => {
                let [Arg::Addr(y, yi), Arg::Addr(b, bi), Arg::Addr(z, zi), rest @ ..] = args else {
                    return self.fault("epilogue takes three buffer addresses first");
                };
                let (ints, floats) = self.scalars(rest, "epilogue scalar arguments")?;
                let (&[rows, cols, mode, period, residual, code], &[alpha, beta]) = (&ints[..], &floats[..]) else {
                    return self.fault("epilogue takes rows, cols, bias, period, residual, act, alpha, beta");
                };
                // Compiled code does nothing for what the runtime refuses; the interpreter, a
                // test oracle, says so.
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
                let (yi, bi, zi) = (self.index(yi)?, self.index(bi)?, self.index(zi)?);
                // The runtime's routine computes it, as for sgemm; unused operands are not read.
                let b = self.f32_span("epilogue", *b, bi, e.bias_len())?;
                let z = self.f32_span("epilogue", *z, zi, e.z_len())?;
                let mut y_span = self.f32_span("epilogue", *y, yi, e.y_len())?;
                e.run(&mut y_span, &b, &z);
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::Im2col => {
                let [Arg::Addr(x, xi), Arg::Addr(col, ci), rest @ ..] = args else {
                    return self.fault("im2col takes two buffer addresses first");
                };
                let ints = self.integers(rest, "im2col takes integer sizes")?;
                let ([channels], win, []) = self.windowed(&ints, "im2col")?;
                let g = Im2col { channels, win };
                // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
                if !g.is_valid() {
                    return self.fault(format!("im2col with invalid sizes {g:?}"));
                }
                let (xi, ci) = (self.index(xi)?, self.index(ci)?);
                // The runtime's routine writes the matrix, as for sgemm.
                let x = self.f32_span("im2col", *x, xi, g.x_len())?;
                let mut col_span = self.f32_span("im2col", *col, ci, g.col_len())?;
                g.run(&x, &mut col_span);
                self.store_f32_span(*col, ci, &col_span)?;
                Ok(())
            }
            RuntimeFn::Conv2dNchwc => {
                let name = "conv2d_nchwc";
                let [Arg::Addr(x, xi), Arg::Addr(w, wi), Arg::Addr(b, bi), Arg::Addr(z, zi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault(format!("{name} takes five buffer addresses first"));
                };
                let (ints, floats) = self.scalars(rest, &format!("{name} scalar arguments"))?;
                let (&[alpha, beta], Some((ints, &[width, x_blocked]))) = (&floats[..], ints.split_last_chunk::<2>()) else {
                    return self.fault(format!("{name} takes its integers, the panel width, x_blocked, alpha and beta"));
                };
                let ([batch, channels, out_channels, groups], win, [bias, residual, code]) = self.windowed(ints, name)?;
                let Some(act) = Activation::from_code(code, alpha, beta) else {
                    return self.fault(format!("{name} with activation code {code}"));
                };
                let c = Conv2d { batch, channels, out_channels, groups, win, bias: bias != 0, residual: residual != 0, act };
                // Compiled code does nothing for such convolutions; the interpreter says so.
                let depthwise = nchwc::dwconv::supports(&c);
                if !nchwc::conv::supports(&c) || (width != 0 && width != nchwc::conv::packed_width(&c) as i64) || (x_blocked == 0 && depthwise) {
                    return self.fault(format!("{name} cannot compute {c:?} with panel width {width} and x_blocked {x_blocked}"));
                }
                let (xi, wi, bi, zi, yi) = (self.index(xi)?, self.index(wi)?, self.index(bi)?, self.index(zi)?, self.index(yi)?);
                let y_len = nchwc::conv::y_len(&c);
                let x = self.f32_span(name, *x, xi, nchwc::conv::x_len(&c, x_blocked != 0))?;
                let w = self.f32_span(name, *w, wi, if width == 0 { c.w_len() } else { nchwc::conv::packed_len(&c) })?;
                let b = self.f32_span(name, *b, bi, c.bias_len())?;
                let z = self.f32_span(name, *z, zi, if c.residual { y_len } else { 0 })?;
                let mut y_span = self.f32_span(name, *y, yi, y_len)?;
                // SAFETY: the spans hold what the convolution reads and writes.
                unsafe { nchwc::conv::run(&c, x.as_ptr(), x_blocked != 0, w.as_ptr(), width != 0, b.as_ptr(), z.as_ptr(), y_span.as_mut_ptr()) };
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::MaxPool2dNchwc => {
                let [Arg::Addr(x, xi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault("maxpool2d_nchwc takes two buffer addresses first");
                };
                let ints = self.integers(rest, "maxpool2d_nchwc takes integer sizes")?;
                let ([planes], win, []) = self.windowed(&ints, "maxpool2d_nchwc")?;
                let blocks = planes.div_ceil(nchwc::LANES);
                let m = MaxPool2d { planes: blocks * nchwc::LANES, win };
                if !m.is_valid() {
                    return self.fault(format!("maxpool2d_nchwc with invalid sizes {m:?}"));
                }
                let (xi, yi) = (self.index(xi)?, self.index(yi)?);
                let x = self.f32_span("maxpool2d_nchwc", *x, xi, m.x_len())?;
                let mut y_span = self.f32_span("maxpool2d_nchwc", *y, yi, m.y_len())?;
                if m.y_len() > 0 {
                    // SAFETY: the spans hold every block of the pool.
                    unsafe { nchwc::maxpool::run(kiln_runtime::gemm::Isa::detected(), blocks, &win, x.as_ptr(), y_span.as_mut_ptr()) };
                }
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::ToNchwc | RuntimeFn::FromNchwc => {
                let name = if f == RuntimeFn::ToNchwc { "to_nchwc" } else { "from_nchwc" };
                let [Arg::Addr(x, xi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault(format!("{name} takes two buffer addresses first"));
                };
                let ints = self.integers(rest, &format!("{name} takes integer sizes"))?;
                let sizes: Option<Vec<usize>> = ints.iter().map(|&v| usize::try_from(v).ok()).collect();
                let Some(&[batch, channels, pixels]) = sizes.as_deref() else {
                    return self.fault(format!("{name} takes batch, channels and pixels, not {ints:?}"));
                };
                let (plain, blocked) = (channels * pixels, nchwc::blocked_len(channels, pixels));
                let (from, to) = if f == RuntimeFn::ToNchwc { (plain, blocked) } else { (blocked, plain) };
                let (xi, yi) = (self.index(xi)?, self.index(yi)?);
                let x = self.f32_span(name, *x, xi, batch * from)?;
                let mut y_span = self.f32_span(name, *y, yi, batch * to)?;
                for n in 0..batch {
                    let (src, dst) = (&x[n * from..], &mut y_span[n * to..]);
                    if f == RuntimeFn::ToNchwc { nchwc::to_blocked(src, channels, pixels, dst) } else { nchwc::from_blocked(src, channels, pixels, dst) }
                }
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::MaxPool2d => {
                let [Arg::Addr(x, xi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault("maxpool2d takes two buffer addresses first");
                };
                let ints = self.integers(rest, "maxpool2d takes integer sizes")?;
                let ([planes], win, []) = self.windowed(&ints, "maxpool2d")?;
                let m = MaxPool2d { planes, win };
                // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
                if !m.is_valid() {
                    return self.fault(format!("maxpool2d with invalid sizes {m:?}"));
                }
                let (xi, yi) = (self.index(xi)?, self.index(yi)?);
                // The runtime's routine computes the pool, as for sgemm.
                let x = self.f32_span("maxpool2d", *x, xi, m.x_len())?;
                let mut y_span = self.f32_span("maxpool2d", *y, yi, m.y_len())?;
                m.run(&x, &mut y_span);
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::Copy => {
                let [Arg::Addr(dst, di), Arg::Addr(src, si), Arg::Value(n)] = args else {
                    return self.fault("copy takes two buffer addresses and a count");
                };
                let Val::Int(_, n) = self.expr(n)? else { return self.fault("copy takes an integer count") };
                if n <= 0 {
                    return Ok(());
                }
                let (di, si) = (self.index(di)?, self.index(si)?);
                // The bytes as they are, as the runtime copies them (bounds through `slot`).
                let (d0, _, de) = self.slot(*dst, di)?;
                let (s0, _, se) = self.slot(*src, si)?;
                self.slot(*dst, di + n - 1)?;
                self.slot(*src, si + n - 1)?;
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
            RuntimeFn::LayerNorm => {
                let [Arg::Addr(x, xi), Arg::Addr(sc, si), Arg::Addr(b, bi), Arg::Addr(y, yi), rest @ ..] = args else {
                    return self.fault("layernorm takes four buffer addresses first");
                };
                let (ints, floats) = self.scalars(rest, "layernorm scalar arguments")?;
                let (&[rows, cols, bias, rms], &[epsilon]) = (&ints[..], &floats[..]) else {
                    return self.fault("layernorm takes rows, cols, bias, rms, epsilon");
                };
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
                let (xi, si, bi, yi) = (self.index(xi)?, self.index(si)?, self.index(bi)?, self.index(yi)?);
                // The runtime's routine computes it, as for softmax; an unused bias is not read.
                let x = self.f32_span("layernorm", *x, xi, g.len())?;
                let scale = self.f32_span("layernorm", *sc, si, cols)?;
                let bias = self.f32_span("layernorm", *b, bi, g.bias_len())?;
                let mut y_span = self.f32_span("layernorm", *y, yi, g.len())?;
                g.run(&x, &scale, &bias, &mut y_span);
                self.store_f32_span(*y, yi, &y_span)?;
                Ok(())
            }
            RuntimeFn::Softmax => {
                let [Arg::Addr(x, xi), Arg::Value(rows), Arg::Value(cols)] = args else {
                    return self.fault("softmax takes a buffer address, rows and cols");
                };
                let (Val::Int(_, rows), Val::Int(_, cols)) = (self.expr(rows)?, self.expr(cols)?) else {
                    return self.fault("softmax takes integer sizes");
                };
                let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
                    return self.fault(format!("softmax with a negative size ({rows} × {cols})"));
                };
                let s = Softmax { rows, cols };
                // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
                if !s.is_valid() {
                    return self.fault(format!("softmax with invalid sizes {s:?}"));
                }
                let xi = self.index(xi)?;
                // The runtime's routine computes it, as for sgemm.
                let mut x_span = self.f32_span("softmax", *x, xi, s.len())?;
                s.run(&mut x_span);
                self.store_f32_span(*x, xi, &x_span)?;
                Ok(())
            }
        }
    }
}
