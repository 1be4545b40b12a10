"""HDF5 (h5py): one contiguous, uncompressed dataset (h5py's default layout);
a batch is one fancy-indexed read of the sorted unique indices (h5py requires
increasing indices), reordered into request order."""

import numpy as np

import h5py

from . import chunks


class System:
    def __init__(self, name, **_):
        self.f = None

    def version(self):
        return f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version})"

    def store_path(self, base):
        return base.with_suffix(".h5")

    def write(self, path, array):
        with h5py.File(path, "w") as f:
            d = f.create_dataset("x", shape=array.shape, dtype=array.dtype)
            for start, stop in chunks(array):
                d[start:stop] = array[start:stop]

    def open(self, path):
        self.f = h5py.File(path, "r")
        self.d = self.f["x"]
        return len(self.d)

    def gather(self, idxs):
        uniq, inverse = np.unique(idxs, return_inverse=True)
        return self.d[uniq][inverse]

    def close(self):
        f, self.f = self.f, None
        if f is not None:
            f.close()
