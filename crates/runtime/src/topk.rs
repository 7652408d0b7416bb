//! TopK along the middle axis of an `f32` tensor seen as `outer × len × inner`: the `k`
//! largest (or smallest) elements of each run of `len` (stride `inner`), in ONNX's reference
//! order (by value, NaN above every number, `-0` equal to `0`, ties by lower index first),
//! with their indices.
//!
//! Each run is gathered with its indices, partitioned around its `k`-th element
//! (`select_nth_unstable_by`, linear time) and its first `k` sorted: `O(len + k·log k)`, where
//! generated loops select round by round in `O(len·k)`.

use std::cmp::Ordering;

/// A TopK of `outer × len × inner` `f32` elements into `outer × k × inner` values and indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopK {
    /// Runs before the axis.
    pub outer: usize,
    /// Elements along the axis.
    pub len: usize,
    /// Runs after the axis (the axis's stride).
    pub inner: usize,
    /// Elements taken from each run.
    pub k: usize,
    /// The largest elements (else the smallest).
    pub largest: bool,
}

impl TopK {
    /// Whether the sizes describe something [`run`](TopK::run) can do: `k ≤ len`, the element
    /// counts addressable.
    pub fn is_valid(&self) -> bool {
        self.k <= self.len && self.x_len().is_some() && self.y_len().is_some() && u32::try_from(self.len).is_ok()
    }

    /// Elements of `x`, `outer·len·inner`; `None` when it overflows.
    pub fn x_len(&self) -> Option<usize> {
        self.outer.checked_mul(self.len)?.checked_mul(self.inner).filter(|&n| n <= isize::MAX as usize / 8)
    }

    /// Elements of the values and of the indices, `outer·k·inner`; `None` when it overflows.
    pub fn y_len(&self) -> Option<usize> {
        self.outer.checked_mul(self.k)?.checked_mul(self.inner).filter(|&n| n <= isize::MAX as usize / 8)
    }

    /// Whether `a` comes before `b` in the output order: `Less` when it does.
    fn order(&self, a: &(f32, u32), b: &(f32, u32)) -> Ordering {
        // NaN above every number; `partial_cmp` makes -0 and 0 equal.
        let by_value = |p: f32, q: f32| match (p.is_nan(), q.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => p.partial_cmp(&q).unwrap_or(Ordering::Equal),
        };
        let v = if self.largest { by_value(b.0, a.0) } else { by_value(a.0, b.0) };
        v.then(a.1.cmp(&b.1))
    }

    /// The values into `y` and the indices into `indices` (`y_len()` each) from `x`
    /// (`x_len()`). Does nothing unless [`is_valid`](TopK::is_valid) and the slices are that
    /// long.
    pub fn run(&self, x: &[f32], y: &mut [f32], indices: &mut [i64]) {
        let (Some(nx), Some(ny)) = (self.x_len(), self.y_len()) else { return };
        if !self.is_valid() || x.len() < nx || y.len() < ny || indices.len() < ny || self.k == 0 {
            return;
        }
        let mut run: Vec<(f32, u32)> = Vec::with_capacity(self.len);
        for o in 0..self.outer {
            for i in 0..self.inner {
                let base = o * self.len * self.inner + i;
                run.clear();
                // `len` fits in `u32` (`is_valid`).
                run.extend((0..self.len).map(|j| (x[base + j * self.inner], j as u32)));
                if self.k < self.len {
                    run.select_nth_unstable_by(self.k - 1, |a, b| self.order(a, b));
                }
                let best = &mut run[..self.k];
                best.sort_unstable_by(|a, b| self.order(a, b));
                let out = o * self.k * self.inner + i;
                for (r, &(v, j)) in best.iter().enumerate() {
                    y[out + r * self.inner] = v;
                    indices[out + r * self.inner] = i64::from(j);
                }
            }
        }
    }
}

/// [`TopK`] for generated code: `largest` non-zero for the largest elements; the indices are
/// `i64`. Nothing happens when the sizes are negative or [`TopK::is_valid`] refuses them.
///
/// # Safety
///
/// `outer·len·inner` elements readable at `x`; `outer·k·inner` writable at `y` and (as `i64`)
/// at `indices`, neither overlapping `x` or the other. No alignment is required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_topk(x: *const f32, y: *mut f32, indices: *mut u8, outer: i64, len: i64, inner: i64, k: i64, largest: i64) {
    let [Ok(outer), Ok(len), Ok(inner), Ok(k)] = [outer, len, inner, k].map(usize::try_from) else { return };
    let t = TopK { outer, len, inner, k, largest: largest != 0 };
    let (Some(nx), Some(ny)) = (t.x_len(), t.y_len()) else { return };
    if !t.is_valid() || ny == 0 {
        return;
    }
    let aligned = (x as usize).is_multiple_of(4) && (y as usize).is_multiple_of(4) && (indices as usize).is_multiple_of(8);
    if aligned {
        // SAFETY: by the caller's contract, the pointers aligned for their types.
        let (x, y, indices) = unsafe { (std::slice::from_raw_parts(x, nx), std::slice::from_raw_parts_mut(y, ny), std::slice::from_raw_parts_mut(indices.cast::<i64>(), ny)) };
        t.run(x, y, indices);
        return;
    }
    // Through aligned copies; byte copies need no alignment.
    let (mut xs, mut ys, mut is) = (vec![0f32; nx], vec![0f32; ny], vec![0i64; ny]);
    // SAFETY: by the caller's contract; the copies hold as many elements.
    unsafe { std::ptr::copy_nonoverlapping(x.cast::<u8>(), xs.as_mut_ptr().cast::<u8>(), nx * 4) };
    t.run(&xs, &mut ys, &mut is);
    // SAFETY: as above.
    unsafe {
        std::ptr::copy_nonoverlapping(ys.as_ptr().cast::<u8>(), y.cast::<u8>(), ny * 4);
        std::ptr::copy_nonoverlapping(is.as_ptr().cast::<u8>(), indices, ny * 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round by round, as the generated loops select: the best element after the previous
    /// pick in the output order.
    fn reference(t: &TopK, x: &[f32]) -> (Vec<f32>, Vec<i64>) {
        let n = t.y_len().unwrap();
        let (mut y, mut idx) = (vec![0.0; n], vec![0; n]);
        for o in 0..t.outer {
            for i in 0..t.inner {
                let at = |j: usize| (x[(o * t.len + j) * t.inner + i], j as u32);
                let mut prev: Option<(f32, u32)> = None;
                for r in 0..t.k {
                    let best = (0..t.len)
                        .map(at)
                        .filter(|e| prev.is_none_or(|p| t.order(&p, e) == Ordering::Less))
                        .min_by(|a, b| t.order(a, b))
                        .unwrap();
                    y[(o * t.k + r) * t.inner + i] = best.0;
                    idx[(o * t.k + r) * t.inner + i] = i64::from(best.1);
                    prev = Some(best);
                }
            }
        }
        (y, idx)
    }

    #[test]
    fn matches_selection_round_by_round() {
        let values = [3.0, -1.0, f32::NAN, 0.0, -0.0, 3.0, 7.5, f32::INFINITY, -2.0, 3.0, f32::NEG_INFINITY, 1.0];
        for (outer, len, inner) in [(1, 12, 1), (2, 6, 1), (1, 4, 3), (3, 2, 2)] {
            let x: Vec<f32> = (0..outer * len * inner).map(|e| values[(e * 7) % values.len()]).collect();
            for k in 0..=len {
                for largest in [true, false] {
                    let t = TopK { outer, len, inner, k, largest };
                    let n = t.y_len().unwrap();
                    let (mut y, mut idx) = (vec![0.0; n], vec![0; n]);
                    t.run(&x, &mut y, &mut idx);
                    let (want_y, want_idx) = reference(&t, &x);
                    assert_eq!(idx, want_idx, "{t:?}");
                    let bits = |v: &[f32]| v.iter().map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() }).collect::<Vec<_>>();
                    assert_eq!(bits(&y), bits(&want_y), "{t:?}");
                }
            }
        }
    }

    #[test]
    fn the_symbol_takes_unaligned_operands() {
        let x = [0.5f32, 3.0, -1.0, 3.0, 2.0];
        let mut xb = vec![0u8; 1 + 20];
        xb[1..].copy_from_slice(&x.iter().flat_map(|v| v.to_ne_bytes()).collect::<Vec<_>>());
        let (mut yb, mut ib) = (vec![0u8; 1 + 12], vec![0u8; 3 + 24]);
        // SAFETY: the buffers hold the elements past their odd offsets.
        unsafe { kiln_rt_topk(xb.as_ptr().add(1).cast(), yb.as_mut_ptr().add(1).cast(), ib.as_mut_ptr().add(3), 1, 5, 1, 3, 1) };
        let y: Vec<f32> = yb[1..].chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect();
        let i: Vec<i64> = ib[3..].chunks_exact(8).map(|b| i64::from_ne_bytes(b.try_into().unwrap())).collect();
        assert_eq!((y, i), (vec![3.0, 3.0, 2.0], vec![1, 3, 4]));
        // SAFETY: a negative size returns before any pointer is used.
        unsafe { kiln_rt_topk(std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut(), -1, 5, 1, 3, 1) };
    }

    #[test]
    fn refuses_what_does_not_fit() {
        assert!(!TopK { outer: 1, len: 3, inner: 1, k: 4, largest: true }.is_valid());
        assert!(!TopK { outer: usize::MAX, len: 2, inner: 1, k: 1, largest: true }.is_valid());
        // Too short an output: nothing written.
        let t = TopK { outer: 1, len: 3, inner: 1, k: 2, largest: true };
        let mut y = [9.0; 1];
        t.run(&[1.0, 2.0, 3.0], &mut y, &mut [0; 2]);
        assert_eq!(y, [9.0]);
    }
}
