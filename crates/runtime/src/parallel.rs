//! Loops of generated code split over the thread pool: [`kiln_rt_parallel_for`].
//!
//! The code generator outlines a loop whose iterations are independent
//! (`kiln_loops::parallel`) into a function running iterations `lo..hi`; this routine cuts the
//! trip count into one contiguous range per thread and runs the ranges on the current pool.
//! Every iteration computes what it computes in order, so results do not depend on the split.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::pool;

/// Parts per member of the pool, when the loop has enough iterations.
const PARTS_PER_THREAD: usize = 4;

/// An outlined loop: runs iterations `lo..hi` over the buffers of `table`; 0, or a failed
/// check's status.
pub type LoopBody = unsafe extern "C" fn(table: *const *mut u8, lo: i64, hi: i64) -> u32;

/// Runs iterations `0..n` of `body`, in parts of at least `grain` iterations (up to four per
/// member) over the current thread's pool (in one call on this thread without one). Returns 0, or the status of the
/// first part, in iteration order, whose body failed: what running the loop in order would
/// return, since each part stops at its first failure and parts cover ascending ranges.
///
/// # Safety
///
/// `body` must be safe to call with `table` on any range inside `0..n`, from several threads
/// at once on disjoint ranges (its iterations touch disjoint elements of what they write).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_parallel_for(body: LoopBody, table: *const *mut u8, n: i64, grain: i64) -> u32 {
    if n <= 0 {
        return 0;
    }
    let total = n as u64;
    let threads = pool::threads();
    if threads <= 1 {
        // SAFETY: by the caller's contract.
        return unsafe { body(table, 0, n) };
    }
    // Parts are taken in turn, a few per thread, so a member that starts late (a worker being
    // woken, or preempted) leaves its share to the others.
    let parts = (PARTS_PER_THREAD * threads).min(usize::try_from(total / grain.max(1) as u64).unwrap_or(usize::MAX));
    if parts <= 1 {
        // SAFETY: by the caller's contract.
        return unsafe { body(table, 0, n) };
    }
    // The lowest failing part's index in the high half, its status in the low half.
    let first = AtomicU64::new(u64::MAX);
    let table = pool::SharedPtr(table);
    pool::for_each(parts, &|i| {
        let r = pool::part(total as usize, parts, 1, i);
        // SAFETY: the parts are disjoint ranges inside `0..n` (the caller's contract).
        let status = unsafe { body(table.get(), r.start as i64, r.end as i64) };
        if status != 0 {
            first.fetch_min(((i as u64) << 32) | u64::from(status), Ordering::Relaxed);
        }
    });
    match first.into_inner() {
        u64::MAX => 0,
        f => f as u32,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::pool::Pool;

    static HITS: [AtomicUsize; 100] = [const { AtomicUsize::new(0) }; 100];

    /// Counts each iteration; iterations 37 and 80 fail with statuses 5 and 3.
    unsafe extern "C" fn count(_: *const *mut u8, lo: i64, hi: i64) -> u32 {
        for i in lo..hi {
            HITS[i as usize].fetch_add(1, Ordering::Relaxed);
            match i {
                37 => return 5,
                80 => return 3,
                _ => {}
            }
        }
        0
    }

    #[test]
    fn every_iteration_runs_once_and_the_first_failure_is_reported() {
        for threads in [1, 2, 3] {
            for h in &HITS {
                h.store(0, Ordering::Relaxed);
            }
            let pool = Pool::new(threads).unwrap();
            // SAFETY: `count` touches nothing but the counters.
            let status = pool.enter(|| unsafe { kiln_rt_parallel_for(count, std::ptr::null(), 100, 1) });
            assert_eq!(status, 5, "{threads} threads");
            // Iterations up to the first failure ran exactly once.
            assert!(HITS[..38].iter().all(|h| h.load(Ordering::Relaxed) == 1), "{threads} threads");
            assert!(HITS.iter().all(|h| h.load(Ordering::Relaxed) <= 1));
        }
        // SAFETY: as above; nothing runs for an empty loop.
        assert_eq!(unsafe { kiln_rt_parallel_for(count, std::ptr::null(), 0, 1) }, 0);
    }
}
