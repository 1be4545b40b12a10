//! The `Collection` and `CollectionWriter` classes: many stores in one
//! folder read as one (zrecord's `collection/`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::{AppendOptions, Collection as Inner, CollectionWriter as InnerWriter};
use zrecord::{ShardLimits, StoreOptions};

use crate::convert::{int32, seconds, u32s, u64s, uint, Src};
use crate::error;
use crate::record_reads;
use crate::zrecord::{checksums_arg, codec_arg};

/// The published shards of a sharded collection, read as one sequence of
/// records: the shards' records in the order the collection's manifest
/// lists them, as of the opening. With `shards`, only those (by folder
/// name): a host's part, the others not opened at all.
///
/// Reads as `Zrecord` does (`lengths`, `gather`, `gather_array`,
/// `gather_var`); a shard's store is opened the first time a read needs
/// it. Writing is `CollectionWriter`'s. Until it is closed, deletes from
/// its shards by other handles are refused (they would renumber rows under
/// it), as a delete from a store is while the store is open elsewhere.
#[pyclass(module = "loaderx._native", name = "Collection", frozen)]
pub struct Collection {
    inner: Mutex<Option<Arc<Inner>>>,
    path: String,
}

impl Collection {
    pub(crate) fn shared(&self) -> PyResult<Arc<Inner>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        inner.ok_or_else(|| error::closed(&self.path))
    }
}

#[pymethods]
impl Collection {
    #[new]
    #[pyo3(signature = (path, *, shards = None, checksums = None, read_only = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        shards: Option<Vec<String>>,
        checksums: Option<bool>,
        read_only: bool,
    ) -> PyResult<Self> {
        let options = StoreOptions {
            checksums: checksums_arg(checksums),
            read_only,
            ..StoreOptions::default()
        };
        let inner = py
            .detach(|| Inner::open_shards(&path, &options, shards.as_deref()))
            .map_err(error::engine)?;
        Ok(Collection {
            inner: Mutex::new(Some(Arc::new(inner))),
            path: path.to_string_lossy().into_owned(),
        })
    }

    /// The published shards' folder names, in order, from the collection's
    /// manifest alone (no shard is opened).
    #[staticmethod]
    fn published(py: Python<'_>, path: PathBuf) -> PyResult<Vec<String>> {
        py.detach(|| Inner::published(&path)).map_err(error::engine)
    }

    /// Lists `shards` (folder names of durable shards that writers made,
    /// `CollectionWriter.sync()`, and that are not listed yet) at the end of
    /// the collection at `path`, as one new manifest generation; returns it.
    #[staticmethod]
    fn publish(py: Python<'_>, path: PathBuf, shards: Vec<String>) -> PyResult<u64> {
        py.detach(|| Inner::publish(&path, &shards))
            .map_err(error::engine)
    }

    /// Removes the shards in the collection at `path` that writers given
    /// `prefix` made and that it does not list; returns their names. For the
    /// shards of a distributed write's dead tasks, once every task is done.
    #[staticmethod]
    fn remove_unpublished(py: Python<'_>, path: PathBuf, prefix: &str) -> PyResult<Vec<String>> {
        py.detach(|| Inner::remove_unpublished(&path, prefix))
            .map_err(error::engine)
    }

    /// Records in all published shards, as of the opening.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.shared()?.len() as usize)
    }

    /// The collection's folder.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Raises ZrecordError when the collection's folder is no longer at its
    /// path (moved, removed or replaced by another since it was opened).
    fn check_folder(&self) -> PyResult<()> {
        self.shared()?.check_folder().map_err(error::engine)
    }

    /// The manifest generation read (0 when nothing was published).
    #[getter]
    fn generation(&self) -> PyResult<u64> {
        Ok(self.shared()?.generation())
    }

    /// The published shards' folder names, in order.
    #[getter]
    fn shards(&self) -> PyResult<Vec<String>> {
        Ok(self.shared()?.shard_names().map(str::to_owned).collect())
    }

    /// The index of each shard's first record, then the length.
    #[getter]
    fn starts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(PyArray1::from_slice(py, self.shared()?.starts()))
    }

    /// Logical byte lengths of records `idxs`, as a uint32 array.
    fn lengths<'py>(
        &self,
        py: Python<'py>,
        idxs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        record_reads::lengths(py, self.shared()?, idxs)
    }

    /// Gathers records `idxs` into `dst`, record k at byte k * stride, the
    /// rest of each slot zeroed, as `Zrecord.gather` does.
    fn gather(
        &self,
        py: Python<'_>,
        idxs: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        stride: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        record_reads::gather(py, self.shared()?, idxs, dst, stride)
    }

    /// Records `idxs` in a new uint8 array, as `Zrecord.gather_array`.
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

    /// Ragged records: record k at byte offsets[k] of `dst`, the ranges not
    /// overlapping.
    fn gather_var(
        &self,
        py: Python<'_>,
        idxs: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        record_reads::gather_var(py, self.shared()?, idxs, dst, offsets)
    }

    /// Lets go of the shards' stores (a loader reading them keeps them).
    fn close(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Whether `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[allow(unused_variables)]
    fn __exit__(
        &self,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> bool {
        self.close();
        false
    }
}

/// Appends to new shards of its own in a collection's folder (created when
/// missing) and publishes them: readers see none of its records before
/// `publish()` and all of them after, whatever happens to the writer
/// between. A shard holds at most `shard_records` records and about
/// `shard_bytes` bytes (a bigger record gets one of its own); a call goes
/// whole into the current shard when it fits there, else into new ones.
/// With `prefix`, its shards are named `{prefix}-0`, `{prefix}-1`, ... (hex),
/// so that writers given the same prefix, limits and appends (a table's
/// streams) make shards of the same names and lengths. With `durable=False`
/// nothing is synced: a crash of the process loses nothing published, a
/// power loss may.
#[pyclass(module = "loaderx._native", name = "CollectionWriter", frozen)]
pub struct CollectionWriter {
    inner: Mutex<InnerWriter>,
    codec: zrecord::Codec,
}

impl CollectionWriter {
    fn options(
        &self,
        codec: Option<&str>,
        level: Option<&Bound<'_, PyAny>>,
        durable: bool,
        timeout: f64,
    ) -> PyResult<AppendOptions> {
        Ok(AppendOptions {
            codec: codec.map(codec_arg).transpose()?.unwrap_or(self.codec),
            level: level.map(|l| int32(l, "level")).transpose()?,
            durable,
            wait: seconds(timeout, "timeout")?,
        })
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, InnerWriter> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn append_records(
        &self,
        py: Python<'_>,
        records: &[&[u8]],
        options: &AppendOptions,
    ) -> PyResult<()> {
        let mut guard = self.writer();
        let writer = &mut *guard;
        py.detach(|| writer.append(records, options))
            .map_err(error::engine)
    }
}

#[pymethods]
impl CollectionWriter {
    #[new]
    #[pyo3(signature = (path, codec = "flate", *, shard_records = None, shard_bytes = None,
                        checksums = None, prefix = None, durable = true))]
    #[allow(clippy::too_many_arguments)] // Python keywords, one per option.
    fn new(
        py: Python<'_>,
        path: PathBuf,
        codec: &str,
        shard_records: Option<&Bound<'_, PyAny>>,
        shard_bytes: Option<&Bound<'_, PyAny>>,
        checksums: Option<bool>,
        prefix: Option<&str>,
        durable: bool,
    ) -> PyResult<Self> {
        let codec = codec_arg(codec)?;
        let mut limits = ShardLimits::default();
        if let Some(n) = shard_records {
            limits.max_records = uint(n, "shard_records", zrecord::MAX_RECORDS as u64)?;
        }
        if let Some(n) = shard_bytes {
            limits.max_bytes = uint(n, "shard_bytes", u64::MAX)?;
        }
        if limits.max_records == 0 || limits.max_bytes == 0 {
            return Err(PyValueError::new_err(
                "shard_records and shard_bytes must be at least 1",
            ));
        }
        let options = StoreOptions {
            checksums: checksums_arg(checksums),
            ..StoreOptions::default()
        };
        let inner = py
            .detach(|| {
                let mut writer = InnerWriter::new(&path, &options, limits)?;
                if !durable {
                    writer = writer.without_sync();
                }
                match prefix {
                    Some(prefix) => writer.with_prefix(prefix),
                    None => Ok(writer),
                }
            })
            .map_err(error::engine)?;
        Ok(CollectionWriter {
            inner: Mutex::new(inner),
            codec,
        })
    }

    /// Appends `n` records of `item_len` bytes laid out back to back at the
    /// start of `src`, as `Zrecord.append` does (`timeout`: how long an
    /// append to a published shard waits for another handle's).
    #[pyo3(signature = (src, n, item_len, codec = None, *, level = None, durable = false,
                        timeout = 60.0))]
    #[allow(clippy::too_many_arguments)] // Python keywords, one per option.
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
    ) -> PyResult<()> {
        let n: usize = uint(n, "n", usize::MAX as u64)?;
        let item_len: usize = uint(item_len, "item_len", usize::MAX as u64)?;
        let options = self.options(codec, level, durable, timeout)?;
        let src = Src::new(src)?;
        let bytes = src.bytes()?;
        let needed = n.checked_mul(item_len).filter(|&b| b <= bytes.len());
        if needed.is_none() {
            return Err(PyValueError::new_err(format!(
                "{n} records of {item_len} bytes do not fit in a {}-byte source",
                bytes.len()
            )));
        }
        let records: Vec<&[u8]> = (0..n).map(|k| &bytes[k * item_len..][..item_len]).collect();
        self.append_records(py, &records, &options)
    }

    /// Appends ragged records: record k is src[offsets[k]:offsets[k] + lens[k]].
    #[pyo3(signature = (src, offsets, lens, codec = None, *, level = None, durable = false,
                        timeout = 60.0))]
    #[allow(clippy::too_many_arguments)] // Python keywords, one per option.
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
    ) -> PyResult<()> {
        let options = self.options(codec, level, durable, timeout)?;
        let offsets = u64s(offsets, "offsets")?;
        let lens = u32s(lens, "lens")?;
        if offsets.len() != lens.len() {
            return Err(PyValueError::new_err(format!(
                "{} offsets but {} lengths",
                offsets.len(),
                lens.len()
            )));
        }
        let src = Src::new(src)?;
        let bytes = src.bytes()?;
        let mut records = Vec::with_capacity(lens.len());
        for (k, (&at, &len)) in offsets.iter().zip(&lens).enumerate() {
            let end = at
                .checked_add(u64::from(len))
                .filter(|&e| e <= bytes.len() as u64);
            if end.is_none() {
                return Err(PyValueError::new_err(format!(
                    "record {k} at {at}+{len} lies outside the {}-byte source",
                    bytes.len()
                )));
            }
            records.push(&bytes[at as usize..at as usize + len as usize]);
        }
        self.append_records(py, &records, &options)
    }

    /// Makes this writer's shards durable and lists the new ones at the end
    /// of the collection, as one new manifest generation; returns it.
    fn publish(&self, py: Python<'_>) -> PyResult<u64> {
        let mut guard = self.writer();
        let writer = &mut *guard;
        py.detach(|| writer.publish()).map_err(error::engine)
    }

    /// Ends the current shard (made durable): the next append starts a new
    /// one.
    fn end_shard(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.writer();
        let writer = &mut *guard;
        py.detach(|| writer.end_shard()).map_err(error::engine)
    }

    /// Makes this writer's shards durable without publishing them, for
    /// another process to publish (`Collection.publish`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.writer();
        let writer = &mut *guard;
        py.detach(|| writer.sync()).map_err(error::engine)
    }

    /// Removes the shards of this writer that the collection does not list,
    /// after a write that failed before its publish; its published shards
    /// stay. Not for shards another process is to publish.
    fn discard(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.writer();
        let writer = &mut *guard;
        py.detach(|| writer.discard()).map_err(error::engine)
    }

    /// The folder names of the shards this writer made, in order.
    #[getter]
    fn shards(&self) -> Vec<String> {
        self.writer().shards().to_vec()
    }
}
