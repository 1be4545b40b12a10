//! Batch buffers handed to Python as numpy arrays, without a copy.
//!
//! The array views the buffer's memory and holds a small owner object as
//! its numpy `base`; when the last array or view of the batch goes away,
//! the owner drops the buffer, which goes back to the recycler it came
//! from (its loader's, or zrecord's shared one) for the next batch.

use numpy::ndarray::ArrayView1;
use numpy::{PyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use zrecord::BatchBuffer;

/// Keeps a batch's memory alive for the arrays that view it.
#[pyclass(module = "loaderx._native", name = "BatchMemory", frozen)]
pub struct BatchMemory {
    buffer: BatchBuffer,
}

#[pymethods]
impl BatchMemory {
    /// The descriptor of the shared memory file whose start holds these
    /// bytes (a loader's with ``shared_memory=True``), for a worker process
    /// to map; None for private memory. Open while this object lives.
    #[getter]
    pub(crate) fn fd(&self) -> Option<i64> {
        #[cfg(unix)]
        return self.buffer.shared_fd().map(i64::from);
        #[cfg(not(unix))]
        return None;
    }

    /// A number naming that shared memory file, the same for every batch
    /// recycled from it and never given to another file of this process
    /// (a worker process keeps its mapping by it); None for private memory.
    #[getter]
    pub(crate) fn shared_id(&self) -> Option<u64> {
        self.buffer.shared_id()
    }
}

/// The address of `array`'s first byte: where in a shared mapping an array
/// lies, without building `__array_interface__` (a dict) for each array of
/// each batch.
#[pyfunction]
pub(crate) fn array_address(array: &Bound<'_, PyUntypedArray>) -> usize {
    // SAFETY: a live array object's struct, read for its data pointer.
    unsafe { (*array.as_array_ptr()).fields.data as usize }
}

/// A writable 1-D uint8 array over `buffer`'s bytes.
pub(crate) fn into_array(py: Python<'_>, buffer: BatchBuffer) -> PyResult<Bound<'_, PyArray1<u8>>> {
    let (ptr, len) = (buffer.as_ptr(), buffer.len());
    let owner = Bound::new(py, BatchMemory { buffer })?;
    // SAFETY: `ptr` is valid for `len` bytes for as long as `owner` lives,
    // and nothing moves or frees them before: the owner is frozen, and
    // becomes the array's base, which numpy keeps until the array and
    // every view of it are gone.
    unsafe {
        let view = ArrayView1::from_shape_ptr(len, ptr);
        Ok(PyArray1::borrow_from_array(&view, owner.into_any()))
    }
}
