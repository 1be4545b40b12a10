"""Which JPEG decoder the image pipeline builds on: images per second on
one core, on ImageNet-sized photographs (bench/README.md, "Image
decoders"). Run: bench/.venv/bin/python bench/image_decoders.py

The set: 1,248 crops of 500 x 375 (quality 90) cut from the photographs of
Debian's plasma-workspace-wallpapers by scripts/wallpaper_crops.py, made
once into bench/out/wallpaper-crops.
Timed, medians of 3 rounds over every file:
* ours (crates/zimage: libjpeg-turbo 3.1, built by turbojpeg-sys): a full
  decode to RGB, and the training pipeline (decode of the region the crop
  reads, random-resized crop to 224 x 224, flip), on one core, without and
  with draft (scaled decodes); then the pipeline through the loader's image
  stream with 2 workers (crates/zloader/examples/image_loader_speed.rs);
* libjpeg-turbo through simplejpeg: a full decode to RGB, the physical
  limit the image issue sets;
* Pillow: a full decode, and decode + crop + bilinear resize to 224.
Then the same for ours and simplejpeg on the wallpapers' own JPEGs, at
their own sizes (720 x 1440 to 5120 x 2880), where draft applies.
"""

import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import wallpaper_crops  # noqa: E402

CROPS = ROOT / "bench" / "out" / "wallpaper-crops"


def rate(fn, files):
    start = time.perf_counter()
    for f in files:
        fn(f)
    return len(files) / (time.perf_counter() - start)


def main():
    import simplejpeg
    from PIL import Image

    wallpaper_crops.make(CROPS)
    files = [p.read_bytes() for p in sorted(CROPS.rglob("*.jpg"))]
    ours = loader_speed(CROPS)

    def pillow_crop(f):
        Image.open(io.BytesIO(f)).convert("RGB").resize(
            (224, 224), Image.BILINEAR, box=(50, 40, 400, 300))

    def limit(files):
        return statistics.median(
            rate(lambda f: simplejpeg.decode_jpeg(f, colorspace="RGB"), files) for _ in range(3))

    rows = {
        **one_core(ours),
        "ours through the loader, 2 workers (both cores), batch 256":
            statistics.median(r[3] for r in ours),
        "libjpeg-turbo (simplejpeg): full decode": limit(files),
        "Pillow: full decode": statistics.median(
            rate(lambda f: Image.open(io.BytesIO(f)).convert("RGB").load(), files)
            for _ in range(3)),
        "Pillow: decode + crop + resize 224": statistics.median(
            rate(pillow_crop, files) for _ in range(3)),
    }
    table(f"{len(files)} JPEGs of 500 x 375 (quality 90), one core unless said", rows)

    photos = sorted(wallpaper_crops.WALLPAPERS.rglob("*.jpg"))
    ours = loader_speed(wallpaper_crops.WALLPAPERS)
    rows = {
        **one_core(ours),
        "libjpeg-turbo (simplejpeg): full decode": limit([p.read_bytes() for p in photos]),
    }
    table(f"{len(photos)} JPEGs of the wallpapers at their own sizes, one core", rows)


def loader_speed(folder):
    """The rates of image_loader_speed over `folder`, a tuple per round."""
    out = subprocess.run(
        ["cargo", "run", "--release", "-q", "-p", "zloader", "--example", "image_loader_speed",
         "--", str(folder), "2", "4", "3"], cwd=ROOT, check=True, capture_output=True,
        text=True).stdout
    return [tuple(map(float, line.split())) for line in out.split("\n") if line.strip()]


def one_core(ours):
    """The medians of the one-core rates of loader_speed's rounds, by name."""
    names = ["ours (libjpeg-turbo): full decode",
             "ours: decode of the crop's region + random-resized crop 224 + flip",
             "ours: the same with draft (scaled decodes)"]
    return {name: statistics.median(r[k] for r in ours) for k, name in enumerate(names)}


def table(title, rows):
    limit = rows["libjpeg-turbo (simplejpeg): full decode"]
    print(f"{title}\n")
    print("| decoder | images/s | / libjpeg-turbo full decode |\n|---|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:,.0f} | {value / limit:.2f}× |")
    print()


if __name__ == "__main__":
    sys.exit(main())
