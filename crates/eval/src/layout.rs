//! Ops that move elements: Transpose, Expand, Concat, Split, Slice, Tile, Pad, Trilu,
//! DepthToSpace, SpaceToDepth.

use kiln_tir::Op;
use kiln_tir::op::{DepthToSpaceMode, PadMode};

use crate::args::Args;
use crate::array::{Arr, Buf, broadcast_shape, broadcast_to, internal, norm_axis, numel, strides, walk};
use crate::error::{Result, invalid};
use crate::shape_ops::{dims_input, norm_axes};

/// Evaluates `op` if it is one of this module's.
pub(crate) fn eval(op: &Op, a: &Args) -> Option<Result<Vec<Arr>>> {
    Some(match op {
        Op::Transpose(o) => a.arr(0).and_then(|x| {
            let perm = if o.perm.is_empty() { (0..x.shape.len()).rev().collect() } else { perm_of(a.op, &o.perm, x.shape.len())? };
            Ok(vec![transpose(a.op, &x, &perm)?])
        }),
        Op::Expand(_) => expand(a),
        Op::Concat(o) => a.all().and_then(|xs| Ok(vec![concat(a.op, &xs, o.axis)?])),
        Op::Split(o) => split(a, o.axis, o.num_outputs),
        Op::Slice(_) => slice(a),
        Op::Tile(_) => tile(a),
        Op::Pad(o) => pad(a, o.mode),
        Op::Trilu(o) => trilu(a, o.upper != 0),
        Op::DepthToSpace(o) => depth_to_space(a, o.blocksize, o.mode),
        Op::SpaceToDepth(o) => space_to_depth(a, o.blocksize, o.mode),
        _ => return None,
    })
}

/// Checks that `perm` is a permutation of `0..rank`.
fn perm_of(op: &'static str, perm: &[i64], rank: usize) -> Result<Vec<usize>> {
    let p = norm_axes(op, perm, rank)?;
    if p.len() != rank {
        return Err(invalid(op, format!("perm {perm:?} does not permute {rank} axes")));
    }
    Ok(p)
}

/// `x` with its axes permuted: output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(op: &'static str, x: &Arr, perm: &[usize]) -> Result<Arr> {
    let st = strides(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let steps: Vec<isize> = perm.iter().map(|&p| st[p] as isize).collect();
    x.take(op, &walk(&shape, &steps, 0), shape)
}

fn expand(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let shape = broadcast_shape(a.op, &x.shape, &dims_input(a, 1)?)?;
    numel(a.op, &shape)?;
    Ok(vec![broadcast_to(a.op, &x, &shape)?])
}

/// Joins arrays along `axis`.
pub(crate) fn concat(op: &'static str, xs: &[Arr], axis: i64) -> Result<Arr> {
    let first = xs.first().ok_or_else(|| invalid(op, "needs at least one input"))?;
    let rank = first.shape.len();
    let ax = norm_axis(op, axis, rank)?;
    let mut shape = first.shape.clone();
    shape[ax] = 0;
    for x in xs {
        let same_rest = x.shape.len() == rank && (0..rank).all(|d| d == ax || x.shape[d] == first.shape[d]);
        if !same_rest || x.dtype != first.dtype {
            return Err(invalid(op, format!("cannot join {}{:?} and {}{:?} along axis {ax}", first.dtype, first.shape, x.dtype, x.shape)));
        }
        shape[ax] += x.shape[ax];
    }
    numel(op, &shape)?;
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..].iter().product();
    let mut buf = first.buf.empty_like();
    for o in 0..outer {
        for x in xs {
            let chunk = x.shape[ax] * inner;
            buf.extend_range(op, &x.buf, o * chunk..(o + 1) * chunk)?;
        }
    }
    Ok(Arr { dtype: first.dtype, shape, buf })
}

/// The part `start..start + len` of `x` along `axis`.
pub(crate) fn slice_axis(op: &'static str, x: &Arr, axis: usize, start: usize, len: usize) -> Result<Arr> {
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let dim = x.shape[axis];
    if start + len > dim {
        return Err(internal(op, "slice past the end"));
    }
    let mut buf = x.buf.empty_like();
    for o in 0..outer {
        let base = (o * dim + start) * inner;
        buf.extend_range(op, &x.buf, base..base + len * inner)?;
    }
    let mut shape = x.shape.clone();
    shape[axis] = len;
    Ok(Arr { dtype: x.dtype, shape, buf })
}

fn split(a: &Args, axis: i64, num_outputs: Option<i64>) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ax = norm_axis(a.op, axis, x.shape.len())?;
    let dim = x.shape[ax];
    let sizes: Vec<usize> = match a.opt_i64s(1)? {
        Some(split) => {
            let sizes: Vec<usize> = split.iter().map(|&s| usize::try_from(s).map_err(|_| invalid(a.op, format!("split size {s} is negative")))).collect::<Result<_>>()?;
            if sizes.iter().sum::<usize>() != dim {
                return Err(invalid(a.op, format!("split sizes {split:?} do not add up to {dim}")));
            }
            sizes
        }
        None => {
            let n = match num_outputs {
                Some(n) => usize::try_from(n).map_err(|_| invalid(a.op, "num_outputs is negative"))?,
                None => a.num_outputs,
            };
            if n == 0 {
                return Err(invalid(a.op, "split into zero parts"));
            }
            // Equal parts of ceil(dim / n); the last takes what remains.
            let chunk = dim.div_ceil(n);
            let full = dim.checked_div(chunk).map_or(0, |q| q.min(n));
            let mut sizes = vec![chunk; full];
            if sizes.len() < n {
                sizes.push(dim - chunk * full);
            }
            if sizes.len() != n {
                return Err(invalid(a.op, format!("cannot split {dim} into {n} parts")));
            }
            sizes
        }
    };
    let mut start = 0;
    sizes
        .into_iter()
        .map(|len| {
            let part = slice_axis(a.op, &x, ax, start, len);
            start += len;
            part
        })
        .collect()
}

fn slice(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let (starts, ends) = (a.i64s(1)?, a.i64s(2)?);
    let rank = x.shape.len();
    let axes = match a.opt_i64s(3)? {
        Some(axes) => norm_axes(a.op, &axes, rank)?,
        None => (0..starts.len()).collect(),
    };
    let steps = a.opt_i64s(4)?.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(invalid(a.op, "starts, ends, axes and steps differ in length"));
    }
    let (shape, idx) = slice_elements(a.op, &x.shape, &starts, &ends, &axes, &steps)?;
    Ok(vec![x.take(a.op, &idx, shape)?])
}

/// Slice's output shape over an input of `dims`, and the input element each output element
/// reads, in order: negative indices count from the end, starts and ends clamp per direction.
pub(crate) fn slice_elements(op: &'static str, dims: &[usize], starts: &[i64], ends: &[i64], axes: &[usize], steps: &[i64]) -> Result<(Vec<usize>, Vec<usize>)> {
    let (shape, walk_steps, base) = slice_walk(op, dims, starts, ends, axes, steps)?;
    let idx = if shape.contains(&0) { Vec::new() } else { walk(&shape, &walk_steps, base) };
    Ok((shape, idx))
}

/// A Slice's output dims, the input offset each output axis steps by, and the offset of its
/// first element.
pub(crate) fn slice_walk(op: &'static str, dims: &[usize], starts: &[i64], ends: &[i64], axes: &[usize], steps: &[i64]) -> Result<(Vec<usize>, Vec<isize>, isize)> {
    let rank = dims.len();
    let st = strides(dims);
    let mut shape = dims.to_vec();
    let mut step_of = vec![1i128; rank];
    let mut base = 0isize;
    for (j, &ax) in axes.iter().enumerate() {
        if ax >= rank {
            return Err(invalid(op, format!("axis {ax} out of range")));
        }
        let (dim, step) = (dims[ax] as i128, i128::from(steps[j]));
        if step == 0 {
            return Err(invalid(op, "step is zero"));
        }
        let adjust = |v: i64| if v < 0 { i128::from(v) + dim } else { i128::from(v) };
        let (mut s, mut e) = (adjust(starts[j]), adjust(ends[j]));
        let len = if dim == 0 {
            s = 0;
            0
        } else if step > 0 {
            s = s.clamp(0, dim);
            e = e.clamp(0, dim);
            if e > s { (e - s + step - 1) / step } else { 0 }
        } else {
            s = s.clamp(0, dim - 1);
            e = e.clamp(-1, dim - 1);
            if s > e { (s - e - step - 1) / -step } else { 0 }
        };
        shape[ax] = len as usize;
        // With fewer than two elements the step is never taken; keep it small.
        step_of[ax] = if len > 1 { step } else { 1 };
        base += (s as usize * st[ax]) as isize;
    }
    numel(op, &shape)?;
    let walk_steps: Vec<isize> = (0..rank).map(|d| step_of[d] as isize * st[d] as isize).collect();
    Ok((shape, walk_steps, base))
}

/// Offsets into `x` for an output of `shape` where output coordinate `c` along axis `d` reads
/// input coordinate `maps[d][c]`, or `None` (a fill value) where any map says so.
fn remap(x_shape: &[usize], shape: &[usize], maps: &[Vec<Option<usize>>]) -> Vec<Option<usize>> {
    let st = strides(x_shape);
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut counter = vec![0usize; shape.len()];
    for _ in 0..n {
        let mut off = Some(0usize);
        for (d, &c) in counter.iter().enumerate() {
            off = off.and_then(|o| maps[d][c].map(|i| o + i * st[d]));
        }
        out.push(off);
        for d in (0..shape.len()).rev() {
            counter[d] += 1;
            if counter[d] < shape[d] {
                break;
            }
            counter[d] = 0;
        }
    }
    out
}

/// `x` read at `idx`, with `fill` (a one-element array) where `idx` is `None`.
fn take_or_fill(op: &'static str, x: &Arr, idx: &[Option<usize>], fill: &Arr, shape: Vec<usize>) -> Result<Arr> {
    let mut src = x.buf.clone();
    src.extend_range(op, &fill.buf, 0..1)?;
    let flat: Vec<usize> = idx.iter().map(|i| i.unwrap_or(x.len())).collect();
    Ok(Arr { dtype: x.dtype, shape, buf: src.take(op, &flat)? })
}

fn tile(a: &Args) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let reps = dims_input(a, 1)?;
    if reps.len() != x.shape.len() {
        return Err(invalid(a.op, format!("{} repeats for rank {}", reps.len(), x.shape.len())));
    }
    let shape: Vec<usize> = x.shape.iter().zip(&reps).map(|(&d, &r)| d.checked_mul(r).ok_or_else(|| invalid(a.op, "shape overflows"))).collect::<Result<_>>()?;
    numel(a.op, &shape)?;
    let maps: Vec<Vec<Option<usize>>> = shape.iter().zip(&x.shape).map(|(&n, &d)| (0..n).map(|c| Some(c % d)).collect()).collect();
    let idx: Vec<usize> = remap(&x.shape, &shape, &maps).into_iter().flatten().collect();
    Ok(vec![x.take(a.op, &idx, shape)?])
}

fn pad(a: &Args, mode: PadMode) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let rank = x.shape.len();
    let pads = a.i64s(1)?;
    let axes = match a.opt_i64s(3)? {
        Some(axes) => norm_axes(a.op, &axes, rank)?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(invalid(a.op, format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let fill = match a.opt_arr(2)? {
        Some(v) if v.len() == 1 && v.dtype == x.dtype => v,
        Some(_) => return Err(invalid(a.op, "constant_value must be one element of the input's type")),
        None => Arr { dtype: x.dtype, shape: vec![1], buf: zero_of(&x.buf) },
    };
    let mut begin = vec![0i128; rank];
    let mut shape = x.shape.clone();
    for (j, &ax) in axes.iter().enumerate() {
        let (pb, pe) = (i128::from(pads[j]), i128::from(pads[j + axes.len()]));
        let dim = x.shape[ax] as i128 + pb + pe;
        if dim < 0 || dim > i128::from(u32::MAX) {
            return Err(invalid(a.op, format!("axis {ax} would have size {dim}")));
        }
        begin[ax] = pb;
        shape[ax] = dim as usize;
    }
    numel(a.op, &shape)?;
    let mut maps = Vec::with_capacity(rank);
    for d in 0..rank {
        let dim = x.shape[d] as i128;
        if dim == 0 && shape[d] > 0 && mode != PadMode::Constant {
            return Err(invalid(a.op, format!("cannot pad empty axis {d} in {} mode", mode.as_str())));
        }
        let map = (0..shape[d] as i128)
            .map(|o| {
                let i = o - begin[d];
                if (0..dim).contains(&i) {
                    return Some(i as usize);
                }
                let src = match mode {
                    PadMode::Constant => return None,
                    PadMode::Edge => i.clamp(0, dim - 1),
                    PadMode::Wrap => i.rem_euclid(dim),
                    PadMode::Reflect if dim == 1 => 0,
                    PadMode::Reflect => {
                        let m = i.rem_euclid(2 * (dim - 1));
                        if m >= dim { 2 * (dim - 1) - m } else { m }
                    }
                };
                Some(src as usize)
            })
            .collect();
        maps.push(map);
    }
    let idx = remap(&x.shape, &shape, &maps);
    Ok(vec![take_or_fill(a.op, &x, &idx, &fill, shape)?])
}

/// A one-element buffer holding zero (false, empty string) of `buf`'s kind.
fn zero_of(buf: &Buf) -> Buf {
    match buf {
        Buf::F(_) => Buf::F(vec![0.0]),
        Buf::I(_) => Buf::I(vec![0]),
        Buf::B(_) => Buf::B(vec![false]),
        Buf::S(_) => Buf::S(vec![bytes::Bytes::new()]),
    }
}

fn trilu(a: &Args, upper: bool) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let k = a.opt_i64_scalar(1)?.unwrap_or(0);
    let rank = x.shape.len();
    if rank < 2 {
        return Err(invalid(a.op, "input must have rank 2 or more"));
    }
    let (rows, cols) = (x.shape[rank - 2], x.shape[rank - 1]);
    let idx: Vec<Option<usize>> = (0..x.len())
        .map(|e| {
            let (i, j) = ((e / cols.max(1)) % rows.max(1), e % cols.max(1));
            let diff = j as i128 - i as i128;
            let keep = if upper { diff >= i128::from(k) } else { diff <= i128::from(k) };
            keep.then_some(e)
        })
        .collect();
    let zero = Arr { dtype: x.dtype, shape: vec![1], buf: zero_of(&x.buf) };
    Ok(vec![take_or_fill(a.op, &x, &idx, &zero, x.shape.clone())?])
}

/// The NCHW dims of a 4-D input and a positive block size dividing what it must.
fn blocked(a: &Args, x: &Arr, blocksize: i64) -> Result<([usize; 4], usize)> {
    let [n, c, h, w] = x.shape[..] else {
        return Err(invalid(a.op, format!("input must be 4-D, has shape {:?}", x.shape)));
    };
    let b = usize::try_from(blocksize).ok().filter(|&b| b > 0).ok_or_else(|| invalid(a.op, format!("blocksize {blocksize} must be positive")))?;
    Ok(([n, c, h, w], b))
}

fn depth_to_space(a: &Args, blocksize: i64, mode: DepthToSpaceMode) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ([n, c, h, w], b) = blocked(a, &x, blocksize)?;
    if c % (b * b) != 0 {
        return Err(invalid(a.op, format!("{c} channels do not divide by blocksize^2 = {}", b * b)));
    }
    let cb = c / (b * b);
    let (split, perm) = match mode {
        DepthToSpaceMode::Dcr => (vec![n, b, b, cb, h, w], [0, 3, 4, 1, 5, 2]),
        DepthToSpaceMode::Crd => (vec![n, cb, b, b, h, w], [0, 1, 4, 2, 5, 3]),
    };
    let y = transpose(a.op, &x.with_shape(split), &perm)?;
    Ok(vec![y.with_shape(vec![n, cb, h * b, w * b])])
}

fn space_to_depth(a: &Args, blocksize: i64, mode: DepthToSpaceMode) -> Result<Vec<Arr>> {
    let x = a.arr(0)?;
    let ([n, c, h, w], b) = blocked(a, &x, blocksize)?;
    if h % b != 0 || w % b != 0 {
        return Err(invalid(a.op, format!("spatial dims {h}x{w} do not divide by blocksize {b}")));
    }
    let perm = match mode {
        DepthToSpaceMode::Dcr => [0, 3, 5, 1, 2, 4],
        DepthToSpaceMode::Crd => [0, 1, 3, 5, 2, 4],
    };
    let y = transpose(a.op, &x.with_shape(vec![n, c, h / b, b, w / b, b]), &perm)?;
    Ok(vec![y.with_shape(vec![n, c * b * b, h / b, w / b])])
}
