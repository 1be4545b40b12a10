"""Batches come in recycled memory: what a caller can see of that."""

import gc

import numpy as np

from loaderx import Dataset, Zrecord


def test_recycled_batches_never_show_or_change_other_batches(tmp_path):
    rng = np.random.default_rng(3)
    src = rng.integers(0, 255, size=(512, 300), dtype=np.uint8)
    ds = Dataset.write(tmp_path / "d.zr", src, codec="raw")
    kept = []
    for step in range(40):
        idx = rng.integers(0, len(src), 256)
        batch = ds.__getitems__(idx)
        np.testing.assert_array_equal(batch, src[idx])
        if step % 5 == 0:
            kept.append((idx, batch))  # held while later batches are made
        else:
            batch[:] = 0  # a consumer scribbling on its batch, then dropping it
        del batch
        gc.collect()
    for idx, batch in kept:
        np.testing.assert_array_equal(batch, src[idx])
    view = ds.__getitems__(np.arange(256))[10:20]  # a view keeps the memory alive
    for _ in range(5):
        ds.__getitems__(rng.integers(0, len(src), 256))
    np.testing.assert_array_equal(view, src[10:20])
    assert view.flags.writeable
    ds.close()


def test_short_records_leave_zeros_in_their_slots(tmp_path):
    zr = Zrecord(tmp_path / "z.zr", "raw")
    long = np.full(100_000, 7, dtype=np.uint8)
    zr.append(long, 1, long.size)
    zr.append(np.full(10, 9, dtype=np.uint8), 1, 10)
    # The first batch leaves 7s behind in the recycled memory; the second
    # must not show them after its 10-byte record.
    first = zr.gather_array([0, 0], 100_000)
    del first
    second = zr.gather_array([1, 0], 100_000)
    assert (second[:10] == 9).all()
    assert (second[10:100_000] == 0).all()
    assert (second[100_000:] == 7).all()
    dst = np.full(2 * 100_000, 5, dtype=np.uint8)
    zr.gather([1, 0], dst, 100_000)
    assert (dst[10:100_000] == 0).all()
    zr.close()
