"""Internal: Arrow data as conversion sources: Parquet files, Arrow IPC
files and streams, Hugging Face ``datasets`` (a ``save_to_disk`` folder, or
a ``datasets.Dataset`` in Python). Needs pyarrow (the ``convert`` extra).

Columns become streams by their Arrow type:

* numbers and booleans: a fixed stream of scalars;
* fixed-size lists of numbers (nested too): a fixed stream of that shape;
* variable-length lists of numbers: a ragged stream of 1-D samples;
* strings: a byte stream of ``str``; binaries: of ``bytes``;
* structs: one stream per field, named ``parent.child``; a Hugging Face
  ``Image`` feature (a struct of ``bytes`` and ``path``) becomes one byte
  stream of the encoded image, read from ``path`` when ``bytes`` is empty;
* a Hugging Face ``ClassLabel``: int64, its names in the manifest.

Anything else (nulls, nested variable-length lists, maps, ...) is refused
with an error that names the column (and the row, for a null).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import fingerprint


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ValueError(
            "converting Parquet, Arrow and Hugging Face data needs pyarrow: "
            "pip install 'loaderx[convert]'"
        ) from None
    return pyarrow


def hf_folder(path: Path) -> bool:
    """Whether `path` is a Hugging Face ``save_to_disk`` folder."""
    return path.is_dir() and (path / "state.json").is_file()


class ArrowSource:
    #: Decoding Parquet and Arrow batches takes a core of its own.
    overlap = True

    """Reads record batches from `batches` (a callable giving an iterator of
    pyarrow RecordBatches), described by `schema` and, for Hugging Face
    data, its `features` (the JSON form of ``datasets.Features``)."""

    def __init__(
        self,
        what: str,
        describe: dict[str, Any],
        schema: Any,
        rows: int,
        batches: Any,
        features: dict[str, Any] | None,
        base: Path | None,
    ) -> None:
        self.pa = _pyarrow()
        self.what = what
        self._describe = describe
        self.rows = rows
        self._batches = batches
        self.base = base
        self.features = features or {}
        self.kinds: dict[str, str] = {}
        self.classes: dict[str, list[str]] = {}
        #: stream name -> (path of fields from the top-level column, how to convert).
        self.plan: dict[str, tuple[tuple[str, ...], str]] = {}
        for field in schema:
            self._plan(field.name, (field.name,), field.type, self.features.get(field.name))

    # -- the columns' kinds -------------------------------------------------------

    def _plan(self, name: str, path: tuple[str, ...], t: Any, feature: Any) -> None:
        pa = self.pa
        ftype = feature.get("_type") if isinstance(feature, dict) else None
        if ftype == "Image" or ftype == "Audio":
            self._add(name, path, "bytes", "hf_file")
            return
        if ftype == "ClassLabel":
            self.classes[name] = list(feature.get("names") or [])
            self._add(name, path, "fixed", "number")
            return
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            self._add(name, path, "fixed", "number")
        elif pa.types.is_fixed_size_list(t) and numeric_leaf(pa, t):
            self._add(name, path, "fixed", "fixed_list")
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and is_number(pa, t.value_type):
            self._add(name, path, "ragged", "list")
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            self._add(name, path, "bytes", "str")
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            self._add(name, path, "bytes", "bytes")
        elif pa.types.is_struct(t):
            sub = feature if isinstance(feature, dict) and "_type" not in feature else {}
            for i in range(t.num_fields):
                f = t.field(i)
                self._plan(f"{name}.{f.name}", (*path, f.name), f.type, sub.get(f.name))
        else:
            raise ValueError(f"{self.what}: column {name!r} has type {t}, which no stream holds")

    def _add(self, name: str, path: tuple[str, ...], kind: str, how: str) -> None:
        self.kinds[name] = kind
        self.plan[name] = (path, how)

    def describe(self) -> dict[str, Any]:
        return self._describe

    # -- the rows ---------------------------------------------------------------

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        pa = self.pa
        at = 0
        for batch in self._batches():
            n = batch.num_rows
            if at + n <= start:
                at += n
                continue
            if start > at:
                batch = batch.slice(start - at)
            first = max(at, start)
            at += n
            table = pa.Table.from_batches([batch])
            step = max(1, int(max_bytes / max(table.nbytes / max(len(table), 1), 1)))
            for k in range(0, len(table), step):
                part = table.slice(k, step)
                yield {name: self._column(part, name, first + k) for name in self.plan}

    def _column(self, table: Any, name: str, first_row: int) -> Any:
        path, how = self.plan[name]
        col = table.column(path[0]).combine_chunks()
        for field in path[1:]:
            col = col.field(field)
        if how == "hf_file":
            return [self._hf_file(x, name, first_row + i) for i, x in enumerate(col.to_pylist())]
        if col.null_count:
            row = first_row + int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"{self.what}: column {name!r} is null at row {row}")
        if self.pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if how == "number":
            return col.to_numpy(zero_copy_only=False)
        if how == "fixed_list":
            return fixed_list_array(self.pa, col)
        if how == "list":
            flat = self.pa.compute.list_flatten(col).to_numpy(zero_copy_only=False)
            lengths = self.pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
            return np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        return col.to_pylist()  # str or bytes

    def _hf_file(self, item: Any, name: str, row: int) -> bytes:
        """The encoded bytes of a Hugging Face Image/Audio cell."""
        if item is None:
            raise ValueError(f"{self.what}: column {name!r} is null at row {row}")
        if item.get("bytes"):
            return item["bytes"]
        file = item.get("path")
        if not file:
            raise ValueError(f"{self.what}: column {name!r} row {row} has neither bytes nor path")
        file = Path(file) if Path(file).is_absolute() or self.base is None else self.base / file
        try:
            return file.read_bytes()
        except OSError as e:
            raise ValueError(
                f"{self.what}: column {name!r} row {row}: {file}: {e.strerror}"
            ) from None


def is_number(pa: Any, t: Any) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def numeric_leaf(pa: Any, t: Any) -> bool:
    while pa.types.is_fixed_size_list(t):
        t = t.value_type
    return is_number(pa, t)


def fixed_list_array(pa: Any, col: Any) -> np.ndarray:
    """A fixed-size list column (nested too) as an ``(n, *shape)`` array."""
    shape = []
    t = col.type
    values = col
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        values = pa.compute.list_flatten(values)
        t = t.value_type
    return values.to_numpy(zero_copy_only=False).reshape(len(col), *shape)


# -- opening ----------------------------------------------------------------------


def open_file(path: Path, kind: str) -> ArrowSource:
    pa = _pyarrow()
    describe = {"from": kind, "path": str(path.resolve()), "files": fingerprint([path])}
    try:
        if kind == "parquet":
            pf = pa.parquet.ParquetFile(path)
            schema, rows = pf.schema_arrow, pf.metadata.num_rows
            features = hf_features(schema)

            def batches() -> Iterator[Any]:
                return pf.iter_batches(batch_size=4096)

            return ArrowSource(str(path), describe, schema, rows, batches, features, path.parent)
        source = pa.memory_map(str(path))
        try:
            reader = pa.ipc.open_file(source)
            rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))

            def batches() -> Iterator[Any]:
                return (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            stream = pa.ipc.open_stream(pa.memory_map(str(path)))
            rows = sum(b.num_rows for b in stream)

            def batches() -> Iterator[Any]:
                return iter(pa.ipc.open_stream(pa.memory_map(str(path))))

            reader = pa.ipc.open_stream(pa.memory_map(str(path)))
        schema = reader.schema
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"{path}: not a readable {kind} file: {e}") from None
    return ArrowSource(str(path), describe, schema, rows, batches, hf_features(schema),
                       path.parent)


def hf_features(schema: Any) -> dict[str, Any] | None:
    """The Hugging Face features a file's schema metadata carries, if any."""
    meta = schema.metadata or {}
    raw = meta.get(b"huggingface")
    if not raw:
        return None
    try:
        return json.loads(raw).get("info", {}).get("features")
    except ValueError:
        return None


def open_hf_folder(path: Path) -> ArrowSource:
    """A ``save_to_disk`` folder: its Arrow files in order, its features."""
    pa = _pyarrow()
    try:
        state = json.loads((path / "state.json").read_text())
        info = json.loads((path / "dataset_info.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable Hugging Face dataset folder: {e}") from None
    files = [path / f["filename"] for f in state.get("_data_files", [])]
    if not files:
        raise ValueError(f"{path}: its state.json lists no data files")
    readers = []
    for f in files:
        try:
            readers.append(pa.ipc.open_stream(pa.memory_map(str(f))).read_all())
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"{f}: not a readable Arrow stream: {e}") from None
    schema = readers[0].schema

    def batches() -> Iterator[Any]:
        for t in readers:
            yield from t.to_batches()

    rows = sum(len(t) for t in readers)
    describe = {"from": "hf", "path": str(path.resolve()),
                "files": fingerprint(sorted(p for p in path.rglob("*") if p.is_file()))}
    return ArrowSource(str(path), describe, schema, rows, batches, info.get("features"), path)


def open_hf_dataset(dataset: Any) -> ArrowSource:
    """A ``datasets.Dataset`` object, read through its Arrow table."""
    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    if getattr(dataset, "_indices", None) is not None:
        table = dataset.flatten_indices().data.table
    features = dataset.features.to_dict()
    describe = {"from": "hf", "fingerprint": getattr(dataset, "_fingerprint", None)}

    def batches() -> Iterator[Any]:
        return iter(table.to_batches())

    return ArrowSource("the dataset", describe, table.schema, len(table), batches, features, None)


def open_source(path: Any, kind: str, **_: Any) -> ArrowSource:
    if kind == "hf":
        return open_hf_dataset(path) if not isinstance(path, Path) else open_hf_folder(path)
    return open_file(path, kind)
