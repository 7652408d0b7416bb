//! The intra-op thread pool: a fixed team of worker threads that splits one micro-kernel call.
//!
//! Generated code calls the runtime's `extern "C"` kernels on the thread that runs the model.
//! A kernel that is worth splitting calls [`for_each`] with a task count and a task function;
//! when the calling thread has [entered](Pool::enter) a pool, the caller and the pool's workers
//! take tasks from a shared counter until none is left, and the call returns when every task
//! has finished. Without a pool (the interpreter, an object file linked into firmware, a worker
//! of the pool itself) the tasks run in order on the caller. Kernels split only along
//! dimensions whose elements are computed independently, each in the same order as the
//! single-threaded code, so results are bit-identical whatever the thread count.
//!
//! **Why not rayon.** The call comes from JIT code on a thread outside any pool, once per
//! kernel, hundreds of times per inference. `rayon::ThreadPool::install` parks the caller while
//! the pool works (one core of two idle) and `scope`/`spawn` allocate per task; this pool lets
//! the caller take tasks too and allocates nothing per call.
//!
//! **Idle workers sleep.** After a job a worker polls for the next one for [`SPIN`] (1 ms:
//! kernels of one inference follow each other within microseconds, and waking a sleeping
//! thread costs tens of them, ~30 µs on this project's virtual machine), then blocks on a
//! condition variable. Posting a job and waiting for the workers to leave it are atomics only; the
//! caller makes system calls just to wake sleeping workers, which it first steers off its
//! own CPU (`pool/steer.rs`: Linux may queue a woken thread behind its waker). A pool busy with one caller's job
//! runs a second caller's job on that caller alone, so concurrent requests never queue behind
//! each other.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod steer;
use steer::Steer;

/// How long a worker polls for the next job before it sleeps: longer than most single-thread
/// stretches of an inference (a sleeping worker costs the next split ~30 µs to wake on this
/// project's machine), short enough to leave an idle service's cores alone.
const SPIN: Duration = Duration::from_millis(1);

/// How long the caller polls for workers finishing their last task before it starts yielding
/// its core (to a worker that may be waiting for it).
const WAIT_SPIN: Duration = Duration::from_micros(50);

/// A team of `threads − 1` workers; the thread that calls in is the last member.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held by the caller whose job the workers are on.
    busy: Mutex<()>,
}

/// What the caller and the workers share. Every access is sequentially consistent: the
/// handshakes below are argued in that order.
struct Shared {
    /// The job being worked on; null once its caller stops admitting workers. A worker counts
    /// itself in `inside` before it reads this, and the caller clears it before it waits for
    /// `inside` to drop to zero, so no worker can reach a job whose caller has returned.
    job: AtomicPtr<Job<'static>>,
    /// Workers between counting themselves in and leaving.
    inside: AtomicUsize,
    /// Bumped for every job posted (and at shutdown).
    epoch: AtomicU64,
    /// Workers that have counted themselves asleep: the caller wakes them only when some are.
    /// A worker counts itself before its last look at `epoch`, and the caller bumps `epoch`
    /// before it reads this, so either the worker sees the new job or the caller sees it
    /// asleep.
    sleepers: AtomicUsize,
    shutdown: AtomicBool,
    /// Guards sleeping: a worker holds it from counting itself asleep until it waits.
    lock: Mutex<()>,
    /// Signalled when a job is posted to sleeping workers or the pool shuts down.
    posted: Condvar,
    /// Where sleeping workers are woken (see [`steer`]).
    steer: Option<Steer>,
}

struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    tasks: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
}

impl Job<'_> {
    /// Runs tasks until none is left; a panicking task stops this thread's share.
    fn work(&self) {
        let run = || {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= self.tasks {
                    break;
                }
                (self.task)(i);
            }
        };
        if catch_unwind(AssertUnwindSafe(run)).is_err() {
            self.panicked.store(true, Ordering::Relaxed);
            // The remaining tasks are skipped; the caller reports the panic.
            self.next.store(self.tasks, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// The pool this thread's kernel calls split over, while inside [`Pool::enter`].
    static CURRENT: Cell<*const Pool> = const { Cell::new(std::ptr::null()) };
}

impl Pool {
    /// A pool of `threads` (at least 1) members: the caller and `threads − 1` workers, named
    /// `kiln-worker-N`.
    ///
    /// # Errors
    ///
    /// If the operating system refuses to start a thread.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            inside: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            posted: Condvar::new(),
            steer: Steer::new(threads.max(1) - 1),
        });
        let mut pool = Pool { shared: shared.clone(), workers: Vec::new(), busy: Mutex::new(()) };
        for i in 1..threads.max(1) {
            let shared = shared.clone();
            let handle = std::thread::Builder::new().name(format!("kiln-worker-{i}")).spawn(move || worker(&shared, i - 1))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Members of the team, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f` with this pool as the current thread's pool: the kernels it calls split their
    /// work over the pool.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Pool);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(self)));
        f()
    }

    /// Runs `task(0) … task(tasks − 1)`, each exactly once, over the team; returns when all
    /// have finished.
    ///
    /// # Panics
    ///
    /// If a task panics (after every other member has left the job).
    pub fn for_each(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        if tasks <= 1 || self.workers.is_empty() {
            return (0..tasks).for_each(task);
        }
        // A second caller while the team is busy runs alone rather than waiting.
        let _busy = match self.busy.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..tasks).for_each(task),
        };
        let sh = &*self.shared;
        let job = Job { task, tasks, next: AtomicUsize::new(0), panicked: AtomicBool::new(false) };
        // SAFETY: only the lifetime is erased; no worker reaches the job after this call
        // returns (see `Shared::job`). Workers only read through the pointer.
        let ptr = unsafe { std::mem::transmute::<*const Job<'_>, *const Job<'static>>(&job) };
        sh.job.store(ptr.cast_mut(), Ordering::SeqCst);
        sh.epoch.fetch_add(1, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            if let Some(steer) = &sh.steer {
                steer.away_from_caller();
            }
            // Taking the lock waits for a worker between counting itself asleep and waiting.
            drop(sh.lock());
            sh.posted.notify_all();
        }
        job.work();
        sh.job.store(std::ptr::null_mut(), Ordering::SeqCst);
        // Workers still inside are finishing their last task: poll, and after a while let a
        // preempted one have this core.
        let start = Instant::now();
        let mut polls = 0u32;
        while sh.inside.load(Ordering::SeqCst) > 0 {
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(256) && start.elapsed() > WAIT_SPIN {
                std::thread::yield_now();
            }
        }
        assert!(!job.panicked.load(Ordering::Relaxed), "a kiln runtime task panicked");
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let sh = &*self.shared;
        sh.shutdown.store(true, Ordering::SeqCst);
        sh.epoch.fetch_add(1, Ordering::SeqCst);
        drop(sh.lock());
        sh.posted.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Worker `index`'s loop.
fn worker(sh: &Shared, index: usize) {
    if let Some(steer) = &sh.steer {
        steer.register(index);
    }
    let mut seen = 0;
    loop {
        let start = Instant::now();
        let mut polls = 0u32;
        while sh.epoch.load(Ordering::SeqCst) == seen {
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(256) && start.elapsed() > SPIN {
                let mut guard = sh.lock();
                sh.sleepers.fetch_add(1, Ordering::SeqCst);
                while sh.epoch.load(Ordering::SeqCst) == seen {
                    guard = sh.posted.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                sh.sleepers.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
        if sh.shutdown.load(Ordering::SeqCst) {
            return;
        }
        seen = sh.epoch.load(Ordering::SeqCst);
        // A pin lasts until the worker runs: also when the caller pinned it just as it saw the
        // job without sleeping.
        if let Some(steer) = &sh.steer {
            steer.release(index);
        }
        sh.inside.fetch_add(1, Ordering::SeqCst);
        let job = sh.job.load(Ordering::SeqCst);
        // SAFETY: a non-null job is alive until `inside` drops back to zero (`Shared::job`).
        if let Some(job) = unsafe { job.as_ref() } {
            crate::trace::span("worker tasks", "worker", || job.work());
        }
        sh.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Members of the current thread's pool (1 without one): how many parts a kernel should make.
pub fn threads() -> usize {
    // SAFETY: a non-null pointer was set by `Pool::enter`, whose borrow outlives it.
    CURRENT.with(|c| unsafe { c.get().as_ref() }).map_or(1, Pool::threads)
}

/// Runs `task(0) … task(tasks − 1)` over the current thread's pool, or in order on this thread
/// without one.
pub fn for_each(tasks: usize, task: &(dyn Fn(usize) + Sync)) {
    // SAFETY: as in `threads`.
    match CURRENT.with(|c| unsafe { c.get().as_ref() }) {
        Some(pool) => pool.for_each(tasks, task),
        None => (0..tasks).for_each(task),
    }
}

/// The share of a team's time spent on useful work when `len` elements split into `parts`
/// [`part`]s of whole `grain`s and the largest part sets the pace (1 when perfectly even).
pub fn balance(len: usize, parts: usize, grain: usize) -> f64 {
    let parts = parts.max(1);
    let largest = (0..parts).map(|i| part(len, parts, grain, i).len()).max().unwrap_or(len);
    if largest == 0 { 1.0 } else { len as f64 / (largest * parts) as f64 }
}

/// Splits `0..len` into `parts` contiguous ranges of whole `grain`s, as equal as they can be;
/// part `i` of them (empty when there are fewer grains than parts).
pub fn part(len: usize, parts: usize, grain: usize, i: usize) -> std::ops::Range<usize> {
    let grains = len.div_ceil(grain.max(1));
    let parts = parts.max(1);
    let at = |i: usize| ((grains * i / parts) * grain.max(1)).min(len);
    at(i)..at(i + 1)
}

/// A raw pointer that tasks on other threads may use: each task touches a disjoint part of
/// what it points to.
#[derive(Clone, Copy)]
pub(crate) struct SharedPtr<T>(pub T);

impl<T: Copy> SharedPtr<T> {
    /// The wrapped value (a method, so closures capture the wrapper, not its fields).
    pub fn get(&self) -> T {
        self.0
    }
}

// SAFETY: the kernels that wrap pointers hand each task a disjoint part of the output and only
// read the inputs.
unsafe impl<T> Send for SharedPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedPtr<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        let pool = Pool::new(3).unwrap();
        for tasks in [0, 1, 2, 5, 100] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.enter(|| for_each(tasks, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }));
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn workers_take_tasks() {
        let pool = Pool::new(2).unwrap();
        let me = std::thread::current().id();
        let others = AtomicUsize::new(0);
        // Tasks long enough that the worker wakes before the caller has taken them all.
        pool.enter(|| for_each(64, &|_| {
            std::thread::sleep(Duration::from_millis(1));
            if std::thread::current().id() != me {
                others.fetch_add(1, Ordering::Relaxed);
            }
        }));
        assert!(others.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn concurrent_callers_share_a_pool() {
        let pool = Pool::new(2).unwrap();
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        pool.enter(|| for_each(8, &|i| {
                            total.fetch_add(i, Ordering::Relaxed);
                        }));
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 50 * 28);
    }

    #[test]
    fn without_a_pool_tasks_run_in_order_here() {
        let order = Mutex::new(Vec::new());
        for_each(4, &|i| order.lock().unwrap().push(i));
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
        assert_eq!(threads(), 1);
    }

    #[test]
    fn a_panicking_task_is_reported_to_the_caller() {
        let pool = Pool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| pool.enter(|| for_each(16, &|i| assert!(i != 7)))));
        assert!(r.is_err());
        // The pool still works.
        let n = AtomicUsize::new(0);
        pool.enter(|| for_each(16, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(n.load(Ordering::Relaxed), 16);
        assert_eq!(threads(), 1, "enter restores the previous pool, even on unwinding");
    }

    #[test]
    fn parts_cover_the_range_in_whole_grains() {
        for (len, parts, grain) in [(100, 3, 8), (7, 4, 1), (5, 8, 2), (0, 2, 4), (48, 2, 48)] {
            let ranges: Vec<_> = (0..parts).map(|i| part(len, parts, grain, i)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[parts - 1].end, len);
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert!(w[0].end % grain == 0 || w[0].end == len);
            }
        }
    }
}
