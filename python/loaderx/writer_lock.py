"""Internal: the lock a writer of several stores holds.

A :class:`~loaderx.RaggedDataset` (values and shapes) and a
:class:`~loaderx.Table` (one or more stores per stream) change several
stores in one write; each store serialises its own appends, but two writers
could still interleave their stores' appends and misalign them. So such a
writer holds an exclusive ``flock`` on a lock file in the directory for the
whole write. Readers take none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def writer_lock(directory: Path, name: str) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``directory / name`` (created if
    missing), waiting for another writer to release it."""
    import fcntl

    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
