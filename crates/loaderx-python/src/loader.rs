//! The native `Loader` class behind `loaderx.DataLoader`, over the zloader
//! crate: gathering runs on Rust threads, and waiting for a batch releases
//! the GIL.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use zloader::{Batch, Layout, LoaderError, LoaderOptions, Stream};
use zrecord::RecordSource;

use crate::collection::Collection;
use crate::convert::uint;
use crate::image::ImagePipeline;
use crate::mixture::MixtureSampler;
use crate::sampler::Sampler;
use crate::zrecord::Zrecord;
use crate::{batch_array, error};

/// What iterating yields: `(step, indices, buffers, sources)`.
type NativeBatch<'py> = (
    u64,
    Bound<'py, PyArray1<u64>>,
    Bound<'py, PyList>,
    Option<Bound<'py, PyArray1<i32>>>,
);

/// How long one wait for a batch lasts before checking for signals
/// (Ctrl-C), with the GIL released in between.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Gathers batches of several stores in lockstep on worker threads.
///
/// `stores[i]` holds fixed-size records of `record_lens[i]` bytes, records
/// of any length when `record_lens[i]` is None, or encoded images when it is
/// an ImagePipeline (each decoded into a slot of the pipeline's sample
/// length, delivered like fixed records); every step of
/// `sampler` (from its current step on; its shard of each batch) is gathered
/// from every store by `num_workers` threads (at most one per core) into
/// batch memory recycled from the loader's earlier batches, at most
/// `prefetch_size` steps beyond those being gathered ahead of the consumer.
/// With a MixtureSampler, `stores[i]` is a list of one store per source and
/// the loader starts at `step`. Iterating yields
/// `(step, indices, buffers, sources)`: the step number, its uint64 indices,
/// per store one flat uint8 array (fixed records, back to back at their
/// stride) or a `(bytes, lengths)` pair (variable-length records packed back
/// to back, and their uint32 byte lengths), and for a mixture each sample's
/// int32 source (else None), strictly in step order. The
/// wait for a batch releases the GIL and wakes every 50 ms to run signal
/// handlers (Ctrl-C); a batch that is ready when a handler raises is kept
/// for the next call, so an interrupted wait loses nothing. Ends
/// (StopIteration) once closed, or after the last step of the sampler's
/// finite pass. While a loader runs, its stores cannot be
/// deleted from or compacted.
#[pyclass(module = "loaderx._native", name = "Loader", frozen)]
pub struct Loader {
    inner: zloader::Loader,
    /// A batch taken from the engine whose delivery a signal handler's
    /// exception interrupted: the next call returns it.
    pending: Mutex<Option<Batch>>,
}

impl Loader {
    fn lock_pending(&self) -> MutexGuard<'_, Option<Batch>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next batch, waiting for it with `wait` (else None when it is not
    /// finished yet); None once closed or past the pass's end.
    fn take<'py>(&self, py: Python<'py>, wait: bool) -> PyResult<Option<NativeBatch<'py>>> {
        // (`is_closed` first: it takes no lock in a forked child.)
        let pending = match self.inner.is_closed() {
            true => None,
            false => self.lock_pending().take(),
        };
        let batch = match pending {
            Some(batch) => batch,
            None => loop {
                let slice = if wait { WAIT_SLICE } else { Duration::ZERO };
                match py.detach(|| self.inner.next_timeout(slice)) {
                    Ok(Some(batch)) => break batch,
                    Ok(None) if wait => py.check_signals()?,
                    Ok(None) => return Ok(None),
                    Err(LoaderError::Closed | LoaderError::PassEnded { .. }) => return Ok(None),
                    Err(e) => return Err(error::loader(e)),
                }
            },
        };
        // A signal that arrived while the batch was being made is handled
        // now, while the batch can still be kept, rather than by the
        // interpreter right after this call returns, which would drop it.
        if let Err(e) = py.check_signals() {
            *self.lock_pending() = Some(batch);
            return Err(e);
        }
        // The buffers become numpy arrays without a copy.
        let buffers = PyList::empty(py);
        // A ragged buffer comes with its records' lengths, a blanking image
        // stream's with whether each slot was decoded.
        let marks = batch.lengths.into_iter().zip(batch.decoded);
        for (buffer, (lengths, decoded)) in batch.buffers.into_iter().zip(marks) {
            let bytes = batch_array::into_array(py, buffer)?;
            let mark = match (lengths, decoded) {
                (Some(lengths), _) => Some(PyArray1::from_vec(py, lengths).into_any()),
                (None, Some(decoded)) => Some(PyArray1::from_vec(py, decoded).into_any()),
                (None, None) => None,
            };
            match mark {
                None => buffers.append(bytes)?,
                Some(mark) => buffers.append(PyTuple::new(py, [bytes.into_any(), mark])?)?,
            }
        }
        let sources = batch
            .sources
            .map(|sources| PyArray1::from_vec(py, sources.into_iter().map(|s| s as i32).collect()));
        Ok(Some((
            batch.step,
            PyArray1::from_vec(py, batch.indices),
            buffers,
            sources,
        )))
    }
}

/// The records a stream reads: a `Zrecord`'s store or a `Collection`.
fn record_source(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn RecordSource>> {
    if let Ok(store) = obj.cast::<Zrecord>() {
        return Ok(store.get().shared()?);
    }
    if let Ok(collection) = obj.cast::<Collection>() {
        return Ok(collection.get().shared()?);
    }
    Err(PyTypeError::new_err(format!(
        "a stream reads a Zrecord or a Collection, not {}",
        obj.get_type().name()?
    )))
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (stores, record_lens, sampler, num_workers = 4, prefetch_size = 4, *,
                        step = None, shared_memory = false, held = 0))]
    #[allow(clippy::too_many_arguments)] // Python keywords, one per option.
    fn new(
        py: Python<'_>,
        stores: Vec<Bound<'_, PyAny>>,
        record_lens: Vec<Bound<'_, PyAny>>,
        sampler: &Bound<'_, PyAny>,
        num_workers: usize,
        prefetch_size: usize,
        step: Option<&Bound<'_, PyAny>>,
        shared_memory: bool,
        held: usize,
    ) -> PyResult<Self> {
        if stores.len() != record_lens.len() {
            return Err(PyValueError::new_err(format!(
                "{} stores but {} record lengths",
                stores.len(),
                record_lens.len()
            )));
        }
        let streams = stores
            .iter()
            .zip(record_lens)
            .map(|(stores, len)| {
                // A store or collection, or a mixture's list of them.
                let stores = match record_source(stores) {
                    Ok(source) => vec![source],
                    Err(_) => stores
                        .try_iter()?
                        .map(|store| record_source(&store?))
                        .collect::<PyResult<Vec<_>>>()?,
                };
                let layout = if len.is_none() {
                    Layout::Ragged
                } else if let Ok(pipeline) = len.cast::<ImagePipeline>() {
                    Layout::Image(pipeline.get().inner.clone(), pipeline.get().bad)
                } else {
                    Layout::Fixed(len.extract::<usize>()?)
                };
                Ok(Stream::mixed(stores, layout))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let options = LoaderOptions {
            num_workers,
            prefetch: prefetch_size,
            shared_memory,
            held,
        };
        let inner = if let Ok(mixture) = sampler.cast::<MixtureSampler>() {
            let mixture = mixture.get().inner.clone();
            let first: u64 = match step {
                Some(step) => uint(step, "step", u64::MAX)?,
                None => 0,
            };
            py.detach(|| zloader::Loader::mixed(streams, mixture, first, options))
        } else {
            let mut sampler = sampler.extract::<PyRef<'_, Sampler>>()?.inner.clone();
            if let Some(step) = step {
                sampler.seek(uint(step, "step", u64::MAX)?);
            }
            py.detach(|| zloader::Loader::new(streams, sampler, options))
        }
        .map_err(error::loader)?;
        Ok(Loader {
            inner,
            pending: Mutex::new(None),
        })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<NativeBatch<'py>>> {
        self.take(py, true)
    }

    /// The next batch if it is finished now, else None (also when the
    /// loader is closed or its pass is over, which the next iteration
    /// reports): what a caller with other work in hand takes without
    /// waiting.
    fn next_ready<'py>(&self, py: Python<'py>) -> PyResult<Option<NativeBatch<'py>>> {
        self.take(py, false)
    }

    /// Stops and joins the worker threads and releases the stores. Returns
    /// once the gathers in flight end. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
        // Free a kept batch's memory, but keep its step: it was never
        // delivered, and `next_step` says so.
        if let Some(batch) = &mut *self.lock_pending() {
            batch.indices = Vec::new();
            batch.sources = None;
            batch.buffers = Vec::new();
            batch.lengths = Vec::new();
            batch.decoded = Vec::new();
        }
    }

    /// The step that the next iteration yields (a step whose gather failed
    /// counts as yielded once its error has been raised): the consumer's
    /// position, not the workers', which run ahead.
    #[getter]
    fn next_step(&self) -> u64 {
        match &*self.lock_pending() {
            Some(batch) => batch.step,
            None => self.inner.next_step(),
        }
    }

    /// Whether the loader is closed (or belongs to a parent process).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}
