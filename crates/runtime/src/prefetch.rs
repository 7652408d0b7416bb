//! Software prefetches of strided blocks: for operands a kernel will read soon in short runs a
//! row apart, which the hardware prefetchers do not pick up before the reads arrive.

/// Bytes per cache line.
const LINE: usize = 64;

/// Asks for the cache lines of `rows` rows of `cols` floats at `p`, `ld` floats apart, to be
/// loaded into L1. A hint: it never faults and changes no value.
#[inline(always)]
pub(crate) fn rows(p: *const f32, rows: usize, cols: usize, ld: usize) {
    #[cfg(target_arch = "x86_64")]
    lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(p, rows, cols, ld);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, rows, cols, ld);
}

/// [`rows`] into L2 only: for a block that a kernel reads after the one it is on, which would
/// push that one's operands out of L1.
#[inline(always)]
pub(crate) fn rows_to_l2(p: *const f32, rows: usize, cols: usize, ld: usize) {
    #[cfg(target_arch = "x86_64")]
    lines::<{ std::arch::x86_64::_MM_HINT_T1 }>(p, rows, cols, ld);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, rows, cols, ld);
}

/// The prefetches of [`rows`] with the hint `HINT`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lines<const HINT: i32>(p: *const f32, rows: usize, cols: usize, ld: usize) {
    for r in 0..rows {
        let row = p.wrapping_add(r * ld) as usize;
        // Every line the row touches, from the one holding its first float.
        let (first, end) = (row & !(LINE - 1), row + cols * 4);
        for line in (first..end).step_by(LINE) {
            // SAFETY: a prefetch of any address is a hint that cannot fault; SSE is part of
            // x86-64.
            unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line as *const i8) };
        }
    }
}
