"""Image streams: encoded images (JPEG, PNG, WebP) of a byte stream decoded,
cropped, resized, flipped and normalised natively, on the loader's worker
threads and without the GIL, straight into a fixed-shape batch.

``DataLoader(table, images={'image': Images(224, crop='random', flip=True)})``
delivers the table's ``image`` stream as a ``uint8`` array of shape
``(batch, 224, 224, 3)`` (``float32`` with ``mean`` and ``std``). Each
sample's random box and flip are drawn from its seed (the loader's seed, the
step and the sample's position in the global batch), so a resumed loader,
or one with another number of workers or hosts, produces the same pixels.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._native import ImagePipeline

#: What ``crop=`` may be: the whole image resized to the output, a centre
#: box of the output's aspect, or a random-resized box.
CROPS = ("resize", "center", "random")

#: What ``on_error=`` may be: fail the step, or deliver a blank sample.
ON_ERROR = ("raise", "blank")


class Images:
    """What every image of an image stream becomes.

    Args:
        size: the output's ``(height, width)``, or one int for a square.
        channels: 1 (gray), 3 (RGB) or 4 (RGBA); other sources are
            converted (RGB to gray by ITU-R 601-2 weights, as Pillow's
            ``convert('L')``; alpha dropped, or added opaque).
        crop: ``'resize'`` (the whole image, its aspect ratio changed),
            ``'center'`` (the central box of the output's aspect, `fraction`
            of the largest such box on each side: ``224/256`` is "resize to
            256, crop 224"), or ``'random'`` (torchvision's
            ``RandomResizedCrop``: a box of `scale` of the image's area and
            aspect `ratio`, drawn uniformly in log scale; ten tries, then
            the central box of the nearest allowed ratio).
        fraction, scale, ratio: the crop's parameters (see `crop`).
        flip: mirror left to right on a fair coin.
        mean, std: per channel; when given, values are delivered as
            ``float32`` ``(value / 255 - mean) / std``.
        max_pixels: images that declare more pixels are refused before they
            are decoded (a decompression bomb).
        draft: let a JPEG whose box is at least twice the output each way
            decode at 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's scaled
            inverse DCT), the least at which the box keeps the output's
            pixels, as Pillow's ``draft()`` does: faster on photographs much
            larger than the output (1.2 times on the benchmark's, up to
            5120 x 2880), and pixels that differ slightly from a full
            decode's (see docs/images.md).
        antialias: when shrinking, average every source pixel under an
            output pixel (the default, Pillow's ``BILINEAR``); False
            interpolates each output pixel from its two nearest source
            pixels each way, as ``tf.image.resize`` and torchvision's
            ``antialias=False`` do, for the pixels of pipelines built on
            those; a box shrunk to less than half its size aliases. It is
            no faster on the benchmark's random crops of photographs.
        on_error: what a record that is not a decodable image does:
            ``'raise'`` fails its step with a ValueError naming the record;
            ``'blank'`` makes it a blank sample (every value zero) and marks
            it False in the batch's ``'<stream>_decoded'`` entry, a bool
            array of the batch's length, so that one bad file among millions
            does not stop a training run.

    The box is resized with a bilinear filter (see `antialias`). A record
    that is not a JPEG, PNG or WebP, or is truncated, damaged, empty or over
    `max_pixels`, is a bad image (see `on_error`).
    """

    def __init__(
        self,
        size: int | Sequence[int],
        *,
        channels: int = 3,
        crop: str = "resize",
        fraction: float = 224 / 256,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        max_pixels: int = ImagePipeline.DEFAULT_MAX_PIXELS,
        draft: bool = False,
        antialias: bool = True,
        on_error: str = "raise",
    ) -> None:
        if isinstance(size, (bool, np.bool_)):
            raise TypeError("size must be an int or (height, width)")
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        height, width = operator.index(height), operator.index(width)
        if crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}, not {crop!r}")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        mean = None if mean is None else [float(m) for m in mean]
        std = None if std is None else [float(s) for s in std]
        self.native = ImagePipeline(
            height, width, channels, crop, float(fraction),
            (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1])), bool(flip),
            mean, std, max_pixels, on_error == "blank", bool(draft), bool(antialias),
        )
        #: The shape of one sample, and its dtype.
        self.shape = (height, width, channels)
        self.dtype = np.dtype(np.float32 if mean is not None else np.uint8)
        #: What a loader state records of the pipeline.
        self.identity: dict[str, Any] = {
            "size": [height, width], "channels": channels, "crop": crop,
            "fraction": float(fraction), "scale": [float(s) for s in scale],
            "ratio": [float(r) for r in ratio], "flip": bool(flip), "mean": mean, "std": std,
            "on_error": on_error,
        }
        # Only where set, so that states saved before the option existed
        # still match.
        if draft:
            self.identity["draft"] = True
        if not antialias:
            self.identity["antialias"] = False

    def __repr__(self) -> str:
        i = self.identity
        # The options that mean something for this pipeline: its crop's own
        # parameters, and what differs from the defaults.
        shown = {"channels": i["channels"], "crop": i["crop"]}
        if i["crop"] == "center":
            shown["fraction"] = i["fraction"]
        if i["crop"] == "random":
            shown.update(scale=tuple(i["scale"]), ratio=tuple(i["ratio"]))
        shown.update({k: i[k] for k in ("flip", "mean", "std", "draft") if i.get(k)})
        if i.get("antialias") is False:
            shown["antialias"] = False
        if i["on_error"] != "raise":
            shown["on_error"] = i["on_error"]
        options = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"Images({tuple(i['size'])}, {options})"
