"""Internal: an image folder laid out as ``root/<class>/<image>`` (what
torchvision's ``ImageFolder`` reads) as a conversion source: an ``image``
stream and an int64 ``label`` stream, classes in sorted order and their
names in the manifest. Images are kept as their encoded bytes (the files'
bytes, bit for bit) unless `image_size` asks for them decoded, converted to
RGB and resized to ``(H, W, 3)`` uint8, or `max_side` or `quality` for them
re-encoded as smaller JPEGs (both with Pillow, the ``convert`` extra)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import fingerprint

#: The JPEG quality of re-encoded images when only `max_side` is given.
DEFAULT_QUALITY = 90

#: The file name endings taken as images (torchvision's list).
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def is_image(path: Path) -> bool:
    return path.suffix.lower() in EXTENSIONS and path.is_file()


def looks_like_image_folder(root: Path) -> bool:
    """Whether `root` has a class directory holding an image."""
    return any(
        d.is_dir() and any(is_image(f) for f in d.iterdir()) for d in sorted(root.iterdir())
    )


class ImageFolderSource:
    #: Files are read, and decoded, by `workers` threads already.
    overlap = False

    def __init__(
        self, root: Path, image_size: tuple[int, int] | None, workers: int,
        reencode: tuple[int | None, int] | None = None,
    ) -> None:
        self.root = root
        self.image_size = image_size
        self.reencode = reencode
        self.workers = workers
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        self.files: list[Path] = []
        labels: list[int] = []
        for label, name in enumerate(classes):
            for f in sorted((root / name).rglob("*")):
                if is_image(f):
                    self.files.append(f)
                    labels.append(label)
        if not self.files:
            raise ValueError(f"{root}: no images in any <class>/ directory")
        self.labels = np.array(labels, dtype=np.int64)
        self.rows = len(self.files)
        self.kinds = {"image": "fixed" if image_size else "bytes", "label": "fixed"}
        self.classes = {"label": classes}
        if image_size or reencode:
            _pillow()

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"from": "images", "path": str(self.root.resolve()),
                             "files": fingerprint(self.files)}
        if self.image_size:
            d["image_size"] = list(self.image_size)
        if self.reencode:
            d["max_side"], d["quality"] = self.reencode
        return d

    def read(self, path: Path) -> Any:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ValueError(f"{path}: cannot be read: {e.strerror}") from None
        if self.reencode:
            return reencode(path, data, *self.reencode)
        if not self.image_size:
            return data
        return decode(path, data, self.image_size)

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        per = 256
        with ThreadPoolExecutor(self.workers) as pool:
            for at in range(start, self.rows, per):
                files = self.files[at : at + per]
                images = list(pool.map(self.read, files))
                if self.image_size:
                    images = np.stack(images)
                yield {"image": images, "label": self.labels[at : at + per]}


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ValueError(
            "decoding images needs Pillow: pip install 'loaderx[convert]'"
        ) from None
    return Image


def decode(path: Path, data: bytes, size: tuple[int, int]) -> np.ndarray:
    """`data`, the file at `path`, decoded to RGB and resized to `size`
    (height, width), as a uint8 array."""
    import io

    Image = _pillow()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im = im.convert("RGB")
            if im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"{path}: not a readable image: {e}") from None


def reencode(path: Path, data: bytes, max_side: int | None, quality: int) -> bytes:
    """`data`, the file at `path`, as a JPEG of `quality`, shrunk (aspect
    kept) so that neither side exceeds `max_side`. Gray images stay gray;
    every other mode becomes RGB (JPEG has no alpha)."""
    import io

    Image = _pillow()
    try:
        with Image.open(io.BytesIO(data)) as im:
            if max_side:
                # Pillow's thumbnail lets a JPEG decode at a reduced scale
                # first, then resamples with antialiasing.
                im.thumbnail((max_side, max_side), Image.LANCZOS)
            im = im.convert("L" if im.mode in ("1", "L", "I;16", "I") else "RGB")
            out = io.BytesIO()
            im.save(out, format="JPEG", quality=quality)
            return out.getvalue()
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"{path}: not a readable image: {e}") from None


def open_source(
    path: Path, kind: str, *, image_size: tuple[int, int] | None = None, workers: int = 2,
    max_side: int | None = None, quality: int | None = None, **_: Any,
) -> ImageFolderSource:
    if (max_side is not None or quality is not None) and image_size:
        raise ValueError("image_size decodes images; max_side and quality re-encode them: "
                         "choose one")
    if max_side is not None and max_side < 1:
        raise ValueError(f"max_side must be at least 1, not {max_side}")
    if quality is not None and not 1 <= quality <= 95:
        raise ValueError(f"quality must be in 1..95 (Pillow's JPEG range), not {quality}")
    reencode = None
    if max_side is not None or quality is not None:
        reencode = (max_side, DEFAULT_QUALITY if quality is None else quality)
    return ImageFolderSource(path, image_size, workers, reencode)
