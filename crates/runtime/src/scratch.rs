//! Per-thread scratch vectors: grown to the largest length asked for and kept for the thread's
//! life, so a warm call allocates nothing.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `f` on `len` elements of the thread's vector in `key` (a fresh vector if that one is
/// already in use on this thread, or gone at thread exit).
pub(crate) fn with<T: Copy + Default, R>(key: &'static LocalKey<RefCell<Vec<T>>>, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let mut f = Some(f);
    let reused = key.try_with(|cell| {
        let mut v = cell.try_borrow_mut().ok()?;
        if v.len() < len {
            v.resize(len, T::default());
        }
        let f = f.take()?;
        Some(f(&mut v[..len]))
    });
    match (reused, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(&mut vec![T::default(); len]),
        (_, None) => unreachable!("the closure ran and returned"),
    }
}
