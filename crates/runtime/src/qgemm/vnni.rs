//! The AVX-512 VNNI micro-kernel: a tile of up to 6 rows × 2 panels (32 columns) of `C` in 12
//! vector accumulators, each step one 64-byte load per panel, one broadcast of four of `A`'s
//! bytes per row and one `vpdpbusd` per accumulator.

use std::arch::x86_64::*;

use super::{MR, Out, PANEL, Tile};

/// Rows `rows` × panels `panels` of `C`.
///
/// # Safety
///
/// As [`Tile::run`]; the CPU has AVX-512F and AVX-512 VNNI.
pub(super) unsafe fn block(t: &Tile<'_>, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
    let mut i = rows.start;
    while i < rows.end {
        let r = MR.min(rows.end - i);
        let mut p = panels.start;
        while p < panels.end {
            let np = 2.min(panels.end - p);
            // SAFETY: by the caller's contract, for rows `i..i + r` and panels `p..p + np`.
            unsafe {
                match (r, np) {
                    (6, 2) => tile::<6, 2>(t, i, p),
                    (5, 2) => tile::<5, 2>(t, i, p),
                    (4, 2) => tile::<4, 2>(t, i, p),
                    (3, 2) => tile::<3, 2>(t, i, p),
                    (2, 2) => tile::<2, 2>(t, i, p),
                    (1, 2) => tile::<1, 2>(t, i, p),
                    (6, _) => tile::<6, 1>(t, i, p),
                    (5, _) => tile::<5, 1>(t, i, p),
                    (4, _) => tile::<4, 1>(t, i, p),
                    (3, _) => tile::<3, 1>(t, i, p),
                    (2, _) => tile::<2, 1>(t, i, p),
                    _ => tile::<1, 1>(t, i, p),
                }
            }
            p += np;
        }
        i += r;
    }
}

/// Rows `i0..i0 + R` × panels `p0..p0 + P` of `C`.
///
/// # Safety
///
/// As [`block`], for a tile inside `C`.
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile<const R: usize, const P: usize>(t: &Tile<'_>, i0: usize, p0: usize) {
    let groups = t.k.div_ceil(4);
    let full = t.k / 4;
    let padded = t.cols.len() / 3;
    let flip = _mm512_set1_epi8(t.a_flip as i8);
    // SAFETY: the packed panels hold `groups` groups of 64 bytes each; rows `i0..i0 + R` of `A`
    // hold `k` bytes, read four at a time up to `4·full` and byte by byte after; the tile is
    // inside `C` and its columns inside the padded column terms.
    unsafe {
        // Plain arrays and loops: a closure through `array::from_fn` would move the vectors
        // through a function compiled without AVX-512.
        let mut panel = [t.packed.as_ptr(); P];
        for (v, p) in panel.iter_mut().enumerate() {
            *p = p.add((p0 + v) * groups * 4 * PANEL);
        }
        let mut row = [t.a; R];
        for (r, p) in row.iter_mut().enumerate() {
            *p = p.add((i0 + r) * t.lda);
        }
        let mut acc = [[_mm512_setzero_si512(); P]; R];
        let mut b = [_mm512_setzero_si512(); P];
        for g in 0..full {
            for v in 0..P {
                b[v] = _mm512_loadu_si512(panel[v].add(g * 4 * PANEL).cast());
            }
            for r in 0..R {
                let a = _mm512_xor_si512(_mm512_set1_epi32(row[r].add(4 * g).cast::<i32>().read_unaligned()), flip);
                for v in 0..P {
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, b[v]);
                }
            }
        }
        if full < groups {
            // The last group's bytes past `k` meet zeros in the panel: any value does.
            for v in 0..P {
                b[v] = _mm512_loadu_si512(panel[v].add(full * 4 * PANEL).cast());
            }
            for r in 0..R {
                let mut quad = [0u8; 4];
                for (q, byte) in quad.iter_mut().enumerate().take(t.k - 4 * full) {
                    *byte = row[r].add(4 * full + q).read();
                }
                let a = _mm512_xor_si512(_mm512_set1_epi32(i32::from_le_bytes(quad)), flip);
                for v in 0..P {
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, b[v]);
                }
            }
        }
        for v in 0..P {
            let j0 = (p0 + v) * PANEL;
            let mask = if t.n - j0 >= PANEL { u16::MAX } else { (1u16 << (t.n - j0)) - 1 };
            let zb = _mm512_loadu_si512(t.cols.as_ptr().add(j0).cast());
            let db = _mm512_loadu_si512(t.cols.as_ptr().add(padded + j0).cast());
            let cb = _mm512_loadu_si512(t.cols.as_ptr().add(2 * padded + j0).cast());
            for r in 0..R {
                let i = i0 + r;
                let za = _mm512_set1_epi32(t.rows[3 * i]);
                let ra = _mm512_set1_epi32(t.rows[3 * i + 1]);
                let rb = _mm512_add_epi32(_mm512_set1_epi32(t.rows[3 * i + 2]), cb);
                let y = _mm512_sub_epi32(_mm512_sub_epi32(acc[r][v], _mm512_mullo_epi32(zb, ra)), _mm512_add_epi32(_mm512_mullo_epi32(za, db), rb));
                match t.c {
                    Out::Acc(c) => _mm512_mask_storeu_epi32(c.add(i * t.ldc + j0).cast(), mask, y),
                    Out::Bytes { y: out, scales, per_row, single, zero, signed, f32 } => {
                        use crate::requantize::avx512::{halves_f32, halves_i32, levels, levels_f32};
                        let s = if per_row { _mm512_set1_ps(Out::scale(scales, true, single, i, j0) as f32) } else { _mm512_maskz_loadu_ps(mask, scales.add(j0)) };
                        let fast = if f32 { levels_f32(y, s, zero as f32, signed) } else { None };
                        let bytes = match fast {
                            Some(bytes) => bytes,
                            None => levels(halves_i32(y), halves_f32(s), zero, signed),
                        };
                        crate::requantize::avx512::store(out.add(i * t.ldc + j0), mask, bytes);
                    }
                }
            }
        }
    }
}

