//! The interpreter's windowed runtime calls (convolutions, im2col, pooling) and the blocked
//! layout's reorders, decoded by operand name as in `calls.rs`.

use kiln_runtime::conv::Conv2d;
use kiln_runtime::dwconv::DwConv2d;
use kiln_runtime::epilogue::Activation;
use kiln_runtime::im2col::Im2col;
use kiln_runtime::maxpool::MaxPool2d;
use kiln_runtime::nchwc;

use super::calls::ints;
use super::{InterpError, Machine};
use crate::call::{self, Addr};
use crate::ir::*;

impl Machine<'_> {
    pub(super) fn dwconv2d(&mut self, c: &call::DwConv2d) -> Result<(), InterpError> {
        let name = "dwconv2d";
        let counts = ints!(self, name, c; planes, channels);
        let win = self.window(name, c.window())?;
        let [accumulate] = ints!(self, name, c; accumulate);
        let [planes, channels] = self.counts(name, counts)?;
        let d = DwConv2d { planes, channels, win, accumulate: accumulate != 0 };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !d.is_valid() {
            return self.fault(format!("dwconv2d with invalid sizes {d:?}"));
        }
        let (xi, wi, yi) = (self.index(&c.x.index)?, self.index(&c.w.index)?, self.index(&c.y.index)?);
        // The runtime's kernel computes the convolution, as for sgemm.
        let x = self.f32_span(name, c.x.buf, xi, d.x_len())?;
        let w = self.f32_span(name, c.w.buf, wi, d.w_len())?;
        let mut y_span = self.f32_span(name, c.y.buf, yi, d.y_len())?;
        d.run(&x, &w, &mut y_span);
        self.store_f32_span(c.y.buf, yi, &y_span)
    }

    /// The runtime's convolution from a call's integers (`call::Conv2d::ints`) and `alpha`,
    /// `beta`; a negative size or an unknown activation is a fault.
    fn convolution(&mut self, name: &str, ints: [&Expr; 19], floats: [&Expr; 2]) -> Result<Conv2d, InterpError> {
        let [batch, channels, out_channels, groups, window @ .., bias, residual, code] = ints;
        let counts = [self.int(name, "batch", batch)?, self.int(name, "channels", channels)?, self.int(name, "out_channels", out_channels)?, self.int(name, "groups", groups)?];
        let win = self.window(name, window)?;
        let [bias, residual, code] = [self.int(name, "bias", bias)?, self.int(name, "residual", residual)?, self.int(name, "act", code)?];
        let [alpha, beta] = [self.float(name, "alpha", floats[0])?, self.float(name, "beta", floats[1])?];
        let [batch, channels, out_channels, groups] = self.counts(name, counts)?;
        let Some(act) = Activation::from_code(code, alpha, beta) else {
            return self.fault(format!("{name} with activation code {code}"));
        };
        Ok(Conv2d { batch, channels, out_channels, groups, win, bias: bias != 0, residual: residual != 0, act })
    }

    /// `conv2d`, or `conv2d_packed` with its panel `width`: operands `x, w, b, z, y`.
    pub(super) fn conv2d(&mut self, name: &str, [x, w, b, z, y]: [&Addr; 5], ints: [&Expr; 19], floats: [&Expr; 2], width: Option<i64>) -> Result<(), InterpError> {
        let c = self.convolution(name, ints, floats)?;
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !c.is_valid() {
            return self.fault(format!("{name} with invalid sizes {c:?}"));
        }
        let width = match width.map(usize::try_from) {
            None => None,
            Some(Ok(width)) if width > 0 => Some(width),
            Some(_) => return self.fault(format!("{name} with panel width {}", width.unwrap_or(0))),
        };
        let [xi, wi, bi, zi, yi] = [x, w, b, z, y].map(|a| self.index(&a.index));
        let (xi, wi, bi, zi, yi) = (xi?, wi?, bi?, zi?, yi?);
        // The runtime's routine computes the convolution, as for sgemm; unused operands are not
        // read.
        let xs = self.f32_span(name, x.buf, xi, c.x_len())?;
        let w_len = match width {
            Some(width) if c.w_len() > 0 => c.packed_len(width),
            _ => c.w_len(),
        };
        let ws = self.f32_span(name, w.buf, wi, w_len)?;
        let bs = self.f32_span(name, b.buf, bi, c.bias_len())?;
        let zs = self.f32_span(name, z.buf, zi, c.z_len())?;
        let mut y_span = self.f32_span(name, y.buf, yi, c.y_len())?;
        match width {
            Some(width) => c.run_packed_with(kiln_runtime::gemm::Isa::detected(), &xs, &ws, width, &bs, &zs, &mut y_span),
            None => c.run(&xs, &ws, &bs, &zs, &mut y_span),
        }
        self.store_f32_span(y.buf, yi, &y_span)
    }

    pub(super) fn conv2d_nchwc(&mut self, cl: &call::Conv2dNchwc) -> Result<(), InterpError> {
        let name = "conv2d_nchwc";
        let c = self.convolution(name, cl.ints(), [&cl.alpha, &cl.beta])?;
        let [width, x_blocked] = ints!(self, name, cl; width, x_blocked);
        // Compiled code does nothing for such convolutions; the interpreter says so.
        let depthwise = nchwc::dwconv::supports(&c);
        if !nchwc::conv::supports(&c) || (width != 0 && width != nchwc::conv::packed_width(&c) as i64) || (x_blocked == 0 && depthwise) {
            return self.fault(format!("{name} cannot compute {c:?} with panel width {width} and x_blocked {x_blocked}"));
        }
        let [xi, wi, bi, zi, yi] = [&cl.x, &cl.w, &cl.b, &cl.z, &cl.y].map(|a| self.index(&a.index));
        let (xi, wi, bi, zi, yi) = (xi?, wi?, bi?, zi?, yi?);
        let y_len = nchwc::conv::y_len(&c);
        let x = self.f32_span(name, cl.x.buf, xi, nchwc::conv::x_len(&c, x_blocked != 0))?;
        let w = self.f32_span(name, cl.w.buf, wi, if width == 0 { c.w_len() } else { nchwc::conv::packed_len(&c) })?;
        let b = self.f32_span(name, cl.b.buf, bi, c.bias_len())?;
        let z = self.f32_span(name, cl.z.buf, zi, if c.residual { y_len } else { 0 })?;
        let mut y_span = self.f32_span(name, cl.y.buf, yi, y_len)?;
        // SAFETY: the spans hold what the convolution reads and writes.
        unsafe { nchwc::conv::run(&c, x.as_ptr(), x_blocked != 0, w.as_ptr(), width != 0, b.as_ptr(), z.as_ptr(), y_span.as_mut_ptr()) };
        self.store_f32_span(cl.y.buf, yi, &y_span)
    }

    pub(super) fn im2col(&mut self, c: &call::Im2col) -> Result<(), InterpError> {
        let name = "im2col";
        let counts = ints!(self, name, c; channels);
        let win = self.window(name, c.window())?;
        let [channels] = self.counts(name, counts)?;
        let g = Im2col { channels, win };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !g.is_valid() {
            return self.fault(format!("im2col with invalid sizes {g:?}"));
        }
        let (xi, ci) = (self.index(&c.x.index)?, self.index(&c.col.index)?);
        // The runtime's routine writes the matrix, as for sgemm.
        let x = self.f32_span(name, c.x.buf, xi, g.x_len())?;
        let mut col_span = self.f32_span(name, c.col.buf, ci, g.col_len())?;
        g.run(&x, &mut col_span);
        self.store_f32_span(c.col.buf, ci, &col_span)
    }

    pub(super) fn maxpool2d(&mut self, c: &call::MaxPool2d) -> Result<(), InterpError> {
        let name = "maxpool2d";
        let counts = ints!(self, name, c; planes);
        let win = self.window(name, c.window())?;
        let [planes] = self.counts(name, counts)?;
        let m = MaxPool2d { planes, win };
        // Compiled code does nothing for such sizes; the interpreter, a test oracle, says so.
        if !m.is_valid() {
            return self.fault(format!("maxpool2d with invalid sizes {m:?}"));
        }
        let (xi, yi) = (self.index(&c.x.index)?, self.index(&c.y.index)?);
        // The runtime's routine computes the pool, as for sgemm.
        let x = self.f32_span(name, c.x.buf, xi, m.x_len())?;
        let mut y_span = self.f32_span(name, c.y.buf, yi, m.y_len())?;
        m.run(&x, &mut y_span);
        self.store_f32_span(c.y.buf, yi, &y_span)
    }

    pub(super) fn maxpool2d_nchwc(&mut self, c: &call::MaxPool2dNchwc) -> Result<(), InterpError> {
        let name = "maxpool2d_nchwc";
        let counts = ints!(self, name, c; planes);
        let win = self.window(name, c.window())?;
        let [planes] = self.counts(name, counts)?;
        let blocks = planes.div_ceil(nchwc::LANES);
        let m = MaxPool2d { planes: blocks * nchwc::LANES, win };
        if !m.is_valid() {
            return self.fault(format!("maxpool2d_nchwc with invalid sizes {m:?}"));
        }
        let (xi, yi) = (self.index(&c.x.index)?, self.index(&c.y.index)?);
        let x = self.f32_span(name, c.x.buf, xi, m.x_len())?;
        let mut y_span = self.f32_span(name, c.y.buf, yi, m.y_len())?;
        if m.y_len() > 0 {
            // SAFETY: the spans hold every block of the pool.
            unsafe { nchwc::maxpool::run(kiln_runtime::gemm::Isa::detected(), blocks, &win, x.as_ptr(), y_span.as_mut_ptr()) };
        }
        self.store_f32_span(c.y.buf, yi, &y_span)
    }

    /// `to_nchwc` (`blocking`) or `from_nchwc`: operands `x, y` and `batch, channels, pixels`.
    pub(super) fn reorder(&mut self, name: &str, blocking: bool, [x, y]: [&Addr; 2], sizes: [&Expr; 3]) -> Result<(), InterpError> {
        let sizes = [self.int(name, "batch", sizes[0])?, self.int(name, "channels", sizes[1])?, self.int(name, "pixels", sizes[2])?];
        let [batch, channels, pixels] = self.counts(name, sizes)?;
        let (plain, blocked) = (channels * pixels, nchwc::blocked_len(channels, pixels));
        let (from, to) = if blocking { (plain, blocked) } else { (blocked, plain) };
        let (xi, yi) = (self.index(&x.index)?, self.index(&y.index)?);
        let xs = self.f32_span(name, x.buf, xi, batch * from)?;
        let mut y_span = self.f32_span(name, y.buf, yi, batch * to)?;
        for n in 0..batch {
            let (src, dst) = (&xs[n * from..], &mut y_span[n * to..]);
            if blocking { nchwc::to_blocked(src, channels, pixels, dst) } else { nchwc::from_blocked(src, channels, pixels, dst) }
        }
        self.store_f32_span(y.buf, yi, &y_span)
    }
}
