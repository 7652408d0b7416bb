//! Stopping a run from outside it: a cancel flag another thread sets, and a deadline.
//!
//! A run installs its [`Stop`] on the calling thread for its duration ([`with`]); generated code
//! polls it where a run's time is not bounded by its tensors' sizes, once per iteration of a
//! `Loop` (`kiln_rt_should_stop`), and the runner between kernels and stages, and the reference
//! evaluator between steps ([`reason`]). A run stops within one kernel's time.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// When a run should stop early.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// Stops the run once another thread sets it.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Stops the run once this instant has passed.
    pub deadline: Option<Instant>,
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The cancel flag was set.
    Cancelled,
    /// The deadline passed.
    DeadlineExceeded,
}

impl Stop {
    /// Whether the run should stop now, and why.
    pub fn reason(&self) -> Option<Reason> {
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Some(Reason::Cancelled);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(Reason::DeadlineExceeded);
        }
        None
    }

    /// True when nothing can stop the run.
    pub fn is_never(&self) -> bool {
        self.cancel.is_none() && self.deadline.is_none()
    }
}

thread_local! {
    static CURRENT: RefCell<Stop> = RefCell::new(Stop::default());
}

/// Runs `f` with `stop` installed on this thread, restoring what was there before (also when
/// `f` unwinds).
pub fn with<R>(stop: &Stop, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Stop>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(prev) = self.0.take() {
                CURRENT.with(|c| *c.borrow_mut() = prev);
            }
        }
    }
    let prev = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), stop.clone()));
    let _restore = Restore(Some(prev));
    f()
}

/// Whether something can stop the run on this thread (a cancel flag or a deadline is set).
pub fn armed() -> bool {
    CURRENT.with(|c| !c.borrow().is_never())
}

/// Whether the run on this thread should stop now, and why.
pub fn reason() -> Option<Reason> {
    CURRENT.with(|c| c.borrow().reason())
}

/// Writes 1 to `flag` if the run on this thread should stop, else 0.
///
/// # Safety
/// `flag` is one writable byte.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_rt_should_stop(flag: *mut u8) {
    // SAFETY: by the caller's contract.
    unsafe { flag.write(u8::from(reason().is_some())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_seen_only_inside_its_run() {
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Stop { cancel: Some(cancel.clone()), deadline: None };
        assert_eq!(reason(), None);
        with(&stop, || {
            assert_eq!(reason(), None);
            cancel.store(true, Ordering::Relaxed);
            assert_eq!(reason(), Some(Reason::Cancelled));
            let past = Stop { cancel: None, deadline: Some(Instant::now()) };
            with(&past, || assert_eq!(reason(), Some(Reason::DeadlineExceeded)));
            assert_eq!(reason(), Some(Reason::Cancelled));
        });
        assert_eq!(reason(), None);
    }
}
