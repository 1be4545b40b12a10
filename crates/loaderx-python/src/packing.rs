//! The `pack` function, over zsampler's packing.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zsampler::{LongSamples, PackMethod};

/// Places samples of `lengths` tokens into rows of `row_length`: each
/// piece into the first row with room (`method="first-fit"`) or the
/// fullest one with room (`"best-fit"`), a sample longer than a row cut
/// into pieces (`long="split"`) or left out (`"drop"`). Returns a dict:
/// `rows` (how many), `dropped` (the samples left out) and, one entry per
/// piece in placement order, uint32 arrays `sample`, `start` (its first
/// token in the sample), `length`, `row`, `offset` (its first token in the
/// row) and `segment` (its number in the row, from 1).
#[pyfunction]
#[pyo3(signature = (lengths, row_length, method = "first-fit", long = "split"))]
pub(crate) fn pack<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, u32>,
    row_length: u32,
    method: &str,
    long: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let method = match method {
        "first-fit" => PackMethod::FirstFit,
        "best-fit" => PackMethod::BestFit,
        other => {
            return Err(PyValueError::new_err(format!(
                "method must be 'first-fit' or 'best-fit', not {other:?}"
            )))
        }
    };
    let long = match long {
        "split" => LongSamples::Split,
        "drop" => LongSamples::Drop,
        other => {
            return Err(PyValueError::new_err(format!(
                "long must be 'split' or 'drop', not {other:?}"
            )))
        }
    };
    if row_length == 0 {
        return Err(PyValueError::new_err("row_length must be at least 1"));
    }
    let lengths = lengths.as_slice()?.to_vec();
    let packed = py.detach(|| zsampler::pack(&lengths, row_length, method, long));
    let out = PyDict::new(py);
    out.set_item("rows", packed.rows)?;
    out.set_item("dropped", PyArray1::from_vec(py, packed.dropped))?;
    let column =
        |f: fn(&zsampler::Piece) -> u32| -> Vec<u32> { packed.pieces.iter().map(f).collect() };
    out.set_item("sample", PyArray1::from_vec(py, column(|p| p.sample)))?;
    out.set_item("start", PyArray1::from_vec(py, column(|p| p.start)))?;
    out.set_item("length", PyArray1::from_vec(py, column(|p| p.len)))?;
    out.set_item("row", PyArray1::from_vec(py, column(|p| p.row)))?;
    out.set_item("offset", PyArray1::from_vec(py, column(|p| p.offset)))?;
    out.set_item("segment", PyArray1::from_vec(py, column(|p| p.segment)))?;
    Ok(out)
}
