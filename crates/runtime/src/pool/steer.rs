//! Waking a sleeping worker on a CPU other than the caller's.
//!
//! When one thread wakes another, Linux may queue the woken thread on the waker's own CPU:
//! it does so when it judges that CPU lightly loaded, and some kernels pack wake-ups onto busy
//! virtual CPUs on purpose so that idle ones stay halted on the host (this project's virtual
//! machine boots with `sched_vcpu_pack`). For a fork–join pool that is the one wrong place: the
//! caller keeps its CPU busy with the tasks, so the worker waits behind it until a scheduler
//! tick moves it, about a millisecond, while the other CPU idles. `perf sched` on the MLP after
//! an idle gap shows it: the worker ran on the caller's CPU in most wake-ups and took far
//! fewer than half of the tasks.
//!
//! So before waking sleeping workers the caller pins each to one CPU of the pool's set other
//! than its own (one system call each; waking from sleep already costs tens of microseconds),
//! and a worker restores its whole set when it next takes a job, so a pin lasts one wake-up.
//! Elsewhere than Linux this does nothing.

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    /// The CPUs the pool's threads may run on and the workers' thread ids.
    pub struct Steer {
        /// The creating thread's CPU set, which the workers inherit.
        allowed: libc::cpu_set_t,
        /// `allowed`'s members in order.
        cpus: Vec<usize>,
        /// Each worker's kernel thread id, 0 until it has started.
        tids: Vec<AtomicI32>,
        /// Whether the caller pinned the worker since it last restored its set.
        pinned: Vec<AtomicBool>,
    }

    impl Steer {
        /// For `workers` workers; `None` when the threads may use only one CPU.
        pub fn new(workers: usize) -> Option<Steer> {
            // SAFETY: `cpu_set_t` is plain bits; the call writes at most its size.
            let allowed = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                    return None;
                }
                set
            };
            // SAFETY: `CPU_ISSET` reads the set for indices below its capacity.
            let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) }).collect();
            if cpus.len() < 2 {
                return None;
            }
            Some(Steer { allowed, cpus, tids: (0..workers).map(|_| AtomicI32::new(0)).collect(), pinned: (0..workers).map(|_| AtomicBool::new(false)).collect() })
        }

        /// Records the calling thread as worker `i`.
        pub fn register(&self, i: usize) {
            // SAFETY: `gettid` has no preconditions.
            self.tids[i].store(unsafe { libc::gettid() }, Ordering::SeqCst);
        }

        /// Pins every started worker to one CPU other than the calling thread's, spreading them
        /// over the rest of the set.
        pub fn away_from_caller(&self) {
            // SAFETY: `sched_getcpu` has no preconditions; it returns −1 on failure.
            let here = unsafe { libc::sched_getcpu() };
            let others: Vec<usize> = self.cpus.iter().copied().filter(|&c| c as i32 != here).collect();
            if others.is_empty() {
                return;
            }
            for (i, tid) in self.tids.iter().enumerate() {
                let tid = tid.load(Ordering::SeqCst);
                if tid == 0 {
                    continue;
                }
                // SAFETY: as in `new`; `CPU_SET` writes below the set's capacity. A failed call
                // (the thread has exited) leaves the scheduler to place the worker.
                unsafe {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(others[i % others.len()], &mut one);
                    if libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &one) == 0 {
                        self.pinned[i].store(true, Ordering::SeqCst);
                    }
                }
            }
        }

        /// Worker `i`, running: gives it back the whole set if the caller pinned it (a load
        /// of a flag when it did not).
        pub fn release(&self, i: usize) {
            if self.pinned[i].load(Ordering::Relaxed) && self.pinned[i].swap(false, Ordering::SeqCst) {
                // SAFETY: `allowed` is a valid set; thread 0 is the calling thread.
                unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.allowed) };
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    /// Nothing to steer with outside Linux.
    pub struct Steer;

    impl Steer {
        pub fn new(_workers: usize) -> Option<Steer> {
            None
        }
        pub fn register(&self, _i: usize) {}
        pub fn away_from_caller(&self) {}
        pub fn release(&self, _i: usize) {}
    }
}

pub(super) use imp::Steer;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::Steer;

    /// The CPUs thread `tid` may run on.
    fn cpus_of(tid: i32) -> Vec<usize> {
        // SAFETY: as in `Steer::new`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }

    #[test]
    fn a_pinned_worker_leaves_the_callers_cpu_until_it_wakes() {
        let whole = cpus_of(0);
        let Some(steer) = Steer::new(1) else {
            assert_eq!(whole.len(), 1, "no steering although the thread may use {whole:?}");
            return;
        };
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (mask_tx, mask_rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let steer = &steer;
        std::thread::scope(|s| {
            s.spawn(move || {
                steer.register(0);
                // SAFETY: `gettid` has no preconditions.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                wait.recv().unwrap();
                steer.release(0);
                mask_tx.send(cpus_of(0)).unwrap();
            });
            let tid = tid_rx.recv().unwrap();
            // This test's thread stays on one CPU, so the CPU the worker avoids is known.
            let here = whole[0];
            // SAFETY: as in `Steer::away_from_caller`.
            unsafe {
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(here, &mut one);
                assert_eq!(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one), 0);
            }
            steer.away_from_caller();
            let pinned = cpus_of(tid);
            assert_eq!(pinned.len(), 1, "{pinned:?}");
            assert!(pinned[0] != here && whole.contains(&pinned[0]), "pinned to {pinned:?}, caller on {here}, set {whole:?}");
            go.send(()).unwrap();
            assert_eq!(mask_rx.recv().unwrap(), whole);
        });
    }
}
