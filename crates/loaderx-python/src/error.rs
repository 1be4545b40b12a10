//! Error conversion: every engine error becomes a subclass of
//! `ZrecordError` carrying loaderx 0.5.0's numeric code; each subclass also
//! derives from the built-in exception a Python user would catch (an index
//! out of range is both a `ZrecordError` with code -3 and an `IndexError`).
//! Loader and sampler errors become the matching built-in exception.

use pyo3::exceptions::{
    PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyPermissionError, PyRuntimeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::{create_exception, intern};

create_exception!(
    loaderx,
    ZrecordError,
    PyRuntimeError,
    "An error reported by the Zrecord store engine.\n\n`code` is loaderx 0.5.0's numeric error code: -1 out of memory, -2 I/O,\n-3 index out of range, -4 record too large, -5 store full, -6 buffer too\nsmall (or destination overlap), -7 corrupt record, -8 not a store (or a newer\nformat version); new in 0.6: -9 invalid argument, -10 store busy (delete or\ncompact need the only open handle), -11 any other engine error. Each kind\nis a subclass (ZrecordIndexError, StoreBusyError, ...)."
);

/// One kind of engine error as a Python class: its name, the built-in
/// exception it also derives from (besides `ZrecordError`, or its parent
/// kind), its code and its docstring. The classes are made at import
/// (`add_kinds`), in this order, so a parent comes before its children.
struct Kind {
    name: &'static str,
    /// A kind of this table it derives from instead of `ZrecordError`.
    parent: Option<usize>,
    builtin: Option<fn(Python<'_>) -> Bound<'_, PyType>>,
    code: i32,
    doc: &'static str,
}

/// Indices into [`KINDS`].
pub(crate) mod kind {
    pub const MEMORY: usize = 0;
    pub const IO: usize = 1;
    pub const INDEX: usize = 2;
    pub const TOO_LARGE: usize = 3;
    pub const FULL: usize = 4;
    pub const BUFFER: usize = 5;
    pub const CORRUPT: usize = 6;
    pub const NOT_A_STORE: usize = 7;
    pub const NOT_FOUND: usize = 8;
    pub const INVALID: usize = 9;
    pub const BUSY: usize = 10;
    pub const READ_ONLY: usize = 11;
    pub const FORKED: usize = 12;
}

const KINDS: [Kind; 13] = [
    Kind {
        name: "StoreMemoryError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyMemoryError>()),
        code: code::OUT_OF_MEMORY,
        doc: "Memory for a batch or an operation could not be allocated (code -1).",
    },
    Kind {
        name: "StoreIOError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyOSError>()),
        code: code::IO,
        doc: "The operating system refused a file operation of the store (code -2); `errno` \
              is the system's error number (errno.ENOSPC: the disk is full).",
    },
    Kind {
        name: "ZrecordIndexError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyIndexError>()),
        code: code::INDEX_OUT_OF_RANGE,
        doc: "A record or sample index at or past the end of the store (code -3).",
    },
    Kind {
        name: "RecordTooLargeError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyValueError>()),
        code: code::RECORD_TOO_LARGE,
        doc: "A record to append is larger than MAX_RECORD_LEN (code -4).",
    },
    Kind {
        name: "StoreFullError",
        parent: None,
        builtin: None,
        code: code::STORE_FULL,
        doc: "An append would take the store past its record or chunk limit (code -5).",
    },
    Kind {
        name: "BufferTooSmallError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyValueError>()),
        code: code::BUFFER_TOO_SMALL,
        doc: "A destination cannot hold the records asked for, or two of its ranges \
              overlap (code -6).",
    },
    Kind {
        name: "CorruptStoreError",
        parent: None,
        builtin: None,
        code: code::CORRUPT_RECORD,
        doc: "A stored record does not decode to its logical bytes or fails its \
              checksum (code -7).",
    },
    Kind {
        name: "NotAStoreError",
        parent: None,
        builtin: None,
        code: code::NOT_A_STORE,
        doc: "The directory holds something that is not a store this version reads \
              (code -8).",
    },
    Kind {
        name: "StoreNotFoundError",
        parent: Some(kind::NOT_A_STORE),
        builtin: Some(|py| py.get_type::<PyFileNotFoundError>()),
        code: code::NOT_A_STORE,
        doc: "There is no store in the directory and create=False (code -8).",
    },
    Kind {
        name: "InvalidArgumentError",
        parent: None,
        builtin: Some(|py| py.get_type::<PyValueError>()),
        code: code::INVALID_ARGUMENT,
        doc: "Arguments that do not describe a valid request (code -9).",
    },
    Kind {
        name: "StoreBusyError",
        parent: None,
        builtin: None,
        code: code::BUSY,
        doc: "Another handle or thread holds a lock the call needs: delete and \
              compact need the only open handle, an append waited past its \
              timeout (code -10).",
    },
    Kind {
        name: "StoreReadOnlyError",
        parent: Some(kind::IO),
        builtin: Some(|py| py.get_type::<PyPermissionError>()),
        code: code::IO,
        doc: "A write (append, delete, compact) to a store opened read-only: with \
              read_only=True, or on files this process may not write (code -2).",
    },
    Kind {
        name: "StoreForkedError",
        parent: None,
        builtin: None,
        code: code::OTHER,
        doc: "A write (append, delete, compact) through a store handle that a forked \
              child inherited: open the store again in the child (code -11).",
    },
];

/// The classes of [`KINDS`], made once at import.
static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Makes the classes of [`KINDS`] and adds them to the module `m`.
pub(crate) fn add_kinds(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let classes = CLASSES.get_or_try_init(py, || -> PyResult<Vec<Py<PyType>>> {
        let type_ = py.get_type::<PyType>();
        let mut made: Vec<Py<PyType>> = Vec::with_capacity(KINDS.len());
        for k in &KINDS {
            let parent = match k.parent {
                Some(i) => made[i].bind(py).clone(),
                None => py.get_type::<ZrecordError>(),
            };
            let bases = match k.builtin {
                Some(builtin) => PyTuple::new(py, [parent, builtin(py)])?,
                None => PyTuple::new(py, [parent])?,
            };
            let namespace = PyDict::new(py);
            namespace.set_item("__doc__", k.doc)?;
            namespace.set_item("__module__", "loaderx")?;
            namespace.set_item("code", k.code)?;
            let class = type_.call1((k.name, bases, namespace))?;
            made.push(class.cast_into::<PyType>()?.unbind());
        }
        Ok(made)
    })?;
    for class in classes {
        let class = class.bind(py);
        m.add(class.name()?, class)?;
    }
    Ok(())
}

/// An exception of kind `kind` (an index into [`KINDS`]) with `message`.
pub(crate) fn kind_error(kind: usize, message: String) -> PyErr {
    Python::attach(|py| match CLASSES.get(py) {
        Some(classes) => PyErr::from_type(classes[kind].bind(py).clone(), message),
        None => zrecord_error(message, KINDS[kind].code),
    })
}

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

/// The kind (an index into [`KINDS`]) of an engine error.
pub(crate) fn kind_of(e: &zrecord::Error) -> Option<usize> {
    use zrecord::Error as E;
    Some(match e {
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::OutOfMemory => kind::MEMORY,
        E::Io { .. } => kind::IO,
        E::NotFound { .. } => kind::NOT_FOUND,
        E::NotAStore { .. } | E::UnsupportedVersion { .. } => kind::NOT_A_STORE,
        E::IndexOutOfRange { .. } => kind::INDEX,
        E::RecordTooLarge { .. } => kind::TOO_LARGE,
        E::StoreFull { .. } => kind::FULL,
        E::BufferTooSmall { .. } | E::DestinationOverlap { .. } => kind::BUFFER,
        E::CorruptRecord { .. } => kind::CORRUPT,
        E::InvalidArgument { .. } => kind::INVALID,
        E::Busy { .. } => kind::BUSY,
        E::ReadOnly { .. } => kind::READ_ONLY,
        E::ForkedHandle { .. } => kind::FORKED,
        _ => return None,
    })
}

/// A plain `ZrecordError` with `message` and `code`, for the errors that
/// have no kind of their own.
pub(crate) fn zrecord_error(message: String, code: i32) -> PyErr {
    Python::attach(|py| {
        let err = ZrecordError::new_err(message);
        match err.value(py).setattr(intern!(py, "code"), code) {
            Ok(()) => err,
            Err(e) => e,
        }
    })
}

/// Converts an engine error to its kind's class; its message names the
/// store and the record.
pub(crate) fn engine(e: zrecord::Error) -> PyErr {
    error_of(&e, e.to_string())
}

/// The exception of `e`'s kind with `message`; a `StoreIOError` has the
/// system's error number as `errno`, as an `OSError` does (`errno.ENOSPC`:
/// the disk is full).
fn error_of(e: &zrecord::Error, message: String) -> PyErr {
    let err = match kind_of(e) {
        Some(kind) => kind_error(kind, message),
        None => return zrecord_error(message, code::OTHER),
    };
    if let zrecord::Error::Io { source, .. } = e {
        if let Some(number) = source.raw_os_error() {
            // Not `strerror` or `filename`: with them `str()` would be
            // OSError's "[Errno n] ...", not the message.
            if let Err(set) =
                Python::attach(|py| err.value(py).setattr(intern!(py, "errno"), number))
            {
                return set;
            }
        }
    }
    err
}

/// The store is closed: `ValueError`, as for a closed Python file.
pub(crate) fn closed(path: &str) -> PyErr {
    PyValueError::new_err(format!("{path}: operation on a closed Zrecord store"))
}

/// Another user holds the store while an exclusive operation was asked for,
/// or an exclusive operation is running while another was asked for.
pub(crate) fn busy(path: &str, what: &str) -> PyErr {
    kind_error(
        kind::BUSY,
        format!(
            "{path}: store is busy: {what} needs exclusive access, but the store is in use \
             (a gather in another thread, a DataLoader, or a delete/compact in progress)"
        ),
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
        } => error_of(
            &source,
            format!("loader step {step}, stream {stream}: {source}"),
        ),
        E::InvalidArgument(_) | E::StreamTooShort { .. } | E::Image { .. } => {
            PyValueError::new_err(e.to_string())
        }
        E::Spawn(_) => PyOSError::new_err(e.to_string()),
        E::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// Converts a sampler error: a bad argument.
pub(crate) fn sampler(e: zsampler::SamplerError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
