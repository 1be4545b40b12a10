#!/usr/bin/env python3
"""A PyTorch training loop on Fashion-MNIST fed by loaderx: the loader as a
``torch.utils.data.IterableDataset`` (batches reach torch through DLPack,
without a copy), one shard of every global batch per rank, and checkpoints
that resume the data stream exactly.

    python examples/torch_loop.py                      # 600 steps, then evaluate
    python examples/torch_loop.py --steps 300          # stop early (a "preemption")
    python examples/torch_loop.py --steps 600 --resume # continue from the checkpoint

Needs PyTorch and the Fashion-MNIST IDX files (the Debian package
dataset-fashion-mnist, or set FASHION_MNIST_DIR). The stores are written
once into --workdir. Under torch.distributed every rank takes
``shard=(rank, world_size)``.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

try:
    import torch
except ImportError:
    sys.exit("examples/torch_loop.py needs PyTorch, which is not installed: pip install torch")

from loaderx import Dataset
from loaderx.torch import IterableLoader

SOURCE = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
FILES = {"train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
         "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    _, _, ndim = struct.unpack(">HBB", raw[:4])
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def convert(source, workdir):
    """Fashion-MNIST into one loaderx store per array (once)."""
    for name, file in FILES.items():
        path = workdir / f"{name}.zr"
        if not (path / "schema.json").is_file():
            if not (source / file).is_file():
                sys.exit(f"Fashion-MNIST not found in {source}: install dataset-fashion-mnist "
                         "or set FASHION_MNIST_DIR")
            Dataset.write(path, read_idx(source / file)).close()
    return {name: Dataset(workdir / f"{name}.zr") for name in FILES}


def to_float(batch):
    """Loader transform (runs on a loader thread): uint8 images to float32."""
    x = batch["image"].reshape(len(batch["image"]), -1).astype(np.float32) / 255.0
    return {"image": x, "label": batch["label"].astype(np.int64)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("data/fashion-mnist-stores"))
    p.add_argument("--steps", type=int, default=600, help="train until this global step")
    p.add_argument("--batch-size", type=int, default=256, help="global batch size")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    rank, world = 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    ds = convert(SOURCE, args.workdir)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    data = IterableLoader(
        {"image": ds["train_images"], "label": ds["train_labels"]},
        batch_size=args.batch_size, mode=2, seed=args.seed,   # SHUFFLE, epoch after epoch
        shard=(rank, world), transform=to_float,              # this rank's part
    )
    ckpt = args.workdir / "torch-checkpoint.pt"
    start = 0
    if args.resume and ckpt.is_file():
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        data.load_state_dict(json.loads(saved["loader"]))
        start = saved["step"]
        print(f"resuming at step {start}")

    # The loader batches and prefetches on its own threads: batch_size=None
    # and no worker processes.
    batches = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)
    t0, losses = time.perf_counter(), []
    for step, batch in zip(range(start, args.steps), batches):
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if (step + 1) % args.checkpoint_every == 0 or step + 1 == args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                        "loader": json.dumps(data.state_dict())}, ckpt)
            print(f"step {step + 1:5d}  loss {np.mean(losses):.4f}  "
                  f"checkpoint at loader step {data.state_dict()['step']}")
            losses = []
    data.close()
    print(f"trained in {time.perf_counter() - t0:.1f}s")

    with torch.no_grad():
        x = torch.from_numpy(ds["test_images"][:].reshape(-1, 784).astype(np.float32) / 255.0)
        pred = model(x).argmax(-1).numpy()
    accuracy = float((pred == ds["test_labels"][:]).mean())
    print(f"test accuracy {accuracy:.2%}")
    for d in ds.values():
        d.close()
    return accuracy


if __name__ == "__main__":
    main()
