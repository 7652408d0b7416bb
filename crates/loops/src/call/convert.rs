//! What routines of one family share, written once: the 2-D window operands, a convolution's
//! integers as `kiln_runtime::conv::Conv2d::from_args` takes them, and the rewrites of a call
//! into its packed or blocked form (`kiln-schedule`'s passes).

use super::*;

/// The 2-D window operands of the routines that have them.
macro_rules! windowed {
    ($($name:ident)*) => {$(
        impl $name {
            /// The window operands in `kiln_runtime::window::Window::from_args` order: `ih, iw,
            /// oh, ow, kh, kw, sh, sw, ph, pw, dh, dw`.
            pub fn window(&self) -> [&Expr; 12] {
                [&self.ih, &self.iw, &self.oh, &self.ow, &self.kh, &self.kw, &self.sh, &self.sw, &self.ph, &self.pw, &self.dh, &self.dw]
            }
        }
    )*};
}

windowed!(DwConv2d DwConv2dRequantize Conv2d Conv2dPacked Conv2dNchwc Im2col Im2colBytes MaxPool2d MaxPool2dNchwc);

/// The integers the convolution routines share.
macro_rules! convolution {
    ($($name:ident)*) => {$(
        impl $name {
            /// The 19 integers of `kiln_runtime::conv::Conv2d::from_args`: `batch, channels,
            /// out_channels, groups`, the window, `bias, residual, act`.
            pub fn ints(&self) -> [&Expr; 19] {
                let [ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = self.window();
                [&self.batch, &self.channels, &self.out_channels, &self.groups, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, &self.bias, &self.residual, &self.act]
            }
        }
    )*};
}

convolution!(Conv2d Conv2dPacked Conv2dNchwc);

impl Sgemm {
    /// This product reading `op(B)` packed at `b` in the layout `(nr, kc)`: `sgemm_packed`.
    pub fn packed(self, b: Addr, nr: Expr, kc: Expr) -> SgemmPacked {
        let Sgemm { a, c, m, n, k, lda, ldc, trans_a, alpha, beta, .. } = self;
        SgemmPacked { a, b, c, m, n, k, lda, ldc, trans_a, nr, kc, alpha, beta }
    }
}

impl Conv2d {
    /// This convolution reading its weights packed at `w` in panels of `width`:
    /// `conv2d_packed`.
    pub fn packed(self, w: Addr, width: Expr) -> Conv2dPacked {
        let Conv2d { x, b, z, y, batch, channels, out_channels, groups, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act, alpha, beta, .. } = self;
        Conv2dPacked { x, w, b, z, y, batch, channels, out_channels, groups, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act, width, alpha, beta }
    }

    /// This convolution on blocked tensors, its weights in panels of `width` (0: plain), its
    /// input blocked unless `x_blocked` is 0: `conv2d_nchwc`.
    pub fn nchwc(self, width: Expr, x_blocked: Expr) -> Conv2dNchwc {
        let Conv2d { x, w, b, z, y, batch, channels, out_channels, groups, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act, alpha, beta } = self;
        Conv2dNchwc { x, w, b, z, y, batch, channels, out_channels, groups, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, bias, residual, act, width, x_blocked, alpha, beta }
    }
}

impl MaxPool2d {
    /// This pool on a blocked tensor: `maxpool2d_nchwc`.
    pub fn nchwc(self) -> MaxPool2dNchwc {
        let MaxPool2d { x, y, planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw } = self;
        MaxPool2dNchwc { x, y, planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw }
    }
}

impl Qgemm {
    /// This product with the output stage requantizing into `y` (laid out as `C`):
    /// `qgemm_requantize`.
    pub fn requantized(self, y: Addr, scales: Addr, scale_mode: Expr, zero: Expr, y_signed: Expr) -> QgemmRequantize {
        let Qgemm { a, b, c: _, za, zb, bias, m, n, k, lda, ldb, ldc, a_signed, b_signed, a_zeros, b_zeros, bias_mode, b_packed } = self;
        QgemmRequantize { a, b, y, za, zb, bias, scales, m, n, k, lda, ldb, ldc, a_signed, b_signed, a_zeros, b_zeros, bias_mode, b_packed, scale_mode, zero, y_signed }
    }
}

impl QgemmRequantize {
    /// The product alone, its result at `y`'s address (which its `i32` elements would overrun:
    /// for the checks and definitions the two routines share).
    pub fn product(&self) -> Qgemm {
        let q = self.clone();
        Qgemm { a: q.a, b: q.b, c: q.y, za: q.za, zb: q.zb, bias: q.bias, m: q.m, n: q.n, k: q.k, lda: q.lda, ldb: q.ldb, ldc: q.ldc, a_signed: q.a_signed, b_signed: q.b_signed, a_zeros: q.a_zeros, b_zeros: q.b_zeros, bias_mode: q.bias_mode, b_packed: q.b_packed }
    }
}
