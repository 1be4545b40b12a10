"""How far JPEG shortcuts move the pixels from Pillow's full decode, as PSNR
in dB (bench/README.md, "Image decoders"; docs/images.md, "Draft decodes").
Run: bench/.venv/bin/python bench/jpeg_psnr.py

* Draft decodes: on every third JPEG of Debian's plasma-workspace-wallpapers
  (at their own sizes), boxes of at least twice the output (224 and 256,
  two random boxes each, seeded), resized by Pillow's BILINEAR from the full
  decode and from Pillow's draft() decode at the least of 1/2, 1/4, 1/8
  that keeps the box at least the output's size (what Images(draft=True)
  does, within a level).
* libjpeg-turbo's fast options: every fifth of the 1,248 wallpaper crops
  (bench/out/wallpaper-crops) decoded by simplejpeg with fastdct,
  fastupsample or both, against Pillow's decode of the same file.
"""

import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import wallpaper_crops  # noqa: E402

CROPS = ROOT / "bench" / "out" / "wallpaper-crops"


def psnr(a, b):
    mse = ((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2).mean()
    return 10 * np.log10(255 ** 2 / max(mse, 1e-9))


def summary(name, values):
    v = sorted(values)
    print(f"| {name} | {len(v)} | {v[0]:.1f} | {v[len(v) // 20]:.1f} | {v[len(v) // 2]:.1f} |")


def draft_decodes():
    from PIL import Image

    rng = np.random.default_rng(0)
    by_scale = {2: [], 4: [], 8: []}
    for f in sorted(wallpaper_crops.WALLPAPERS.rglob("*.jpg"))[::3]:
        raw = f.read_bytes()
        full = Image.open(io.BytesIO(raw)).convert("RGB")
        w, h = full.size
        for out in (224, 256):
            for _ in range(2):
                bw = int(rng.integers(min(w, 2 * out), w + 1))
                bh = int(rng.integers(min(h, 2 * out), h + 1))
                if bw < 2 * out or bh < 2 * out:
                    continue
                left, top = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
                s = 1
                while bw >= 2 * s * out and bh >= 2 * s * out and s < 8:
                    s *= 2
                want = full.resize((out, out), Image.BILINEAR,
                                   box=(left, top, left + bw, top + bh))
                small = Image.open(io.BytesIO(raw))
                small.draft("RGB", (w // s, h // s))
                got = small.convert("RGB").resize(
                    (out, out), Image.BILINEAR,
                    box=(left / s, top / s, (left + bw) / s, (top + bh) / s))
                by_scale[s].append(psnr(got, want))
    print("Draft decode + resize against full decode + resize, dB\n")
    print("| scale | boxes | min | 5th percentile | median |\n|---|---|---|---|---|")
    for s, values in by_scale.items():
        if values:
            summary(f"1/{s}", values)
    summary("all", [v for values in by_scale.values() for v in values])


def fast_options():
    import simplejpeg
    from PIL import Image

    wallpaper_crops.make(CROPS)
    options = {"fastdct": dict(fastdct=True), "fastupsample": dict(fastupsample=True),
               "both": dict(fastdct=True, fastupsample=True)}
    values = {name: [] for name in options}
    for f in sorted(CROPS.rglob("*.jpg"))[::5]:
        raw = f.read_bytes()
        want = Image.open(io.BytesIO(raw)).convert("RGB")
        for name, kw in options.items():
            values[name].append(psnr(simplejpeg.decode_jpeg(raw, colorspace="RGB", **kw), want))
    print("\nlibjpeg-turbo's fast options against Pillow's decode, dB\n")
    print("| options | files | min | 5th percentile | median |\n|---|---|---|---|---|")
    for name, v in values.items():
        summary(name, v)


def main():
    draft_decodes()
    fast_options()


if __name__ == "__main__":
    sys.exit(main())
