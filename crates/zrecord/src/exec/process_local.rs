//! A value each process has its own of, safe across `fork()`.
//!
//! A forked child inherits a copy of the parent's memory but only the thread
//! that forked, so a thread pool built by the parent is a husk there: handing
//! it work would wait forever. A [`ProcessLocal`] remembers which process
//! built its value; a call from any other process (a forked child) builds
//! and installs a fresh one. Values are leaked, never freed: the parent's
//! copy in a child refers to threads that do not exist there, so neither
//! dropping it nor joining anything is safe.
//!
//! A process is told by its [`generation`], not its pid: reading the pid is
//! a system call (glibc keeps no copy), and every gather asks for a few of
//! these values.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

struct Owned<T> {
    generation: u64,
    value: T,
}

/// Which process this is, among the process and the children forked from
/// it (and theirs): a count of the forks this process's memory has been
/// through, raised in each child by a `pthread_atfork` handler before the
/// child runs anything else. Where the handler cannot be registered, and
/// off Unix, the pid (with the top bit set, so that the two never meet).
fn generation() -> u64 {
    static FORKS: AtomicU64 = AtomicU64::new(0);
    static COUNTING: OnceLock<bool> = OnceLock::new();
    let counting = *COUNTING.get_or_init(|| {
        #[cfg(unix)]
        {
            extern "C" fn forked() {
                FORKS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: registers a child handler that only adds to an
            // atomic, which is async-signal-safe, as a fork handler must be.
            unsafe { libc::pthread_atfork(None, None, Some(forked)) == 0 }
        }
        #[cfg(not(unix))]
        false
    });
    match counting {
        true => FORKS.load(Ordering::Relaxed),
        false => 1 << 63 | u64::from(std::process::id()),
    }
}

/// A lazily built, leaked value per process; see the module doc.
pub(crate) struct ProcessLocal<T> {
    installed: AtomicPtr<Owned<T>>,
}

impl<T: Send + Sync + 'static> ProcessLocal<T> {
    pub(crate) const fn new() -> ProcessLocal<T> {
        ProcessLocal {
            installed: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The calling process's value. The first call of a process builds it
    /// with `build` and, once it is installed, passes it to `on_install`
    /// (which may start threads that borrow it for ever). When threads of
    /// one process race to build it, one value wins and the others are
    /// dropped unused, before any `on_install`.
    pub(crate) fn get(
        &self,
        build: impl FnOnce() -> T,
        on_install: impl FnOnce(&'static T),
    ) -> &'static T {
        let generation = generation();
        let current = self.installed.load(Ordering::Acquire);
        // SAFETY: an installed value is leaked, never freed, so a non-null
        // pointer stays valid for the life of the process (and of a forked
        // child, which has a copy of the memory it points at).
        if let Some(owned) = unsafe { current.as_ref() } {
            if owned.generation == generation {
                return &owned.value;
            }
        }
        let fresh = Box::into_raw(Box::new(Owned {
            generation,
            value: build(),
        }));
        match self
            .installed
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: `fresh` is installed now, so it is never freed.
                let value = unsafe { &(*fresh).value };
                on_install(value);
                value
            }
            Err(winner) => {
                // SAFETY: `fresh` came from `Box::into_raw` above and was
                // never published, so this is its only owner.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: the compare-exchange only fails when another thread
                // of this process installed a value (fork copies just the
                // forking thread, so no other process races here); installed
                // values are never freed, and never null once set.
                unsafe { &(*winner).value }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Threads of one process racing for the value all get the same one,
    /// and it is installed (and announced) exactly once.
    #[test]
    fn racing_threads_share_one_value_installed_once() {
        static LOCAL: ProcessLocal<usize> = ProcessLocal::new();
        static INSTALLS: AtomicUsize = AtomicUsize::new(0);
        let seen: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    s.spawn(move || {
                        let value = LOCAL.get(
                            || i,
                            |_| {
                                INSTALLS.fetch_add(1, Ordering::SeqCst);
                            },
                        );
                        value as *const usize as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        assert_eq!(INSTALLS.load(Ordering::SeqCst), 1);
    }

    /// A forked child, and a child of that child, each build their own
    /// value; the parent keeps its.
    #[cfg(unix)]
    #[test]
    fn each_forked_child_builds_its_own_value() {
        static LOCAL: ProcessLocal<u32> = ProcessLocal::new();
        /// The value `LOCAL` gives a forked child that would build
        /// `depth`, as the child's exit status (a grandchild's when `deeper`).
        fn in_child(depth: u32, deeper: bool) -> i32 {
            // SAFETY: the child only reads the value, forks again at most
            // once and leaves with `_exit`, never returning into the harness.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let mut seen = *LOCAL.get(|| depth, |_| {}) as i32;
                if deeper && seen == depth as i32 {
                    seen = in_child(depth + 1, false);
                }
                // SAFETY: _exit takes no pointers and never returns.
                unsafe { libc::_exit(seen) };
            }
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer for the call's duration.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "{status}");
            libc::WEXITSTATUS(status)
        }
        assert_eq!(*LOCAL.get(|| 1, |_| {}), 1);
        assert_eq!(in_child(2, true), 3, "the grandchild's own value");
        assert_eq!(in_child(2, false), 2, "the child's own value");
        assert_eq!(*LOCAL.get(|| 9, |_| {}), 1, "the parent's value");
    }
}
