//! Each routine's constant codes, and the extent each of its buffer addresses spans from its
//! base when the sizes are constants (invariants 11 and 12 of the module doc).

use super::Cx;
use crate::call::{self, Call};
use crate::ir::*;

/// An operand's extent: its name, the last element the routine reaches past its base address
/// (negative: it addresses nothing), and what the access is.
type Extent = (&'static str, i128, &'static str);

/// `v`'s product as `i128`, `None` when a factor is negative or it overflows.
fn product(v: &[i64]) -> Option<i128> {
    v.iter().try_fold(1i128, |a, &b| if b < 0 { None } else { a.checked_mul(i128::from(b)) })
}

/// The last element read through `op(A)` (`m × k`, row stride `lda`, transposed by `ta`).
fn span_a(m: i128, k: i128, lda: i128, ta: i64) -> i128 {
    if ta != 0 { (k - 1) * lda + m - 1 } else { (m - 1) * lda + k - 1 }
}

impl Cx<'_> {
    /// The value of `e` when the analysis knows it is a constant.
    fn constant(&self, e: &Expr) -> Option<i64> {
        self.range(e).as_constant()
    }

    /// Reports an 8-bit operand `what` whose buffer's signedness is not the one the constant
    /// flag `signed` says (the routine would read or write the other type's values).
    fn signedness(&mut self, routine: &str, what: &str, a: &call::Addr, signed: &Expr) {
        let Some(flag) = self.constant(signed) else { return };
        let want = if flag != 0 { ScalarType::I8 } else { ScalarType::U8 };
        if let Some(b) = self.buffer(a.buf)
            && b.elem != ElemType::Scalar(want)
        {
            let got = b.elem.name();
            self.err(format!("{routine} operand `{what}` is @{} of {got} elements, but the flag says {}", a.buf.0, want.name()));
        }
    }

    /// The extents of `call`'s addresses, by operand name; none when its sizes are not
    /// constants or it addresses nothing. Reports constant codes that do not exist.
    pub(super) fn extents(&mut self, call: &Call) -> Vec<Extent> {
        let name = call.kind().name();
        match call {
            Call::Sgemm(g) => {
                let [Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc), Some(ta), Some(tb)] = [&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.trans_a, &g.trans_b].map(|e| self.constant(e)) else { return Vec::new() };
                if !(m > 0 && n > 0 && k > 0 && lda >= 0 && ldb >= 0 && ldc >= 0) {
                    return Vec::new();
                }
                let (m, n, k, lda, ldb, ldc) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldb), i128::from(ldc));
                let span_b = if tb != 0 { (n - 1) * ldb + k - 1 } else { (k - 1) * ldb + n - 1 };
                vec![("a", span_a(m, k, lda, ta), "sgemm reads A"), ("b", span_b, "sgemm reads B"), ("c", (m - 1) * ldc + n - 1, "sgemm writes C")]
            }
            Call::SgemmPacked(g) => {
                let [Some(m), Some(n), Some(k), Some(lda), Some(ldc), Some(ta), Some(nr), Some(kc)] = [&g.m, &g.n, &g.k, &g.lda, &g.ldc, &g.trans_a, &g.nr, &g.kc].map(|e| self.constant(e)) else { return Vec::new() };
                // The runtime does nothing with an empty layout.
                if !(m > 0 && n > 0 && k > 0 && lda >= 0 && ldc >= 0) || nr <= 0 || kc <= 0 {
                    return Vec::new();
                }
                let (m, n, k, lda, ldc, nr) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldc), i128::from(nr));
                let span_b = k * ((n + nr - 1) / nr * nr) - 1;
                vec![("a", span_a(m, k, lda, ta), "sgemm_packed reads A"), ("b", span_b, "sgemm_packed reads the packed B"), ("c", (m - 1) * ldc + n - 1, "sgemm_packed writes C")]
            }
            Call::SgemmFused(g) => self.sgemm_fused(g),
            Call::ShouldStop(_) => vec![("flag", 0, "should_stop writes its flag")],
            Call::DwConv2d(d) => {
                let [Some(planes), Some(channels), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw)] = [&d.planes, &d.channels, &d.ih, &d.iw, &d.oh, &d.ow, &d.kh, &d.kw].map(|e| self.constant(e)) else { return Vec::new() };
                // Each operand is `count` planes of `a·b` elements; a zero extent addresses
                // nothing, and so does the whole call when the output is empty.
                let extent = |count: i64, a: i64, b: i64| {
                    let n = i128::from(count) * i128::from(a);
                    // `count·a` past `i64` (sizes the runtime refuses) could overflow the product.
                    if count < 0 || a < 0 || b < 0 || n > i128::from(i64::MAX) { None } else { Some(n * i128::from(b) - 1) }
                };
                match (extent(planes, h, w), extent(channels, kh, kw), extent(planes, oh, ow)) {
                    (Some(x), Some(k), Some(y)) if y >= 0 => vec![("x", x, "dwconv2d reads X"), ("w", k, "dwconv2d reads W"), ("y", y, "dwconv2d writes Y")],
                    _ => Vec::new(),
                }
            }
            Call::Conv2d(c) => self.conv2d(name, c.ints(), None),
            Call::Conv2dPacked(c) => {
                let width = self.constant(&c.width);
                self.conv2d(name, c.ints(), Some(width))
            }
            Call::Conv2dNchwc(c) => self.conv2d_nchwc(c),
            Call::MaxPool2dNchwc(m) => {
                // `⌈planes/16⌉·16` lanes of `ih·iw` pixels read, of `oh·ow` written.
                let [Some(planes), Some(h), Some(w), Some(oh), Some(ow)] = [&m.planes, &m.ih, &m.iw, &m.oh, &m.ow].map(|e| self.constant(e)) else { return Vec::new() };
                let (Some(x), Some(y)) = (product(&[planes, h, w]), product(&[planes, oh, ow])) else { return Vec::new() };
                if y == 0 {
                    return Vec::new();
                }
                let lanes = (i128::from(planes) + 15) / 16 * 16;
                let (x, y) = (x / i128::from(planes) * lanes, y / i128::from(planes) * lanes);
                vec![("x", x - 1, "maxpool2d_nchwc reads X"), ("y", y - 1, "maxpool2d_nchwc writes Y")]
            }
            Call::ToNchwc(_) | Call::FromNchwc(_) => {
                let sizes = match call {
                    Call::ToNchwc(c) => [&c.batch, &c.channels, &c.pixels],
                    Call::FromNchwc(c) => [&c.batch, &c.channels, &c.pixels],
                    _ => return Vec::new(),
                };
                let [Some(batch), Some(channels), Some(pixels)] = sizes.map(|e| self.constant(e)) else { return Vec::new() };
                let Some(plain) = product(&[batch, channels, pixels]) else { return Vec::new() };
                if plain == 0 {
                    return Vec::new();
                }
                let blocked = plain / i128::from(channels) * ((i128::from(channels) + 15) / 16 * 16);
                if let Call::ToNchwc(_) = call {
                    vec![("x", plain - 1, "to_nchwc reads X"), ("y", blocked - 1, "to_nchwc writes Y")]
                } else {
                    vec![("x", blocked - 1, "from_nchwc reads X"), ("y", plain - 1, "from_nchwc writes Y")]
                }
            }
            Call::Epilogue(e) => self.epilogue(e),
            Call::Requantize(q) => {
                // `rows·cols` elements of X read and of Y written, the scales of the first
                // `min(period, rows)` rows read.
                self.signedness("requantize", "y", &q.y, &q.signed);
                if let Some(int_x) = self.constant(&q.int_x)
                    && let Some(b) = self.buffer(q.x.buf)
                {
                    let want = if int_x != 0 { ScalarType::I32 } else { ScalarType::F32 };
                    if b.elem != ElemType::Scalar(want) {
                        let got = b.elem.name();
                        self.err(format!("requantize operand `x` is @{} of {got} elements, but the flag says {}", q.x.buf.0, want.name()));
                    }
                }
                let [Some(rows), Some(cols)] = [&q.rows, &q.cols].map(|e| self.constant(e)) else { return Vec::new() };
                let period = self.constant(&q.period);
                if let Some(p) = period.filter(|&p| p <= 0) {
                    self.err(format!("requantize with a scale period of {p}"));
                }
                if rows <= 0 || cols <= 0 {
                    return Vec::new();
                }
                let n = i128::from(rows) * i128::from(cols);
                let scales = i128::from(period.filter(|&p| p > 0).map_or(rows, |p| p.min(rows)));
                vec![("x", n - 1, "requantize reads X"), ("s", scales - 1, "requantize reads the scales"), ("y", n - 1, "requantize writes Y")]
            }
            Call::Im2colBytes(g) => {
                // As im2col's, in bytes.
                self.signedness("im2col_bytes", "x", &g.x, &g.signed);
                self.signedness("im2col_bytes", "col", &g.col, &g.signed);
                let [Some(channels), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw)] = [&g.channels, &g.ih, &g.iw, &g.oh, &g.ow, &g.kh, &g.kw].map(|e| self.constant(e)) else { return Vec::new() };
                let (Some(x), Some(col)) = (product(&[channels, h, w]), product(&[channels, kh, kw, oh, ow])) else { return Vec::new() };
                if col == 0 {
                    return Vec::new();
                }
                vec![("x", x - 1, "im2col_bytes reads X"), ("col", col - 1, "im2col_bytes writes the matrix")]
            }
            Call::DwConv2dRequantize(d) => {
                // Planes of X and Y, the channels' kernels, scales and bias (when read).
                self.signedness("dwconv2d_requantize", "x", &d.x, &d.x_signed);
                self.signedness("dwconv2d_requantize", "y", &d.y, &d.y_signed);
                let ints = [&d.planes, &d.channels].into_iter().chain(d.window()).chain([&d.x_signed, &d.x_zero, &d.bias_mode, &d.zero, &d.y_signed]).map(|e| self.constant(e)).collect::<Option<Vec<i64>>>();
                let Some(v) = ints else { return Vec::new() };
                let window: [i64; 12] = std::array::from_fn(|i| v[2 + i]);
                let Some(q) = kiln_runtime::qdwconv::QDwConv2d::from_args(v[0], v[1], window, [v[14], v[15], v[16], v[17], v[18]]) else {
                    let what = if (0..=1).contains(&v[16]) { format!("sizes or zero points the runtime refuses (planes {}, channels {}, window {window:?}, zero points {} and {})", v[0], v[1], v[15], v[17]) } else { format!("bias mode {}", v[16]) };
                    self.err(format!("dwconv2d_requantize with {what}"));
                    return Vec::new();
                };
                let (ex, ew, ec, ey) = q.extents();
                if ey == 0 {
                    return Vec::new();
                }
                let mut out = vec![("x", ex as i128 - 1, "dwconv2d_requantize reads X"), ("w", ew as i128 - 1, "dwconv2d_requantize reads the kernels"), ("scales", ec as i128 - 1, "dwconv2d_requantize reads the scales"), ("y", ey as i128 - 1, "dwconv2d_requantize writes Y")];
                if q.bias {
                    out.push(("bias", ec as i128 - 1, "dwconv2d_requantize reads the bias"));
                }
                out
            }
            Call::Qgemm(q) => self.qgemm("qgemm", q),
            Call::QgemmRequantize(q) => {
                // The product's extents, its result bytes at `y`, and the scales by their count.
                self.signedness("qgemm_requantize", "y", &q.y, &q.y_signed);
                let mut out = self.qgemm("qgemm_requantize", &q.product());
                for e in &mut out {
                    if e.0 == "c" {
                        *e = ("y", e.1, "qgemm_requantize writes Y");
                    }
                }
                let Some(code) = self.constant(&q.scale_mode) else { return out };
                let Some(along) = kiln_runtime::qgemm::QScale::from_code(code) else {
                    self.err(format!("qgemm_requantize with scale mode {code}"));
                    return out;
                };
                let [Some(m), Some(n)] = [&q.m, &q.n].map(|e| self.constant(e).and_then(|v| usize::try_from(v).ok())) else { return out };
                let r = kiln_runtime::qgemm::Requant { scales: along, zero: 0, signed: false };
                if !out.is_empty() {
                    out.push(("scales", r.scales_len(m, n) as i128 - 1, "qgemm_requantize reads the scales"));
                }
                out
            }
            Call::Im2col(g) => {
                // `channels` planes of `ih·iw` read, `channels·kh·kw` rows of `oh·ow` written;
                // nothing is addressed when the matrix is empty (or sizes are nonsense, which
                // the runtime refuses).
                let [Some(channels), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw)] = [&g.channels, &g.ih, &g.iw, &g.oh, &g.ow, &g.kh, &g.kw].map(|e| self.constant(e)) else { return Vec::new() };
                let (Some(x), Some(col)) = (product(&[channels, h, w]), product(&[channels, kh, kw, oh, ow])) else { return Vec::new() };
                if col == 0 {
                    return Vec::new();
                }
                vec![("x", x - 1, "im2col reads X"), ("col", col - 1, "im2col writes the matrix")]
            }
            Call::MaxPool2d(m) => {
                // `planes` planes of `ih·iw` read, of `oh·ow` written; nothing is addressed when
                // the output is empty.
                let [Some(planes), Some(h), Some(w), Some(oh), Some(ow)] = [&m.planes, &m.ih, &m.iw, &m.oh, &m.ow].map(|e| self.constant(e)) else { return Vec::new() };
                let (Some(x), Some(y)) = (product(&[planes, h, w]), product(&[planes, oh, ow])) else { return Vec::new() };
                if y == 0 {
                    return Vec::new();
                }
                vec![("x", x - 1, "maxpool2d reads X"), ("y", y - 1, "maxpool2d writes Y")]
            }
            Call::Copy(c) => match self.constant(&c.n) {
                Some(n) if n > 0 => vec![("dst", i128::from(n) - 1, "copy writes its destination"), ("src", i128::from(n) - 1, "copy reads its source")],
                _ => Vec::new(),
            },
            Call::LayerNorm(g) => {
                let [Some(rows), Some(cols)] = [&g.rows, &g.cols].map(|e| self.constant(e)) else { return Vec::new() };
                let (bias, rms) = (self.constant(&g.bias), self.constant(&g.rms));
                // Nothing is addressed when the matrix is empty (or a size negative).
                if rows <= 0 || cols <= 0 {
                    return Vec::new();
                }
                let (n, cols) = (i128::from(rows) * i128::from(cols), i128::from(cols));
                let bias = if bias == Some(0) || rms.is_some_and(|r| r != 0) { -1 } else { cols - 1 };
                vec![("x", n - 1, "layernorm reads X"), ("scale", cols - 1, "layernorm reads the scale"), ("b", bias, "layernorm reads the bias"), ("y", n - 1, "layernorm writes Y")]
            }
            Call::TopK(t) => {
                // The routine writes `i64` indices whatever the buffer holds.
                if let Some(b) = self.buffer(t.indices.buf)
                    && b.elem != ElemType::Scalar(ScalarType::I64)
                {
                    let got = b.elem.name();
                    self.err(format!("topk operand `indices` is @{} of {got} elements, not i64", t.indices.buf.0));
                }
                let [Some(outer), Some(len), Some(inner), Some(k)] = [&t.outer, &t.len, &t.inner, &t.k].map(|e| self.constant(e)) else { return Vec::new() };
                let (Some(x), Some(y)) = (product(&[outer, len, inner]), product(&[outer, k, inner])) else { return Vec::new() };
                // Nothing is addressed when the output is empty or `k` exceeds the axis.
                if y == 0 || k > len {
                    return Vec::new();
                }
                vec![("x", x - 1, "topk reads X"), ("y", y - 1, "topk writes the values"), ("indices", y - 1, "topk writes the indices")]
            }
            Call::Softmax(s) => {
                let [Some(rows), Some(cols)] = [&s.rows, &s.cols].map(|e| self.constant(e)) else { return Vec::new() };
                // Nothing is addressed when the matrix is empty (or a size negative).
                if rows <= 0 || cols <= 0 {
                    return Vec::new();
                }
                vec![("x", i128::from(rows) * i128::from(cols) - 1, "softmax reads and writes X")]
            }
        }
    }

    /// The extents of an integer product (routine `name`: `qgemm`, or the product of
    /// `qgemm_requantize`).
    fn qgemm(&mut self, name: &str, q: &call::Qgemm) -> Vec<Extent> {
        // `A` (`m` rows of `lda`, `k` used), `B` (`k` rows of `ldb`, `n` used) and `C`
        // (`m` rows of `ldc`, `n` written); the zero points by their counts. Nothing is
        // addressed when `C` is empty or the sizes are ones the runtime refuses.
        // A packed `B` holds `i8` whatever the matrix held.
        let packed = self.constant(&q.b_packed);
        let b_flag = if packed.is_some_and(|p| p != 0) { Expr::idx(1) } else { q.b_signed.clone() };
        // An unused zero point (a count of 0) may be any buffer's address.
        let used = |count: &Expr| self.constant(count) != Some(0);
        let (za_used, zb_used) = (used(&q.a_zeros), used(&q.b_zeros));
        for (what, a, flag, checked) in [("a", &q.a, &q.a_signed, true), ("za", &q.za, &q.a_signed, za_used), ("b", &q.b, &b_flag, true), ("zb", &q.zb, &q.b_signed, zb_used)] {
            if checked {
                self.signedness(name, what, a, flag);
            }
        }
        let sizes = [&q.m, &q.n, &q.k, &q.lda, &q.ldb, &q.ldc, &q.a_zeros, &q.b_zeros].map(|e| self.constant(e).and_then(|v| usize::try_from(v).ok()));
        let [Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc), Some(a_zeros), Some(b_zeros)] = sizes else { return Vec::new() };
        let Some(code) = self.constant(&q.bias_mode) else { return Vec::new() };
        let Some(bias) = kiln_runtime::qgemm::QBias::from_code(code) else {
            self.err(format!("{name} with bias mode {code}"));
            return Vec::new();
        };
        let Some(packed) = packed else { return Vec::new() };
        let g = kiln_runtime::qgemm::Qgemm { m, n, k, lda, ldb, ldc, a_signed: false, b_signed: false, a_zeros, b_zeros, bias, b_packed: packed != 0 };
        if !g.is_valid() {
            self.err(format!("{name} with inconsistent sizes {g:?}"));
            return Vec::new();
        }
        let (ea, eb, ec) = g.extents();
        let mut out = Vec::new();
        if ec > 0 {
            out.push(("c", ec as i128 - 1, "qgemm writes C"));
            if ea > 0 {
                out.push(("a", ea as i128 - 1, "qgemm reads A"));
            }
            if eb > 0 {
                out.push(("b", eb as i128 - 1, "qgemm reads B"));
            }
            let counts = [("za", a_zeros, "qgemm reads A's zero points"), ("zb", b_zeros, "qgemm reads B's zero points"), ("bias", g.bias_len(), "qgemm reads the bias")];
            out.extend(counts.into_iter().filter(|e| e.1 > 0).map(|(o, z, w)| (o, z as i128 - 1, w)));
        }
        out
    }

    fn sgemm_fused(&mut self, g: &call::SgemmFused) -> Vec<Extent> {
        let [Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc), Some(ta), Some(tb), Some(nr)] = [&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.trans_a, &g.trans_b, &g.nr].map(|e| self.constant(e)) else { return Vec::new() };
        let [kc, mode, period, residual, act] = [&g.kc, &g.bias_mode, &g.period, &g.residual, &g.act].map(|e| self.constant(e));
        if !(m > 0 && n > 0 && k > 0 && lda >= 0 && ldb >= 0 && ldc >= 0) {
            return Vec::new();
        }
        if let Some(mode) = mode.filter(|m| !(0..=2).contains(m)) {
            self.err(format!("sgemm_fused bias mode {mode} does not exist (0 none, 1 per row, 2 per column)"));
        }
        if let Some(act) = act.filter(|a| !(0..=11).contains(a)) {
            self.err(format!("sgemm_fused activation code {act} does not exist"));
        }
        if nr > 0 && kc.is_some_and(|kc| kc <= 0) {
            // The runtime does nothing with an empty layout.
            return Vec::new();
        }
        let (m, n, k, lda, ldb, ldc, nr) = (i128::from(m), i128::from(n), i128::from(k), i128::from(lda), i128::from(ldb), i128::from(ldc), i128::from(nr));
        let span_b = match (nr > 0, tb != 0) {
            (true, _) => k * ((n + nr - 1) / nr * nr) - 1,
            (false, true) => (n - 1) * ldb + k - 1,
            (false, false) => (k - 1) * ldb + n - 1,
        };
        let span_c = (m - 1) * ldc + n - 1;
        // As for `epilogue`: an operand counts as read unless a constant flag says not.
        let bias = bias_span(mode, period, m, n);
        let z = if residual == Some(0) { -1 } else { span_c };
        vec![("a", span_a(m, k, lda, ta), "sgemm_fused reads A"), ("b", span_b, "sgemm_fused reads B"), ("c", span_c, "sgemm_fused writes C"), ("bias", bias, "sgemm_fused reads the bias"), ("z", z, "sgemm_fused reads Z")]
    }

    fn epilogue(&mut self, e: &call::Epilogue) -> Vec<Extent> {
        let [Some(rows), Some(cols)] = [&e.rows, &e.cols].map(|e| self.constant(e)) else { return Vec::new() };
        let [mode, period, residual, act] = [&e.bias_mode, &e.period, &e.residual, &e.act].map(|e| self.constant(e));
        if let Some(mode) = mode.filter(|m| !(0..=2).contains(m)) {
            self.err(format!("epilogue bias mode {mode} does not exist (0 none, 1 per row, 2 per column)"));
        }
        if let (Some(1), Some(period)) = (mode, period.filter(|&p| p <= 0)) {
            self.err(format!("epilogue with a bias per row of period {period}"));
        }
        if let Some(act) = act.filter(|a| !(0..=11).contains(a)) {
            self.err(format!("epilogue activation code {act} does not exist"));
        }
        if rows <= 0 || cols <= 0 || i128::from(rows) * i128::from(cols) > i128::from(i64::MAX) {
            return Vec::new();
        }
        let (rows, cols) = (i128::from(rows), i128::from(cols));
        // An operand counts as read unless its flag is a constant that says it is not.
        let bias = bias_span(mode, period, rows, cols);
        let z = if residual == Some(0) { -1 } else { rows * cols - 1 };
        vec![("y", rows * cols - 1, "epilogue writes Y"), ("b", bias, "epilogue reads the bias"), ("z", z, "epilogue reads Z")]
    }

    /// `conv2d`'s extents from its integers, or `conv2d_packed`'s with its panel `width`.
    fn conv2d(&mut self, name: &str, ints: [&Expr; 19], width: Option<Option<i64>>) -> Vec<Extent> {
        let ints = ints.map(|e| self.constant(e));
        let [Some(batch), Some(channels), Some(out_channels), Some(groups), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), _, _, _, _, _, _, bias, residual, act] = ints else { return Vec::new() };
        if let Some(act) = act.filter(|a| !(0..=11).contains(a)) {
            self.err(format!("{name} activation code {act} does not exist"));
        }
        // Nothing is addressed when the output is empty or the groups do not divide the
        // channels (which the runtime refuses).
        if groups <= 0 || channels % groups != 0 || out_channels % groups != 0 {
            return Vec::new();
        }
        let (Some(x), Some(mut wk), Some(y)) = (product(&[batch, channels, h, w]), product(&[out_channels, channels / groups, kh, kw]), product(&[batch, out_channels, oh, ow])) else { return Vec::new() };
        if y == 0 {
            return Vec::new();
        }
        if let Some(width) = width {
            // Each group's kernels in whole panels of `width` output channels.
            let Some(width) = width else {
                self.err(format!("{name} needs a constant panel width"));
                return Vec::new();
            };
            if width <= 0 {
                self.err(format!("{name} panel width {width} is not positive"));
                return Vec::new();
            }
            let mg = out_channels / groups;
            let panels = (i128::from(mg) + i128::from(width) - 1) / i128::from(width);
            let Some(per_group) = product(&[channels / groups, kh, kw]) else { return Vec::new() };
            wk = i128::from(groups) * panels * i128::from(width) * per_group;
        }
        let flag = |f: Option<i64>, span: i128| if f == Some(0) { -1 } else { span };
        let what = if width.is_none() {
            ["conv2d reads X", "conv2d reads W", "conv2d reads the bias", "conv2d reads Z", "conv2d writes Y"]
        } else {
            ["conv2d_packed reads X", "conv2d_packed reads the packed W", "conv2d_packed reads the bias", "conv2d_packed reads Z", "conv2d_packed writes Y"]
        };
        let spans = [x - 1, wk - 1, flag(bias, i128::from(out_channels) - 1), flag(residual, y - 1), y - 1];
        ["x", "w", "b", "z", "y"].into_iter().zip(spans).zip(what).map(|((o, s), w)| (o, s, w)).collect()
    }

    fn conv2d_nchwc(&mut self, c: &call::Conv2dNchwc) -> Vec<Extent> {
        let name = "conv2d_nchwc";
        let ints = c.ints().map(|e| self.constant(e));
        let (width, x_blocked) = (self.constant(&c.width), self.constant(&c.x_blocked));
        let [Some(batch), Some(channels), Some(out_channels), Some(groups), Some(h), Some(w), Some(oh), Some(ow), Some(kh), Some(kw), _, _, _, _, _, _, bias, residual, act] = ints else { return Vec::new() };
        if let Some(act) = act.filter(|a| !(0..=2).contains(a)) {
            self.err(format!("{name} activation code {act} is not none, relu or clip"));
        }
        let Some(width) = width else {
            self.err(format!("{name} needs a constant panel width"));
            return Vec::new();
        };
        // One group (panels of 64 output channels), or depthwise (blocks of 16).
        let depthwise = groups == channels && out_channels == channels && groups > 1;
        let packed = if depthwise { 16 } else { 64 };
        if width != 0 && width != packed {
            self.err(format!("{name} panel width {width} is not 0 or {packed}"));
            return Vec::new();
        }
        // Nothing is addressed with other groups or an empty output (which the runtime
        // refuses).
        if groups != 1 && !depthwise {
            return Vec::new();
        }
        let blocks = |c: i64| (i128::from(c) + 15) / 16 * 16;
        let (Some(x), Some(wk), Some(y)) = (product(&[batch, h, w]), product(&[out_channels, channels / groups.max(1), kh, kw]), product(&[batch, oh, ow])) else { return Vec::new() };
        // NCHW planes when `x_blocked` is a constant 0; blocked otherwise.
        let (x, y) = (x * if x_blocked == Some(0) { i128::from(channels) } else { blocks(channels) }, y * blocks(out_channels));
        if y == 0 || channels < 0 || out_channels < 0 {
            return Vec::new();
        }
        let (kh, kw) = (i128::from(kh), i128::from(kw));
        let wk = match (width, depthwise) {
            (0, _) => wk,
            (_, true) => blocks(channels) * kh * kw,
            (_, false) => (i128::from(out_channels) + 63) / 64 * 64 * i128::from(channels) * kh * kw,
        };
        let flag = |f: Option<i64>, span: i128| if f == Some(0) { -1 } else { span };
        vec![
            ("x", x - 1, "conv2d_nchwc reads X"),
            ("w", wk - 1, "conv2d_nchwc reads W"),
            ("b", flag(bias, i128::from(out_channels) - 1), "conv2d_nchwc reads the bias"),
            ("z", flag(residual, y - 1), "conv2d_nchwc reads Z"),
            ("y", y - 1, "conv2d_nchwc writes Y"),
        ]
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
