//! Weights read from memory-mapped files, whose pages a stage may give back once it has read
//! them into a copy of its own.
//!
//! A loader that maps a file registers the mapping ([`register`]); a stage that has packed or
//! copied a weight calls [`release`] on the bytes it read. The pages wholly inside them leave the
//! process's resident set. Nothing else changes: the mapping is private and read-only, so a
//! later read of the same bytes faults the pages in again from the file, with the same values.
//! Bytes outside every registered mapping (copies on the heap) are left alone.

use std::sync::{Arc, Mutex, Weak};

/// A mapped region that can drop its pages.
pub trait Region: Send + Sync {
    /// The mapped bytes.
    fn bytes(&self) -> &[u8];
    /// Drops the resident pages of `len` bytes from `offset` (page-aligned, inside the region),
    /// as `madvise(MADV_DONTNEED)` does for a private read-only file mapping.
    fn release(&self, offset: usize, len: usize);
}

/// Bytes per page below which nothing is released: the common page size. On a system with
/// larger pages the kernel rounds the range out to them, and the pages it takes back are
/// faulted in again if read.
const PAGE: usize = 4096;

static REGIONS: Mutex<Vec<Weak<dyn Region>>> = Mutex::new(Vec::new());

/// Registers `region` for [`release`] while it lives.
pub fn register(region: &Arc<dyn Region>) {
    let mut regions = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
    regions.retain(|r| r.strong_count() > 0);
    regions.push(Arc::downgrade(region));
}

/// Gives back the pages wholly inside `bytes` when they lie in a registered mapping; `bytes`
/// stay readable.
pub fn release(bytes: &[u8]) {
    let (start, end) = (bytes.as_ptr() as usize, bytes.as_ptr() as usize + bytes.len());
    let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
    if first >= last {
        return;
    }
    let regions = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
    for region in regions.iter().filter_map(Weak::upgrade) {
        let mapped = region.bytes();
        let base = mapped.as_ptr() as usize;
        if base <= first && last <= base + mapped.len() {
            region.release(first - base, last - first);
            return;
        }
    }
}
