"""One module per benchmarked system; see bench/worker.py for the interface.

Each module defines `System`, with `write(path, array)`, `open(path)`,
`gather(idxs) -> (n, *shape) array`, `close()` and `version()`. A module may
import only NumPy, the standard library and its own system's package, because
each runs in its own worker process (loaderx 0.5.0's in .ref050-venv).
"""

NAMES = ("ours", "ours_unchecked", "ref050", "numpy_mmap", "numpy_ram", "lmdb", "h5py", "arrow", "arrayrecord")

#: system name -> module name in this package (avoids shadowing the real packages).
MODULES = {
    "ours": "loaderx_store",
    "ours_unchecked": "loaderx_store",
    "ref050": "loaderx_store",
    "numpy_mmap": "numpy_file",
    "numpy_ram": "numpy_file",
    "lmdb": "lmdb_store",
    "h5py": "h5py_store",
    "arrow": "arrow_ipc",
    "arrayrecord": "arrayrecord_grain",
}

#: Chunk of source bytes a streaming writer handles at a time.
WRITE_CHUNK = 64 << 20


def chunks(array, limit=WRITE_CHUNK):
    """(start, stop) ranges along axis 0 of at most `limit` bytes (>= 1 row)."""
    row = max(1, array[0].nbytes if len(array) else 1)
    step = max(1, limit // row)
    for start in range(0, len(array), step):
        yield start, min(len(array), start + step)
