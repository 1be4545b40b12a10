"""loaderx: ours (bench/.venv) or 0.5.0 (.ref050-venv), whichever `import loaderx`
finds in this worker's interpreter; the worker checks which one it got.
`ours_unchecked` is ours with checksums=False: the baseline of the checksum
cost (bench/README.md, "Checksums by default")."""

import importlib.metadata

import loaderx


class System:
    def __init__(self, name, codec="raw", durable=True, **_):
        self.name = name
        self.codec = codec
        self.durable = durable
        self.ds = None
        self.ours = name in ("ours", "ours_unchecked")
        self.checksums = name != "ours_unchecked"

    def version(self):
        return f"loaderx {importlib.metadata.version('loaderx')} ({loaderx.__file__})"

    def store_path(self, base):
        return base.with_suffix(".zr")

    def write(self, path, array):
        if self.ours:
            ds = loaderx.Dataset.write(
                str(path), array, codec=self.codec, durable=self.durable, checksums=self.checksums
            )
        else:
            ds = loaderx.Dataset.write(str(path), array, codec=self.codec)
        if hasattr(ds, "close"):
            ds.close()

    def open(self, path):
        self.ds = loaderx.Dataset(str(path), **({} if self.checksums else {"checksums": False}))
        return len(self.ds)

    def gather(self, idxs):
        return self.ds.__getitems__(idxs)

    def close(self):
        ds, self.ds = self.ds, None
        if ds is not None and hasattr(ds, "close"):
            ds.close()
