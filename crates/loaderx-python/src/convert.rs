//! Argument checking: turning Python index sequences and numpy arrays into
//! the slices the engine takes, with a clear exception for anything else.
//!
//! Byte views of arrays go through rust-numpy's borrow checker, so two calls
//! cannot write into (or read from while writing) the same array at once,
//! even with the GIL released.

use numpy::prelude::*;
use numpy::{
    BorrowError, PyArray1, PyArrayDescr, PyReadonlyArray1, PyReadwriteArray1, PyUntypedArray,
};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    PyModule::import(py, intern!(py, "numpy"))
}

fn dtype_str(dtype: &Bound<'_, PyArrayDescr>) -> String {
    dtype
        .getattr(intern!(dtype.py(), "str"))
        .and_then(|s| s.extract::<String>())
        .unwrap_or_else(|_| "?".into())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Record indices (or offsets) from anything numpy turns into a 1-D integer
/// array: a list, a range, an integer array. Negative values are an
/// `IndexError`; non-integers a `TypeError`.
pub(crate) fn u64s(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let py = obj.py();
    if let Ok(arr) = obj.cast::<PyArray1<u64>>() {
        return Ok(arr.try_readonly()?.as_array().iter().copied().collect());
    }
    let arr = numpy(py)?.call_method1(intern!(py, "asarray"), (obj,))?;
    let arr = arr.cast_into::<PyUntypedArray>()?;
    if arr.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a one-dimensional sequence of integers, not a {}-dimensional {}",
            arr.ndim(),
            type_name(obj)
        )));
    }
    if arr.is_empty() {
        return Ok(Vec::new());
    }
    let dtype = arr.dtype();
    match dtype.kind() {
        b'u' => {
            let wide = arr.call_method1(intern!(py, "astype"), (numpy::dtype::<u64>(py),))?;
            let wide = wide.cast_into::<PyArray1<u64>>()?;
            Ok(wide.try_readonly()?.as_array().iter().copied().collect())
        }
        b'i' => {
            let wide = arr.call_method1(intern!(py, "astype"), (numpy::dtype::<i64>(py),))?;
            let wide = wide.cast_into::<PyArray1<i64>>()?;
            let wide = wide.try_readonly()?;
            let view = wide.as_array();
            if let Some((k, &v)) = view.iter().enumerate().find(|(_, &v)| v < 0) {
                return Err(PyIndexError::new_err(format!(
                    "{what}[{k}] is {v}: negative values are not allowed"
                )));
            }
            Ok(view.iter().map(|&v| v as u64).collect())
        }
        b'b' => Err(PyTypeError::new_err(format!(
            "{what} must be integers, not booleans (use numpy.flatnonzero for a mask)"
        ))),
        _ => Err(PyTypeError::new_err(format!(
            "{what} must be integers, not {}",
            dtype_str(&dtype)
        ))),
    }
}

/// Record lengths: like [`u64s`], each also at most `u32::MAX`.
pub(crate) fn u32s(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u32>> {
    u64s(obj, what)?
        .into_iter()
        .enumerate()
        .map(|(k, v)| {
            u32::try_from(v).map_err(|_| {
                PyValueError::new_err(format!("{what}[{k}] is {v}, over the 32-bit limit"))
            })
        })
        .collect()
}

fn check_array<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a numpy.ndarray, not {}",
            type_name(obj)
        ))
    })?;
    check_dtype(&arr.dtype(), what)?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} must be C-contiguous (use numpy.ascontiguousarray)"
        )));
    }
    Ok(arr.clone())
}

fn check_dtype(dtype: &Bound<'_, PyArrayDescr>, what: &str) -> PyResult<()> {
    if dtype.has_object() {
        return Err(PyTypeError::new_err(format!(
            "{what} holds Python objects ({}); only plain-data dtypes are byte buffers",
            dtype_str(dtype)
        )));
    }
    Ok(())
}

/// The array's bytes as a flat `uint8` view (no copy; the array is
/// C-contiguous).
fn byte_view<'py>(arr: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let py = arr.py();
    let flat = arr.call_method1(intern!(py, "reshape"), (-1,))?;
    let bytes = flat.call_method1(intern!(py, "view"), (numpy::dtype::<u8>(py),))?;
    Ok(bytes.cast_into::<PyArray1<u8>>()?)
}

/// A destination: a writable, C-contiguous numpy array of any plain dtype,
/// borrowed exclusively as bytes.
pub(crate) struct Dst<'py>(PyReadwriteArray1<'py, u8>);

impl<'py> Dst<'py> {
    pub(crate) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Dst<'py>> {
        let arr = check_array(obj, "dst")?;
        let borrowed = byte_view(&arr)?.try_readwrite().map_err(|e| match e {
            BorrowError::NotWriteable => PyValueError::new_err("dst is read-only"),
            e => PyValueError::new_err(format!("dst is in use by another call: {e}")),
        })?;
        Ok(Dst(borrowed))
    }

    pub(crate) fn bytes(&mut self) -> PyResult<&mut [u8]> {
        Ok(self.0.as_slice_mut()?)
    }
}

/// A source: `bytes`, a C-contiguous numpy array of any plain dtype, or any
/// other object exporting a contiguous buffer (`bytearray`, `memoryview`),
/// read as bytes.
pub(crate) enum Src<'py> {
    Bytes(Bound<'py, PyBytes>),
    Array(PyReadonlyArray1<'py, u8>),
}

impl<'py> Src<'py> {
    pub(crate) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Src<'py>> {
        let py = obj.py();
        if let Ok(bytes) = obj.cast::<PyBytes>() {
            return Ok(Src::Bytes(bytes.clone()));
        }
        let arr = if obj.cast::<PyUntypedArray>().is_ok() {
            check_array(obj, "src")?
        } else {
            // numpy keeps the buffer exported while the array lives, so a
            // bytearray cannot be resized under the engine.
            let arr = numpy(py)?
                .call_method1(intern!(py, "frombuffer"), (obj, numpy::dtype::<u8>(py)))
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "src must be bytes, a numpy.ndarray or a contiguous buffer, not {}",
                        type_name(obj)
                    ))
                })?;
            check_array(&arr, "src")?
        };
        let borrowed = byte_view(&arr)?.try_readonly().map_err(|e| {
            PyValueError::new_err(format!("src is being written by another call: {e}"))
        })?;
        Ok(Src::Array(borrowed))
    }

    pub(crate) fn bytes(&self) -> PyResult<&[u8]> {
        match self {
            Src::Bytes(b) => Ok(b.as_bytes()),
            Src::Array(a) => Ok(a.as_slice()?),
        }
    }
}

/// A duration in seconds from a Python float: finite and non-negative, or
/// infinity for no limit; `ValueError` naming the argument otherwise.
pub(crate) fn seconds(value: f64, what: &str) -> PyResult<std::time::Duration> {
    if value == f64::INFINITY {
        return Ok(std::time::Duration::MAX);
    }
    std::time::Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a number of seconds >= 0 (or float('inf')), not {value}"
        ))
    })
}

/// A non-negative Python int (anything with `__index__`, not a bool) of at
/// most `max`, as `T`: a `TypeError` or `ValueError` that names the argument
/// `what` and its range, instead of the bare "can't convert negative int to
/// unsigned" or "int too big to convert" of the default conversion.
pub(crate) fn uint<T: TryFrom<u64>>(obj: &Bound<'_, PyAny>, what: &str, max: u64) -> PyResult<T> {
    let py = obj.py();
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not bool"
        )));
    }
    let index = obj.call_method0(intern!(py, "__index__")).map_err(|_| {
        PyTypeError::new_err(format!("{what} must be an int, not {}", type_name(obj)))
    })?;
    match index.extract::<u64>() {
        Ok(v) if v <= max => T::try_from(v).map_err(|_| out_of(what, max, &index)),
        _ => Err(out_of(what, max, &index)),
    }
}

/// A Python int that fits an `i32` (a compression level): a `TypeError` or
/// `ValueError` naming the argument `what` otherwise; the engine checks the
/// range that the codec allows.
pub(crate) fn int32(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i32> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not bool"
        )));
    }
    let index = obj
        .call_method0(intern!(obj.py(), "__index__"))
        .map_err(|_| {
            PyTypeError::new_err(format!("{what} must be an int, not {}", type_name(obj)))
        })?;
    index
        .extract::<i32>()
        .map_err(|_| PyValueError::new_err(format!("{what} {index} is out of range")))
}

fn out_of(what: &str, max: u64, value: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!("{what} must be an int in 0..={max}, not {value}"))
}
