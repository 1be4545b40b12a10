//! The `MixtureSampler` class, over zsampler's `Mixture`.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zsampler::{MixtureSource, Proportions};

use crate::convert::uint;
use crate::error;
use crate::sampler::{mode_arg, mode_name, MAX_BATCH_SIZE};

/// What `batch` returns: each sample's source, and its index in it.
type SourcesAndIndices<'py> = (Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u64>>);

/// The index generator of a weighted mixture of sources.
///
/// Source `j` has `lengths[j]` indices drawn in its own order (`modes[j]`,
/// its own epochs); each step's `batch_size` positions are dealt to the
/// sources by `weights` (only their ratios matter): with
/// `proportions="exact"` every batch holds each source's weighted count,
/// rounded, never drifting; with `"drawn"` the counts of a batch are a
/// random draw (each window of 2^20 positions holds the exact ones).
/// `schedule`, a list of `(step, weights)` with increasing steps above 0,
/// changes the weights from those steps on. Every
/// step is a pure function of the configuration, so `batch(step)` gives any
/// step directly. `shard=(index, count)` keeps this process's part of each
/// global batch, as for a Sampler.
#[pyclass(module = "loaderx._native", name = "MixtureSampler", frozen)]
pub struct MixtureSampler {
    pub(crate) inner: zsampler::Mixture,
}

#[pymethods]
impl MixtureSampler {
    #[new]
    // `seed` is checked by `uint`; the text signature shows its default.
    #[pyo3(
        signature = (lengths, modes, weights, batch_size, seed = None, *, shard = None,
                     proportions = "exact", schedule = None),
        text_signature = "(lengths, modes, weights, batch_size, seed=42, *, shard=None, \
                          proportions='exact', schedule=None)"
    )]
    // One argument per parameter of the Python signature.
    #[allow(clippy::too_many_arguments)]
    fn new(
        lengths: Vec<u64>,
        modes: Vec<Bound<'_, PyAny>>,
        weights: Vec<f64>,
        batch_size: &Bound<'_, PyAny>,
        seed: Option<&Bound<'_, PyAny>>,
        shard: Option<(u64, u64)>,
        proportions: &str,
        schedule: Option<Vec<(u64, Vec<f64>)>>,
    ) -> PyResult<Self> {
        if lengths.len() != modes.len() {
            return Err(PyValueError::new_err(format!(
                "{} lengths but {} modes",
                lengths.len(),
                modes.len()
            )));
        }
        let batch_size: usize = uint(batch_size, "batch_size", MAX_BATCH_SIZE as u64)?;
        let seed: u64 = match seed {
            Some(seed) => uint(seed, "seed", u64::MAX)?,
            None => 42,
        };
        let proportions = match proportions {
            "exact" => Proportions::Exact,
            "drawn" => Proportions::Drawn,
            other => {
                return Err(PyValueError::new_err(format!(
                    "proportions must be 'exact' or 'drawn', not {other:?}"
                )))
            }
        };
        let sources = lengths
            .iter()
            .zip(&modes)
            .map(|(&length, mode)| {
                Ok(MixtureSource {
                    length,
                    mode: mode_arg(mode)?,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let mut inner = zsampler::Mixture::new(&sources, &weights, batch_size, seed, proportions)
            .map_err(error::sampler)?;
        if let Some(schedule) = schedule {
            inner = inner.with_schedule(&schedule).map_err(error::sampler)?;
        }
        if let Some((index, count)) = shard {
            inner = inner.with_shard(index, count).map_err(error::sampler)?;
        }
        Ok(MixtureSampler { inner })
    }

    /// Each source's length.
    #[getter]
    fn lengths(&self) -> Vec<u64> {
        self.inner.lengths()
    }

    /// Each source's mode, as ints (Sampler.Mode values).
    #[getter]
    fn modes(&self) -> Vec<u32> {
        self.inner.modes().iter().map(|m| m.as_u32()).collect()
    }

    /// The weights as used: integers in the ratios of those given.
    #[getter]
    fn weights(&self) -> Vec<u64> {
        self.inner.weights().to_vec()
    }

    /// The weight changes as used: (step, integer weights) for each.
    #[getter]
    fn schedule(&self) -> Vec<(u64, Vec<u64>)> {
        self.inner.schedule()
    }

    /// 'exact' or 'drawn'.
    #[getter]
    fn proportions(&self) -> &'static str {
        match self.inner.proportions() {
            Proportions::Exact => "exact",
            Proportions::Drawn => "drawn",
        }
    }

    /// The global batch size.
    #[getter]
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    /// Samples per batch of this shard.
    #[getter]
    fn local_batch_size(&self) -> usize {
        self.inner.local_batch_size()
    }

    /// This sampler's shard, as (index, count).
    #[getter]
    fn shard(&self) -> (u64, u64) {
        self.inner.shard()
    }

    /// The seed.
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    /// This shard's part of `step`: (sources, indices), an int32 array of
    /// each sample's source and a uint64 array of its index in that source.
    fn batch<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<SourcesAndIndices<'py>> {
        let batch = self.inner.batch(uint(step, "step", u64::MAX)?);
        let sources = batch.sources.iter().map(|&s| s as i32).collect();
        Ok((
            PyArray1::from_vec(py, sources),
            PyArray1::from_vec(py, batch.indices),
        ))
    }

    /// One uint64 seed per sample of `batch(step)` (see Sampler.sample_seeds).
    fn sample_seeds<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let step: u64 = uint(step, "step", u64::MAX)?;
        Ok(PyArray1::from_vec(py, self.inner.sample_seeds(step)))
    }

    /// How many of the first `positions` positions (over all shards) go to
    /// each source.
    fn counts(&self, positions: u128) -> Vec<u128> {
        self.inner.counts(positions)
    }

    fn __repr__(&self) -> String {
        let modes: Vec<&str> = self.inner.modes().into_iter().map(mode_name).collect();
        let shard = match self.inner.shard() {
            (_, 1) => String::new(),
            (index, count) => format!(", shard=({index}, {count})"),
        };
        format!(
            "MixtureSampler(lengths={:?}, modes={modes:?}, weights={:?}, batch_size={}, seed={}, \
             proportions='{}'{shard})",
            self.inner.lengths(),
            self.inner.weights(),
            self.inner.batch_size(),
            self.inner.seed(),
            self.proportions(),
        )
    }
}
