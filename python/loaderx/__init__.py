"""loaderx: a persistent record store with zero-copy batch gathering,
transparent per-record compression and an endless, step-based data loader.

* :class:`Dataset` — a NumPy-shaped view of a store: one sample per record.
* :class:`DataLoader` — an endless iterator of ``{'data', 'label'}`` batches,
  gathered on Rust threads.
* :class:`Zrecord` — the raw store of byte records underneath.
* :class:`Sampler` — the step-based index generator the loader uses.
"""

from ._native import MAX_RECORD_LEN, Sampler, Zrecord, ZrecordError, __version__
from .dataloader import DataLoader
from .dataset import Dataset

__all__ = [
    "Dataset",
    "DataLoader",
    "Zrecord",
    "ZrecordError",
    "Sampler",
    "MAX_RECORD_LEN",
    "__version__",
]
