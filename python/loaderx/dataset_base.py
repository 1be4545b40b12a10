"""Internal: the base class of Dataset and RaggedDataset.

Both are a directory of Zrecord stores described by ``schema.json``
(``schema_file.py``) and indexed alike (``indexing.py``). :class:`DatasetBase`
holds what they share as objects: the open stores and their lifetime
(close, closed, context manager), pickling by path, and the repr.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from ._native import Zrecord

#: Bytes of source data handed to one append call by ``write``.
WRITE_CHUNK_BYTES = 64 << 20

_D = TypeVar("_D", bound="DatasetBase")


class DatasetBase:
    """A dataset over open Zrecord stores. A subclass's ``__init__`` sets
    `path`, `dtype`, `codec`, ``_checksums`` and ``_read_only``, then opens its stores into
    ``_open``; ``_layout_repr`` names its sample layout for the repr."""

    #: The class name that messages and the repr give.
    _kind: str
    path: Path
    dtype: np.dtype
    codec: str
    _checksums: bool | None
    _read_only: bool = False
    #: Whether the records are a sharded collection's (``sharding.py``), and
    #: the shards this handle reads (None: all).
    sharded: bool = False
    _shards: list[str] | None = None
    #: The open stores; None until opened and once closed.
    _open: tuple[Zrecord, ...] | None = None
    #: The number of samples a table lets this stream show (``table.py``):
    #: records past it belong to an append the table has not committed.
    _limit: int | None = None

    def _capped(self, n: int) -> int:
        """`n` records as a number of samples: at most ``_limit``."""
        return n if self._limit is None else min(n, self._limit)

    def _stores(self) -> tuple[Zrecord, ...]:
        stores = self._open
        if stores is None:
            raise ValueError(f"{self.path}: operation on a closed {self._kind}")
        return stores

    def _check_folder(self) -> None:
        """Raises ZrecordError when a store's folder is no longer at its path:
        before a change that reopens the stores by their paths."""
        for store in self._stores():
            store.check_folder()

    def _layout_repr(self) -> str:
        raise NotImplementedError

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Closes the dataset. Idempotent."""
        stores, self._open = self._open, None
        for store in stores or ():
            store.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._open is None

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reopen_options(self) -> dict[str, Any]:
        """Options of the class's own that a copy opens with: the shards of
        a sharded dataset's view."""
        return {} if self._shards is None else {"shards": self._shards}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles by path: the copy reopens the stores (worker processes).
        return (_reopen, (type(self), str(self.path), self._checksums, self._read_only,
                          self._reopen_options()))

    def __repr__(self) -> str:
        if self._open is None:
            return f"{self._kind}({str(self.path)!r}, closed)"
        return (
            f"{self._kind}({str(self.path)!r}, len={len(self)}, {self._layout_repr()}, "
            f"codec={self.codec!r})"
        )


def _reopen(cls: type[_D], path: str, checksums: bool | None, read_only: bool = False,
            options: dict[str, Any] | None = None) -> _D:
    """Unpickles a dataset by opening its directory again."""
    return cls(path, checksums=checksums, read_only=read_only,  # type: ignore[call-arg]
               **(options or {}))
