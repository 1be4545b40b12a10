//! The `Zrecord` class: a raw byte-record store.
//!
//! The store sits in a slot that is only ever locked briefly, while the GIL
//! is held: shared calls (gather, append, …) clone the `Arc` out of it and
//! run on the clone with the GIL released; `delete` and `compact` need the
//! only reference, take it out of the slot for the duration (marking the
//! slot busy) and fail with `ZrecordError(-10)` when anyone else — a gather
//! in another thread, a `DataLoader` — holds the store.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::{AppendOptions, Checksums, Codec, Store, StoreOptions};

use crate::convert::{int32, seconds, u32s, u64s, uint, Src};
use crate::error;
use crate::record_reads;

enum Slot {
    Open(Arc<Store>),
    /// A delete or compact holds the store.
    Busy,
    Closed,
}

/// Why the slot gave no store.
#[derive(Clone, Copy)]
enum Unavailable {
    Busy,
    Closed,
}

/// A persistent store of byte records (the Zrecord engine).
///
/// Opens the store in the directory `path`, creating it when missing (unless
/// `create=False`). `codec` ('raw', 'flate', 'lz4' or 'zstd') is what
/// `append` uses when it is not given one. Records are plain bytes: gather
/// them into any writable C-contiguous numpy array.
///
/// Indices are anything numpy turns into a 1-D integer array; a negative
/// index raises IndexError, one past the end ZrecordError (code -3). Using
/// a closed store raises ValueError.
#[pyclass(module = "loaderx._native", name = "Zrecord", frozen)]
pub struct Zrecord {
    slot: Mutex<Slot>,
    path: String,
    codec: Codec,
}

pub(crate) fn codec_arg(name: &str) -> PyResult<Codec> {
    Codec::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown codec {name:?}: expected one of 'raw', 'flate', 'lz4', 'zstd'"
        ))
    })
}

/// `checksums=None|True|False` of the Python classes.
pub(crate) fn checksums_arg(checksums: Option<bool>) -> Checksums {
    match checksums {
        None => Checksums::Auto,
        Some(true) => Checksums::On,
        Some(false) => Checksums::Off,
    }
}

impl Zrecord {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A shared handle on the open store, for a call that runs without the
    /// GIL or for a loader.
    ///
    /// No Python object is made while the slot is locked, here or anywhere:
    /// making one may release the GIL, and the thread that then gets it may
    /// be waiting for the slot with the GIL held (a delete putting the store
    /// back), a deadlock. So the slot's state is read under the lock and the
    /// error built after the guard is dropped.
    pub(crate) fn shared(&self) -> PyResult<Arc<Store>> {
        let state = match &*self.lock() {
            Slot::Open(store) => return Ok(store.clone()),
            Slot::Busy => Unavailable::Busy,
            Slot::Closed => Unavailable::Closed,
        };
        Err(self.unavailable(state, "this call"))
    }

    /// The error for a store that is not there to use.
    fn unavailable(&self, state: Unavailable, what: &str) -> PyErr {
        match state {
            Unavailable::Busy => error::busy(&self.path, what),
            Unavailable::Closed => error::closed(&self.path),
        }
    }

    /// Runs `f` on the only reference to the store, with the GIL released,
    /// waiting up to `wait` for the other users of this handle (a gather in
    /// another thread, a loader) to let go of it; `f` gets the time left.
    fn exclusive<R: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        wait: Duration,
        f: impl FnOnce(&mut Store, Duration) -> zrecord::Result<R> + Send,
    ) -> PyResult<R> {
        // In a forked child this handle may not write, whoever else holds
        // it (the parent's loader, copied): say so rather than "busy".
        self.shared()?.same_process(what).map_err(error::engine)?;
        let start = Instant::now();
        let mut pause = Duration::from_micros(50);
        let store = loop {
            match self.take() {
                Err(Some(_)) if start.elapsed() < wait => {
                    let nap = pause.min(wait.saturating_sub(start.elapsed()));
                    py.detach(|| std::thread::sleep(nap));
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(Some(state)) => return Err(self.unavailable(state, what)),
                Err(None) => return Err(self.unavailable(Unavailable::Closed, what)),
                Ok(store) => break store,
            }
        };
        let left = wait.saturating_sub(start.elapsed());
        // Put the store back however `f` ends, panics included.
        struct Restore<'a>(&'a Zrecord, Option<Arc<Store>>);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                if let Some(store) = self.1.take() {
                    *self.0.lock() = Slot::Open(store);
                }
            }
        }
        let mut guard = Restore(self, Some(store));
        let inner = guard.1.as_mut().and_then(Arc::get_mut);
        let inner = inner.expect("the slot held the only reference");
        let result = py.detach(|| f(inner, left));
        drop(guard);
        result.map_err(error::engine)
    }

    /// Takes the store out of its slot when this is the only reference,
    /// marking the slot busy. `Err(Some(Busy))` while someone else holds
    /// it, `Err(None)` when the store is closed.
    fn take(&self) -> Result<Arc<Store>, Option<Unavailable>> {
        let taken = {
            let mut slot = self.lock();
            match std::mem::replace(&mut *slot, Slot::Busy) {
                Slot::Open(store) if Arc::strong_count(&store) == 1 => Ok(store),
                other => {
                    let state = match &other {
                        Slot::Closed => Unavailable::Closed,
                        _ => Unavailable::Busy,
                    };
                    *slot = other;
                    Err(state)
                }
            }
        };
        // The error is built with the slot unlocked (see `shared`).
        taken.map_err(|state| match state {
            Unavailable::Closed => None,
            busy => Some(busy),
        })
    }

    fn append_options(
        &self,
        codec: Option<&str>,
        level: Option<&Bound<'_, PyAny>>,
        durable: bool,
        timeout: f64,
    ) -> PyResult<AppendOptions> {
        Ok(AppendOptions {
            codec: match codec {
                Some(name) => codec_arg(name)?,
                None => self.codec,
            },
            level: level.map(|l| int32(l, "level")).transpose()?,
            durable,
            wait: seconds(timeout, "timeout")?,
        })
    }
}

#[pymethods]
impl Zrecord {
    #[new]
    #[pyo3(signature = (path, codec = "flate", *, create = true, checksums = None, read_only = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        codec: &str,
        create: bool,
        checksums: Option<bool>,
        read_only: bool,
    ) -> PyResult<Self> {
        let codec = codec_arg(codec)?;
        let options = StoreOptions {
            create,
            checksums: checksums_arg(checksums),
            read_only,
            ..StoreOptions::default()
        };
        let store = py
            .detach(|| Store::open_with(&path, &options))
            .map_err(error::engine)?;
        Ok(Zrecord {
            slot: Mutex::new(Slot::Open(Arc::new(store))),
            path: path.to_string_lossy().into_owned(),
            codec,
        })
    }

    /// Number of live records; they are exactly the indices 0..len.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.shared()?.len())
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Raises ZrecordError when the store's folder is no longer at its path
    /// (moved, removed or replaced by another since it was opened).
    fn check_folder(&self) -> PyResult<()> {
        self.shared()?.check_folder().map_err(error::engine)
    }

    /// Whether this handle only reads: opened with read_only=True, or on
    /// files this process may not write (then append, delete and compact
    /// raise StoreReadOnlyError).
    #[getter]
    fn read_only(&self) -> PyResult<bool> {
        Ok(self.shared()?.read_only())
    }

    /// The store's format version: 1 (what loaderx 0.5.0 reads), or 2 once it
    /// holds a record over V1_MAX_RECORD_LEN (1 MiB).
    #[getter]
    fn version(&self) -> PyResult<u16> {
        Ok(self.shared()?.version())
    }

    /// The default codec of `append`.
    #[getter]
    fn codec(&self) -> &'static str {
        self.codec.name()
    }

    /// Whether `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        matches!(*self.lock(), Slot::Closed)
    }

    /// Flushes every chunk file and meta.zr to stable storage.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.shared()?;
        py.detach(|| store.sync()).map_err(error::engine)
    }

    /// Logical (decoded) byte lengths of records `idxs`, as a uint32 array.
    fn lengths<'py>(
        &self,
        py: Python<'py>,
        idxs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        record_reads::lengths(py, self.shared()?, idxs)
    }

    /// Gathers records `idxs` into `dst`, record k at byte k * stride.
    ///
    /// `dst` is a writable C-contiguous numpy array of any dtype, treated as
    /// bytes. A record longer than `stride`, or a `dst` too small, raises
    /// ZrecordError (code -6) before anything is written. Bytes of a slot
    /// past its record's length are set to zero.
    fn gather(
        &self,
        py: Python<'_>,
        idxs: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        stride: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        record_reads::gather(py, self.shared()?, idxs, dst, stride)
    }

    /// Gathers records `idxs` into a new uint8 array of `len(idxs) * stride`
    /// bytes, record k at byte k * stride, as `gather` does.
    ///
    /// The array's memory is recycled from batches that are no longer
    /// referenced (a few per size, 256 MiB at most), so it comes already
    /// mapped: the fast way to read batch after batch. With `exact`, every
    /// record must be exactly `stride` bytes (InvalidArgumentError, before
    /// anything is read) instead of being zero-padded.
    #[pyo3(signature = (idxs, stride, *, exact = false))]
    fn gather_array<'py>(
        &self,
        py: Python<'py>,
        idxs: &Bound<'py, PyAny>,
        stride: &Bound<'py, PyAny>,
        exact: bool,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        record_reads::gather_array(py, self.shared()?, idxs, stride, exact)
    }

    /// Gathers ragged records: record k at byte offsets[k] of `dst`.
    ///
    /// The destination ranges may come in any order but must not overlap
    /// (ZrecordError, code -6).
    fn gather_var(
        &self,
        py: Python<'_>,
        idxs: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        record_reads::gather_var(py, self.shared()?, idxs, dst, offsets)
    }

    /// Appends `n` records of `item_len` bytes laid out back to back at the
    /// start of `src` (bytes, a numpy array or a contiguous buffer). Returns
    /// the index of the first new record. `level` is the codec's level
    /// (flate 1..=12, zstd -131072..=22; its default when None). `durable=True`
    /// flushes the commit to stable storage before returning. While another handle or thread
    /// appends, the call waits for it, up to `timeout` seconds (StoreBusyError
    /// after that; `float('inf')` waits for ever).
    #[pyo3(signature = (src, n, item_len, codec = None, *, level = None, durable = false, timeout = 60.0))]
    // The Python signature: each argument is one of `append`'s.
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        n: &Bound<'_, PyAny>,
        item_len: &Bound<'_, PyAny>,
        codec: Option<&str>,
        level: Option<&Bound<'_, PyAny>>,
        durable: bool,
        timeout: f64,
    ) -> PyResult<u32> {
        let n: usize = uint(n, "n", usize::MAX as u64)?;
        let item_len: usize = uint(item_len, "item_len", usize::MAX as u64)?;
        let options = self.append_options(codec, level, durable, timeout)?;
        let src = Src::new(src)?;
        let bytes = src.bytes()?;
        let store = self.shared()?;
        py.detach(|| store.append_fixed(bytes, n, item_len, &options))
            .map_err(error::engine)
    }

    /// Appends ragged records: record k is src[offsets[k]:offsets[k] + lens[k]].
    /// Returns the index of the first new record. Waits for other appends
    /// up to `timeout` seconds, as `append` does.
    #[pyo3(signature = (src, offsets, lens, codec = None, *, level = None, durable = false, timeout = 60.0))]
    // The Python signature: each argument is one of `append`'s.
    #[allow(clippy::too_many_arguments)]
    fn append_var(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        lens: &Bound<'_, PyAny>,
        codec: Option<&str>,
        level: Option<&Bound<'_, PyAny>>,
        durable: bool,
        timeout: f64,
    ) -> PyResult<u32> {
        let options = self.append_options(codec, level, durable, timeout)?;
        let offsets = u64s(offsets, "offsets")?;
        let lens = u32s(lens, "lens")?;
        let src = Src::new(src)?;
        let bytes = src.bytes()?;
        let store = self.shared()?;
        py.detach(|| store.append_ragged(bytes, &offsets, &lens, &options))
            .map_err(error::engine)
    }

    /// Deletes records `idxs`; each hole is filled with the current last
    /// record, so survivors may change index. Needs exclusive access: with
    /// the store in use elsewhere (another handle, a gather in another
    /// thread, a DataLoader) it waits up to `timeout` seconds, by default
    /// not at all, then raises StoreBusyError.
    #[pyo3(signature = (idxs, *, timeout = 0.0))]
    fn delete(&self, py: Python<'_>, idxs: &Bound<'_, PyAny>, timeout: f64) -> PyResult<()> {
        let idxs = u64s(idxs, "idxs")?;
        let wait = seconds(timeout, "timeout")?;
        self.exclusive(py, "delete", wait, |store, left| {
            store.delete_within(&idxs, left)
        })
    }

    /// Rewrites the live records densely, reclaiming deleted bytes on disk.
    /// Needs exclusive access, waiting for it as `delete` does.
    #[pyo3(signature = (*, timeout = 0.0))]
    fn compact(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let wait = seconds(timeout, "timeout")?;
        self.exclusive(py, "compact", wait, |store, left| {
            store.compact_within(u64::MAX, left).map(|_| ())
        })
    }

    /// Decodes every record and checks it against its checksum when the
    /// store keeps checksums. Returns a dict: records (int), checksummed
    /// (bool: the store keeps checksums), unchecked (int: records that a
    /// program keeping no checksums, such as loaderx 0.5.0, wrote or moved,
    /// read without a check) and bad, a list of dicts (index, chunk,
    /// offset, reason), one per damaged record. Raises only when the files
    /// cannot be read.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.shared()?;
        let report = py.detach(|| store.verify()).map_err(error::engine)?;
        let bad = pyo3::types::PyList::empty(py);
        for b in &report.bad {
            let entry = PyDict::new(py);
            entry.set_item("index", b.index)?;
            entry.set_item("chunk", b.chunk)?;
            entry.set_item("offset", b.offset)?;
            entry.set_item("reason", &b.reason)?;
            bad.append(entry)?;
        }
        let dict = PyDict::new(py);
        dict.set_item("records", report.records)?;
        dict.set_item("checksummed", report.checksummed)?;
        dict.set_item("unchecked", report.unchecked)?;
        dict.set_item("bad", bad)?;
        Ok(dict)
    }

    /// Storage usage: a dict with records, live_bytes, chunk_bytes and
    /// reclaimable (an upper bound on what compact() frees).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.shared()?;
        let stats = py.detach(|| store.stats());
        let dict = PyDict::new(py);
        dict.set_item("records", stats.records)?;
        dict.set_item("live_bytes", stats.live_bytes)?;
        dict.set_item("chunk_bytes", stats.chunk_bytes)?;
        dict.set_item("reclaimable", stats.reclaimable)?;
        Ok(dict)
    }

    /// Closes the store. Idempotent. A DataLoader still running on the store
    /// keeps it open until the loader closes.
    fn close(&self) -> PyResult<()> {
        let mut slot = self.lock();
        if matches!(*slot, Slot::Busy) {
            // The error is built with the slot unlocked (see `shared`).
            drop(slot);
            return Err(self.unavailable(Unavailable::Busy, "close"));
        }
        let old = std::mem::replace(&mut *slot, Slot::Closed);
        drop(slot);
        drop(old);
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[allow(unused_variables)]
    fn __exit__(
        &self,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &*self.lock() {
            Slot::Open(store) => format!(
                "Zrecord('{}', len={}, codec='{}')",
                self.path,
                store.len(),
                self.codec.name()
            ),
            Slot::Busy => format!("Zrecord('{}', busy)", self.path),
            Slot::Closed => format!("Zrecord('{}', closed)", self.path),
        }
    }
}
