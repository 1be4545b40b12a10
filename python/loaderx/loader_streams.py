"""Internal: the DataLoader's stream adapters.

A stream adapter says which native stores a stream is gathered from (and
their record lengths), what identifies the stream in a loader state, and
how the gathered buffers of one step become the stream's batch value: an
array for a :class:`~loaderx.Dataset`, a packed or padded dict
(``ragged_batch.py``) for a :class:`~loaderx.RaggedDataset`, a list of
items for a :class:`~loaderx.BytesDataset`, or for one named in ``images=``
a fixed-shape array of its decoded images (``images.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

import numpy as np

from .bytes_dataset import BytesDataset, items_of
from .images import Images
from .ragged import RaggedDataset
from .ragged_batch import SHAPE_DTYPE, pack, pad_batch
from .schema_file import dtype_name

if TYPE_CHECKING:
    from ._native import Zrecord
    from .dataset import Dataset


class FixedStream:
    """A Dataset stream: one native store of fixed-size records."""

    kind = "fixed"

    def __init__(self, ds: Dataset) -> None:
        self.dtype = ds.dtype
        self.shape = tuple(ds.shape)
        self.stores = [ds._zr()]
        self.record_lens: list[int | None] = [ds._itemsize]
        self.identity = {"kind": "fixed", "dtype": dtype_name(ds.dtype), "shape": list(ds.shape)}

    def assemble(self, buffers: Iterable[Any], n: int) -> np.ndarray:
        (buf,) = buffers
        return buf.view(self.dtype).reshape((n, *self.shape))


class RaggedStream:
    """A RaggedDataset stream: its values store (ragged) and its shapes
    store (fixed, ndim int64 per record)."""

    kind = "ragged"

    def __init__(self, ds: RaggedDataset, pad: bool) -> None:
        values, shapes = ds._stores()
        self.dtype = ds.dtype
        self.ndim = ds.ndim
        self.pad = pad
        self.stores = [values, shapes]
        self.record_lens = [None, ds.ndim * SHAPE_DTYPE.itemsize]
        self.identity = {"kind": "ragged", "dtype": dtype_name(ds.dtype), "ndim": ds.ndim}

    def assemble(self, buffers: Iterable[Any], n: int) -> dict[str, np.ndarray]:
        (values, lengths), shapes = buffers
        shapes = shapes.view(SHAPE_DTYPE).reshape(n, self.ndim)
        batch = pack(values, lengths, shapes, self.dtype)
        return pad_batch(batch) if self.pad else batch


class BytesStream:
    """A BytesDataset stream: one native store of records of any length.
    Its batch value is a list of the items (``bytes`` or ``str``), what
    per-item decoders (an image or JSON decoder, a tokenizer) take."""

    kind = "bytes"

    def __init__(self, ds: BytesDataset) -> None:
        self.item_kind = ds.kind
        self.stores = [ds._stores()[0]]
        self.record_lens: list[int | None] = [None]
        self.identity = {"kind": "bytes", "items": ds.kind}

    def assemble(self, buffers: Iterable[Any], n: int) -> list[Any]:
        ((values, lengths),) = buffers
        return items_of(values, lengths, self.item_kind)


class ImageStream:
    """A BytesDataset stream of encoded images, each decoded by the native
    workers through `images`' pipeline into a fixed slot."""

    kind = "image"

    def __init__(self, ds: BytesDataset, images: Images, name: str) -> None:
        self.images = images
        self.stores = [ds._stores()[0]]
        self.record_lens: list[Any] = [images.native]
        self.identity = {"kind": "image", **images.identity}
        #: The batch entry marking the decoded samples, when bad images
        #: are blanked (their buffer then comes with the marks).
        self.decoded_key = f"{name}_decoded" if images.identity["on_error"] == "blank" else None

    def assemble(self, buffers: Iterable[Any], n: int) -> np.ndarray:
        (buf,) = buffers
        if self.decoded_key is not None:
            buf, _ = buf
        return buf.view(self.images.dtype).reshape((n, *self.images.shape))

    def extra(self, buffers: Sequence[Any]) -> dict[str, np.ndarray]:
        """The batch entries beside the stream's own: its decoded marks."""
        if self.decoded_key is None:
            return {}
        ((_, decoded),) = buffers
        return {self.decoded_key: decoded}


Stream = Union[FixedStream, RaggedStream, BytesStream, ImageStream]


def stream_adapters(
    streams: Mapping[str, Any], padded: Collection[str], images: Mapping[str, Images]
) -> dict[str, Stream]:
    """Each stream's adapter, by name; the ragged streams named in `padded`
    are delivered padded, the byte streams named in `images` decoded."""

    def adapter(name: str, ds: Any) -> Stream:
        if isinstance(ds, RaggedDataset):
            return RaggedStream(ds, name in padded)
        if isinstance(ds, BytesDataset):
            return ImageStream(ds, images[name], name) if name in images else BytesStream(ds)
        return FixedStream(ds)

    adapters = {name: adapter(name, ds) for name, ds in streams.items()}
    for a in adapters.values():
        if getattr(a, "decoded_key", None) in adapters:
            raise ValueError(f"an image stream adds a {a.decoded_key!r} entry, and a stream "
                             "has that name")
    return adapters


def native_streams(adapters: Mapping[str, Stream]) -> tuple[list[Zrecord], list[int | None]]:
    """The native loader's stores and record lengths (None: ragged), every
    adapter's in turn."""
    stores: list[Zrecord] = []
    record_lens: list[int | None] = []
    for adapter in adapters.values():
        stores += adapter.stores
        record_lens += adapter.record_lens
    return stores, record_lens


def assembler(adapters: Mapping[str, Stream]) -> Callable[[Any], dict[str, Any]]:
    """What turns a native batch ``(step, indices, buffers, sources)`` into
    the batch dict: each adapter takes its stores' buffers, in the order of
    :func:`native_streams`."""
    pairs = list(adapters.items())
    widths = [len(adapter.stores) for _, adapter in pairs]

    def assemble(item: Any) -> dict[str, Any]:
        _step, indices, buffers, _sources = item
        n = len(indices)
        batch = {}
        at = 0
        for (name, adapter), width in zip(pairs, widths):
            mine = buffers[at : at + width]
            batch[name] = adapter.assemble(mine, n)
            if isinstance(adapter, ImageStream):
                batch.update(adapter.extra(mine))
            at += width
        return batch

    return assemble
