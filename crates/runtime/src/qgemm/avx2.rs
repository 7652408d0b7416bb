//! The AVX2 micro-kernel, exact without VNNI: a tile of up to 3 rows × one panel (16 columns)
//! of `C` in 12 vector accumulators.
//!
//! `vpmaddubsw` would multiply the bytes as they are, but it saturates the sum of two products
//! at `i16`, which a `u8 × i8` pair can pass; so the bytes are widened to `i16` first and
//! multiplied by `vpmaddwd`, whose two products per lane sum exactly in `i32`. A panel's group
//! (16 columns × 4 bytes of `k`) is read as four quarters of 4 columns, each widened to 16
//! `i16`; four of `A`'s bytes, widened and repeated, meet each quarter, giving two partial
//! sums per column (`k` 0–1 and 2–3) that are added pairwise at the store.

use std::arch::x86_64::*;

use super::{Out, PANEL, Tile};

/// Rows per tile: 3 rows × 4 quarters of accumulators, 3 broadcasts of `A` and one quarter of
/// `B` fill the 16 vector registers.
const ROWS: usize = 3;

/// [`super::row_sum`]: 32 bytes per step, summed in 64-bit lanes by `vpsadbw` against zero.
///
/// # Safety
///
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn row_sum(row: &[u8], flip: u8) -> i32 {
    let (flip8, zero) = (_mm256_set1_epi8(flip as i8), _mm256_setzero_si256());
    let mut acc = _mm256_setzero_si256();
    let mut chunks = row.chunks_exact(32);
    for chunk in &mut chunks {
        // SAFETY: the chunk holds 32 bytes.
        let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_xor_si256(v, flip8), zero));
    }
    let mut lanes = [0i64; 4];
    // SAFETY: four 64-bit lanes fit the array.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
    let tail: i64 = chunks.remainder().iter().map(|&v| i64::from(v ^ flip)).sum();
    (lanes.iter().sum::<i64>() + tail) as i32
}

/// Rows `rows` × panels `panels` of `C`.
///
/// # Safety
///
/// As [`Tile::run`]; the CPU has AVX2.
pub(super) unsafe fn block(t: &Tile<'_>, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
    let mut i = rows.start;
    while i < rows.end {
        let r = ROWS.min(rows.end - i);
        for p in panels.clone() {
            // SAFETY: by the caller's contract, for rows `i..i + r` and panel `p`.
            unsafe {
                match r {
                    3 => tile::<3>(t, i, p),
                    2 => tile::<2>(t, i, p),
                    _ => tile::<1>(t, i, p),
                }
            }
        }
        i += r;
    }
}

/// Four of `A`'s bytes (`u8`), widened to `i16` and repeated across 16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn broadcast(quad: i32) -> __m256i {
    _mm256_cvtepu8_epi16(_mm_set1_epi32(quad))
}

/// Adds group `g` of the panel at `panel` times the rows' broadcasts `a` into `acc`.
///
/// # Safety
///
/// The panel holds group `g`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn step<const R: usize>(acc: &mut [[__m256i; 4]; R], panel: *const i8, g: usize, a: &[__m256i; R]) {
    for q in 0..4 {
        // SAFETY: by the caller's contract.
        let b = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(panel.add(g * 4 * PANEL + 16 * q).cast()) });
        for r in 0..R {
            acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(a[r], b));
        }
    }
}

/// Rows `i0..i0 + R` × panel `p` of `C`.
///
/// # Safety
///
/// As [`block`], for a tile inside `C`.
#[target_feature(enable = "avx2")]
unsafe fn tile<const R: usize>(t: &Tile<'_>, i0: usize, p: usize) {
    let groups = t.k.div_ceil(4);
    let full = t.k / 4;
    let padded = t.cols.len() / 3;
    // SAFETY: the packed panel holds `groups` groups of 64 bytes; rows `i0..i0 + R` of `A` hold
    // `k` bytes, read four at a time up to `4·full` and byte by byte after; the tile is inside
    // `C` and its columns inside the padded column terms.
    unsafe {
        let panel = t.packed.as_ptr().add(p * groups * 4 * PANEL);
        let mut row = [t.a; R];
        for (r, ptr) in row.iter_mut().enumerate() {
            *ptr = ptr.add((i0 + r) * t.lda);
        }
        let mut acc = [[_mm256_setzero_si256(); 4]; R];
        let mut a = [_mm256_setzero_si256(); R];
        for g in 0..full {
            for r in 0..R {
                a[r] = broadcast(row[r].add(4 * g).cast::<i32>().read_unaligned());
            }
            step(&mut acc, panel, g, &a);
        }
        if full < groups {
            // The last group's bytes past `k` meet zeros in the panel: any value does.
            for r in 0..R {
                let mut quad = [0u8; 4];
                for (q, byte) in quad.iter_mut().enumerate().take(t.k - 4 * full) {
                    *byte = row[r].add(4 * full + q).read();
                }
                a[r] = broadcast(i32::from_le_bytes(quad));
            }
            step(&mut acc, panel, full, &a);
        }
        // `hadd` of quarters 0 and 1 gives columns 0, 1, 4, 5 | 2, 3, 6, 7; the permutation
        // puts them in order.
        let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        for half in 0..2 {
            let j0 = p * PANEL + 8 * half;
            if j0 >= t.n {
                break;
            }
            let live = (t.n - j0).min(8) as i32;
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let zb = _mm256_loadu_si256(t.cols.as_ptr().add(j0).cast());
            let db = _mm256_loadu_si256(t.cols.as_ptr().add(padded + j0).cast());
            let cb = _mm256_loadu_si256(t.cols.as_ptr().add(2 * padded + j0).cast());
            for r in 0..R {
                let i = i0 + r;
                let sum = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(acc[r][2 * half], acc[r][2 * half + 1]), order);
                let za = _mm256_set1_epi32(t.rows[3 * i]);
                let ra = _mm256_set1_epi32(t.rows[3 * i + 1]);
                let rb = _mm256_add_epi32(_mm256_set1_epi32(t.rows[3 * i + 2]), cb);
                let y = _mm256_sub_epi32(_mm256_sub_epi32(sum, _mm256_mullo_epi32(zb, ra)), _mm256_add_epi32(_mm256_mullo_epi32(za, db), rb));
                match t.c {
                    Out::Acc(c) => _mm256_maskstore_epi32(c.add(i * t.ldc + j0).cast(), mask, y),
                    bytes => {
                        let mut v = [0i32; 8];
                        _mm256_storeu_si256(v.as_mut_ptr().cast(), y);
                        bytes.store(t.ldc, i, j0, &v[..live as usize]);
                    }
                }
            }
        }
    }
}

/// Packs the whole groups of one full panel of `B` (16 columns from `b`, `k` rows of stride
/// `ldb`) into `out`, each four rows' 16-byte runs interleaved into 16 columns of four bytes,
/// and adds each column's sum into `sums`; returns how many groups it packed (the last one,
/// when `k` is not a multiple of 4, is left to the caller).
///
/// # Safety
///
/// `b` readable for 16 bytes at each of the `k` rows; `out` holds the panel's groups; the CPU
/// has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pack_panel(b: *const u8, k: usize, ldb: usize, flip: u8, out: &mut [i8], sums: &mut [i32]) -> usize {
    let full = k / 4;
    assert!(out.len() >= full * 4 * PANEL && sums.len() >= PANEL);
    let flip = _mm_set1_epi8(flip as i8);
    let ones8 = _mm_set1_epi8(1);
    let ones16 = _mm_set1_epi16(1);
    let mut acc = [_mm_setzero_si128(); 4];
    for g in 0..full {
        // SAFETY: rows `4g..4g + 4` hold 16 bytes at `b`, by the caller's contract.
        let row = |q: usize| unsafe { _mm_xor_si128(_mm_loadu_si128(b.add((4 * g + q) * ldb).cast()), flip) };
        let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
        let (lo01, hi01) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
        let (lo23, hi23) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
        let quarters = [_mm_unpacklo_epi16(lo01, lo23), _mm_unpackhi_epi16(lo01, lo23), _mm_unpacklo_epi16(hi01, hi23), _mm_unpackhi_epi16(hi01, hi23)];
        for (q, v) in quarters.into_iter().enumerate() {
            // SAFETY: `out` holds group `g` (asserted above).
            unsafe { _mm_storeu_si128(out.as_mut_ptr().add(g * 4 * PANEL + 16 * q).cast(), v) };
            // Each column's four signed bytes: pairs to `i16` by `maddubs` (1 × byte, exact),
            // then to `i32`.
            acc[q] = _mm_add_epi32(acc[q], _mm_madd_epi16(_mm_maddubs_epi16(ones8, v), ones16));
        }
    }
    for (q, v) in acc.into_iter().enumerate() {
        let mut lanes = [0i32; 4];
        // SAFETY: `lanes` holds 16 bytes.
        unsafe { _mm_storeu_si128(lanes.as_mut_ptr().cast(), v) };
        for (c, lane) in lanes.into_iter().enumerate() {
            sums[4 * q + c] = sums[4 * q + c].wrapping_add(lane);
        }
    }
    full
}
