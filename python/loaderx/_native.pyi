"""Type stubs of loaderx._native, the Rust extension module.

Checked against the compiled module by tests/python/test_stubs.py: every
class, method, property and signature here must match the runtime module.
"""

from os import PathLike
from types import TracebackType
from typing import Any, ClassVar, Iterator, Literal, Sequence, final

import numpy as np
import numpy.typing as npt

MAX_RECORDS: int
"""The most records one store (one shard of a collection) holds: 2**24."""
MAX_RECORD_LEN: int
"""The largest record: 1 GiB. A store with a record over V1_MAX_RECORD_LEN is
format 2, which loaderx 0.5.0 refuses."""
V1_MAX_RECORD_LEN: int
"""The largest record of a format-1 store, which loaderx 0.5.0 reads: 1 MiB."""
__version__: str

def gather_threads() -> int:
    """Threads one gather may use, which is also the most worker threads a
    Loader starts: the cores, or RAYON_NUM_THREADS where it is set."""

_Indices = Sequence[int] | npt.NDArray[np.integer[Any]]
_Src = bytes | bytearray | memoryview | npt.NDArray[Any]

class ZrecordError(RuntimeError):
    """An error reported by the Zrecord store engine."""

    code: int

class StoreMemoryError(ZrecordError, MemoryError):
    """Memory for a batch or an operation could not be allocated (code -1)."""

class StoreIOError(ZrecordError, OSError):
    """The operating system refused a file operation of the store (code -2);
    `errno` is the system's error number (errno.ENOSPC: the disk is full)."""

class ZrecordIndexError(ZrecordError, IndexError):
    """A record or sample index at or past the end of the store (code -3)."""

class RecordTooLargeError(ZrecordError, ValueError):
    """A record to append is larger than MAX_RECORD_LEN (code -4)."""

class StoreFullError(ZrecordError):
    """An append would take the store past its record or chunk limit (code -5)."""

class BufferTooSmallError(ZrecordError, ValueError):
    """A destination cannot hold the records asked for, or two of its ranges
    overlap (code -6)."""

class CorruptStoreError(ZrecordError):
    """A stored record does not decode to its logical bytes or fails its
    checksum (code -7)."""

class NotAStoreError(ZrecordError):
    """The directory holds something that is not a store this version reads
    (code -8)."""

class StoreNotFoundError(NotAStoreError, FileNotFoundError):
    """There is no store in the directory and create=False (code -8)."""

class InvalidArgumentError(ZrecordError, ValueError):
    """Arguments that do not describe a valid request (code -9)."""

class StoreBusyError(ZrecordError):
    """Another handle or thread holds a lock the call needs (code -10)."""

class StoreReadOnlyError(StoreIOError, PermissionError):
    """A write (append, delete, compact) to a store opened read-only (code -2)."""

class StoreForkedError(ZrecordError):
    """A write through a store handle that a forked child inherited (code -11)."""

@final
class Zrecord:
    """A persistent store of byte records (the Zrecord engine)."""

    def __init__(
        self,
        path: str | PathLike[str],
        codec: str = "flate",
        *,
        create: bool = True,
        checksums: bool | None = None,
        read_only: bool = False,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    def check_folder(self) -> None:
        """Raises ZrecordError when the store's folder is no longer at its
        path (moved, removed or replaced by another since it was opened)."""
    @property
    def read_only(self) -> bool: ...
    @property
    def version(self) -> int:
        """The store's format version: 1 (what loaderx 0.5.0 reads), or 2
        once it holds a record over V1_MAX_RECORD_LEN (1 MiB)."""
    @property
    def codec(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def sync(self) -> None: ...
    def lengths(self, idxs: _Indices) -> npt.NDArray[np.uint32]: ...
    def gather(self, idxs: _Indices, dst: npt.NDArray[Any], stride: int) -> None: ...
    def gather_array(
        self, idxs: _Indices, stride: int, *, exact: bool = False
    ) -> npt.NDArray[np.uint8]: ...
    def gather_var(self, idxs: _Indices, dst: npt.NDArray[Any], offsets: _Indices) -> None: ...
    def append(
        self,
        src: _Src,
        n: int,
        item_len: int,
        codec: str | None = None,
        *,
        level: int | None = None,
        durable: bool = False,
        timeout: float = 60.0,
    ) -> int: ...
    def append_var(
        self,
        src: _Src,
        offsets: _Indices,
        lens: _Indices,
        codec: str | None = None,
        *,
        level: int | None = None,
        durable: bool = False,
        timeout: float = 60.0,
    ) -> int: ...
    def delete(self, idxs: _Indices, *, timeout: float = 0.0) -> None: ...
    def compact(self, *, timeout: float = 0.0) -> None: ...
    def verify(self) -> dict[str, Any]: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Zrecord: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...
    def __repr__(self) -> str: ...

@final
class Collection:
    """The published shards of a sharded collection, read as one sequence
    of records (docs/FORMAT.md, "Collections"). Until it is closed, deletes
    from its shards by other handles are refused (StoreBusyError), as a
    delete from a store is while the store is open elsewhere."""

    def __init__(
        self, path: str | PathLike[str], *, shards: Sequence[str] | None = None,
        checksums: bool | None = None, read_only: bool = False,
    ) -> None: ...
    @staticmethod
    def published(path: str | PathLike[str]) -> list[str]: ...
    @staticmethod
    def publish(path: str | PathLike[str], shards: Sequence[str]) -> int: ...
    @staticmethod
    def remove_unpublished(path: str | PathLike[str], prefix: str) -> list[str]:
        """Removes the shards in the collection at `path` that writers given
        `prefix` made and that it does not list; returns their names. For the
        shards of a distributed write's dead tasks, once every task is
        done."""
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    def check_folder(self) -> None:
        """Raises ZrecordError when the collection's folder is no longer at
        its path (moved, removed or replaced by another since it was
        opened)."""
    @property
    def generation(self) -> int: ...
    @property
    def shards(self) -> list[str]: ...
    @property
    def starts(self) -> npt.NDArray[np.uint64]: ...
    @property
    def closed(self) -> bool: ...
    def lengths(self, idxs: _Indices) -> npt.NDArray[np.uint32]: ...
    def gather(self, idxs: _Indices, dst: npt.NDArray[Any], stride: int) -> None: ...
    def gather_array(
        self, idxs: _Indices, stride: int, *, exact: bool = False
    ) -> npt.NDArray[np.uint8]: ...
    def gather_var(self, idxs: _Indices, dst: npt.NDArray[Any], offsets: _Indices) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Collection: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class CollectionWriter:
    """Appends to new shards of its own in a collection's folder and
    publishes them all at once."""

    def __init__(
        self,
        path: str | PathLike[str],
        codec: str = "flate",
        *,
        shard_records: int | None = None,
        shard_bytes: int | None = None,
        checksums: bool | None = None,
        prefix: str | None = None,
        durable: bool = True,
    ) -> None: ...
    def append(
        self, src: _Src, n: int, item_len: int, codec: str | None = None, *,
        level: int | None = None, durable: bool = False, timeout: float = 60.0,
    ) -> None: ...
    def append_var(
        self, src: _Src, offsets: _Indices, lens: _Indices, codec: str | None = None, *,
        level: int | None = None, durable: bool = False, timeout: float = 60.0,
    ) -> None: ...
    def publish(self) -> int: ...
    def sync(self) -> None: ...
    def end_shard(self) -> None: ...
    def discard(self) -> None: ...
    @property
    def shards(self) -> list[str]: ...

@final
class Sampler:
    """A step-based index generator over 0..length: endless, or a finite
    pass of `epochs` epochs."""

    @final
    class Mode:
        """How a Sampler maps steps to indices; compares equal to its int."""

        SEQUENTIAL: ClassVar[Sampler.Mode]
        IID: ClassVar[Sampler.Mode]
        SHUFFLE: ClassVar[Sampler.Mode]
        def __int__(self) -> int: ...
        def __repr__(self) -> str: ...

    def __init__(
        self,
        length: int,
        batch_size: int,
        mode: int | Sampler.Mode,
        seed: int = 42,
        *,
        shard: tuple[int, int] | None = None,
        epochs: int | None = None,
        last_batch: Literal["partial", "pad"] = "partial",
    ) -> None: ...
    @property
    def length(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def local_batch_size(self) -> int: ...
    @property
    def shard(self) -> tuple[int, int]: ...
    @property
    def mode(self) -> Sampler.Mode: ...
    @property
    def seed(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def epochs(self) -> int | None: ...
    @property
    def last_batch(self) -> Literal["partial", "pad"] | None: ...
    @property
    def steps(self) -> int | None: ...
    def valid_len(self, step: int) -> int: ...
    def sample_seeds(self, step: int) -> npt.NDArray[np.uint64]: ...
    def batch(self, step: int) -> npt.NDArray[np.uint64]: ...
    def seek(self, step: int) -> None: ...
    def next(self) -> npt.NDArray[np.uint64]: ...
    def __iter__(self) -> Iterator[npt.NDArray[np.uint64]]: ...
    def __next__(self) -> npt.NDArray[np.uint64]: ...
    def __repr__(self) -> str: ...

@final
class MixtureSampler:
    """The index generator of a weighted mixture of sources."""

    def __init__(
        self,
        lengths: Sequence[int],
        modes: Sequence[int | Sampler.Mode],
        weights: Sequence[float],
        batch_size: int,
        seed: int = 42,
        *,
        shard: tuple[int, int] | None = None,
        proportions: Literal["exact", "drawn"] = "exact",
        schedule: Sequence[tuple[int, Sequence[float]]] | None = None,
    ) -> None: ...
    @property
    def lengths(self) -> list[int]: ...
    @property
    def modes(self) -> list[int]: ...
    @property
    def weights(self) -> list[int]: ...
    @property
    def schedule(self) -> list[tuple[int, list[int]]]: ...
    @property
    def proportions(self) -> Literal["exact", "drawn"]: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def local_batch_size(self) -> int: ...
    @property
    def shard(self) -> tuple[int, int]: ...
    @property
    def seed(self) -> int: ...
    def batch(self, step: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint64]]: ...
    def sample_seeds(self, step: int) -> npt.NDArray[np.uint64]: ...
    def counts(self, positions: int) -> list[int]: ...
    def __repr__(self) -> str: ...

def pack(
    lengths: npt.NDArray[np.uint32],
    row_length: int,
    method: Literal["first-fit", "best-fit"] = "first-fit",
    long: Literal["split", "drop"] = "split",
) -> dict[str, Any]: ...

@final
class ImagePipeline:
    """What every image of an image stream becomes: decoded, cropped,
    resized, flipped and (with mean and std) normalised; with `blank`, a bad
    image becomes a zero sample marked in the batch."""

    DEFAULT_MAX_PIXELS: int
    def __init__(
        self,
        height: int,
        width: int,
        channels: int = 3,
        crop: Literal["resize", "center", "random"] = "resize",
        fraction: float = 0.875,
        scale: tuple[float, float] = ...,
        ratio: tuple[float, float] = ...,
        flip: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        max_pixels: int = ...,
        blank: bool = False,
        draft: bool = False,
        antialias: bool = True,
    ) -> None: ...
    @property
    def sample_len(self) -> int: ...

class BatchMemory:
    """The owner (a NumPy ``base``) of a batch's memory."""

    @property
    def fd(self) -> int | None: ...
    @property
    def shared_id(self) -> int | None: ...

def array_address(array: np.ndarray) -> int:
    """The address of `array`'s first byte."""

# The batch message of transform processes (batch_message.rs).
BATCH_ALIGN: int
"""Where arrays start in a transform process's arena: a multiple of 64."""
PLACE_WRITTEN: int
"""The memory number of an array copied into the message's own arena."""
PLACE_CAME_IN: int
"""The memory number of a result's array that lies in the arena its batch came in."""
PLACE_SHARED: int
"""The first memory number of a shared batch buffer (its ``shared_id`` plus this)."""

def shared_place(
    array: np.ndarray, shared: dict[int, tuple[np.ndarray, int]]
) -> tuple[int, int] | None:
    """Where `array` lies in the shared batch buffer it views, `(offset,
    memory number)`, when it is contiguous and inside that buffer's bytes;
    the buffer goes into `shared` (number to its array and descriptor).
    None otherwise."""

def pack_batch(
    arena: npt.NDArray[np.uint8] | None,
    batch: Any,
    seeds: np.ndarray | None,
    ints: Sequence[int],
    spans: Sequence[tuple[int, int, int]] | None = None,
) -> tuple[int, int, dict[int, tuple[np.ndarray, int]] | None] | int | None:
    """Packs a dict of numeric arrays, `seeds` and `ints` into `arena` as one
    message, placing the arrays that lie in `spans` (memory number, start
    and end address) or, with no spans, in shared batch buffers: `(offset,
    length, shared buffers by number or None)`; the size needed when the
    arena is too small; None for a batch it cannot carry."""

def message_places(arena: npt.NDArray[np.uint8], offset: int, length: int) -> list[int]:
    """The shared batch buffers a message's arrays lie in, in order."""

def unpack_batch(
    arena: npt.NDArray[np.uint8],
    offset: int,
    length: int,
    memories: dict[int, npt.NDArray[np.uint8]],
    copy: bool,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, list[int]]:
    """The `(batch, seeds, ints)` of a message, its arrays views of
    `memories` or, with `copy`, copies of those in the arenas. ValueError
    for a damaged message."""

#: What a Loader yields: (step, indices, per stream its buffer, sources).
NativeBatch = tuple[
    int,
    npt.NDArray[np.uint64],
    # A ragged stream's buffer comes with its records' lengths, a blanking
    # image stream's with whether each slot was decoded.
    list[
        npt.NDArray[np.uint8]
        | tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint32] | npt.NDArray[np.bool_]]
    ],
    npt.NDArray[np.int32] | None,
]

class Loader:
    """Gathers batches of several stores in lockstep on worker threads."""

    def __init__(
        self,
        stores: Sequence[Zrecord | Collection | Sequence[Zrecord | Collection]],
        record_lens: Sequence[int | ImagePipeline | None],
        sampler: Sampler | MixtureSampler,
        num_workers: int = 4,
        prefetch_size: int = 4,
        *,
        step: int | None = None,
        shared_memory: bool = False,
        held: int = 0,
    ) -> None:
        """`held`: batches the caller keeps alive besides the two with its
        consumer (a transform stage's steps in flight), for which the
        loader keeps recycled memory too."""
    @property
    def next_step(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __iter__(self) -> Loader: ...
    def __next__(self) -> NativeBatch: ...
    def next_ready(self) -> NativeBatch | None:
        """The next batch if it is finished now, else None (also once closed
        or past the pass's end, which the next iteration reports)."""
