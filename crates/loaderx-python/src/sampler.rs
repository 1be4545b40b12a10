//! The `Sampler` class and its `Sampler.Mode` enum, over the zsampler crate.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use zsampler::{LastBatch, Mode};

use crate::convert::uint;
use crate::error;

/// Largest batch: a store never holds more records than this, and the limit
/// keeps a mistyped batch size from asking for terabytes of indices.
pub(crate) const MAX_BATCH_SIZE: usize = zrecord::MAX_RECORDS;

/// How a Sampler maps steps to indices: SEQUENTIAL (0) a sliding window over
/// the circular index space, IID (1) independent uniform draws with
/// replacement, SHUFFLE (2) a fresh permutation every epoch, without
/// replacement. Compares equal to its integer value.
#[pyclass(module = "loaderx._native", name = "Mode", eq, eq_int, frozen)]
#[derive(Clone, Copy, PartialEq, Eq)]
#[allow(clippy::upper_case_acronyms)]
pub enum PyMode {
    SEQUENTIAL = 0,
    IID = 1,
    SHUFFLE = 2,
}

impl From<PyMode> for Mode {
    fn from(m: PyMode) -> Mode {
        match m {
            PyMode::SEQUENTIAL => Mode::Sequential,
            PyMode::IID => Mode::Iid,
            PyMode::SHUFFLE => Mode::Shuffle,
        }
    }
}

impl From<Mode> for PyMode {
    fn from(m: Mode) -> PyMode {
        match m {
            Mode::Sequential => PyMode::SEQUENTIAL,
            Mode::Iid => PyMode::IID,
            Mode::Shuffle => PyMode::SHUFFLE,
        }
    }
}

/// The name of a mode in `Sampler.Mode`.
pub(crate) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Sequential => "SEQUENTIAL",
        Mode::Iid => "IID",
        Mode::Shuffle => "SHUFFLE",
    }
}

/// A mode given as `Sampler.Mode` or as its integer value.
pub(crate) fn mode_arg(obj: &Bound<'_, PyAny>) -> PyResult<Mode> {
    if let Ok(mode) = obj.cast::<PyMode>() {
        return Ok((*mode.get()).into());
    }
    let bad = || {
        PyValueError::new_err(format!(
            "mode must be Sampler.Mode.SEQUENTIAL (0), IID (1) or SHUFFLE (2), not {obj}"
        ))
    };
    let value: u32 = obj.extract().map_err(|_| bad())?;
    Mode::from_u32(value).ok_or_else(bad)
}

/// A step-based index generator over 0..length: endless, or a finite pass.
///
/// Iterating yields one uint64 array of indices per step, forever, or with
/// `epochs` for the `steps` steps of that many epochs (SEQUENTIAL or
/// SHUFFLE; every index once per epoch), the last batch shorter
/// (`last_batch="partial"`) or padded with the pass's last index
/// (`"pad"`; `valid_len(step)` says how many lead it). The batch
/// of a step is a pure function of (length, batch_size, mode, seed, shard,
/// step), so `batch(step)` gives any step directly and `seek(step)` resumes
/// a run exactly.
///
/// `batch_size` is the global batch size. With `shard=(index, count)` the
/// sampler yields only the index-th of count equal, contiguous parts of each
/// global batch (`local_batch_size = batch_size // count` indices; the
/// batch size must be divisible by count), so count processes see every
/// index of a step exactly once between them.
#[pyclass(module = "loaderx._native", name = "Sampler")]
pub struct Sampler {
    pub(crate) inner: zsampler::Sampler,
}

#[pymethods]
impl Sampler {
    #[new]
    // `seed` is checked by `uint`, so it arrives as any object; the text
    // signature keeps showing its default.
    #[pyo3(
        signature = (length, batch_size, mode, seed = None, *, shard = None, epochs = None,
                     last_batch = "partial"),
        text_signature = "(length, batch_size, mode, seed=42, *, shard=None, epochs=None, \
                          last_batch='partial')"
    )]
    fn new(
        length: &Bound<'_, PyAny>,
        batch_size: &Bound<'_, PyAny>,
        mode: &Bound<'_, PyAny>,
        seed: Option<&Bound<'_, PyAny>>,
        shard: Option<(u64, u64)>,
        epochs: Option<&Bound<'_, PyAny>>,
        last_batch: &str,
    ) -> PyResult<Self> {
        let length: u64 = uint(length, "length", u64::MAX)?;
        let batch_size: usize = uint(batch_size, "batch_size", usize::MAX as u64)?;
        let seed: u64 = match seed {
            Some(seed) => uint(seed, "seed", u64::MAX)?,
            None => 42,
        };
        if batch_size > MAX_BATCH_SIZE {
            return Err(PyValueError::new_err(format!(
                "batch_size {batch_size} is over the limit of {MAX_BATCH_SIZE} \
                 (the most records a store can hold)"
            )));
        }
        let mut inner = zsampler::Sampler::new(length, batch_size, mode_arg(mode)?, seed)
            .map_err(error::sampler)?;
        if let Some((index, count)) = shard {
            inner = inner.with_shard(index, count).map_err(error::sampler)?;
        }
        let last = match last_batch {
            "partial" => LastBatch::Partial,
            "pad" => LastBatch::Pad,
            other => {
                return Err(PyValueError::new_err(format!(
                    "last_batch must be 'partial' or 'pad', not {other:?}"
                )))
            }
        };
        if let Some(epochs) = epochs {
            let epochs = uint(epochs, "epochs", u64::MAX)?;
            inner = inner.with_epochs(epochs, last).map_err(error::sampler)?;
        }
        Ok(Sampler { inner })
    }

    /// The sampling modes.
    #[classattr]
    #[pyo3(name = "Mode")]
    fn mode_class(py: Python<'_>) -> Bound<'_, PyType> {
        py.get_type::<PyMode>()
    }

    /// Size of the index space.
    #[getter]
    fn length(&self) -> u64 {
        self.inner.length()
    }

    /// The global batch size: indices per step over all shards.
    #[getter]
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    /// Indices per batch of this shard: batch_size // shard count.
    #[getter]
    fn local_batch_size(&self) -> usize {
        self.inner.local_batch_size()
    }

    /// This sampler's shard, as (index, count); (0, 1) when unsharded.
    #[getter]
    fn shard(&self) -> (u64, u64) {
        (self.inner.shard_index(), self.inner.shard_count())
    }

    /// The sampling mode.
    #[getter]
    fn mode(&self) -> PyMode {
        self.inner.mode().into()
    }

    /// The seed (unused by SEQUENTIAL).
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    /// The step the next iteration produces.
    #[getter]
    fn step(&self) -> u64 {
        self.inner.step()
    }

    /// The epochs of a finite pass; None when endless.
    #[getter]
    fn epochs(&self) -> Option<u64> {
        self.inner.epochs()
    }

    /// How a finite pass's last batch ends: 'partial' or 'pad'; None when
    /// endless.
    #[getter]
    fn last_batch(&self) -> Option<&'static str> {
        self.inner.last_batch().map(|last| match last {
            LastBatch::Partial => "partial",
            LastBatch::Pad => "pad",
        })
    }

    /// The steps of a finite pass (the same on every shard); None when
    /// endless.
    #[getter]
    fn steps(&self) -> Option<u64> {
        self.inner.steps()
    }

    /// How many of this shard's indices at `step` belong to the pass (the
    /// local batch size but at the last step of a finite pass and past it).
    fn valid_len(&self, step: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self.inner.valid_len(uint(step, "step", u64::MAX)?))
    }

    /// One uint64 seed per index of `batch(step)`: a hash of (seed, step,
    /// the index's position in the global batch), the same whichever shard
    /// or worker asks.
    fn sample_seeds<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let step: u64 = uint(step, "step", u64::MAX)?;
        Ok(PyArray1::from_vec(py, self.inner.sample_seeds(step)))
    }

    /// The batch of `step`, without moving the iterator.
    fn batch<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let step: u64 = uint(step, "step", u64::MAX)?;
        Ok(PyArray1::from_vec(py, self.inner.batch(step)))
    }

    /// Moves the iterator so that the next batch is that of `step`.
    fn seek(&mut self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.seek(uint(step, "step", u64::MAX)?);
        Ok(())
    }

    /// The batch of the current step, then advances (as loaderx 0.5.0's
    /// `Sampler.next()`; iterating does the same).
    fn next<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        PyArray1::from_vec(py, self.inner.next_batch())
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyArray1<u64>>> {
        use std::iter::Iterator;
        Iterator::next(&mut self.inner).map(|batch| PyArray1::from_vec(py, batch))
    }

    fn __repr__(&self) -> String {
        let mode = mode_name(self.inner.mode());
        let shard = match (self.inner.shard_index(), self.inner.shard_count()) {
            (_, 1) => String::new(),
            (index, count) => format!(", shard=({index}, {count})"),
        };
        let pass = match (self.inner.epochs(), self.last_batch()) {
            (Some(epochs), Some(last)) => format!(", epochs={epochs}, last_batch='{last}'"),
            _ => String::new(),
        };
        format!(
            "Sampler(length={}, batch_size={}, mode=Sampler.Mode.{mode}, seed={}{shard}{pass}, \
             step={})",
            self.inner.length(),
            self.inner.batch_size(),
            self.inner.seed(),
            self.inner.step()
        )
    }
}
