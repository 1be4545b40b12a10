#!/usr/bin/env python3
"""A JAX training loop on Fashion-MNIST fed by loaderx, Flax-style: a pure
``train_step`` under ``jax.jit``, batches put on device two steps ahead,
one shard of every global batch per host, and checkpoints that resume the
data stream exactly.

    python examples/jax_loop.py                    # 600 steps, then evaluate
    python examples/jax_loop.py --steps 300        # stop early (a "preemption")
    python examples/jax_loop.py --steps 600 --resume   # continue from the checkpoint

Needs JAX (``pip install jax``) and the Fashion-MNIST IDX files (the Debian
package dataset-fashion-mnist, or set FASHION_MNIST_DIR). The stores are
written once into --workdir. Runs as is on several hosts: every process
takes ``shard=(jax.process_index(), jax.process_count())``.
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
    import jax
    import jax.numpy as jnp
except ImportError:
    sys.exit("examples/jax_loop.py needs JAX, which is not installed: pip install jax")

from loaderx import DataLoader, Dataset
from loaderx.jax import device_put_iterator

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
    return {"image": x, "label": batch["label"].astype(np.int32)}


def init_params(key, hidden=256):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (784, hidden)) * jnp.sqrt(2.0 / 784),
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, 10)) * jnp.sqrt(1.0 / hidden),
        "b2": jnp.zeros(10),
    }


def logits_fn(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss_fn(params, batch):
    logits = logits_fn(params, batch["image"])
    labels = jax.nn.one_hot(batch["label"], 10)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


@jax.jit
def train_step(params, batch, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, loss


def save_checkpoint(path, params, loader_state):
    path.mkdir(parents=True, exist_ok=True)
    np.savez(path / "params.npz", **{k: np.asarray(v) for k, v in params.items()})
    (path / "loader.json").write_text(json.dumps(loader_state))


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

    ds = convert(SOURCE, args.workdir)
    ckpt = args.workdir / "jax-checkpoint"
    params, state = init_params(jax.random.PRNGKey(args.seed)), None
    if args.resume and (ckpt / "loader.json").is_file():
        params = {k: jnp.asarray(v) for k, v in np.load(ckpt / "params.npz").items()}
        state = json.loads((ckpt / "loader.json").read_text())
        print(f"resuming at step {state['step']}")

    loader = DataLoader(
        {"image": ds["train_images"], "label": ds["train_labels"]},
        batch_size=args.batch_size, mode=2, seed=args.seed,        # SHUFFLE, epoch after epoch
        shard=(jax.process_index(), jax.process_count()),          # this host's part
        transform=to_float, state=state,
    )
    batches = device_put_iterator(loader, size=2)   # 2 steps in flight to the device
    t0, losses = time.perf_counter(), []
    with batches:
        for step in range(loader.step, args.steps):
            params, loss = train_step(params, next(batches), args.lr)
            losses.append(loss)
            if (step + 1) % args.checkpoint_every == 0 or step + 1 == args.steps:
                # The iterator's state: the batches already on their way to
                # the device are not counted, so resuming repeats none.
                save_checkpoint(ckpt, params, batches.state_dict())
                print(f"step {step + 1:5d}  loss {float(np.mean(jax.device_get(losses))):.4f}  "
                      f"checkpoint at loader step {batches.state_dict()['step']}")
                losses = []
    print(f"trained in {time.perf_counter() - t0:.1f}s")

    x = ds["test_images"][:].reshape(-1, 784).astype(np.float32) / 255.0
    accuracy = float(jnp.mean(jnp.argmax(logits_fn(params, x), -1) == ds["test_labels"][:]))
    print(f"test accuracy {accuracy:.2%}")
    for d in ds.values():
        d.close()
    return accuracy


if __name__ == "__main__":
    main()
