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
    // SAFETY: as this function's.
    unsafe {
        if t.terms.is_some() { block_of::<true>(t, rows, panels) } else { block_of::<false>(t, rows, panels) }
    }
}

/// [`block`] with the row and column terms folded (`FOLDED`, when the tile has them) or not.
///
/// # Safety
///
/// As [`block`].
unsafe fn block_of<const FOLDED: bool>(t: &Tile<'_>, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
    let mut i = rows.start;
    while i < rows.end {
        let r = MR.min(rows.end - i);
        let mut p = panels.start;
        while p < panels.end {
            let np = 2.min(panels.end - p);
            // SAFETY: by the caller's contract, for rows `i..i + r` and panels `p..p + np`.
            unsafe {
                match (r, np) {
                    (6, 2) => tile::<6, 2, FOLDED>(t, i, p),
                    (5, 2) => tile::<5, 2, FOLDED>(t, i, p),
                    (4, 2) => tile::<4, 2, FOLDED>(t, i, p),
                    (3, 2) => tile::<3, 2, FOLDED>(t, i, p),
                    (2, 2) => tile::<2, 2, FOLDED>(t, i, p),
                    (1, 2) => tile::<1, 2, FOLDED>(t, i, p),
                    (6, _) => tile::<6, 1, FOLDED>(t, i, p),
                    (5, _) => tile::<5, 1, FOLDED>(t, i, p),
                    (4, _) => tile::<4, 1, FOLDED>(t, i, p),
                    (3, _) => tile::<3, 1, FOLDED>(t, i, p),
                    (2, _) => tile::<2, 1, FOLDED>(t, i, p),
                    _ => tile::<1, 1, FOLDED>(t, i, p),
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
unsafe fn tile<const R: usize, const P: usize, const FOLDED: bool>(t: &Tile<'_>, i0: usize, p0: usize) {
    let groups = t.k.div_ceil(4);
    let full = t.k / 4;
    let padded = t.cols.len() / 3;
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
        // Folded terms start the sums: `−row[i] − column[j]`, one subtraction per vector.
        if FOLDED && let Some((row_terms, col_terms)) = t.terms {
            for v in 0..P {
                let column = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(col_terms.as_ptr().add((p0 + v) * PANEL).cast()));
                for r in 0..R {
                    acc[r][v] = _mm512_sub_epi32(column, _mm512_set1_epi32(row_terms.as_ptr().add(i0 + r).read()));
                }
            }
        }
        let mut b = [_mm512_setzero_si512(); P];
        for g in 0..full {
            for v in 0..P {
                b[v] = _mm512_loadu_si512(panel[v].add(g * 4 * PANEL).cast());
            }
            for r in 0..R {
                let a = _mm512_set1_epi32(row[r].add(4 * g).cast::<i32>().read_unaligned());
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
                let a = _mm512_set1_epi32(i32::from_le_bytes(quad));
                for v in 0..P {
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, b[v]);
                }
            }
        }
        // The values: the raw sums less the row and column terms, unless folded into the
        // start. (Loops of constant counts with no early exit: unrolled, they keep the
        // accumulators in registers.)
        let mut masks = [u16::MAX; P];
        for v in 0..P {
            let j0 = (p0 + v) * PANEL;
            masks[v] = if t.n - j0 >= PANEL { u16::MAX } else { (1u16 << (t.n - j0)) - 1 };
        }
        match t.terms {
            Some(_) if FOLDED => {}
            _ => {
                for v in 0..P {
                    let j0 = (p0 + v) * PANEL;
                    let zb = _mm512_loadu_si512(t.cols.as_ptr().add(j0).cast());
                    let db = _mm512_loadu_si512(t.cols.as_ptr().add(padded + j0).cast());
                    let cb = _mm512_loadu_si512(t.cols.as_ptr().add(2 * padded + j0).cast());
                    for r in 0..R {
                        let i = i0 + r;
                        let za = _mm512_set1_epi32(t.rows[3 * i]);
                        let ra = _mm512_set1_epi32(t.rows[3 * i + 1]);
                        let rb = _mm512_add_epi32(_mm512_set1_epi32(t.rows[3 * i + 2]), cb);
                        acc[r][v] = _mm512_sub_epi32(_mm512_sub_epi32(acc[r][v], _mm512_mullo_epi32(zb, ra)), _mm512_add_epi32(_mm512_mullo_epi32(za, db), rb));
                    }
                }
            }
        }
        match t.c {
            Out::Acc(c) => {
                for r in 0..R {
                    for v in 0..P {
                        _mm512_mask_storeu_epi32(c.add((i0 + r) * t.ldc + (p0 + v) * PANEL).cast(), masks[v], acc[r][v]);
                    }
                }
            }
            Out::Bytes { y, scales, per_row, single, zero, signed, f32 } => {
                use crate::requantize::avx512::{Ties, halves_f32, levels_declined};
                let scale = |r: usize, v: usize| {
                    let j0 = (p0 + v) * PANEL;
                    if per_row { _mm512_set1_ps(Out::scale(scales, true, single, i0 + r, j0) as f32) } else { _mm512_maskz_loadu_ps(masks[v], scales.add(j0)) }
                };
                // The `f32` stage for the whole tile unless a lane of it declines, then the
                // `f64` definition for the whole tile: one test per tile, not per vector, and
                // no call but by value among the live accumulators (taking their address
                // sends them through memory).
                let mut bytes = [[_mm_setzero_si128(); P]; R];
                let mut ties = Ties::new();
                if f32 {
                    for r in 0..R {
                        for v in 0..P {
                            bytes[r][v] = ties.levels(acc[r][v], scale(r, v), zero as f32, signed);
                        }
                    }
                }
                if !f32 || ties.declines() {
                    for r in 0..R {
                        for v in 0..P {
                            bytes[r][v] = levels_declined(acc[r][v], &halves_f32(scale(r, v)), zero, signed);
                        }
                    }
                }
                for r in 0..R {
                    for v in 0..P {
                        let y = y.add((i0 + r) * t.ldc + (p0 + v) * PANEL);
                        if masks[v] == u16::MAX {
                            _mm_storeu_si128(y.cast(), bytes[r][v]);
                        } else {
                            let mut staged = [0u8; 16];
                            _mm_storeu_si128(staged.as_mut_ptr().cast(), bytes[r][v]);
                            std::ptr::copy_nonoverlapping(staged.as_ptr(), y, masks[v].trailing_ones() as usize);
                        }
                    }
                }
            }
        }
    }
}
