//! The reads `Zrecord` and `Collection` share: their Python methods of the
//! same names are these, on the records of either.

use std::sync::Arc;

use numpy::PyArray1;
use pyo3::prelude::*;
use zrecord::{BatchBuffer, RecordSource};

use crate::batch_array;
use crate::convert::{u64s, uint, Dst};
use crate::error;

/// Logical (decoded) byte lengths of records `idxs`, as a uint32 array.
pub(crate) fn lengths<'py>(
    py: Python<'py>,
    source: Arc<dyn RecordSource>,
    idxs: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let idxs = u64s(idxs, "idxs")?;
    let lengths = py.detach(|| source.lengths(&idxs)).map_err(error::engine)?;
    Ok(PyArray1::from_vec(py, lengths))
}

/// Records `idxs` into `dst`, record k at byte k * stride, the rest of each
/// slot zeroed.
pub(crate) fn gather(
    py: Python<'_>,
    source: Arc<dyn RecordSource>,
    idxs: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    stride: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let stride: usize = uint(stride, "stride", usize::MAX as u64)?;
    let idxs = u64s(idxs, "idxs")?;
    let mut dst = Dst::new(dst)?;
    let dst = dst.bytes()?;
    py.detach(|| source.gather(&idxs, dst, stride))
        .map_err(error::engine)
}

/// Records `idxs` in a new uint8 array of `len(idxs) * stride` bytes, in
/// recycled batch memory: zero-padded as `gather` does, or with `exact`
/// each exactly `stride` bytes long.
pub(crate) fn gather_array<'py>(
    py: Python<'py>,
    source: Arc<dyn RecordSource>,
    idxs: &Bound<'py, PyAny>,
    stride: &Bound<'py, PyAny>,
    exact: bool,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let stride: usize = uint(stride, "stride", usize::MAX as u64)?;
    let idxs = u64s(idxs, "idxs")?;
    let out_of_memory = |bytes: String| {
        error::kind_error(
            error::kind::MEMORY,
            format!(
                "{}: cannot allocate {bytes} bytes for a batch",
                source.path().display()
            ),
        )
    };
    let bytes = idxs
        .len()
        .checked_mul(stride)
        .ok_or_else(|| out_of_memory(format!("{} x {stride}", idxs.len())))?;
    let mut buffer = BatchBuffer::new(bytes).ok_or_else(|| out_of_memory(bytes.to_string()))?;
    py.detach(|| match exact {
        true => source.gather_exact(&idxs, &mut buffer, stride),
        false => source.gather(&idxs, &mut buffer, stride),
    })
    .map_err(error::engine)?;
    batch_array::into_array(py, buffer)
}

/// Ragged records: record k at byte offsets[k] of `dst`, the ranges not
/// overlapping.
pub(crate) fn gather_var(
    py: Python<'_>,
    source: Arc<dyn RecordSource>,
    idxs: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    offsets: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let idxs = u64s(idxs, "idxs")?;
    let offsets = u64s(offsets, "offsets")?;
    let mut dst = Dst::new(dst)?;
    let dst = dst.bytes()?;
    py.detach(|| source.gather_ragged(&idxs, dst, &offsets))
        .map_err(error::engine)
}
