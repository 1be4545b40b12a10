//! Error conversion: every engine error becomes a `ZrecordError` carrying
//! loaderx 0.5.0's numeric code; loader and sampler errors become the
//! matching built-in exception.

use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{create_exception, intern};

create_exception!(
    loaderx,
    ZrecordError,
    PyRuntimeError,
    "An error reported by the Zrecord store engine.\n\n`code` is loaderx 0.5.0's numeric error code: -1 out of memory, -2 I/O,\n-3 index out of range, -4 record too large, -5 store full, -6 buffer too\nsmall (or destination overlap), -7 corrupt record, -8 not a store (or a newer\nformat version); new in 0.6: -9 invalid argument, -10 store busy (delete or\ncompact need the only open handle; appends one at a time), -11 any other engine error."
);

/// The numeric codes of `ZrecordError.code`.
pub(crate) mod code {
    pub const OUT_OF_MEMORY: i32 = -1;
    pub const IO: i32 = -2;
    pub const INDEX_OUT_OF_RANGE: i32 = -3;
    pub const RECORD_TOO_LARGE: i32 = -4;
    pub const STORE_FULL: i32 = -5;
    pub const BUFFER_TOO_SMALL: i32 = -6;
    pub const CORRUPT_RECORD: i32 = -7;
    pub const NOT_A_STORE: i32 = -8;
    pub const INVALID_ARGUMENT: i32 = -9;
    pub const BUSY: i32 = -10;
    pub const OTHER: i32 = -11;
}

/// The code of an engine error.
pub(crate) fn code_of(e: &zrecord::Error) -> i32 {
    use zrecord::Error as E;
    match e {
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::OutOfMemory => {
            code::OUT_OF_MEMORY
        }
        E::Io { .. } => code::IO,
        E::NotAStore { .. } | E::UnsupportedVersion { .. } => code::NOT_A_STORE,
        E::IndexOutOfRange { .. } => code::INDEX_OUT_OF_RANGE,
        E::RecordTooLarge { .. } => code::RECORD_TOO_LARGE,
        E::StoreFull { .. } => code::STORE_FULL,
        E::BufferTooSmall { .. } | E::DestinationOverlap { .. } => code::BUFFER_TOO_SMALL,
        E::CorruptRecord { .. } => code::CORRUPT_RECORD,
        E::InvalidArgument { .. } => code::INVALID_ARGUMENT,
        E::Busy { .. } => code::BUSY,
        _ => code::OTHER,
    }
}

/// A `ZrecordError` with `message` and `code`.
pub(crate) fn zrecord_error(message: String, code: i32) -> PyErr {
    Python::attach(|py| {
        let err = ZrecordError::new_err(message);
        match err.value(py).setattr(intern!(py, "code"), code) {
            Ok(()) => err,
            Err(e) => e,
        }
    })
}

/// Converts an engine error; its message names the store and the record.
pub(crate) fn engine(e: zrecord::Error) -> PyErr {
    zrecord_error(e.to_string(), code_of(&e))
}

/// The store is closed: `ValueError`, as for a closed Python file.
pub(crate) fn closed(path: &str) -> PyErr {
    PyValueError::new_err(format!("{path}: operation on a closed Zrecord store"))
}

/// Another user holds the store while an exclusive operation was asked for,
/// or an exclusive operation is running while another was asked for.
pub(crate) fn busy(path: &str, what: &str) -> PyErr {
    zrecord_error(
        format!(
            "{path}: store is busy: {what} needs exclusive access, but the store is in use \
             (a gather in another thread, a DataLoader, or a delete/compact in progress)"
        ),
        code::BUSY,
    )
}

/// Converts a loader error. `Closed` is handled by the caller (it ends the
/// iteration).
pub(crate) fn loader(e: zloader::LoaderError) -> PyErr {
    use zloader::LoaderError as E;
    match e {
        E::Gather {
            source,
            step,
            stream,
        } => zrecord_error(
            format!("loader step {step}, stream {stream}: {source}"),
            code_of(&source),
        ),
        E::InvalidArgument(_) | E::StreamTooShort { .. } => PyValueError::new_err(e.to_string()),
        E::Spawn(_) => PyOSError::new_err(e.to_string()),
        E::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// Converts a sampler error: a bad argument.
pub(crate) fn sampler(e: zsampler::SamplerError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
