//! Batches written into a transform process's arena and read back, for
//! `transform_processes.py`: the usual batch (a dict of arrays with `str`
//! keys and built-in numeric dtypes) crosses in one call on each side
//! instead of a walk in Python and a pickle. Any other batch travels as a
//! pickle, which that file writes.
//!
//! Both ends of a message are this module, in the parent and in one of its
//! processes, so the message layout is defined here alone. In the arena,
//! behind the arrays copied there (each at a multiple of [`ALIGN`]), the
//! message starts at a multiple of `ALIGN`; all numbers little-endian:
//!
//! | bytes | what |
//! |---|---|
//! | 4 | the number of arrays |
//! | 4 | the number of integers that follow (the protocol's own, such as the places the process dropped) |
//! | 4 | flags: bit 0 says that the last array is the batch's per-sample seeds, not one of its keys |
//! | 4 | zero |
//! | 8 each | the integers |
//! | per array | its offset (8 bytes) in its memory, the memory's number (8: [`WRITTEN`], [`CAME_IN`], or a shared batch buffer's `shared_id + SHARED`), numpy's type number of its dtype (4), its number of dimensions `n` (4), the length of its key in UTF-8 (4), zero (4), its shape (8 each, `n` of them), the key, zeros to a multiple of 8 |

use std::ffi::c_void;
use std::ptr;

use numpy::npyffi::{
    self, npy_intp, NpyTypes, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE, PY_ARRAY_API,
};
use numpy::{
    PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

use crate::batch_array::BatchMemory;

/// Where an array packed into an arena starts: a cache line, so that the
/// copies run at full speed and every dtype is aligned.
pub(crate) const ALIGN: usize = 64;
/// The memory of an array that its message's writer copied into its arena.
pub(crate) const WRITTEN: u64 = 0;
/// The memory of a result's array that lies in the arena its batch came in.
pub(crate) const CAME_IN: u64 = 1;
/// The first number of a shared batch buffer (`shared_id + SHARED`).
pub(crate) const SHARED: u64 = 2;

/// Bytes of the message's fixed start, and of an array's fixed part.
const START: usize = 16;
const ARRAY: usize = 32;
/// numpy's most dimensions (NPY_MAXDIMS of numpy 2).
const MAX_DIMS: usize = 64;
/// Bit 0 of the flags.
const WITH_SEEDS: u32 = 1;

/// numpy's type numbers of the dtypes a message carries: the fixed-size
/// numeric ones (bool to complex long double, and half). Their descriptors
/// are numpy's singletons, the same object for the same type number in
/// every process, so the number alone says everything about them.
fn numeric(type_num: i32) -> bool {
    (0..=16).contains(&type_num) || type_num == 23
}

/// numpy's descriptor of `type_num` (a new reference).
fn descr_of(py: Python<'_>, type_num: i32) -> PyResult<Bound<'_, PyArrayDescr>> {
    // SAFETY: a C API call with the GIL held; it returns a new reference
    // or NULL with an exception set.
    unsafe {
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, type_num);
        Ok(Bound::from_owned_ptr_or_err(py, descr.cast())?.cast_into_unchecked())
    }
}

/// The type number of `array`'s dtype when it is numpy's own descriptor of
/// a numeric type: not a byte-swapped one, one with metadata, nor a
/// datetime with its unit, which differ from the singleton.
fn plain_type(py: Python<'_>, array: &Bound<'_, PyUntypedArray>) -> PyResult<Option<i32>> {
    let dtype = array.dtype();
    let num = dtype.num();
    if !numeric(num) {
        return Ok(None);
    }
    Ok((descr_of(py, num)?.as_ptr() == dtype.as_ptr()).then_some(num))
}

fn address(array: &Bound<'_, PyUntypedArray>) -> usize {
    crate::batch_array::array_address(array)
}

/// The bytes `array`'s elements take.
fn byte_len(array: &Bound<'_, PyUntypedArray>) -> usize {
    array.len() * array.dtype().itemsize()
}

/// The shared batch buffer that `array` views, when there is one: the array
/// made of the buffer (whose base is its `BatchMemory`), its number in
/// messages, and its descriptor.
fn shared_root<'py>(
    array: &Bound<'py, PyUntypedArray>,
) -> Option<(Bound<'py, PyUntypedArray>, u64, i64)> {
    let mut a = array.clone();
    loop {
        // SAFETY: a live array's `base` field, a borrowed reference or NULL.
        let base = unsafe { (*a.as_array_ptr()).fields.base };
        if base.is_null() {
            return None;
        }
        // SAFETY: `base` is a live object that `a` holds.
        let base = unsafe { Bound::from_borrowed_ptr(a.py(), base) };
        if let Ok(memory) = base.cast::<BatchMemory>() {
            let memory = memory.get();
            return Some((a, memory.shared_id()? + SHARED, memory.fd()?));
        }
        a = base.cast_into::<PyUntypedArray>().ok()?;
    }
}

/// One array of a batch being packed.
struct Packed<'py> {
    key: Option<Bound<'py, PyString>>,
    array: Bound<'py, PyUntypedArray>,
    type_num: i32,
    /// Its memory's number and its offset there.
    place: (u64, usize),
    /// Whether it is copied into the arena at that offset.
    copied: bool,
}

fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Where `array` lies in the shared batch buffer it views, `(offset,
/// number)`, when it is contiguous and inside that buffer's bytes; the
/// buffer goes into `shared` (number to `(array, descriptor)`). What
/// `pack_batch` places on the parent's side, and `transform_processes.py`
/// in the batches it pickles.
#[pyfunction]
pub(crate) fn shared_place(
    array: &Bound<'_, PyUntypedArray>,
    shared: &Bound<'_, PyDict>,
) -> PyResult<Option<(usize, u64)>> {
    let nbytes = byte_len(array);
    if nbytes == 0 || !array.is_c_contiguous() {
        return Ok(None);
    }
    let Some((root, place, fd)) = shared_root(array) else {
        return Ok(None);
    };
    let (at, start) = (address(array), address(&root));
    if at < start || at + nbytes > start + byte_len(&root) {
        return Ok(None);
    }
    shared.set_item(place, (root, fd))?;
    Ok(Some((at - start, place)))
}

/// Packs a dict of arrays, its seeds and `ints` into `arena` as one message
/// (module doc), for the process whose memories other than its arena lie
/// at `spans` (`(number, start address, end address)`), or, with `spans`
/// None, in the shared batch buffers that the arrays view (the parent's
/// side). Returns `(offset, length, shared)`, where `shared` maps the
/// shared batch buffers used to `(array, descriptor)` (None with `spans`);
/// the arena's size needed when `arena` is too small (or None), nothing
/// written; or None when the batch is not such a dict, for a pickle.
#[pyfunction]
#[pyo3(signature = (arena, batch, seeds, ints, spans=None))]
pub(crate) fn pack_batch<'py>(
    py: Python<'py>,
    arena: Option<&Bound<'py, PyArray1<u8>>>,
    batch: &Bound<'py, PyAny>,
    seeds: Option<&Bound<'py, PyAny>>,
    ints: Vec<u64>,
    spans: Option<Vec<(u64, usize, usize)>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Ok(batch) = batch.cast_exact::<PyDict>() else {
        return Ok(None);
    };
    // The shared buffers found, where there are no spans to look in.
    let shared = spans.is_none().then(|| PyDict::new(py));
    let mut arrays = Vec::with_capacity(batch.len() + 1);
    let mut end = 0;
    let mut frame = START + 8 * ints.len();
    let items = batch.iter().map(|(k, v)| (Some(k), v));
    for (key, value) in items.chain(seeds.map(|s| (None, s.clone()))) {
        let key = match key.map(|k| k.cast_into_exact::<PyString>()) {
            Some(Ok(k)) => Some(k),
            Some(Err(_)) => return Ok(None),
            None => None,
        };
        // A subclass (a masked array, say) is more than its bytes: pickled.
        // SAFETY: a type check of a live object.
        if unsafe { npyffi::PyArray_CheckExact(py, value.as_ptr()) } == 0 {
            return Ok(None);
        }
        let array = value.cast_into::<PyUntypedArray>()?;
        let Some(type_num) = plain_type(py, &array)? else {
            return Ok(None);
        };
        let nbytes = byte_len(&array);
        let at = address(&array);
        let found = if nbytes == 0 {
            Some((WRITTEN, 0))
        } else if let Some(shared) = &shared {
            shared_place(&array, shared)?.map(|(offset, place)| (place, offset))
        } else if !array.is_c_contiguous() {
            None
        } else {
            // `spans` is given where `shared` is not.
            spans
                .iter()
                .flatten()
                .find(|&&(_, start, stop)| start <= at && at + nbytes <= stop)
                .map(|&(place, start, _)| (place, at - start))
        };
        let (place, copied) = match found {
            Some(place) => (place, false),
            None => {
                let offset = aligned(end);
                end = offset + nbytes;
                ((WRITTEN, offset), true)
            }
        };
        let key_len = key.as_ref().map_or(Ok(0), |k| k.to_str().map(str::len))?;
        frame += ARRAY + 8 * array.ndim() + key_len.div_ceil(8) * 8;
        arrays.push(Packed {
            key,
            array,
            type_num,
            place,
            copied,
        });
    }
    let at = aligned(end);
    let needed = at + frame;
    let Some(arena) = arena.filter(|a| a.len() >= needed) else {
        return Ok(Some(PyInt::new(py, needed).into_any()));
    };
    let base = writable_bytes(arena.as_untyped())?;
    for packed in arrays.iter().filter(|p| p.copied) {
        // SAFETY: the arena is writable and at least `needed` bytes long,
        // which covers every copy's offset and length.
        unsafe { copy_into(py, &packed.array, base.add(packed.place.1))? };
    }
    // SAFETY: as above, for the message's bytes.
    let message = unsafe { std::slice::from_raw_parts_mut(base.add(at), frame) };
    write_message(message, &ints, &arrays, seeds.is_some())?;
    let shared = shared.map_or_else(|| py.None().into_bound(py), Bound::into_any);
    Ok(Some(
        PyTuple::new(
            py,
            [
                at.into_pyobject(py)?.into_any(),
                frame.into_pyobject(py)?.into_any(),
                shared,
            ],
        )?
        .into_any(),
    ))
}

/// The writable bytes of a contiguous uint8 array (an arena's view).
fn writable_bytes(array: &Bound<'_, PyUntypedArray>) -> PyResult<*mut u8> {
    // SAFETY: a live array's flags.
    let flags = unsafe { (*array.as_array_ptr()).fields.flags };
    if flags & NPY_ARRAY_WRITEABLE == 0 || !array.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "a batch arena must be a writable contiguous array",
        ));
    }
    Ok(address(array) as *mut u8)
}

/// Copies `array`'s elements, in C order, to `dest`.
///
/// # Safety
/// `dest` must be valid for the array's byte length and aligned for its
/// dtype.
unsafe fn copy_into(
    py: Python<'_>,
    array: &Bound<'_, PyUntypedArray>,
    dest: *mut u8,
) -> PyResult<()> {
    let nbytes = byte_len(array);
    if array.is_c_contiguous() {
        // SAFETY: a contiguous array's data is `nbytes` long; a result may
        // view the arena it is copied into, hence a move, not a copy.
        unsafe { ptr::copy(address(array) as *const u8, dest, nbytes) };
        return Ok(());
    }
    let dest = new_array(
        py,
        &array.dtype(),
        array.shape(),
        dest.cast(),
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE,
    )?;
    // SAFETY: two live arrays of the same shape and dtype.
    let status =
        unsafe { PY_ARRAY_API.PyArray_CopyInto(py, dest.as_array_ptr(), array.as_array_ptr()) };
    if status < 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// A new array of `descr` and `shape` over `data` (numpy's own memory
/// where `data` is null).
fn new_array<'py>(
    py: Python<'py>,
    descr: &Bound<'py, PyArrayDescr>,
    shape: &[usize],
    data: *mut c_void,
    flags: i32,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let mut dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
    // SAFETY: the descriptor's reference is stolen, so one is added for
    // it; `data` is null or, by the callers, valid for the array's bytes
    // while its base (set by the caller) or the caller's copy lives.
    unsafe {
        ffi::Py_INCREF(descr.as_ptr());
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            descr.as_dtype_ptr(),
            dims.len() as i32,
            dims.as_mut_ptr(),
            ptr::null_mut(),
            data,
            flags,
            ptr::null_mut(),
        );
        Ok(Bound::from_owned_ptr_or_err(py, array)?.cast_into_unchecked())
    }
}

fn write_message(out: &mut [u8], ints: &[u64], arrays: &[Packed<'_>], seeds: bool) -> PyResult<()> {
    let mut w = Writer { out, at: 0 };
    w.u32(arrays.len() as u32);
    w.u32(ints.len() as u32);
    w.u32(if seeds { WITH_SEEDS } else { 0 });
    w.u32(0);
    for &i in ints {
        w.u64(i);
    }
    for p in arrays {
        let key = p.key.as_ref().map_or(Ok(""), |k| k.to_str())?;
        w.u64(p.place.1 as u64);
        w.u64(p.place.0);
        w.u32(p.type_num as u32);
        w.u32(p.array.ndim() as u32);
        w.u32(key.len() as u32);
        w.u32(0);
        for &d in p.array.shape() {
            w.u64(d as u64);
        }
        w.bytes(key.as_bytes());
        w.pad();
    }
    Ok(())
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn pad(&mut self) {
        let to = self.at.div_ceil(8) * 8;
        self.out[self.at..to].fill(0);
        self.at = to;
    }
}

/// Reads a message, checking every length against the bytes it has.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> PyResult<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "batch message cut short at byte {} of {}",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }
    fn u32(&mut self) -> PyResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> PyResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// One array of a message as read.
struct Entry<'a> {
    offset: usize,
    place: u64,
    type_num: i32,
    shape: Vec<usize>,
    key: &'a str,
}

struct Message<'a> {
    ints: Vec<u64>,
    seeds: bool,
    arrays: Vec<Entry<'a>>,
}

fn read_message(bytes: &[u8]) -> PyResult<Message<'_>> {
    let mut r = Reader { bytes, at: 0 };
    let count = r.u32()? as usize;
    let ints = r.u32()? as usize;
    let seeds = r.u32()? & WITH_SEEDS != 0;
    r.u32()?;
    let ints = (0..ints).map(|_| r.u64()).collect::<PyResult<Vec<_>>>()?;
    let mut arrays = Vec::new();
    for _ in 0..count {
        let offset = r.u64()? as usize;
        let place = r.u64()?;
        let type_num = r.u32()? as i32;
        let ndim = r.u32()? as usize;
        let key_len = r.u32()? as usize;
        r.u32()?;
        if !numeric(type_num) || ndim > MAX_DIMS {
            return Err(PyValueError::new_err(format!(
                "batch message has an array of type {type_num} with {ndim} dimensions"
            )));
        }
        let shape = (0..ndim)
            .map(|_| r.u64().map(|d| d as usize))
            .collect::<PyResult<Vec<_>>>()?;
        let key = std::str::from_utf8(r.take(key_len)?)
            .map_err(|_| PyValueError::new_err("batch message has a key that is not UTF-8"))?;
        r.take(key_len.div_ceil(8) * 8 - key_len)?;
        arrays.push(Entry {
            offset,
            place,
            type_num,
            shape,
            key,
        });
    }
    if seeds && arrays.is_empty() {
        return Err(PyValueError::new_err(
            "batch message has seeds but no array",
        ));
    }
    Ok(Message {
        ints,
        seeds,
        arrays,
    })
}

/// The message of `length` bytes at `offset` in `arena`.
fn message_bytes<'a>(
    arena: &'a Bound<'_, PyArray1<u8>>,
    offset: usize,
    length: usize,
) -> PyResult<&'a [u8]> {
    let len = arena.len();
    if offset.checked_add(length).is_none_or(|end| end > len) {
        return Err(PyValueError::new_err(format!(
            "batch message at {offset} of {length} bytes lies past its arena's {len}"
        )));
    }
    // SAFETY: in bounds of a live contiguous array (an arena's view),
    // which the borrow of `arena` keeps alive; the writer wrote it before
    // its message was sent and does not touch it until the reply.
    Ok(unsafe {
        std::slice::from_raw_parts(
            (address(arena.as_untyped()) as *const u8).add(offset),
            length,
        )
    })
}

/// The numbers of the shared batch buffers a message's arrays lie in, each
/// once, in the order of the arrays: what a process must have mapped
/// before it unpacks the message.
#[pyfunction]
pub(crate) fn message_places(
    arena: &Bound<'_, PyArray1<u8>>,
    offset: usize,
    length: usize,
) -> PyResult<Vec<u64>> {
    let message = read_message(message_bytes(arena, offset, length)?)?;
    let mut places: Vec<u64> = Vec::new();
    for e in &message.arrays {
        let place = e.place;
        if place >= SHARED && !places.contains(&place) {
            places.push(place);
        }
    }
    Ok(places)
}

/// What [`unpack_batch`] gives: the batch, its seeds, the integers.
type Unpacked<'py> = (
    Bound<'py, PyDict>,
    Option<Bound<'py, PyUntypedArray>>,
    Vec<u64>,
);

/// Unpacks the message of `length` bytes at `offset` in `arena`: `(batch,
/// seeds, ints)`, its arrays views of `memories` (its memories by number:
/// contiguous uint8 arrays) or, with `copy`, copies of those that lie in
/// the arenas (which are reused).
#[pyfunction]
pub(crate) fn unpack_batch<'py>(
    py: Python<'py>,
    arena: &Bound<'py, PyArray1<u8>>,
    offset: usize,
    length: usize,
    memories: &Bound<'py, PyDict>,
    copy: bool,
) -> PyResult<Unpacked<'py>> {
    let message = read_message(message_bytes(arena, offset, length)?)?;
    let batch = PyDict::new(py);
    let mut seeds = None;
    let last = message.arrays.len().wrapping_sub(1);
    for (i, e) in message.arrays.iter().enumerate() {
        let array = unpack_array(py, e, memories, copy)?;
        if message.seeds && i == last {
            seeds = Some(array);
        } else {
            batch.set_item(e.key, array)?;
        }
    }
    Ok((batch, seeds, message.ints))
}

fn unpack_array<'py>(
    py: Python<'py>,
    e: &Entry<'_>,
    memories: &Bound<'py, PyDict>,
    copy: bool,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let descr = descr_of(py, e.type_num)?;
    let nbytes = e
        .shape
        .iter()
        .try_fold(descr.itemsize(), |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            PyValueError::new_err(format!("batch message: array {:?} is too large", e.key))
        })?;
    if nbytes == 0 {
        return new_array(py, &descr, &e.shape, ptr::null_mut(), 0);
    }
    let memory = memories
        .get_item(e.place)?
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "batch message: array {:?} lies in memory {} that is not mapped",
                e.key, e.place
            ))
        })?
        .cast_into::<PyUntypedArray>()?;
    if !memory.is_c_contiguous() || memory.dtype().itemsize() != 1 {
        return Err(PyValueError::new_err(
            "a batch memory must be a contiguous uint8 array",
        ));
    }
    if e.offset
        .checked_add(nbytes)
        .is_none_or(|end| end > memory.len())
    {
        return Err(PyValueError::new_err(format!(
            "batch message: array {:?} at {} of {nbytes} bytes lies past its memory's {}",
            e.key,
            e.offset,
            memory.len()
        )));
    }
    // SAFETY: in bounds of a live contiguous array, checked above.
    let data = unsafe { (address(&memory) as *mut u8).add(e.offset) };
    if copy && e.place < SHARED {
        let array = new_array(py, &descr, &e.shape, ptr::null_mut(), 0)?;
        // SAFETY: a new contiguous array of `nbytes`, and `nbytes` in
        // bounds of the memory.
        unsafe { ptr::copy_nonoverlapping(data, address(&array) as *mut u8, nbytes) };
        return Ok(array);
    }
    // SAFETY: a live array's flags.
    let writable = unsafe { (*memory.as_array_ptr()).fields.flags } & NPY_ARRAY_WRITEABLE;
    let array = new_array(
        py,
        &descr,
        &e.shape,
        data.cast(),
        NPY_ARRAY_C_CONTIGUOUS | writable,
    )?;
    // SAFETY: the reference given is stolen; the view keeps its memory
    // alive through it, as `np.ndarray(shape, dtype, memory, offset)` does.
    let status =
        unsafe { PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_array_ptr(), memory.into_ptr()) };
    if status < 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(array)
}
