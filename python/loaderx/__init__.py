"""loaderx: a persistent record store with zero-copy batch gathering,
transparent per-record compression and an endless, step-based data loader.

* :class:`Dataset` — a NumPy-shaped view of a store: one sample per record.
* :class:`DataLoader` — an endless iterator of batch dicts (``{'data',
  'label'}``, or any named streams), gathered on Rust threads, or a finite
  pass (``epochs=``); resumable (``state_dict``), also on another shard
  count, shardable across hosts (``shard=``); per-sample random generators
  for transforms (``sample_rngs=``, :class:`SampleRngs`).
* :class:`Mixture` — datasets or tables mixed by weight, for the DataLoader.
* :class:`PackedLoader` — ragged token streams packed into ``[batch,
  length]`` rows with segment ids and positions.
* :class:`~loaderx.ragged.RaggedDataset` — samples of one dtype with
  per-sample shapes (``loaderx.ragged``).
* :class:`BytesDataset` — ``bytes`` or ``str`` items of any length.
* :class:`Table` — aligned streams in one folder; ``loaderx.open(path)``
  opens a table or a dataset of any kind.
* ``loaderx.jax`` / ``loaderx.torch`` — hand-off to JAX devices and to
  PyTorch (imported on demand; neither framework is a dependency).
* :class:`Zrecord` — the raw store of byte records underneath.
* :class:`Sampler` — the step-based index generator the loader uses.
"""

from ._native import (
    MAX_RECORD_LEN,
    MAX_RECORDS,
    V1_MAX_RECORD_LEN,
    BufferTooSmallError,
    Collection,
    CollectionWriter,
    CorruptStoreError,
    InvalidArgumentError,
    NotAStoreError,
    RecordTooLargeError,
    Sampler,
    StoreBusyError,
    StoreForkedError,
    StoreFullError,
    StoreIOError,
    StoreMemoryError,
    StoreNotFoundError,
    StoreReadOnlyError,
    Zrecord,
    ZrecordError,
    ZrecordIndexError,
    __version__,
)
from .bytes_dataset import BytesDataset
from .dataloader import DataLoader
from .dataset import Dataset
from .images import Images
from .mixture import Mixture
from .packing import PackedLoader
from .ragged import RaggedDataset
from .sample_rngs import SampleRngs
from .table import Table
from .table import open_path as open
from .convert import convert

__all__ = [
    "Dataset",
    "DataLoader",
    "Mixture",
    "Images",
    "PackedLoader",
    "RaggedDataset",
    "BytesDataset",
    "Table",
    "open",
    "convert",
    "Zrecord",
    "Collection",
    "CollectionWriter",
    "ZrecordError",
    "ZrecordIndexError",
    "StoreBusyError",
    "StoreNotFoundError",
    "NotAStoreError",
    "CorruptStoreError",
    "InvalidArgumentError",
    "BufferTooSmallError",
    "RecordTooLargeError",
    "StoreFullError",
    "StoreIOError",
    "StoreReadOnlyError",
    "StoreForkedError",
    "StoreMemoryError",
    "Sampler",
    "SampleRngs",
    "MAX_RECORD_LEN",
    "MAX_RECORDS",
    "V1_MAX_RECORD_LEN",
    "__version__",
]
