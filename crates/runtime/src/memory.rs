//! Memory for runs and packed weights: anonymous mappings, in huge pages when asked.

/// The size of a transparent huge page on the targets kiln asks for them (x86-64, and aarch64
/// with 4 KiB base pages).
const HUGE: usize = 2 << 20;

/// `len` zeroed bytes (at least one) in a fresh anonymous mapping, for a run's arena and packed
/// weights. With `huge`, it asks the kernel for transparent huge pages: megabytes that
/// 4 KiB pages cover with more TLB entries than a core holds, read on every run. A mapping of
/// 2 MiB or more is then rounded up to whole 2 MiB pages, which the kernel aligns to them; the
/// pages past `len` are never touched. With `populate`, every page is faulted in now.
///
/// # Errors
///
/// When the memory cannot be mapped.
pub fn map_anon(len: usize, populate: bool, huge: bool) -> std::io::Result<memmap2::MmapMut> {
    let len = len.max(1);
    let mapped = if huge && len >= HUGE { len.checked_next_multiple_of(HUGE).unwrap_or(len) } else { len };
    let region = memmap2::MmapOptions::new().len(mapped).map_anon()?;
    // Advice only: without transparent huge pages the mapping keeps small ones.
    #[cfg(target_os = "linux")]
    {
        if huge {
            let _ = region.advise(memmap2::Advice::HugePage);
        }
        if populate {
            let _ = region.advise_range(memmap2::Advice::PopulateWrite, 0, len);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (populate, huge);
    Ok(region)
}

/// Moves the pages of `region` (whose pages are already in place) into transparent huge pages
/// on a thread of its own (`MADV_COLLAPSE`, Linux 6.1 on), for memory every run reads, such as
/// packed weights: faulting them in as huge pages would cost a fresh 2 MiB block each at
/// compile time (see `docs/performance.md`, memory). Where collapsing is not available the
/// region is only marked, and `khugepaged` moves it in the background. The thread keeps
/// `region` alive until it is done.
pub fn huge_later<T: AsRef<[u8]> + Send + 'static>(region: T) {
    if region.as_ref().len() < HUGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let mark = |region: &T, advice: libc::c_int| {
            let bytes = region.as_ref();
            // SAFETY: advice on a range of a live mapping changes no contents; an error (an
            // older kernel, no huge pages free) leaves the small pages as they are.
            unsafe { libc::madvise(bytes.as_ptr() as *mut libc::c_void, bytes.len(), advice) }
        };
        mark(&region, libc::MADV_HUGEPAGE);
        let _ = std::thread::Builder::new().name("kiln-huge".into()).spawn(move || mark(&region, libc::MADV_COLLAPSE));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = region;
}
