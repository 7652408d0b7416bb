//! The runtime-call table: one row per routine.
//!
//! Each row is `Name "text_name" "symbol" { operand: kind, ... }`, the operands in the order
//! the `kiln_runtime` symbol takes them. A kind is `read`, `write` or `read_write` for the
//! address of an `f32` element (`read bytes`, `write bytes`: of any whole-byte element type),
//! `i64` or `f32` for a value. The row's doc gives the semantics; `docs/add-a-runtime-call.md`
//! lists everything else a new routine touches.
//!
//! Conventions: the IR has no null address, so an operand a flag leaves unused is passed as
//! another operand's address (the output's, unless its doc says otherwise) and not read. The 2-D
//! window operands are `ih, iw` (input rows and columns), `oh, ow` (output), `kh, kw` (kernel),
//! `sh, sw` (strides), `ph, pw` (padding before) and `dh, dw` (dilations), as
//! `kiln_runtime::window::Window` takes them. An activation code `act` is 0 none, 1 relu, 2 clip
//! to `[alpha, beta]`, 3 leaky_relu with slope `alpha`, 4 sigmoid, 5 tanh, 6 hard_swish, 7 gelu,
//! 8 gelu_tanh, 9 and 10 QuantizeLinear to `u8` or `u16` and DequantizeLinear back with scale
//! `alpha` and zero point `beta`, 11 silu (`x · sigmoid(x)`).

define_calls! {
    /// `C[m×n] = alpha·op(A)·op(B) + beta·C` on `f32`, row-major with leading dimensions;
    /// `trans_a`, `trans_b` non-zero transpose `A`, `B`.
    Sgemm "sgemm" "kiln_rt_sgemm" {
        a: read, b: read, c: read_write,
        m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64, trans_a: i64, trans_b: i64,
        alpha: f32, beta: f32,
    }

    /// [`Sgemm`] with `op(B)` (`k×n`) packed ahead, when the model was compiled, into the
    /// runtime's panel layout `(nr, kc)`: k blocks of depth `kc` (the last one shorter), each a
    /// run of `⌈n/nr⌉` panels of the block's steps × `nr` columns, step-major, columns past `n`
    /// zero; `k·⌈n/nr⌉·nr` elements.
    SgemmPacked "sgemm_packed" "kiln_rt_sgemm_packed" {
        a: read, b: read, c: read_write,
        m: i64, n: i64, k: i64, lda: i64, ldc: i64, trans_a: i64, nr: i64, kc: i64,
        alpha: f32, beta: f32,
    }

    /// [`Sgemm`] with the fused ops' epilogue applied to each block of `C` once it is summed:
    /// `C = act(alpha·op(A)·op(B) + beta·C + bias + Z)`, `bias_mode` and `period` as for
    /// [`Epilogue`] over `C`'s `m × n`, `residual` non-zero to add `z` (laid out as `C`, row
    /// stride `ldc`; it must not be `c`), the activation `act` with `act_alpha`, `act_beta`.
    /// `op(B)` is packed ahead as for [`SgemmPacked`] when `nr > 0` (`ldb` and `trans_b` are then
    /// ignored), read as for [`Sgemm`] when `nr = 0`. Unused operands are passed as `c`'s
    /// address and not read.
    SgemmFused "sgemm_fused" "kiln_rt_sgemm_fused" {
        a: read, b: read, c: read_write, bias: read, z: read,
        m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64, trans_a: i64, trans_b: i64,
        nr: i64, kc: i64, bias_mode: i64, period: i64, residual: i64, act: i64,
        alpha: f32, beta: f32, act_alpha: f32, act_beta: f32,
    }

    /// Depthwise 2-D convolution of `f32` planes: `y[p, oy, ox] = (y[p, oy, ox] if accumulate) +
    /// Σ_{ky, kx} x[p, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw] · w[p mod channels, ky, kx]`, taps
    /// outside the `ih × iw` input skipped.
    DwConv2d "dwconv2d" "kiln_rt_dwconv2d" {
        x: read, w: read, y: read_write,
        planes: i64, channels: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        accumulate: i64,
    }

    /// The fused ops' epilogue, in place over an `f32` matrix of `rows × cols` (row stride
    /// `cols`): `y[r, c] = act(y[r, c] + bias + z[r, c])`, the bias by `bias_mode` (0: none; 1:
    /// `b[r mod period]`, per row; 2: `b[c]`, per column), `residual` non-zero to add `z` (laid
    /// out as `y`), the activation `act` with `alpha`, `beta`.
    Epilogue "epilogue" "kiln_rt_epilogue" {
        y: read_write, b: read, z: read,
        rows: i64, cols: i64, bias_mode: i64, period: i64, residual: i64, act: i64,
        alpha: f32, beta: f32,
    }

    /// The fused 2-D convolution of `f32` NCHW tensors: `y[n, m, oy, ox] = act(Σ_{c, ky, kx}
    /// x[n, g·Cg + c, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw] · w[m, c, ky, kx] + b[m] + z[n, m,
    /// oy, ox])`, `g` the group of output channel `m`, taps outside the `ih × iw` input skipped;
    /// `bias` non-zero to add `b`, `residual` non-zero to add `z` (laid out as `y`; it must not
    /// be `y`), the activation `act` with `alpha`, `beta`.
    Conv2d "conv2d" "kiln_rt_conv2d" {
        x: read, w: read, b: read, z: read, y: write,
        batch: i64, channels: i64, out_channels: i64, groups: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        bias: i64, residual: i64, act: i64,
        alpha: f32, beta: f32,
    }

    /// [`Conv2d`] with the weights packed ahead, when the model was compiled, into panels of
    /// `width` output channels (`kiln_runtime::conv::Conv2d::pack_weights`): per group of `Mg`
    /// output channels, `⌈Mg/width⌉` panels of the kernel's `K = Cg·kh·kw` steps × `width`
    /// lanes, step-major, lanes past `Mg` zero; `groups·⌈Mg/width⌉·width·K` elements.
    Conv2dPacked "conv2d_packed" "kiln_rt_conv2d_packed" {
        x: read, w: read, b: read, z: read, y: write,
        batch: i64, channels: i64, out_channels: i64, groups: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        bias: i64, residual: i64, act: i64, width: i64,
        alpha: f32, beta: f32,
    }

    /// im2col of `f32` NCHW planes for a 2-D convolution: `col[(c·kh + ky)·kw + kx, oy·ow + ox]
    /// = x[c, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw]`, zero where that position is outside the
    /// `ih × iw` input.
    Im2col "im2col" "kiln_rt_im2col" {
        x: read, col: write,
        channels: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
    }

    /// [`Im2col`] of 8-bit planes (`i8` when `signed` is non-zero, else `u8`; `col` of `x`'s
    /// type) for the integer convolutions: the same matrix, the byte `pad` (its low 8 bits; the
    /// input's zero point) where the position is outside the input.
    Im2colBytes "im2col_bytes" "kiln_rt_im2col_bytes" {
        x: read int8, col: write int8,
        channels: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        pad: i64, signed: i64,
    }

    /// 2-D max pooling of `f32` planes: `y[p, oy, ox]` is the maximum of `x[p, oy·sh − ph +
    /// ky·dh, ox·sw − pw + kx·dw]` over the taps inside the `ih × iw` input, visited in `(ky, kx)`
    /// order, a tap replacing the maximum when it is the first inside or strictly greater (so a
    /// NaN wins only as the first); 0 without any tap inside.
    MaxPool2d "maxpool2d" "kiln_rt_maxpool2d" {
        x: read, y: write,
        planes: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
    }

    /// Writes 1 to the byte at `flag` when the run should stop (cancelled, or past its
    /// deadline: `kiln_runtime::stop`), else 0. Polled once per iteration of a `Loop`.
    ShouldStop "should_stop" "kiln_rt_should_stop" {
        flag: write bytes,
    }

    /// Softmax along the rows of an `f32` matrix of `rows × cols` (row stride `cols`), in
    /// place: `x[r, c] = e^(x[r, c] − m) / Σ e^(x[r, ·] − m)`, `m` the row's maximum or 0 when
    /// that is −∞, a zero sum dividing by 1.
    Softmax "softmax" "kiln_rt_softmax" {
        x: read_write,
        rows: i64, cols: i64,
    }

    /// Layer or RMS normalization along the rows of an `f32` matrix of `rows × cols`: with `m`
    /// the row's mean and `v` its population variance, `y = ((x − m)·(1/√(v + epsilon)))·
    /// scale[c] + b[c]` (the bias only when `bias` is non-zero), or with `rms` non-zero `y =
    /// (x·(1/√(Σx²/cols + epsilon)))·scale[c]`. An unused bias is passed as `scale`'s address
    /// and not read; `y` must not overlap the others.
    LayerNorm "layernorm" "kiln_rt_layernorm" {
        x: read, scale: read, b: read, y: write,
        rows: i64, cols: i64, bias: i64, rms: i64,
        epsilon: f32,
    }

    /// [`Conv2dPacked`] on NCHW16c tensors (`kiln_runtime::nchwc`): `x`, `z` and `y` hold each
    /// image's channels in blocks of 16, `[c/16][h][w][c mod 16]` (`⌈C/16⌉·16·h·w` elements per
    /// image, the lanes past the last channel padding that no routine relies on). One group or
    /// depthwise, and no activation, Relu or Clip. `width` is 0 when `w` holds the plain
    /// weights (packed on each call), else `kiln_runtime::nchwc::conv::packed_width` (64, or 16
    /// when depthwise) when it holds them packed by `kiln_runtime::nchwc::conv::pack_weights`;
    /// `x_blocked` 0 when `x` is NCHW planes instead (one group only). Unlike [`Conv2d`]'s, `z`
    /// may be `y` itself: each addend element is read only for the output element at its
    /// position, before that is stored.
    Conv2dNchwc "conv2d_nchwc" "kiln_rt_conv2d_nchwc" {
        x: read, w: read, b: read, z: read, y: write,
        batch: i64, channels: i64, out_channels: i64, groups: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        bias: i64, residual: i64, act: i64, width: i64, x_blocked: i64,
        alpha: f32, beta: f32,
    }

    /// [`MaxPool2d`] on an NCHW16c tensor: `planes` is its channels over all images rounded up
    /// to a multiple of 16 (each lane a plane).
    MaxPool2dNchwc "maxpool2d_nchwc" "kiln_rt_maxpool2d_nchwc" {
        x: read, y: write,
        planes: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
    }

    /// Lays `batch` NCHW images of `channels` planes of `pixels` elements out as NCHW16c, the
    /// padding lanes zero.
    ToNchwc "to_nchwc" "kiln_rt_to_nchwc" {
        x: read, y: write,
        batch: i64, channels: i64, pixels: i64,
    }

    /// The inverse of [`ToNchwc`]: `batch` NCHW16c images into NCHW planes.
    FromNchwc "from_nchwc" "kiln_rt_from_nchwc" {
        x: read, y: write,
        batch: i64, channels: i64, pixels: i64,
    }

    /// Copies `n` elements: `dst[0..n] = src[0..n]`, both buffers of one element type (not a
    /// packed one), the bytes as they are. The runtime symbol takes the count in bytes, which
    /// the code generator computes from the element type.
    Copy "copy" "kiln_rt_copy" {
        dst: write bytes, src: read bytes,
        n: i64,
    }

    /// Requantization of integer accumulators (QLinearConv's output stage), `i32` (`int_x`
    /// non-zero) or integer-valued `f32`, over a `rows × cols` matrix: `y[r, c] = sat(round(x[r,
    /// c] · s[r mod period] + zero))`, product and sum in `f64`, rounded half to even, saturated
    /// to `i8` (`signed` non-zero; `y` must then be an `i8` buffer) or `u8`, NaN to 0.
    Requantize "requantize" "kiln_rt_requantize" {
        x: read bytes, s: read, y: write int8,
        rows: i64, cols: i64, period: i64, zero: i64, signed: i64, int_x: i64,
    }

    /// The 8-bit integer product `C[m×n] = (A − za)·(B − zb) + bias` in `i32` (wrapping),
    /// row-major with leading dimensions: `A` (`m × k`) and its zero points are `i8` when
    /// `a_signed` is non-zero, else `u8`, and likewise `B` (`k × n`) with `b_signed`. `a_zeros`
    /// is 0 (none), 1 (per tensor) or `m` (per row); `b_zeros` 0, 1 or `n` (per column);
    /// `bias_mode` 0 (none), 1 (`bias[i]` per row) or 2 (`bias[j]` per column). An unused zero
    /// point is passed as its operand's address, an unused bias as `c`'s, and not read.
    /// `b_packed` non-zero: `B` is an `i8` buffer packed ahead (`kiln_runtime::qgemm::pack_b`,
    /// when the model was compiled; `ldb` is not read): for each panel of 16 columns, for each
    /// group of four steps of `k`, each column's four values (`b − 128` for an unsigned `B`), zero
    /// past the matrix; then each padded column's sum as a little-endian `i32`.
    Qgemm "qgemm" "kiln_rt_qgemm" {
        a: read int8, b: read int8, c: write i32, za: read int8, zb: read int8, bias: read i32,
        m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64, a_signed: i64, b_signed: i64, a_zeros: i64, b_zeros: i64,
        bias_mode: i64, b_packed: i64,
    }

    /// Depthwise 2-D convolution of 8-bit planes with QLinearConv's output stage: `y[p, oy,
    /// ox] = sat(round((Σ_{ky, kx} (x[p, ..] − x_zero) · w[c, ky, kx] + bias[c]) · scales[c] +
    /// zero))` for `c = p mod channels`, taps outside the input skipped, the sum an integer in
    /// `i32` (wrapping) and the rest as [`Requantize`]. `x` is `i8` when `x_signed` is non-zero,
    /// else `u8`; `w` holds the weights minus their zero points as `f32`, and every channel's
    /// `Σ |w| · max |x − x_zero|` must stay below 2^24 (the sums are `f32` ones); the bias is
    /// read when `bias_mode` is 1 (an unused one is passed as any `i32` buffer's address);
    /// `y` is `i8` when `y_signed` is non-zero.
    DwConv2dRequantize "dwconv2d_requantize" "kiln_rt_dwconv2d_requantize" {
        x: read int8, w: read, bias: read i32, scales: read, y: write int8,
        planes: i64, channels: i64,
        ih: i64, iw: i64, oh: i64, ow: i64, kh: i64, kw: i64, sh: i64, sw: i64, ph: i64, pw: i64, dh: i64, dw: i64,
        x_signed: i64, x_zero: i64, bias_mode: i64, zero: i64, y_signed: i64,
    }

    /// [`Qgemm`] with QLinearConv's and QLinearMatMul's output stage fused: `y[i, j] =
    /// sat(round(C[i, j] · s + zero))` with the product and sum in `f64`, rounded half to even,
    /// into `i8` (`y_signed` non-zero; `y` must then be an `i8` buffer) or `u8`, laid out as `C`
    /// would be (row stride `ldc`). `s` is `scales[0]`, `scales[i]` or `scales[j]` for
    /// `scale_mode` 0, 1 or 2. The `i32` matrix is never stored.
    QgemmRequantize "qgemm_requantize" "kiln_rt_qgemm_requantize" {
        a: read int8, b: read int8, y: write int8, za: read int8, zb: read int8, bias: read i32, scales: read,
        m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64, a_signed: i64, b_signed: i64, a_zeros: i64, b_zeros: i64,
        bias_mode: i64, b_packed: i64, scale_mode: i64, zero: i64, y_signed: i64,
    }

    /// TopK along the middle axis of an `f32` tensor seen as `outer × len × inner`: for each
    /// run `x[o, :, i]`, its `k` largest elements (`largest` non-zero; else the smallest) in
    /// order, by value with NaN above every number and ties by lower index first (ONNX's
    /// reference order), into `y[o, r, i]`, and their indices along the axis into the `i64`
    /// elements `indices[o, r, i]`.
    TopK "topk" "kiln_rt_topk" {
        x: read, y: write, indices: write bytes,
        outer: i64, len: i64, inner: i64, k: i64, largest: i64,
    }
}
