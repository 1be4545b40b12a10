//! A value each process has its own of, safe across `fork()`.
//!
//! A forked child inherits a copy of the parent's memory but only the thread
//! that forked, so a thread pool built by the parent is a husk there: handing
//! it work would wait forever. A [`ProcessLocal`] remembers which process
//! built its value; a call from any other process (a forked child) builds
//! and installs a fresh one. Values are leaked, never freed: the parent's
//! copy in a child refers to threads that do not exist there, so neither
//! dropping it nor joining anything is safe.

use std::sync::atomic::{AtomicPtr, Ordering};

struct Owned<T> {
    pid: u32,
    value: T,
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
        let pid = std::process::id();
        let current = self.installed.load(Ordering::Acquire);
        // SAFETY: an installed value is leaked, never freed, so a non-null
        // pointer stays valid for the life of the process (and of a forked
        // child, which has a copy of the memory it points at).
        if let Some(owned) = unsafe { current.as_ref() } {
            if owned.pid == pid {
                return &owned.value;
            }
        }
        let fresh = Box::into_raw(Box::new(Owned {
            pid,
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
}
