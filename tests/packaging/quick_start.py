"""The README's quick start as one program, run against an installed loaderx.

scripts/smoke-test-wheel.sh runs it from an empty folder in a fresh virtual
environment; it prints the batch shapes and where loaderx was imported from.
"""

import pathlib

import numpy as np

import loaderx
from loaderx import DataLoader, Dataset

np.save("data.npy", np.random.rand(1000, 3, 32, 32).astype(np.float32))
np.save("label.npy", np.random.randint(0, 10, size=1000).astype(np.int64))
Dataset.write("train_data.zr", np.load("data.npy", mmap_mode="r"))
Dataset.write("train_label.zr", np.load("label.npy", mmap_mode="r"))

dataset = Dataset("train_data.zr")
labelset = Dataset("train_label.zr")
with DataLoader(dataset, labelset) as loader:
    for i, batch in enumerate(loader):
        if i >= 256:
            break
print(batch["data"].shape, batch["label"].shape)
assert np.array_equal(dataset[:10], np.load("data.npy")[:10])
print("imported from", pathlib.Path(loaderx.__file__).parent.parent.name)
