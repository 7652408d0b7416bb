//! Ops whose output size is their data's: NonMaxSuppression and Unique. Compiled models run
//! them here, between compiled stages.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use kiln_tir::Op;

use crate::args::Args;
use crate::array::{Arr, Buf, norm_axis, numel};
use crate::error::{Result, invalid, unsupported};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::NonMaxSuppression(o) => non_max_suppression(a, o.center_point_box != 0),
        Op::Unique(o) => unique(a, o.axis, o.sorted != 0),
        _ => return None,
    })
}

/// A box as (y1, x1, y2, x2) with y1 ≤ y2 and x1 ≤ x2.
fn corners(b: &[f64], center: bool) -> [f64; 4] {
    if center {
        let (xc, yc, w, h) = (b[0], b[1], b[2], b[3]);
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [b[0].min(b[2]), b[1].min(b[3]), b[0].max(b[2]), b[1].max(b[3])]
    }
}

/// Intersection over union of two boxes in corner form; 0 when either has no area.
fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let area = |r: &[f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    let (ha, hb) = (area(a), area(b));
    if ha <= 0.0 || hb <= 0.0 {
        return 0.0;
    }
    let h = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let w = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = h * w;
    inter / (ha + hb - inter)
}

/// NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], max_per_class?, iou_threshold?,
/// score_threshold?): per batch and class, boxes by descending score (ties by index), each kept
/// unless it overlaps a kept one by more than the IoU threshold; `[selected, 3]` indices.
fn non_max_suppression(a: &Args, center: bool) -> Result<Vec<Arr>> {
    let (boxes, scores) = (a.arr(0)?, a.arr(1)?);
    let [nb, n, four] = boxes.shape[..] else {
        return Err(invalid(a.op, format!("boxes must have rank 3, found shape {:?}", boxes.shape)));
    };
    let [sb, classes, sn] = scores.shape[..] else {
        return Err(invalid(a.op, format!("scores must have rank 3, found shape {:?}", scores.shape)));
    };
    if four != 4 || sb != nb || sn != n {
        return Err(invalid(a.op, format!("boxes {:?} and scores {:?} do not fit [B, N, 4] and [B, C, N]", boxes.shape, scores.shape)));
    }
    let max_out = a.opt_arr(2)?.map(|m| m.as_i64s(a.op)).transpose()?.and_then(|v| v.first().copied()).unwrap_or(0).max(0) as usize;
    let scalar = |i: usize| -> Result<Option<f64>> { Ok(a.opt_arr(i)?.map(|t| t.to_f64s(a.op)).transpose()?.and_then(|v| v.first().copied())) };
    let iou_threshold = scalar(3)?.unwrap_or(0.0);
    let score_threshold = scalar(4)?;
    let (bv, sv) = (boxes.to_f64s(a.op)?, scores.to_f64s(a.op)?);
    let mut out = Vec::new();
    for b in 0..nb {
        let rects: Vec<[f64; 4]> = (0..n).map(|i| corners(&bv[(b * n + i) * 4..(b * n + i) * 4 + 4], center)).collect();
        for c in 0..classes {
            let s = &sv[(b * classes + c) * n..(b * classes + c + 1) * n];
            let mut order: Vec<usize> = (0..n).filter(|&i| score_threshold.is_none_or(|t| s[i] > t)).collect();
            order.sort_by(|&x, &y| s[y].partial_cmp(&s[x]).unwrap_or(Ordering::Equal).then(x.cmp(&y)));
            let kept = if iou_threshold >= 0.0 && rects.iter().flatten().all(|v| v.is_finite()) {
                suppress_by_left_edge(&rects, order, max_out, iou_threshold)
            } else {
                suppress(&rects, order, max_out, iou_threshold)
            };
            out.extend(kept.into_iter().flat_map(|i| [b as i64, c as i64, i as i64]));
        }
    }
    let rows = out.len() / 3;
    Ok(vec![Arr::i64s(vec![rows, 3], out)])
}

/// The boxes of `order` (by descending score) that no box kept before them overlaps by more
/// than `threshold`, at most `max_out` of them: each candidate against every kept box.
fn suppress(rects: &[[f64; 4]], order: Vec<usize>, max_out: usize, threshold: f64) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for i in order {
        if kept.len() >= max_out {
            break;
        }
        if kept.iter().all(|&k| iou(&rects[k], &rects[i]) <= threshold) {
            kept.push(i);
        }
    }
    kept
}

/// [`suppress`] for finite boxes and a threshold of at least 0, comparing a candidate only with
/// the kept boxes its columns can overlap: the others have an IoU of 0, which suppresses
/// nothing. The kept boxes with an area are indexed by their left edge; one whose left edge
/// lies more than the widest kept box's width left of the candidate's, or right of its right
/// edge, cannot overlap it. Detection models suppress thousands of boxes at once (one class
/// per band of coordinates, as `torchvision.ops.batched_nms` offsets them), where most kept
/// boxes are far from each candidate.
fn suppress_by_left_edge(rects: &[[f64; 4]], order: Vec<usize>, max_out: usize, threshold: f64) -> Vec<usize> {
    // `f64`s by their total order, which for finite values is `<`'s.
    let key = |x: f64| {
        let bits = x.to_bits() as i64;
        bits ^ (((bits >> 63) as u64) >> 1) as i64
    };
    let mut kept: Vec<usize> = Vec::new();
    let mut by_left: BTreeMap<(i64, usize), usize> = BTreeMap::new();
    let mut widest = 0.0f64;
    for i in order {
        if kept.len() >= max_out {
            break;
        }
        let r = &rects[i];
        // A box without area has an IoU of 0 with every box: never suppressed, suppressing none.
        let has_area = r[2] > r[0] && r[3] > r[1];
        let suppressed = has_area && {
            // Room for the rounding of widths and of the bounds themselves.
            let slack = (r[1].abs() + r[3].abs() + widest) * 1e-12;
            let (lo, hi) = (key(r[1] - widest - slack), key(r[3] + slack));
            by_left.range((lo, 0)..=(hi, usize::MAX)).any(|(_, &k)| iou(&rects[k], r) > threshold)
        };
        if !suppressed {
            if has_area {
                by_left.insert((key(r[1]), kept.len()), i);
                widest = widest.max(r[3] - r[1]);
            }
            kept.push(i);
        }
    }
    kept
}

/// One element as a totally ordered key.
#[derive(Clone, Copy, PartialEq)]
enum Key {
    F(f64),
    I(i128),
    B(bool),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::F(a), Key::F(b)) => a.total_cmp(b),
            (Key::I(a), Key::I(b)) => a.cmp(b),
            (Key::B(a), Key::B(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }
}

fn keys(op: &'static str, x: &Arr) -> Result<Vec<Key>> {
    Ok(match &x.buf {
        // -0.0 and 0.0 are one value.
        Buf::F(v) => v.iter().map(|&f| Key::F(if f == 0.0 { 0.0 } else { f })).collect(),
        Buf::I(v) => v.iter().map(|&i| Key::I(i)).collect(),
        Buf::B(v) => v.iter().map(|&b| Key::B(b)).collect(),
        Buf::S(_) => return Err(unsupported(op, "string elements")),
    })
}

/// Unique(X): the distinct elements (or slices along `axis`), sorted or in order of first
/// appearance, with each one's first index, each input slice's position in the output, and
/// the counts.
fn unique(a: &Args, axis: Option<i64>, sorted: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let k = keys(a.op, &x)?;
    // Slices along the axis as (outer, along, inner) blocks; without an axis, single elements.
    let (outer, along, inner, ax) = match axis {
        Some(axis) => {
            let ax = norm_axis(a.op, axis, x.shape.len())?;
            let outer: usize = x.shape[..ax].iter().product();
            let inner: usize = x.shape[ax + 1..].iter().product();
            (outer, x.shape[ax], inner, Some(ax))
        }
        None => (1, numel(a.op, &x.shape)?, 1, None),
    };
    let slice = |j: usize| -> Vec<usize> { (0..outer).flat_map(|o| (0..inner).map(move |i| (o * along + j) * inner + i)).collect() };
    let slices: Vec<Vec<usize>> = (0..along).map(slice).collect();
    let cmp = |p: usize, q: usize| -> Ordering {
        for (&i, &j) in slices[p].iter().zip(&slices[q]) {
            match k[i].cmp(&k[j]) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        Ordering::Equal
    };
    // First occurrences in input order.
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse_first: Vec<usize> = Vec::with_capacity(along);
    for j in 0..along {
        match firsts.iter().position(|&f| cmp(f, j) == Ordering::Equal) {
            Some(u) => inverse_first.push(u),
            None => {
                inverse_first.push(firsts.len());
                firsts.push(j);
            }
        }
    }
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    if sorted {
        order.sort_by(|&p, &q| cmp(firsts[p], firsts[q]));
    }
    let mut rank = vec![0usize; firsts.len()];
    for (pos, &u) in order.iter().enumerate() {
        rank[u] = pos;
    }
    let uniq: Vec<usize> = order.iter().map(|&u| firsts[u]).collect();
    let mut counts = vec![0i64; uniq.len()];
    for &u in &inverse_first {
        counts[rank[u]] += 1;
    }
    let y_shape: Vec<usize> = match ax {
        Some(ax) => {
            let mut s = x.shape.clone();
            s[ax] = uniq.len();
            s
        }
        None => vec![uniq.len()],
    };
    let mut idx = Vec::with_capacity(outer * uniq.len() * inner);
    for o in 0..outer {
        for &j in &uniq {
            idx.extend((0..inner).map(|i| (o * along + j) * inner + i));
        }
    }
    let y = x.take(a.op, &idx, y_shape)?;
    let n = uniq.len();
    Ok(vec![
        y,
        Arr::i64s(vec![n], uniq.iter().map(|&j| j as i64)),
        Arr::i64s(vec![along], inverse_first.iter().map(|&u| rank[u] as i64)),
        Arr::i64s(vec![n], counts),
    ])
}

#[cfg(test)]
mod tests {
    use super::{corners, suppress, suppress_by_left_edge};

    /// Random boxes in bands of coordinates (as batched NMS offsets classes), some without
    /// area, some with negative or swapped corners: the indexed suppression keeps exactly what
    /// comparing against every kept box keeps.
    #[test]
    fn indexed_suppression_keeps_what_the_plain_one_does() {
        let mut rng = kiln_testkit::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let mut dropped = 0;
        for case in 0..40 {
            let n = 50 + case * 20;
            let bands = 1 + case % 7;
            let rects: Vec<[f64; 4]> = (0..n)
                .map(|i| {
                    let offset = (i % bands) as f64 * 400.0 - 300.0;
                    let (y, x) = (next() * 320.0 + offset, next() * 320.0 + offset);
                    let (h, w) = if i % 11 == 0 { (0.0, next() * 50.0) } else { (next() * 90.0, next() * 90.0) };
                    // Every third box with its corners swapped, as NMS allows.
                    let b = if i % 3 == 0 { [y + h, x + w, y, x] } else { [y, x, y + h, x + w] };
                    corners(&b, false)
                })
                .collect();
            let order: Vec<usize> = (0..n).rev().collect();
            for threshold in [0.0, 0.3, 0.55, 1.0] {
                for max_out in [usize::MAX, n / 4] {
                    let want = suppress(&rects, order.clone(), max_out, threshold);
                    let got = suppress_by_left_edge(&rects, order.clone(), max_out, threshold);
                    assert_eq!(got, want, "case {case}, threshold {threshold}, max_out {max_out}");
                    dropped += n.min(max_out) - want.len();
                }
            }
        }
        // The cases suppress boxes, so the comparison covers the pruning.
        assert!(dropped > 1000, "only {dropped} boxes suppressed");
    }
}
