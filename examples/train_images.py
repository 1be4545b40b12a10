#!/usr/bin/env python3
"""Train a NumPy classifier on image files decoded by loaderx's image streams.

The images stay encoded in the tables (PNG or JPEG files' bytes, as
``loaderx.convert`` stores an image folder); the loader's native workers
decode, crop, resize, flip and normalise them into float32 batches.

``fashion``: Fashion-MNIST's IDX files (scripts/fashion-mnist.sh installs
them) written once as 28 x 28 gray PNGs, ``<workdir>/{train,test}/<class>/<n>.png``;
softmax regression by minibatch SGD, evaluated on the 10,000 test images.

``wallpapers``: 1,248 JPEG crops of 500 x 375 from 18 photographs
(scripts/wallpaper_crops.py), the photograph a crop came from its class;
every 5th crop of a class is held out for the test. Training draws
random-resized crops with flips; the test takes the central crop. A
one-hidden-layer MLP (ReLU) learns the 18 classes.

    python examples/train_images.py fashion           # the full runs
    python examples/train_images.py wallpapers
    python examples/train_images.py fashion --steps 150 --train-limit 5000 \\
        --test-limit 1000                             # smoke tests
    python examples/train_images.py wallpapers --steps 100 --batch-size 32 \\
        --size 32 --hidden 64

``main(argv)`` returns a dict of the results, for a test to check
(tests/python/test_image_examples.py).
"""

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

# The loader's workers decode on every core, and BLAS threads of NumPy's own
# spin against them: on 2 cores a step of the MLP took 5x as long. Only
# effective when this runs before NumPy is first imported (as a script).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import loaderx  # noqa: E402
from loaderx import DataLoader, Images, Sampler  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The IDX reading and the softmax step of the Fashion-MNIST example, and the
# crop maker of the image benchmark, are imported, not copied.
sys.path[:0] = [str(REPO / "examples"), str(REPO / "scripts")]
import train_fashion_mnist as fashion_mnist  # noqa: E402
import wallpaper_crops  # noqa: E402

# ImageNet's per-channel statistics: the wallpapers are photographs too.
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

DEFAULTS = {
    "fashion": {"workdir": REPO / "data" / "fashion-mnist-png",
                "steps": 1500, "batch_size": 128, "lr": 0.1, "size": 28, "hidden": 0},
    "wallpapers": {"workdir": REPO / "data" / "wallpapers",
                   "steps": 600, "batch_size": 64, "lr": 0.05, "size": 48, "hidden": 128},
}


def count_files(folder):
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def write_pngs(images, labels, folder):
    """``folder/<class>/<n>.png`` for every image, unless it holds them all
    already (a smaller or larger set from other limits is replaced)."""
    from PIL import Image

    if count_files(folder) == len(images):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    # The converter numbers classes in sorted order: a digit first keeps
    # that order the IDX labels' one.
    names = [f"{k}-{name.replace('/', '-')}" for k, name in enumerate(fashion_mnist.CLASSES)]
    for name in names:
        (folder / name).mkdir(parents=True)
    for n, (image, label) in enumerate(zip(images, labels)):
        Image.fromarray(image).save(folder / names[label] / f"{n:05d}.png")
    return True


def split_crops(crops, workdir):
    """Hard links (copies across file systems) of the crops into
    ``workdir/train`` and ``workdir/test``: every 5th crop of each class to
    the test, so both hold every class."""
    for split in ("train", "test"):
        shutil.rmtree(workdir / split, ignore_errors=True)
    for picture in sorted(p for p in crops.iterdir() if p.is_dir()):
        for n, crop in enumerate(sorted(picture.glob("*.jpg"))):
            dest = workdir / ("test" if n % 5 == 0 else "train") / picture.name / crop.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(crop, dest)
            except OSError:
                shutil.copyfile(crop, dest)


def convert(folder, dest):
    """The image folder as a table; the files' bytes are stored raw, since
    PNG and JPEG are compressed already. Made anew each time (so a crash
    costs nothing and it need not be durable): the converter would continue
    a table of the same folder path even if the folder now holds other
    files."""
    shutil.rmtree(dest, ignore_errors=True)
    return loaderx.convert(folder, dest, source="images", codec="raw", durable=False,
                           progress=False)


def prepare_fashion(args):
    arrays = fashion_mnist.load_source(args.source, args.train_limit)
    if args.test_limit:
        arrays["test_images"] = arrays["test_images"][:args.test_limit]
        arrays["test_labels"] = arrays["test_labels"][:args.test_limit]
    t0 = time.perf_counter()
    wrote = [write_pngs(arrays[f"{s}_images"], arrays[f"{s}_labels"], args.workdir / s)
             for s in ("train", "test")]
    print(f"PNG folders in {args.workdir}: "
          f"{'written' if any(wrote) else 'already there'}, {time.perf_counter() - t0:.1f}s")
    # The training pixels' mean and std (one gray channel), from their
    # histogram rather than a float copy of them all.
    counts = np.bincount(arrays["train_images"].ravel(), minlength=256)
    values = np.arange(256) / 255
    mean = counts @ values / counts.sum()
    std = np.sqrt(counts @ (values - mean) ** 2 / counts.sum())
    pipeline = Images(args.size, channels=1, mean=[mean], std=[std])
    return pipeline, pipeline


def prepare_wallpapers(args):
    t0 = time.perf_counter()
    crops = wallpaper_crops.make(args.crops)
    split_crops(crops, args.workdir)
    print(f"crops in {crops}, split into {args.workdir}/{{train,test}}: "
          f"{time.perf_counter() - t0:.1f}s")
    norm = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    train = Images(args.size, crop="random", scale=(0.35, 1.0), flip=True, **norm)
    test = Images(args.size, crop="center", **norm)
    return train, test


class Model:
    """Softmax regression (``hidden=0``) or an MLP with one ReLU layer,
    trained by plain SGD on the mean cross-entropy."""

    def __init__(self, inputs, classes, hidden, seed):
        rng = np.random.default_rng(seed)
        self.hidden = hidden
        if hidden:
            # He initialisation for the ReLU layer; zeros are enough on top.
            scale = np.sqrt(2 / inputs)
            self.W1 = (rng.standard_normal((inputs, hidden)) * scale).astype(np.float32)
            self.b1 = np.zeros(hidden, np.float32)
        self.W = np.zeros((hidden or inputs, classes), np.float32)
        self.b = np.zeros(classes, np.float32)

    def logits(self, x):
        return self._features(x) @ self.W + self.b

    def _features(self, x):
        return np.maximum(x @ self.W1 + self.b1, 0) if self.hidden else x

    def step(self, x, y, lr):
        """One SGD step; the batch's loss."""
        if not self.hidden:
            return fashion_mnist.softmax_sgd_step(self.W, self.b, x, y, lr)
        h = self._features(x)
        p = h @ self.W + self.b
        p -= p.max(axis=1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = float(-np.log(p[rows, y] + 1e-12).mean())
        p[rows, y] -= 1.0
        p /= len(y)
        dh = (p @ self.W.T) * (h > 0)
        self.W -= lr * (h.T @ p)
        self.b -= lr * p.sum(axis=0)
        self.W1 -= lr * (x.T @ dh)
        self.b1 -= lr * dh.sum(axis=0)
        return loss


def flat(images):
    return images.reshape(len(images), -1)


def train(table, pipeline, model, args):
    loader = DataLoader(table, batch_size=args.batch_size, num_workers=args.workers,
                        mode=Sampler.Mode.SHUFFLE, seed=args.seed, images={"image": pipeline})
    losses = []
    wait = 0.0
    with loader:
        batch = next(loader)  # the pipeline's start-up is not training throughput
        assert batch["image"].shape == (args.batch_size, *pipeline.shape), batch["image"].shape
        assert batch["image"].dtype == np.float32
        t0 = time.perf_counter()
        for step in range(args.steps):
            if step:
                tw = time.perf_counter()
                batch = next(loader)
                wait += time.perf_counter() - tw
            lr = args.lr * 0.5 * (1.0 + np.cos(np.pi * step / args.steps))  # cosine decay
            losses.append(model.step(flat(batch["image"]), batch["label"], np.float32(lr)))
            if (step + 1) % max(1, args.steps // 6) == 0 or step + 1 == args.steps:
                print(f"  step {step + 1:5d}  loss {np.mean(losses[-50:]):.4f}  lr {lr:.4f}")
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "images_s": args.steps * args.batch_size / seconds,
            "wait_fraction": wait / seconds, "loss": float(np.mean(losses[-50:]))}


def evaluate(table, pipeline, model, args):
    """One finite, ordered pass over the test table."""
    predictions, labels = [], []
    with DataLoader(table, batch_size=args.batch_size, num_workers=args.workers,
                    mode=Sampler.Mode.SEQUENTIAL, epochs=1, images={"image": pipeline}) as loader:
        for batch in loader:
            predictions.append(np.argmax(model.logits(flat(batch["image"])), axis=1))
            labels.append(batch["label"])
    predictions, labels = np.concatenate(predictions), np.concatenate(labels)
    assert len(labels) == table.rows
    counts = np.bincount(labels)
    return {
        "accuracy": float((predictions == labels).mean()),
        "chance": float(counts.max() / len(labels)),  # always guessing the largest class
        "per_class": [float((predictions[labels == c] == c).mean()) if counts[c] else None
                      for c in range(len(counts))],
    }


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted(DEFAULTS))
    p.add_argument("--workdir", type=Path,
                   help="where the image folders and tables go (default: data/fashion-mnist-png "
                        "or data/wallpapers)")
    p.add_argument("--steps", type=int, help="SGD steps (default: 1500 or 600)")
    p.add_argument("--batch-size", type=int, help="default: 128 or 64")
    p.add_argument("--lr", type=float,
                   help="peak learning rate, cosine decay (default: 0.1 or 0.05)")
    p.add_argument("--size", type=int, help="side of the square images the loader delivers "
                                            "(default: 28 or 48)")
    p.add_argument("--hidden", type=int,
                   help="hidden units, 0 for softmax regression (default: 0 or 128)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader num_workers")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--source", type=Path, default=fashion_mnist.DEFAULT_SOURCE,
                   help="fashion: directory of the IDX .gz files (default: %(default)s)")
    p.add_argument("--train-limit", type=int, help="fashion: the first N training images only")
    p.add_argument("--test-limit", type=int, help="fashion: the first N test images only")
    p.add_argument("--crops", type=Path, default=REPO / "data" / "wallpaper-crops",
                   help="wallpapers: the crops' folder, made once (default: %(default)s)")
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.dataset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()
    print(f"loaderx {loaderx.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs")
    prepare = prepare_fashion if args.dataset == "fashion" else prepare_wallpapers
    train_images, test_images = prepare(args)

    t0 = time.perf_counter()
    tables = {s: convert(args.workdir / s, args.workdir / "tables" / s) for s in ("train", "test")}
    train_table, test_table = tables["train"], tables["test"]
    classes = train_table.classes["label"]
    assert test_table.classes["label"] == classes, "the splits number their classes differently"
    print(f"converted: train {train_table.rows} and test {test_table.rows} images of "
          f"{len(classes)} classes, {time.perf_counter() - t0:.1f}s")

    model = Model(int(np.prod(train_images.shape)), len(classes), args.hidden, args.seed)
    kind = f"MLP ({args.hidden} hidden)" if args.hidden else "softmax regression"
    print(f"\n== training: {kind}, {args.steps} steps of {args.batch_size}, {train_images}, "
          f"{args.workers} workers")
    tr = train(train_table, train_images, model, args)
    print(f"  {tr['seconds']:.1f}s  {tr['images_s']:.0f} images/s through the loader, "
          f"{tr['wait_fraction']:.0%} of the time waiting for it")

    print(f"\n== evaluation: one pass over the test table, {test_images}")
    ev = evaluate(test_table, test_images, model, args)
    print("  " + "  ".join(f"{name}: {a:.0%}" for name, a in zip(classes, ev["per_class"])
                           if a is not None))
    print(f"  test accuracy: {ev['accuracy']:.2%}  "
          f"(chance, the largest class: {ev['chance']:.2%})")
    for table in tables.values():
        table.close()
    total = time.perf_counter() - t_start
    print(f"\ndone in {total:.1f}s")
    return {"dataset": args.dataset, "train_rows": train_table.rows, "test_rows": test_table.rows,
            "train": tr, **ev, "seconds": total}


if __name__ == "__main__":
    main()
