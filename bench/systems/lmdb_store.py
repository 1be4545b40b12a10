"""LMDB (py-lmdb): one key per sample (8-byte big-endian index), written with
putmulti(append=True) in 64 MiB transactions; a batch is one read transaction
of txn.get per index, copied into the output array."""

import numpy as np

import lmdb

from . import chunks


def key(i):
    return int(i).to_bytes(8, "big")


class System:
    def __init__(self, name, **_):
        self.env = None

    def version(self):
        return f"lmdb {lmdb.__version__} (LMDB {'.'.join(map(str, lmdb.version()))})"

    def store_path(self, base):
        return base.with_suffix(".lmdb")

    def write(self, path, array):
        row = array[0].nbytes
        # Overflow pages round every value up to whole 4 KiB pages; leave room.
        map_size = int(len(array) * ((row + 4095) // 4096 + 1) * 4096 * 1.25) + (64 << 20)
        env = lmdb.open(str(path), map_size=map_size, subdir=True)
        try:
            for start, stop in chunks(array):
                block = np.ascontiguousarray(array[start:stop])
                with env.begin(write=True) as txn:
                    txn.cursor().putmulti(
                        ((key(start + j), block[j].tobytes()) for j in range(stop - start)),
                        append=True,
                    )
        finally:
            env.close()  # sync=True (the default): committed durably

    def open(self, path):
        self.env = lmdb.open(str(path), readonly=True, lock=False,
                             subdir=True)
        self.shape = None
        with self.env.begin() as txn:
            return txn.stat()["entries"]

    def set_layout(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)

    def gather(self, idxs):
        out = np.empty((len(idxs), *self.shape), dtype=self.dtype)
        flat = out.reshape(len(idxs), -1).view(np.uint8)
        with self.env.begin(buffers=True) as txn:
            get = txn.get
            for j, i in enumerate(idxs.tolist()):
                flat[j] = np.frombuffer(get(key(i)), dtype=np.uint8)
        return out

    def close(self):
        env, self.env = self.env, None
        if env is not None:
            env.close()
