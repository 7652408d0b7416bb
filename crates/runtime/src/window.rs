//! The geometry every 2-D sliding-window routine shares (convolutions, im2col, max pooling):
//! input and output plane sizes, the kernel, strides, leading padding and dilations, and the
//! checks that make their index arithmetic safe.

/// A 2-D window over row-major `h × w` planes producing `oh × ow` planes: output position
/// `(oy, ox)`, tap `(ky, kx)` reads input position `(oy·sh − ph + ky·dh, ox·sw − pw + kx·dw)`,
/// where positions outside the plane are padding. Padding after the input is implied by `oh`
/// and `ow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Input rows.
    pub h: usize,
    /// Input columns.
    pub w: usize,
    /// Output rows.
    pub oh: usize,
    /// Output columns.
    pub ow: usize,
    /// Kernel rows.
    pub kh: usize,
    /// Kernel columns.
    pub kw: usize,
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Padding above the input.
    pub ph: usize,
    /// Padding left of the input.
    pub pw: usize,
    /// Vertical dilation.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
}

impl Window {
    /// The window of runtime-call arguments in field order (`h, w, oh, ow, kh, kw, sh, sw, ph,
    /// pw, dh, dw`), or `None` when one is negative.
    pub fn from_args(args: [i64; 12]) -> Option<Window> {
        let [h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw] = args.map(|v| usize::try_from(v).ok());
        Some(Window { h: h?, w: w?, oh: oh?, ow: ow?, kh: kh?, kw: kw?, sh: sh?, sw: sw?, ph: ph?, pw: pw?, dh: dh?, dw: dw? })
    }

    /// Whether strides and dilations are positive and every index along both axes fits in
    /// `isize` (a generous bound on `n + p + o·s + k·d`).
    pub fn is_valid(&self) -> bool {
        let reach = |n: usize, o: usize, k: usize, s: usize, p: usize, d: usize| {
            let wide = |v: usize| v as u128;
            wide(n) + wide(p) + wide(o) * wide(s) + wide(k) * wide(d) <= isize::MAX as u128
        };
        self.sh > 0 && self.sw > 0 && self.dh > 0 && self.dw > 0 && reach(self.h, self.oh, self.kh, self.sh, self.ph, self.dh) && reach(self.w, self.ow, self.kw, self.sw, self.pw, self.dw)
    }
}

#[cfg(test)]
impl Window {
    /// The window over `h × w` planes padded by `[top, left, bottom, right]`, its output every
    /// position where the dilated kernel fits (none when it does not): how tests spell a layer.
    pub(crate) fn padded((h, w): (usize, usize), (kh, kw): (usize, usize), (sh, sw): (usize, usize), (dh, dw): (usize, usize), [pt, pl, pb, pr]: [usize; 4]) -> Window {
        let extent = |n: usize, before: usize, after: usize, k: usize, s: usize, d: usize| {
            let span = if k == 0 { 1 } else { (k - 1) * d + 1 };
            (n + before + after).checked_sub(span).map_or(0, |r| r / s + 1)
        };
        let (oh, ow) = (extent(h, pt, pb, kh, sh, dh), extent(w, pl, pr, kw, sw, dw));
        Window { h, w, oh, ow, kh, kw, sh, sw, ph: pt, pw: pl, dh, dw }
    }
}

/// The product of `counts` as a number of `f32` elements whose bytes fit in `isize` (what one
/// allocation can hold), or `None`.
pub(crate) fn elements(counts: &[usize]) -> Option<usize> {
    counts.iter().try_fold(1usize, |n, &c| n.checked_mul(c)).filter(|n| n.checked_mul(4).is_some_and(|bytes| bytes <= isize::MAX as usize))
}
