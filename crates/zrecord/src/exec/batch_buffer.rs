//! Batch memory that is recycled instead of freed.
//!
//! A fresh buffer costs a page fault and a page of zeroing per 4 KiB the
//! first time it is written, and the allocator returns big buffers to the
//! kernel when they are freed, so every batch paid that again: gathering
//! into fresh memory ran at 0.46–0.8× the speed of gathering into memory
//! already written once (bench/README.md, "Batch memory"). A dropped
//! [`BatchBuffer`] goes back to the [`Recycler`] it came from instead, and
//! the next batch of about the same size takes it back, pages already
//! mapped.
//!
//! There is one shared recycler, for gathers made on their own
//! ([`BatchBuffer::new`]): [`SHARED_PER_CLASS`] buffers per size class,
//! [`SHARED_BYTES`] in all, none over [`SHARED_MAX_CAPACITY`]. A loader has
//! one of its own ([`Recycler::new`]) sized by how many batches it has in
//! flight, which the shared bounds cannot know: with 40 MiB batches, four
//! workers and four prefetched steps, the shared list kept too few and one
//! batch in ten came in fresh memory (bench/README.md, "A loader's own
//! recycler").
//!
//! A loader whose batches go to worker processes has a recycler of shared
//! memory ([`Recycler::new_shared`]): its buffers of at least
//! [`MIN_POOLED`] bytes are mappings of shared memory files
//! (`shared_memory.rs`), which a worker maps by the buffer's
//! [`BatchBuffer::shared_fd`]; smaller ones cost less to copy than to map.
//!
//! When a returned buffer does not fit, the buffers idle longest make room,
//! since the batch size in use now is the one that comes back. Idle lists
//! are only ever `try_lock`ed: a thread that finds one busy — or a forked
//! child that inherited it locked — allocates or frees as if there were no
//! recycler.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::shared_memory::SharedMemory;

/// Buffers are cache-line aligned, so that every dtype views them aligned
/// and two batches never share a line.
const ALIGN: usize = 64;
/// Smaller buffers are left to the allocator, which keeps them mapped (and
/// are never shared memory).
const MIN_POOLED: usize = 64 << 10;
/// Idle buffers the shared recycler keeps per size class: enough for a
/// caller that holds a few batches while it gathers the next ones.
pub const SHARED_PER_CLASS: usize = 4;
/// Idle bytes the shared recycler keeps in all.
pub const SHARED_BYTES: usize = 256 << 20;
/// Bigger buffers are not kept by the shared recycler: they come from
/// one-off gathers (a whole dataset at once), which must not pin their
/// memory or crowd the batches of a training loop out of the list.
pub const SHARED_MAX_CAPACITY: usize = 64 << 20;

/// A buffer's memory: its start, and the shared memory file it maps (heap
/// memory aligned to [`ALIGN`] when there is none).
struct Allocation {
    ptr: NonNull<u8>,
    shared: Option<SharedMemory>,
}

struct Idle {
    bytes: usize,
    /// `(capacity, allocation)`, the longest idle first; a handful of
    /// entries, searched linearly.
    buffers: Vec<(usize, Allocation)>,
}

// SAFETY: the idle allocations are owned by the list, not shared, so moving
// the list to another thread moves their ownership with it.
unsafe impl Send for Idle {}

/// Where dropped [`BatchBuffer`]s wait to be taken again, within bounds.
pub struct Recycler {
    idle: Mutex<Idle>,
    per_class: usize,
    max_bytes: usize,
    max_capacity: usize,
    /// Set by [`Recycler::close`]: buffers returned from then on are freed.
    closed: AtomicBool,
    /// Whether its fresh buffers of [`MIN_POOLED`] bytes or more are
    /// shared memory.
    shared: bool,
}

static SHARED: Recycler =
    Recycler::with_bounds(SHARED_PER_CLASS, SHARED_BYTES, SHARED_MAX_CAPACITY, false);

impl Recycler {
    const fn with_bounds(
        per_class: usize,
        max_bytes: usize,
        max_capacity: usize,
        shared: bool,
    ) -> Recycler {
        Recycler {
            idle: Mutex::new(Idle {
                bytes: 0,
                buffers: Vec::new(),
            }),
            per_class,
            max_bytes,
            max_capacity,
            closed: AtomicBool::new(false),
            shared,
        }
    }

    /// A recycler that keeps up to `per_class` idle buffers of each size
    /// class and `max_bytes` in all, of any size: for a loader, which knows
    /// how many batches it has in flight and how big they are.
    pub fn new(per_class: usize, max_bytes: usize) -> Arc<Recycler> {
        Arc::new(Recycler::with_bounds(
            per_class,
            max_bytes,
            usize::MAX,
            false,
        ))
    }

    /// As [`Recycler::new`], its buffers of 64 KiB (`MIN_POOLED`) or more in
    /// shared memory that other processes can map (heap memory where the
    /// system has none to give).
    pub fn new_shared(per_class: usize, max_bytes: usize) -> Arc<Recycler> {
        Arc::new(Recycler::with_bounds(
            per_class,
            max_bytes,
            usize::MAX,
            true,
        ))
    }

    /// Frees the idle buffers, and from now on every buffer returned: the
    /// loader that used them has stopped. Waits for the idle list, so not
    /// for a forked child that may have inherited it locked.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let buffers = match self.idle.lock() {
            Ok(mut idle) => {
                idle.bytes = 0;
                std::mem::take(&mut idle.buffers)
            }
            Err(_) => return,
        };
        for (capacity, memory) in buffers {
            free(capacity, memory);
        }
    }

    fn keeps(&self, capacity: usize) -> bool {
        (MIN_POOLED..=self.max_capacity).contains(&capacity) && capacity <= self.max_bytes
    }

    /// An idle allocation of exactly `capacity` bytes, the most recently
    /// returned (its pages are the likeliest to be cached).
    fn take(&self, capacity: usize) -> Option<Allocation> {
        if !self.keeps(capacity) {
            return None;
        }
        let mut idle = self.idle.try_lock().ok()?;
        let k = idle.buffers.iter().rposition(|(c, _)| *c == capacity)?;
        let (_, memory) = idle.buffers.remove(k);
        idle.bytes -= capacity;
        Some(memory)
    }

    /// Bytes kept idle now, waiting to be taken again.
    pub fn idle_bytes(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// Keeps `memory` for a later [`Recycler::take`], or frees it.
    fn give(&self, capacity: usize, memory: Allocation) {
        if self.keeps(capacity) && !self.closed.load(Ordering::Acquire) {
            if let Ok(mut idle) = self.idle.try_lock() {
                let same = idle.buffers.iter().filter(|(c, _)| *c == capacity).count();
                if same < self.per_class {
                    // Freed after the lock is let go: freeing a big buffer
                    // is a system call.
                    let mut evicted = Vec::new();
                    while idle.bytes + capacity > self.max_bytes {
                        let (capacity, old) = idle.buffers.remove(0);
                        idle.bytes -= capacity;
                        evicted.push((capacity, old));
                    }
                    idle.bytes += capacity;
                    idle.buffers.push((capacity, memory));
                    drop(idle);
                    for (capacity, old) in evicted {
                        free(capacity, old);
                    }
                    return;
                }
            }
        }
        free(capacity, memory);
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|e| e.into_inner());
        for (capacity, memory) in idle.buffers.drain(..) {
            free(capacity, memory);
        }
    }
}

/// A byte buffer of a batch: an aligned allocation whose capacity is `len`
/// rounded up to a size class (four per power of two), so that batches of
/// slightly different sizes (ragged streams) reuse each other's memory.
///
/// Its initial bytes are unspecified — zero when the memory is fresh, an
/// earlier batch's bytes when it is recycled — so whoever fills it writes
/// every byte.
pub struct BatchBuffer {
    memory: Allocation,
    len: usize,
    capacity: usize,
    /// The recycler it goes back to; `None` for the shared one.
    home: Option<Arc<Recycler>>,
}

// SAFETY: a `BatchBuffer` owns its allocation exclusively, like a `Vec<u8>`
// (a shared memory file is its own; other processes only map it), and its
// other fields (an `Arc<Recycler>`) are `Send`.
unsafe impl Send for BatchBuffer {}
// SAFETY: as for `Send`; shared access only reads the bytes (`Deref`), and
// writing needs `&mut self`.
unsafe impl Sync for BatchBuffer {}

/// The capacity class of a `len`-byte buffer: `len` rounded up to a
/// quarter of its power of two (at most 25 % more), and to `ALIGN`.
pub(crate) fn class(len: usize) -> Option<usize> {
    let floor_power = 1usize << len.max(1).ilog2();
    len.checked_next_multiple_of((floor_power / 4).max(ALIGN))
}

impl BatchBuffer {
    /// A buffer of `len` bytes from the shared recycler; `None` when the
    /// allocator refuses the memory.
    pub fn new(len: usize) -> Option<BatchBuffer> {
        BatchBuffer::with_home(len, None)
    }

    /// A buffer of `len` bytes from `recycler`, which it returns to when
    /// dropped; `None` when the allocator refuses the memory.
    pub fn new_in(recycler: &Arc<Recycler>, len: usize) -> Option<BatchBuffer> {
        BatchBuffer::with_home(len, Some(recycler.clone()))
    }

    fn with_home(len: usize, home: Option<Arc<Recycler>>) -> Option<BatchBuffer> {
        if len == 0 {
            let memory = Allocation {
                ptr: NonNull::<[u8; ALIGN]>::dangling().cast(),
                shared: None,
            };
            return Some(BatchBuffer {
                memory,
                len,
                capacity: 0,
                home: None,
            });
        }
        let capacity = class(len)?;
        let recycler = home.as_deref().unwrap_or(&SHARED);
        if let Some(memory) = recycler.take(capacity) {
            return Some(BatchBuffer {
                memory,
                len,
                capacity,
                home,
            });
        }
        if recycler.shared && capacity >= MIN_POOLED {
            if let Some(mut shared) = SharedMemory::new(capacity) {
                let ptr = shared.ptr();
                return Some(BatchBuffer {
                    memory: Allocation {
                        ptr,
                        shared: Some(shared),
                    },
                    len,
                    capacity,
                    home,
                });
            }
        }
        let layout = Layout::from_size_align(capacity, ALIGN).ok()?;
        // Fresh memory is zeroed (for this alignment the allocator writes the
        // zeros itself); its pages are faulted in and cleared by that first
        // write, which is the cost recycling saves.
        // SAFETY: `layout` has a non-zero size (`capacity >= ALIGN`), as
        // `alloc_zeroed` requires; a null result is refused just below.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(BatchBuffer {
            memory: Allocation { ptr, shared: None },
            len,
            capacity,
            home,
        })
    }

    /// The capacity a buffer of `len` bytes is allocated with (its size
    /// class), which is what it occupies in a [`Recycler`]; `None` when no
    /// allocation can be that large.
    pub fn capacity_for(len: usize) -> Option<usize> {
        class(len)
    }

    /// The descriptor of the shared memory file that holds the buffer's
    /// bytes from its start, for another process to map; `None` for heap
    /// memory.
    #[cfg(unix)]
    pub fn shared_fd(&self) -> Option<std::os::fd::RawFd> {
        self.memory.shared.as_ref().map(SharedMemory::fd)
    }

    /// A number that names the shared memory file holding the buffer's
    /// bytes, the same for every buffer recycled from that file and never
    /// given to another file of this process; `None` for heap memory.
    pub fn shared_id(&self) -> Option<u64> {
        self.memory.shared.as_ref().map(SharedMemory::id)
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        if self.capacity != 0 {
            let recycler = self.home.as_deref().unwrap_or(&SHARED);
            let memory = Allocation {
                ptr: self.memory.ptr,
                shared: self.memory.shared.take(),
            };
            recycler.give(self.capacity, memory);
        }
    }
}

/// Frees an allocation made by [`BatchBuffer::new`].
fn free(capacity: usize, memory: Allocation) {
    if memory.shared.is_some() {
        return; // dropping it unmaps and closes the file
    }
    // SAFETY: heap memory was allocated in `BatchBuffer::with_home` with
    // `Layout::from_size_align(capacity, ALIGN)`, which succeeded there, so
    // the layout is valid and the same; the caller owns the allocation and
    // gives it up here.
    unsafe {
        std::alloc::dealloc(
            memory.ptr.as_ptr(),
            Layout::from_size_align_unchecked(capacity, ALIGN),
        )
    }
}

impl Deref for BatchBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (zeroed at
        // allocation, written since; or dangling but aligned when `len` is
        // 0) and owned by `self`, which this borrow keeps alive.
        unsafe { std::slice::from_raw_parts(self.memory.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for BatchBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.memory.ptr.as_ptr(), self.len) }
    }
}

impl Clone for BatchBuffer {
    /// A copy in a buffer of its own.
    ///
    /// # Panics
    /// When the allocator refuses the memory, as `Vec::clone` does.
    fn clone(&self) -> BatchBuffer {
        let mut copy = BatchBuffer::new(self.len).expect("out of memory copying a batch");
        copy.copy_from_slice(self);
        copy
    }
}

impl fmt::Debug for BatchBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for BatchBuffer {
    fn eq(&self, other: &BatchBuffer) -> bool {
        **self == **other
    }
}

impl Eq for BatchBuffer {}

impl PartialEq<[u8]> for BatchBuffer {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for BatchBuffer {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Vec<u8>> for BatchBuffer {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The tests that look into the shared idle list run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn idle_of(recycler: &Recycler, capacity: usize) -> usize {
        let idle = recycler.idle.lock().unwrap();
        idle.buffers.iter().filter(|&&(c, _)| c == capacity).count()
    }

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        assert_eq!(class(1), Some(64));
        assert_eq!(class(64), Some(64));
        assert_eq!(class(65), Some(128));
        assert_eq!(class(1 << 20), Some(1 << 20));
        assert_eq!(class((1 << 20) + 1), Some((1 << 20) + (1 << 18)));
        for len in [100_000usize, 3 << 20, 38_535_168, 123_456_789] {
            let c = class(len).unwrap();
            assert!(c >= len && c - len <= len / 4 + ALIGN, "{len} -> {c}");
        }
        assert_eq!(class(usize::MAX), None);
    }

    #[test]
    fn a_dropped_buffer_is_reused_with_its_bytes_and_absurd_sizes_are_refused() {
        // A size no other test uses, so the idle list's entry is ours. The
        // list is only try_locked, so a concurrent test can make one round
        // miss it; one of a few rounds must hit.
        let _serial = serial();
        let len = 5 << 20;
        let reused = (0..10).any(|round| {
            let mut first = BatchBuffer::new(len).unwrap();
            if round == 0 {
                assert!(first.iter().all(|&b| b == 0), "fresh memory is zero");
            }
            first.fill(7);
            let addr = first.as_ptr();
            drop(first);
            let again = BatchBuffer::new(len - 1000).unwrap();
            assert_eq!(again.len(), len - 1000);
            assert_eq!(again.as_ptr() as usize % ALIGN, 0);
            again.as_ptr() == addr && again.iter().all(|&b| b == 7)
        });
        assert!(reused, "a dropped buffer of the same class is taken back");
        assert!(BatchBuffer::new(isize::MAX as usize).is_none());
        assert!(BatchBuffer::new(0).unwrap().is_empty());
    }

    #[test]
    fn the_shared_idle_list_stays_bounded() {
        let _serial = serial();
        let len = 7 << 20;
        let held: Vec<_> = (0..SHARED_PER_CLASS + 3)
            .map(|_| BatchBuffer::new(len).unwrap())
            .collect();
        drop(held);
        assert_eq!(idle_of(&SHARED, class(len).unwrap()), SHARED_PER_CLASS);
        assert!(SHARED.idle_bytes() <= SHARED_BYTES);
    }

    /// A one-off huge gather neither stays pooled nor stops the batches of
    /// the loop after it from being recycled, even when the list is full.
    #[test]
    fn big_one_off_buffers_do_not_crowd_out_batches() {
        let _serial = serial();
        let huge = BatchBuffer::new(SHARED_MAX_CAPACITY + 1).unwrap();
        let huge_capacity = huge.capacity;
        drop(huge);
        assert_eq!(idle_of(&SHARED, huge_capacity), 0, "too big to keep");

        // Fill the list to its byte limit with buffers of another size.
        let filler = SHARED_BYTES / SHARED_PER_CLASS;
        let held: Vec<_> = (0..SHARED_PER_CLASS)
            .map(|_| BatchBuffer::new(filler).unwrap())
            .collect();
        drop(held);
        assert_eq!(SHARED.idle_bytes(), SHARED_BYTES);

        let batch = BatchBuffer::new(3 << 20).unwrap();
        let (capacity, addr) = (batch.capacity, batch.as_ptr());
        drop(batch);
        assert_eq!(
            idle_of(&SHARED, capacity),
            1,
            "the newest buffer evicts the oldest"
        );
        assert_eq!(idle_of(&SHARED, filler), SHARED_PER_CLASS - 1);
        assert!(SHARED.idle_bytes() <= SHARED_BYTES);
        assert_eq!(BatchBuffer::new(3 << 20).unwrap().as_ptr(), addr);
    }

    /// A loader's recycler keeps every batch it has in flight, however many
    /// and however big, so a burst of returns costs no fresh memory later;
    /// closing it gives the memory back.
    #[cfg(unix)]
    #[test]
    fn a_shared_recyclers_big_buffers_are_files_another_mapping_sees() {
        use std::os::fd::BorrowedFd;

        let recycler = Recycler::new_shared(4, 64 << 20);
        let mut big = BatchBuffer::new_in(&recycler, 1 << 20).unwrap();
        let small = BatchBuffer::new_in(&recycler, 1000).unwrap();
        assert!(
            small.shared_fd().is_none(),
            "small buffers stay on the heap"
        );
        assert!(BatchBuffer::new(1 << 20).unwrap().shared_fd().is_none());
        let fd = big.shared_fd().expect("a big buffer is a shared file");
        let id = big.shared_id().expect("and has a number");
        assert!(small.shared_id().is_none());
        for (k, b) in big.iter_mut().enumerate() {
            *b = (k % 251) as u8;
        }
        // What another process does with the descriptor: map the file.
        // SAFETY: `big` keeps the descriptor open for this borrow.
        let file = std::fs::File::from(
            unsafe { BorrowedFd::borrow_raw(fd) }
                .try_clone_to_owned()
                .unwrap(),
        );
        // SAFETY: the file is not truncated while mapped.
        let other = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        assert_eq!(&other[..1 << 20], &big[..]);
        assert_eq!(other.len(), class(1 << 20).unwrap());
        let ptr = big.as_ptr();
        drop(big);
        let again = BatchBuffer::new_in(&recycler, 1 << 20).unwrap();
        assert_eq!(again.as_ptr(), ptr, "a shared buffer is recycled");
        assert_eq!(again.shared_fd(), Some(fd), "with its file");
        assert_eq!(again.shared_id(), Some(id), "and its number");
        let other_file = BatchBuffer::new_in(&recycler, 1 << 20).unwrap();
        assert_ne!(other_file.shared_id(), Some(id), "which no other file has");
        assert_eq!(other[5], 5, "which other mappings keep seeing");
    }

    #[test]
    fn a_loaders_recycler_keeps_its_batches_until_closed() {
        let (in_flight, len) = (10, 70 << 20);
        let capacity = class(len).unwrap();
        let recycler = Recycler::new(in_flight, in_flight * capacity);
        let first: Vec<_> = (0..in_flight + 2)
            .map(|_| BatchBuffer::new_in(&recycler, len).unwrap())
            .collect();
        let addrs: HashSet<_> = first.iter().map(|b| b.as_ptr()).collect();
        drop(first);
        assert_eq!(
            idle_of(&recycler, capacity),
            in_flight,
            "beyond its bound it frees"
        );
        assert_eq!(recycler.idle_bytes(), in_flight * capacity);

        let again: Vec<_> = (0..in_flight)
            .map(|_| BatchBuffer::new_in(&recycler, len).unwrap())
            .collect();
        assert!(
            again.iter().all(|b| addrs.contains(&b.as_ptr())),
            "all recycled"
        );
        assert_eq!(recycler.idle_bytes(), 0);
        drop(again);

        recycler.close();
        assert_eq!(recycler.idle_bytes(), 0, "closing frees the idle buffers");
        drop(BatchBuffer::new_in(&recycler, len).unwrap());
        assert_eq!(
            idle_of(&recycler, capacity),
            0,
            "a closed recycler keeps nothing"
        );
    }
}
