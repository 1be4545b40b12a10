"""NumPy .npy files: np.load(mmap_mode='r') fancy indexing (numpy_mmap), and the
whole array in RAM (numpy_ram, the ceiling: no store at all)."""

import numpy as np


class System:
    def __init__(self, name, **_):
        self.name = name
        self.arr = None

    def version(self):
        return f"numpy {np.__version__}"

    def store_path(self, base):
        return base.with_suffix(".npy")

    def write(self, path, array):
        # np.save of an mmapped array streams it (array.tofile in buffer-sized pieces).
        np.save(path, array)

    def open(self, path):
        if self.name == "numpy_ram":
            self.arr = np.load(path)
        else:
            self.arr = np.load(path, mmap_mode="r")
        return len(self.arr)

    def gather(self, idxs):
        return self.arr[idxs]

    def close(self):
        self.arr = None
