"""Internal: a dataset directory's ``schema.json``, read and written.

Both dataset kinds describe their samples in this small JSON file, the
only loaderx-level metadata beside the Zrecord stores: ``dataset.py``
(format ``loaderx-zrecord``, as loaderx 0.5.0 writes it) and ``ragged.py``
(format ``loaderx-ragged``) name their format and fields; this module
checks the format and version on reading and writes the file atomically.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = "schema.json"
#: The codecs a schema may name (those of the native store).
CODECS = ("raw", "flate", "lz4", "zstd", "zstd-dict")


def read_json(file: Path, missing: str) -> Any:
    """The JSON document in `file`: FileNotFoundError saying `missing` when
    there is none, ValueError when it is not JSON (both naming the file)."""
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found; {missing}")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{file} cannot be read as JSON: {e}") from e


@contextmanager
def reading_schema(
    directory: Path, fmt: str, version: int, what: str, hints: Mapping[str, str] = {}
) -> Iterator[dict[str, Any]]:
    """Yields the schema of `directory` once its format is `fmt` and its
    version `version`; a KeyError, TypeError or ValueError raised while the
    caller reads fields from it becomes "malformed". `what` names the kind
    of dataset in the FileNotFoundError; `hints` maps another format to a
    hint for the ValueError that refuses it."""
    schema_path = directory / SCHEMA
    schema = read_json(schema_path, f"{directory} is not a {what}")
    if not isinstance(schema, dict) or schema.get("format") != fmt:
        other = schema.get("format") if isinstance(schema, dict) else None
        hint = hints.get(other, "") if isinstance(other, str) else ""
        raise ValueError(f"{schema_path} is not a {fmt} schema{hint}")
    if schema.get("version", version) != version:
        raise ValueError(
            f"{schema_path} has schema version {schema.get('version')!r}; "
            f"this loaderx reads version {version}"
        )
    try:
        yield schema
    except KeyError as e:
        raise ValueError(f"{schema_path} is malformed: it has no field {e.args[0]!r}") from e
    except (TypeError, ValueError) as e:
        raise ValueError(f"{schema_path} is malformed: {e}") from e


# The field checks below run inside reading_schema(), which names the file;
# a schema is read from disk, so nothing in it is trusted: a wrong type or
# value is refused at open instead of failing later with an unrelated
# message, or reading records zero-padded to a size they do not have.


def dtype_name(dtype: np.dtype) -> str:
    """What schema.json records for `dtype`: NumPy's ``dtype.str`` (byte
    order included, as loaderx 0.5.0 writes it), or for the ml_dtypes types
    (bfloat16, float8_*, ...), whose ``str`` is an anonymous ``'<V2'``,
    their name (some have a ``str`` that NumPy does not read back)."""
    try:
        if np.dtype(dtype.str) == dtype:
            return dtype.str
    except TypeError:
        pass
    return dtype.name


def schema_dtype(value: Any) -> np.dtype:
    """A schema's ``dtype`` field: a NumPy dtype string (as ``dtype.str``
    writes it), or an ml_dtypes type name, of a dtype that holds no Python
    objects."""
    if not isinstance(value, str):
        raise ValueError(f"field 'dtype' must be a dtype string such as '<f4', not {value!r}")
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = ml_dtype(value)
    if dtype.hasobject:
        raise ValueError(f"field 'dtype' {value!r} holds Python objects, which no store holds")
    return dtype


def schema_shape(value: Any, dtype: np.dtype, max_bytes: int) -> tuple[int, ...]:
    """A schema's ``shape`` field: a list of non-negative ints whose samples
    of `dtype` take at most `max_bytes` (a record's limit)."""
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise ValueError(f"field 'shape' must be a list of non-negative ints, not {value!r}")
    size = math.prod(value) * dtype.itemsize
    if size > max_bytes:
        raise ValueError(
            f"field 'shape' {value} of {dtype.str} makes samples of {size} bytes, over "
            f"the {max_bytes} byte record limit"
        )
    return tuple(value)


def schema_count(name: str, value: Any, least: int) -> int:
    """An integer field of at least `least` (a bool is not a count)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"field {name!r} must be an int of at least {least}, not {value!r}")
    return value


def schema_codec(value: Any) -> str:
    """A schema's ``codec`` field: one the store knows."""
    if not isinstance(value, str) or value not in CODECS:
        raise ValueError(f"field 'codec' must be one of {list(CODECS)}, not {value!r}")
    return value


def codec_arg(codec: str) -> str:
    """`codec`, once it is one the store knows."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}, expected one of {list(CODECS)}")
    return codec


def ml_dtype(name: str) -> np.dtype:
    """The ml_dtypes type called `name` (``bfloat16``, ``float8_e4m3fn``...);
    ValueError when there is none, or ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        raise ValueError(
            f"field 'dtype' {name!r} is not a NumPy dtype; if it is an ml_dtypes type, "
            "install ml_dtypes (pip install 'loaderx[ml]')"
        ) from None
    kind = getattr(ml_dtypes, name, None)
    if not isinstance(kind, type):
        raise ValueError(f"field 'dtype' {name!r} is not a NumPy dtype, nor an ml_dtypes type")
    return np.dtype(kind)


def recordable_dtype(dtype: np.dtype) -> np.dtype:
    """`dtype`, once schema.json can record it (:func:`dtype_name` names it
    again) and it holds no Python objects."""
    if dtype.hasobject:
        raise TypeError(f"cannot store an array of Python objects ({dtype})")
    name = dtype_name(dtype)
    try:
        again = np.dtype(name)
    except TypeError:
        again = None
    if again != dtype:
        raise TypeError(f"dtype {dtype} cannot be recorded in schema.json (as {name!r})")
    return dtype


def create_schema(
    directory: Path,
    fmt: str,
    version: int,
    dtype: np.dtype,
    layout: Mapping[str, Any],
    codec: str,
    durable: bool,
) -> bool:
    """Creates `directory`'s schema.json, unless one is there already:
    format, version, dtype, the `layout` fields (the sample shape, or the
    number of dimensions) and codec, in that order, indented as loaderx
    0.5.0 writes it. Returns False, writing nothing, when the file exists,
    which is how the loser of two writers creating one dataset learns that
    it must append to the winner's (whose schema it must then match)
    instead of replacing its schema. With `durable`, the file reaches
    stable storage."""
    fields = {"dtype": dtype_name(dtype), **layout, "codec": codec}
    return create_schema_fields(directory, fmt, version, fields, durable)


def create_schema_fields(
    directory: Path, fmt: str, version: int, fields: Mapping[str, Any], durable: bool
) -> bool:
    """Creates `directory`'s schema.json of format `fmt` and `version` with
    `fields` after them, unless one is there already (then False), as
    :func:`create_schema` does."""
    schema = {"format": fmt, "version": version, **fields}
    return _create_whole(directory / SCHEMA, json.dumps(schema, indent=2) + "\n", durable)


def _create_whole(path: Path, text: str, durable: bool) -> bool:
    """Writes `text` to a temporary file, then links it to `path`: a reader
    sees no file or the whole of it, and an existing file is never replaced
    (a link fails where a rename would replace). False when `path` exists."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        sync_dir(path.parent)
    return True


def sync_dir(directory: Path) -> None:
    """Makes the names in `directory` durable (a new link or a rename in it).
    Where directories cannot be opened (Windows), the OS keeps names
    durable itself, and this does nothing."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
