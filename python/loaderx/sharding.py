"""Internal: datasets of one store or of a sharded collection.

A ``Dataset`` or ``BytesDataset`` whose ``schema.json`` says
``"sharded": true`` keeps its records in a collection of stores, its
shards (docs/FORMAT.md, "Collections"), instead of one store. This module
opens the one or the other, writes to the one or the other, and does the
maintenance (delete, compact, stats, verify) of a sharded one shard by
shard. The reads need nothing of it: ``Collection`` reads as ``Zrecord``.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ._native import Collection, CollectionWriter, Zrecord


def open_records(path: Path, codec: str, sharded: bool, shards: Sequence[str] | None,
                 checksums: bool | None, read_only: bool) -> Zrecord | Collection:
    """The store at `path`, or for a sharded dataset its collection (only
    the shards named in `shards`, when given)."""
    if shards is not None and not sharded:
        raise ValueError(f"{path}: shards= reads part of a sharded dataset; this one is one "
                         "store")
    if sharded:
        return Collection(path, shards=shards, checksums=checksums, read_only=read_only)
    return Zrecord(path, codec, create=False, checksums=checksums, read_only=read_only)


def new_prefix() -> str:
    """A shard-name prefix no other writer picks: the time, this process
    and random bits."""
    return f"{time.time_ns():x}-{os.getpid():x}-{secrets.token_hex(4)}"


def aligned_writer(path: Path, codec: str, prefix: str, checksums: bool | None,
                   shard_records: int | None = None, durable: bool = True) -> CollectionWriter:
    """A writer of shards named after `prefix` that end only every
    `shard_records` records or when told (``end_shard``), never at a byte
    limit: writers of aligned collections (a ragged dataset's two, a
    table's streams) given the same appends make the same shards. Not
    `durable`, it syncs nothing."""
    return CollectionWriter(path, codec, shard_records=shard_records, shard_bytes=2**64 - 1,
                            checksums=checksums, prefix=prefix, durable=durable)


def publish_aligned(paths: Sequence[Path], shards: Sequence[str]) -> None:
    """Publishes `shards` (synced, alike in every collection of `paths`) in
    each, in the order of `paths`: the first lists at least what any other
    lists, so a crash between leaves a state `align` completes. Callers
    hold the writer lock that orders the publishers."""
    for path in paths:
        Collection.publish(path, list(shards))


def align(paths: Sequence[Path]) -> None:
    """Completes a `publish_aligned` that a crash interrupted: publishes in
    every collection of `paths` what the first lists (its shards were all
    synced before the first publish)."""
    names = Collection.published(paths[0])
    for path in paths[1:]:
        if Collection.published(path) != names:
            Collection.publish(path, names)


class RecordsWriter:
    """Where `write` appends: the dataset's store, or new shards of a
    sharded dataset's own (a new one each `shard_records` records or
    `shard_bytes` bytes), published together by `finish`."""

    def __init__(self, path: Path, codec: str, sharded: bool, checksums: bool | None,
                 shard_records: int | None, shard_bytes: int | None) -> None:
        self.sharded = sharded
        self.target: Zrecord | CollectionWriter = (
            CollectionWriter(path, codec, shard_records=shard_records, shard_bytes=shard_bytes,
                             checksums=checksums)
            if sharded else Zrecord(path, codec, checksums=checksums))

    def records(self) -> int:
        """Records the store holds already (none for new shards)."""
        return 0 if self.sharded else len(self.target)

    def finish(self, published: bool) -> None:
        """Publishes the new shards when the write went through; removes
        them (`discard`) when it did not or the publish fails; closes the
        store."""
        if not self.sharded:
            self.target.close()
            return
        if not published:
            discard([self.target])
            return
        try:
            self.target.publish()
        except BaseException:
            # One collection: what its manifest does not list, no reader
            # saw (an aligned publish over several keeps its shards for
            # `align` to complete).
            discard([self.target])
            raise


def discard(writers: Sequence[CollectionWriter]) -> None:
    """Removes the unpublished shards of `writers`, whose write failed: no
    reader saw them, and they would only hold the disk. A shard that cannot
    be removed stays, as a crash would leave it (readers ignore it); the
    write's own error is what the caller raises."""
    for writer in writers:
        try:
            writer.discard()
        except OSError:
            pass


class Shards:
    """The maintenance of a sharded dataset's collection, shard by shard:
    each shard's store opened on its own."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def each(self, run: Callable[[int, Zrecord], Any], only: Any = None,
             read_only: bool = False) -> list[Any]:
        """`run(s, store)` on shard `s` of the dataset's view (or of those
        in `only`). A change needs the stores to itself: the dataset lets go
        of its collection first and reopens it after, with the new lengths."""
        ds = self.dataset
        collection = ds._stores()[0]
        names = collection.shards
        # The shards are opened by their paths: in this dataset's folder,
        # not in another renamed into its place (they would be another
        # dataset's shards, changed at this one's positions).
        ds._check_folder()
        if not read_only:
            collection.close()
        results = []
        try:
            for s in range(len(names)) if only is None else [int(s) for s in only]:
                with Zrecord(ds.path / names[s], ds.codec, create=False,
                             checksums=ds._checksums,
                             read_only=read_only or ds._read_only) as store:
                    if read_only:
                        collection.check_folder()  # still open: checked after each
                    results.append(run(s, store))
        finally:
            if not read_only:
                ds._open = (Collection(ds.path, shards=ds._shards, checksums=ds._checksums,
                                       read_only=ds._read_only),)
        return results

    def delete(self, pos: np.ndarray, timeout: float) -> None:
        """Each shard deletes its own samples (its tail fills its holes), so
        the dataset stays dense: its index is rebuilt from the shards'
        lengths. Atomic per shard, not across shards."""
        starts = self.dataset._stores()[0].starts
        shard_of = np.searchsorted(starts, pos, side="right") - 1
        self.each(lambda s, store: store.delete(pos[shard_of == s] - starts[s], timeout=timeout),
                  only=np.unique(shard_of))

    def compact(self, timeout: float) -> None:
        self.each(lambda _, store: store.compact(timeout=timeout))

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for shard in self.each(lambda _, store: store.stats(), read_only=True):
            for key, value in shard.items():
                total[key] = total.get(key, 0) + value
        return total

    def verify(self) -> dict[str, Any]:
        """Every shard's report in one, bad records named by their index in
        the dataset."""
        starts = self.dataset._stores()[0].starts
        reports = self.each(lambda _, store: store.verify(), read_only=True)
        return {
            "records": sum(r["records"] for r in reports),
            "checksummed": all(r["checksummed"] for r in reports),
            "unchecked": sum(r["unchecked"] for r in reports),
            "bad": [{**bad, "index": int(starts[s]) + bad["index"]}
                    for s, r in enumerate(reports) for bad in r["bad"]],
        }
