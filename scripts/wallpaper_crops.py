#!/usr/bin/env python3
"""ImageNet-like photographs for the image benchmark and example: the JPEG
photographs of Debian's plasma-workspace-wallpapers (scripts/wallpapers.sh
installs them), each scaled so its shorter side is 2-3 crops high and cut
into 8 crops of 500 x 375 saved at quality 90 (Pillow), 1,248 files from 18
pictures. They are written as an image folder, ``<dest>/<picture>/<n>.jpg``,
so the picture a crop came from is its class.

    python scripts/wallpaper_crops.py DEST      # needs Pillow

Made once: a folder that already holds crops is left as it is.
"""

import random
import subprocess
import sys
from pathlib import Path

WALLPAPERS = Path("/usr/share/wallpapers")
SIZE = (500, 375)
PER_FILE = 8


def make(dest: Path) -> Path:
    """Fills `dest` with the crops unless it holds them already; returns it."""
    from PIL import Image

    if dest.is_dir() and any(dest.rglob("*.jpg")):
        return dest
    subprocess.run(["bash", str(Path(__file__).with_name("wallpapers.sh"))], check=True)
    rng = random.Random(0)
    n = 0
    w, h = SIZE
    for path in sorted(WALLPAPERS.rglob("*.jpg")):
        image = Image.open(path).convert("RGB")
        if image.width < w or image.height < h:
            continue
        scale = rng.uniform(2.0, 3.0) * h / min(image.size)
        image = image.resize((max(w, int(image.width * scale)),
                              max(h, int(image.height * scale))), Image.BILINEAR)
        picture = dest / path.relative_to(WALLPAPERS).parts[0]
        picture.mkdir(parents=True, exist_ok=True)
        for _ in range(PER_FILE):
            x = rng.randrange(image.width - w + 1)
            y = rng.randrange(image.height - h + 1)
            image.crop((x, y, x + w, y + h)).save(picture / f"{n:05d}.jpg", quality=90)
            n += 1
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    make(Path(sys.argv[1]))
