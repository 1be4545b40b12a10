"""Read-only stores: reading needs read permission only; writing to a store
opened read-only raises StoreReadOnlyError naming the store."""

import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import Dataset, RaggedDataset, StoreReadOnlyError, Zrecord

DATA = np.arange(60, dtype=np.int32).reshape(20, 3)


def test_read_only_option_reads_and_refuses_writes(tmp_path):
    Dataset.write(tmp_path / "ds", DATA, checksums=True)
    ds = Dataset(tmp_path / "ds", checksums=True, read_only=True)
    assert ds[:].tolist() == DATA.tolist() and ds._zr().read_only
    for write in (lambda: ds.delete([0]), ds.compact):
        with pytest.raises(StoreReadOnlyError, match="store opened read-only") as e:
            write()
        assert isinstance(e.value, PermissionError) and e.value.code == -2
        assert str(tmp_path / "ds") in str(e.value)
    zr = Zrecord(tmp_path / "ds", read_only=True)
    with pytest.raises(StoreReadOnlyError, match="cannot append"):
        zr.append(b"abcd" * 3, 1, 12)
    assert len(Dataset(tmp_path / "ds")) == 20  # nothing was touched
    with pytest.raises(loaderx.StoreNotFoundError):
        Zrecord(tmp_path / "missing", read_only=True)  # nothing is created
    assert not (tmp_path / "missing").exists()
    import pickle
    assert pickle.loads(pickle.dumps(ds))._zr().read_only


CHILD = textwrap.dedent(
    """
    import os
    import sys
    import numpy as np
    from loaderx import DataLoader, Dataset, RaggedDataset, StoreReadOnlyError, Zrecord

    root = sys.argv[1]
    if os.geteuid() == 0:  # root bypasses permission checks: become nobody
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    ds = Dataset(root + "/ds", checksums=True)
    assert ds._zr().read_only, "opened read-only without being asked"
    assert ds[:].tolist() == np.arange(60, dtype=np.int32).reshape(20, 3).tolist()
    loader = DataLoader(ds, batch_size=5, num_workers=2)
    assert all(next(loader)["data"].shape == (5, 3) for _ in range(4))
    loader.close()
    rg = RaggedDataset(root + "/rg")
    assert [a.tolist() for a in rg[:]] == [[1], [2, 3]]
    refused = 0
    for write in (lambda: ds.delete([0]), ds.compact,
                  lambda: Zrecord(root + "/ds").append(b"x" * 12, 1, 12)):
        try:
            write()
        except StoreReadOnlyError as e:
            assert "store opened read-only" in str(e) and root in str(e), e
            refused += 1
    assert refused == 3, refused
    print("ok")
    """
)


def test_a_store_this_user_may_not_write_opens_read_only():
    """Files 0444 in a 0555 directory, read by a user other than their
    owner: as root (which bypasses permission checks) the child drops to
    uid 65534 before it opens anything."""
    root = Path(tempfile.mkdtemp(prefix="loaderx-ro-"))
    try:
        Dataset.write(root / "ds", DATA, checksums=True)
        RaggedDataset.write(root / "rg", [np.array([1]), np.array([2, 3])])
        for path in sorted(root.rglob("*"), reverse=True):
            path.chmod(0o555 if path.is_dir() else 0o444)
        root.chmod(0o555)
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(root)],
            capture_output=True, text=True, timeout=120,
        )
        assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(stat.S_IRWXU)
        subprocess.run(["rm", "-rf", str(root)], check=True)
