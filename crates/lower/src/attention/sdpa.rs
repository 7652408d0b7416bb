//! Attention: the operands checked and laid out as a [`Plan`]; `sdpa_kernel.rs` emits the
//! kernel.
//!
//! The semantics are those of ONNX's reference implementation (`op_attention.py`), which is
//! what the expected outputs come from: 3-D inputs are split into heads with `q_num_heads` and
//! `kv_num_heads`; `past_key`/`past_value` are concatenated before the new keys and values; the
//! bias is the mask (a boolean mask becomes 0/−∞, a mask shorter than the total key length is
//! padded with −∞) plus 0/−∞ for the causal frontier `j ≤ i + offset`, the sliding window and
//! the `nonpad_kv_seqlen` padding; `offset` is the past length, or `nonpad_kv_seqlen[b] − S`
//! for an external cache. `Q` and `K` are each scaled by `√scale` (rounded to the data type)
//! before their product; the softcap comes before the bias; a row whose bias is all −∞ gets
//! zero probabilities. In `qk_matmul_output_mode` 0 the fourth output is the product before
//! the softcap, as the operator's documentation and its ONNX function body have it (the
//! reference op returns it after the softcap; no node-suite case has both).

use kiln_tir::op::Attention;
use kiln_tir::NodeId;

use super::{is_float, promote, round_const};
use kiln_loops::ir::*;
use crate::{LowerError, Lowerer, Operand};

/// Where element `(batch, head, position, feature)` of a Q/K/V-like tensor lives: 4-D
/// `[B, H, L, D]` or 3-D `[B, L, H·D]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Heads {
    /// The buffer.
    pub buf: BufId,
    /// Its storage type.
    pub elem: ElemType,
    batch: i64,
    head: i64,
    row: i64,
}

impl Heads {
    /// A 4-D `[B, heads, len, dim]` tensor.
    pub fn four(buf: BufId, elem: ElemType, heads: u64, len: u64, dim: u64) -> Heads {
        let (h, l, d) = (heads as i64, len as i64, dim as i64);
        Heads { buf, elem, batch: h * l * d, head: l * d, row: d }
    }

    /// A 3-D `[B, len, heads·dim]` tensor.
    pub fn three(buf: BufId, elem: ElemType, heads: u64, len: u64, dim: u64) -> Heads {
        let (h, l, d) = (heads as i64, len as i64, dim as i64);
        Heads { buf, elem, batch: l * h * d, head: d, row: h * d }
    }

    /// A 4-D or 3-D tensor, as `rank3` says.
    pub fn of(x: &Operand, rank3: bool, heads: u64, len: u64, dim: u64) -> Heads {
        if rank3 { Heads::three(x.buf, x.elem, heads, len, dim) } else { Heads::four(x.buf, x.elem, heads, len, dim) }
    }

    /// Elements between consecutive positions of one head.
    pub fn row_stride(&self) -> u64 {
        self.row as u64
    }

    /// The element index of `(b, h, t, d)`.
    pub fn at(&self, b: &Expr, h: &Expr, t: &Expr, d: &Expr) -> Expr {
        b.clone() * self.batch + h.clone() * self.head + t.clone() * self.row + d.clone()
    }
}

/// The sizes of one Attention node.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    /// `B`.
    pub batch: u64,
    /// Query heads.
    pub q_heads: u64,
    /// Key/value heads (a divisor of `q_heads`).
    pub kv_heads: u64,
    /// Query length `S`.
    pub q_len: u64,
    /// New keys and values.
    pub kv_len: u64,
    /// Cached keys and values before them.
    pub past: u64,
    /// Head size of Q and K.
    pub head: u64,
    /// Head size of V.
    pub v_head: u64,
}

impl Dims {
    /// Keys attended: past plus new.
    pub fn total(&self) -> u64 {
        self.past + self.kv_len
    }

    /// Query heads sharing one key/value head.
    pub fn group(&self) -> u64 {
        self.q_heads / self.kv_heads
    }
}

/// The attention mask, broadcast to `[B, q_heads, S, mask_len]`.
#[derive(Clone, Debug)]
pub(super) struct Mask {
    /// The mask tensor.
    pub op: Operand,
    /// True for a boolean mask (true attends), false for an additive float mask.
    pub boolean: bool,
    /// Element strides for batch, head and query row (0 where the mask broadcasts).
    pub strides: [i64; 3],
    /// Length of the key axis; keys past it are masked (the reference pads with −∞).
    pub len: u64,
}

/// Where the causal frontier and the window sit: query `i` is at absolute position
/// `i + offset`.
#[derive(Clone, Debug)]
pub(super) enum Offset {
    /// The past length (or 0).
    Fixed(i64),
    /// `nonpad_kv_seqlen[b] − S`, read at run time from this `i64` buffer.
    PerBatch(BufId),
}

/// What the optional fourth output holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QkOutput {
    /// The scaled product `Q·Kᵀ`.
    Raw,
    /// After the softcap.
    Capped,
    /// After the softcap and the bias.
    Biased,
    /// The probabilities after softmax.
    Probs,
}

/// Everything the kernel needs, checked.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub dims: Dims,
    pub q: Heads,
    pub k: Heads,
    pub v: Heads,
    /// `past_key` and `past_value`, 4-D.
    pub past: Option<(Heads, Heads)>,
    pub mask: Option<Mask>,
    /// `nonpad_kv_seqlen`, `[B]` of `i64`.
    pub nonpad: Option<BufId>,
    pub causal: bool,
    /// `left_window_size`, `right_window_size` (−1: unbounded).
    pub window: (i64, i64),
    pub offset: Offset,
    /// `√scale` rounded to the data type.
    pub scale: f64,
    /// The softcap rounded to the data type, if one applies.
    pub softcap: Option<f64>,
    /// The output `Y`.
    pub y: Heads,
    pub present_key: Option<Operand>,
    pub present_value: Option<Operand>,
    /// The fourth output and what it holds.
    pub qk: Option<(Operand, QkOutput)>,
    /// Data type of Q, K and Y (`T1`).
    pub t: ElemType,
    /// Type of the biased scores (`T1` promoted with a float mask's type).
    pub score: ElemType,
    /// Type the softmax is computed in (`softmax_precision`, else `score`).
    pub soft: ElemType,
}

/// Lowers one Attention node.
pub(super) fn lower(cx: &mut Lowerer<'_>, n: NodeId, a: &Attention) -> Result<(), LowerError> {
    let plan = plan(cx, n, a)?;
    super::sdpa_kernel::emit(cx, n, &plan);
    Ok(())
}

fn plan(cx: &mut Lowerer<'_>, n: NodeId, a: &Attention) -> Result<Plan, LowerError> {
    let (q, k, v) = (cx.required(n, 0)?, cx.required(n, 1)?, cx.required(n, 2)?);
    let mask = cx.input(n, 3)?;
    let (past_k, past_v) = (cx.input(n, 4)?, cx.input(n, 5)?);
    let nonpad = cx.input(n, 6)?;
    let bad = |cx: &Lowerer<'_>, why: &str| Err(cx.unsupported(n, why.to_string()));

    if !is_float(q.elem) || k.elem != q.elem || !is_float(v.elem) {
        return bad(cx, "Q and K must share a floating-point type and V must be floating-point");
    }
    let rank3 = match (q.rank(), k.rank(), v.rank()) {
        (3, 3, 3) => true,
        (4, 4, 4) => false,
        _ => return bad(cx, "Q, K and V must all be 3-D or all 4-D"),
    };
    let dims = if rank3 {
        let (Some(hq), Some(hkv)) = (a.q_num_heads, a.kv_num_heads) else {
            return bad(cx, "3-D inputs need q_num_heads and kv_num_heads");
        };
        if hq <= 0 || hkv <= 0 {
            return bad(cx, "q_num_heads and kv_num_heads must be positive");
        }
        let (hq, hkv) = (hq as u64, hkv as u64);
        let (&[b, s, qh], &[kb, l, kh], &[vb, vl, vh]) = (&q.dims[..], &k.dims[..], &v.dims[..]) else {
            return bad(cx, "Q, K and V must be 3-D");
        };
        if qh % hq != 0 || kh % hkv != 0 || vh % hkv != 0 {
            return bad(cx, "a hidden size is not a multiple of its number of heads");
        }
        if kb != b || vb != b || vl != l || kh / hkv != qh / hq {
            return bad(cx, "Q, K and V shapes do not agree");
        }
        Dims { batch: b, q_heads: hq, kv_heads: hkv, q_len: s, kv_len: l, past: 0, head: qh / hq, v_head: vh / hkv }
    } else {
        let (&[b, hq, s, d], &[kb, hkv, l, kd], &[vb, vh, vl, dv]) = (&q.dims[..], &k.dims[..], &v.dims[..]) else {
            return bad(cx, "Q, K and V must be 4-D");
        };
        if kb != b || vb != b || vh != hkv || vl != l || kd != d {
            return bad(cx, "Q, K and V shapes do not agree");
        }
        if a.q_num_heads.is_some_and(|h| h as u64 != hq) || a.kv_num_heads.is_some_and(|h| h as u64 != hkv) {
            return bad(cx, "q_num_heads or kv_num_heads disagrees with 4-D inputs");
        }
        Dims { batch: b, q_heads: hq, kv_heads: hkv, q_len: s, kv_len: l, past: 0, head: d, v_head: dv }
    };
    let mut dims = dims;
    if dims.kv_heads == 0 || dims.q_heads % dims.kv_heads != 0 {
        return bad(cx, "q_num_heads must be a multiple of kv_num_heads");
    }

    let past = match (&past_k, &past_v) {
        (None, None) => None,
        (Some(pk), Some(pv)) => {
            let p = pk.dims.get(2).copied().unwrap_or(0);
            if pk.dims != [dims.batch, dims.kv_heads, p, dims.head] || pv.dims != [dims.batch, dims.kv_heads, p, dims.v_head] {
                return bad(cx, "past_key or past_value has the wrong shape");
            }
            if pk.elem != k.elem || pv.elem != v.elem {
                return bad(cx, "past_key or past_value has the wrong type");
            }
            dims.past = p;
            Some((Heads::four(pk.buf, pk.elem, dims.kv_heads, p, dims.head), Heads::four(pv.buf, pv.elem, dims.kv_heads, p, dims.v_head)))
        }
        _ => return bad(cx, "past_key and past_value must be given together"),
    };
    if dims.total() == 0 {
        return bad(cx, "no keys to attend to");
    }
    let nonpad = match nonpad {
        None => None,
        Some(_) if past.is_some() => return bad(cx, "nonpad_kv_seqlen together with past_key"),
        Some(np) if np.elem == ElemType::Scalar(ScalarType::I64) && np.dims == [dims.batch] => Some(np.buf),
        Some(_) => return bad(cx, "nonpad_kv_seqlen must be an int64 vector of batch size"),
    };

    let t = q.elem;
    let mask = match mask {
        None => None,
        Some(m) => Some(mask_layout(cx, n, m, &dims)?),
    };
    let score = match &mask {
        Some(m) if !m.boolean => promote(t, m.op.elem),
        _ => t,
    };
    let soft = match a.softmax_precision {
        None => score,
        Some(1) => ElemType::Scalar(ScalarType::F32),
        Some(10) => ElemType::F16,
        Some(11) => ElemType::Scalar(ScalarType::F64),
        Some(16) => ElemType::BF16,
        Some(p) => return Err(cx.unsupported(n, format!("softmax_precision {p}"))),
    };
    if a.left_window_size < -1 || a.right_window_size < -1 {
        return bad(cx, "window sizes must be -1 or non-negative");
    }
    let offset = match nonpad {
        Some(buf) => Offset::PerBatch(buf),
        None => Offset::Fixed(dims.past as i64),
    };
    let mode = match a.qk_matmul_output_mode {
        0 => QkOutput::Raw,
        1 => QkOutput::Capped,
        2 => QkOutput::Biased,
        3 => QkOutput::Probs,
        m => return Err(cx.unsupported(n, format!("qk_matmul_output_mode {m}"))),
    };
    let scale = a.scale.map_or(1.0 / (dims.head as f64).sqrt(), f64::from).sqrt();

    let y = cx.required_output(n, 0)?;
    let y_dims = if rank3 { vec![dims.batch, dims.q_len, dims.q_heads * dims.v_head] } else { vec![dims.batch, dims.q_heads, dims.q_len, dims.v_head] };
    if y.dims != y_dims || y.elem != t {
        return bad(cx, "output Y has an unexpected shape or type");
    }
    let total = dims.total();
    let present_key = cx.output(n, 1)?;
    let present_value = cx.output(n, 2)?;
    let qk = cx.output(n, 3)?;
    if present_key.as_ref().is_some_and(|p| p.dims != [dims.batch, dims.kv_heads, total, dims.head] || p.elem != k.elem)
        || present_value.as_ref().is_some_and(|p| p.dims != [dims.batch, dims.kv_heads, total, dims.v_head] || p.elem != v.elem)
        || qk.as_ref().is_some_and(|p| p.dims != [dims.batch, dims.q_heads, dims.q_len, total] || p.elem != t)
    {
        return bad(cx, "an optional output has an unexpected shape or type");
    }
    Ok(Plan {
        q: Heads::of(&q, rank3, dims.q_heads, dims.q_len, dims.head),
        k: Heads::of(&k, rank3, dims.kv_heads, dims.kv_len, dims.head),
        v: Heads::of(&v, rank3, dims.kv_heads, dims.kv_len, dims.v_head),
        y: Heads::of(&y, rank3, dims.q_heads, dims.q_len, dims.v_head),
        dims,
        past,
        mask,
        nonpad,
        causal: a.is_causal != 0,
        window: (a.left_window_size, a.right_window_size),
        offset,
        scale: round_const(t, scale),
        softcap: (a.softcap > 0.0).then(|| round_const(t, f64::from(a.softcap))),
        present_key,
        present_value,
        qk: qk.map(|o| (o, mode)),
        t,
        score,
        soft,
    })
}

/// Checks that the mask broadcasts to `[B, q_heads, S, total]` (its key axis may be shorter)
/// and computes its strides.
fn mask_layout(cx: &Lowerer<'_>, n: NodeId, m: Operand, dims: &Dims) -> Result<Mask, LowerError> {
    let boolean = m.elem == ElemType::Scalar(ScalarType::Bool);
    if !boolean && !is_float(m.elem) {
        return Err(cx.unsupported(n, format!("an attn_mask of type {}", m.elem.name())));
    }
    if m.rank() == 0 || m.rank() > 4 {
        return Err(cx.unsupported(n, "attn_mask must have rank 1 to 4"));
    }
    let mut full = vec![1u64; 4 - m.rank()];
    full.extend(&m.dims);
    let st = kiln_loops::builder::strides(&full);
    let target = [dims.batch, dims.q_heads, dims.q_len];
    let mut strides = [0i64; 3];
    for i in 0..3 {
        if full[i] == target[i] {
            strides[i] = if full[i] == 1 { 0 } else { st[i] };
        } else if full[i] != 1 {
            return Err(cx.unsupported(n, "attn_mask does not broadcast to the attention scores"));
        }
    }
    let len = full[3];
    if len > dims.total() {
        return Err(cx.unsupported(n, "attn_mask is longer than the keys"));
    }
    Ok(Mask { op: m, boolean, strides, len })
}
