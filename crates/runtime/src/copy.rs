//! Byte copies for the loop IR's `copy` (the contiguous runs of movement ops).

/// Copies `bytes` bytes from `src` to `dst` (as `memmove`: the ranges may overlap). Nothing
/// happens when `bytes` is not positive.
///
/// # Safety
///
/// `src` readable and `dst` writable for `bytes` bytes. No alignment is required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_copy(dst: *mut u8, src: *const u8, bytes: i64) {
    if let Ok(n) = usize::try_from(bytes) {
        // SAFETY: by the caller's contract.
        unsafe { std::ptr::copy(src, dst, n) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_and_ignores_nonsense_sizes() {
        let src = [1u8, 2, 3, 4, 5];
        let mut dst = [0u8; 5];
        // SAFETY: 5 bytes each; then nothing is addressed.
        unsafe {
            super::kiln_rt_copy(dst.as_mut_ptr().add(1), src.as_ptr(), 3);
            super::kiln_rt_copy(std::ptr::null_mut(), std::ptr::null(), -4);
        }
        assert_eq!(dst, [0, 1, 2, 3, 0]);
    }
}
