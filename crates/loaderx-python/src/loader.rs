//! The native `Loader` class behind `loaderx.DataLoader`, over the zloader
//! crate: gathering runs on Rust threads, and waiting for a batch releases
//! the GIL.

use std::time::Duration;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use zloader::{LoaderError, LoaderOptions, Stream};

use crate::error;
use crate::sampler::Sampler;
use crate::zrecord::Zrecord;

/// What iterating yields: `(step, indices, buffers)`.
type NativeBatch<'py> = (u64, Bound<'py, PyArray1<u64>>, Bound<'py, PyList>);

/// How long one wait for a batch lasts before checking for signals
/// (Ctrl-C), with the GIL released in between.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Gathers batches of several stores in lockstep on worker threads.
///
/// `stores[i]` holds fixed-size records of `record_lens[i]` bytes; every
/// step of `sampler` (from its current step on) is gathered from every store
/// into fresh buffers by `num_workers` threads, at most `prefetch_size` steps
/// ahead of the consumer. Iterating yields `(step, indices, buffers)`:
/// the step number, its uint64 indices and one flat uint8 array per store,
/// strictly in step order. Ends (StopIteration) once closed. While a loader
/// runs, its stores cannot be deleted from or compacted.
#[pyclass(module = "loaderx._native", name = "Loader", frozen)]
pub struct Loader {
    inner: zloader::Loader,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (stores, record_lens, sampler, num_workers = 4, prefetch_size = 4))]
    fn new(
        py: Python<'_>,
        stores: Vec<Bound<'_, Zrecord>>,
        record_lens: Vec<usize>,
        sampler: PyRef<'_, Sampler>,
        num_workers: usize,
        prefetch_size: usize,
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
            .map(|(store, len)| Ok(Stream::new(store.get().shared()?, len)))
            .collect::<PyResult<Vec<_>>>()?;
        let sampler = sampler.inner.clone();
        let options = LoaderOptions {
            num_workers,
            prefetch: prefetch_size,
        };
        let inner = py
            .detach(|| zloader::Loader::new(streams, sampler, options))
            .map_err(error::loader)?;
        Ok(Loader { inner })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<NativeBatch<'py>>> {
        let batch = loop {
            match py.detach(|| self.inner.next_timeout(WAIT_SLICE)) {
                Ok(Some(batch)) => break batch,
                Ok(None) => py.check_signals()?,
                Err(LoaderError::Closed) => return Ok(None),
                Err(e) => return Err(error::loader(e)),
            }
        };
        // The buffers become numpy arrays without a copy.
        let buffers = batch
            .buffers
            .into_iter()
            .map(|buffer| PyArray1::from_vec(py, buffer));
        Ok(Some((
            batch.step,
            PyArray1::from_vec(py, batch.indices),
            PyList::new(py, buffers)?,
        )))
    }

    /// Stops and joins the worker threads and releases the stores. Returns
    /// once the gathers in flight end. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    /// Whether the loader is closed (or belongs to a parent process).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}
