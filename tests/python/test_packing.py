"""PackedLoader: ragged token streams packed into [batch, length] rows,
checked against the samples themselves: every row is whole samples (or
pieces of long ones) back to back, segment ids and positions describe them,
no token is lost or doubled over an epoch, streams packed alongside stay
aligned, and a resume continues exactly."""

import json

import numpy as np
import pytest

from loaderx import Dataset, PackedLoader, RaggedDataset

LENGTHS = np.random.default_rng(0).integers(1, 40, 300)


@pytest.fixture
def table(tmp_path):
    """Token samples whose values say which sample and which token they
    are (1000 * sample + token), and a mask stream of the same lengths."""
    samples = [1000 * s + np.arange(n, dtype=np.int32) for s, n in enumerate(LENGTHS)]
    out = {
        "tokens": RaggedDataset.write(tmp_path / "tokens", samples, durable=False),
        "mask": RaggedDataset.write(tmp_path / "mask",
                                    [(t % 2).astype(np.int8) for t in samples], durable=False),
        "label": Dataset.write(tmp_path / "label", np.arange(len(LENGTHS)), durable=False),
    }
    yield out
    for ds in out.values():
        ds.close()


def segments_of(batch, length):
    """Every (sample, first token, tokens) segment of a batch, checking
    each row's layout on the way."""
    found = []
    for row, seg, pos, mask in zip(batch["tokens"], batch["segment_ids"], batch["positions"],
                                   batch["mask"]):
        assert row.shape == (length,)
        used = seg > 0
        assert used.any() and np.all(used[: used.sum()]), "segments first, padding after"
        assert (row[~used] == 0).all() and (pos[~used] == 0).all()
        assert np.array_equal(mask, (row % 2).astype(np.int8))
        for k in range(1, seg.max() + 1):
            where = np.flatnonzero(seg == k)
            tokens = row[where]
            assert np.array_equal(pos[where], np.arange(len(where)))
            sample, first = divmod(int(tokens[0]), 1000)
            assert np.array_equal(tokens, 1000 * sample + first + np.arange(len(where)))
            found.append((sample, first, len(where)))
    return found


@pytest.mark.parametrize("method", ["first-fit", "best-fit"])
def test_an_epoch_of_packed_rows_holds_every_token_once(table, method):
    length = 32
    total = int(LENGTHS.sum())
    # One window is the whole dataset, in order: its rows (the first
    # `total` tokens delivered) hold each sample once.
    with PackedLoader(table, length, batch_size=8, streams=["tokens", "mask"], method=method,
                      window=len(LENGTHS), mode=0) as loader:
        found, tokens = [], 0
        while tokens < total:
            for segment in segments_of(next(loader), length):
                if tokens < total:
                    found.append(segment)
                    tokens += segment[2]
    assert tokens == total
    by_sample = {}
    for sample, first, n in found:
        by_sample.setdefault(sample, []).append((first, n))
    assert sorted(by_sample) == list(range(len(LENGTHS)))
    for s, n in enumerate(LENGTHS):
        pieces = sorted(by_sample[s])
        assert [p[0] for p in pieces] == list(range(0, n, length)), s
        assert sum(p[1] for p in pieces) == n


def test_long_samples_are_dropped_on_request(table):
    with PackedLoader(table, 16, batch_size=4, streams=["tokens"], long="drop", window=300,
                      mode=0) as loader:
        batch = next(loader)
    assert set(batch) == {"tokens", "segment_ids", "positions"}
    assert (np.diff(np.flatnonzero(np.diff(batch["segment_ids"].ravel()) != 0)) <= 16).all()
    assert all(n <= 16 for _, _, n in segments_of_tokens(batch))


def segments_of_tokens(batch):
    out = []
    for row, seg in zip(batch["tokens"], batch["segment_ids"]):
        for k in range(1, seg.max() + 1):
            tokens = row[seg == k]
            out.append((int(tokens[0]) // 1000, int(tokens[0]) % 1000, len(tokens)))
    for sample, first, n in out:
        assert first == 0 and n == LENGTHS[sample]
    return out


def test_a_packed_run_resumes_exactly(table):
    kwargs = dict(length=48, batch_size=6, streams=["tokens", "mask"], method="best-fit",
                  window=50, mode=2, seed=3)
    with PackedLoader(table, **kwargs) as loader:
        whole = [next(loader) for _ in range(25)]
    with PackedLoader(table, **kwargs) as loader:
        for _ in range(11):
            next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
        # The state at a batch already delivered (loaderx.jax asks for it).
        nine = loader._state_at(9)
        with pytest.raises(ValueError, match="last 64 batches"):
            loader._state_at(200)
    with PackedLoader(table, **kwargs) as loader:
        for _ in range(9):
            next(loader)
        assert loader.state_dict() == nine
    assert state["step"] == 11 and state["row"] >= 0
    with PackedLoader(table, **kwargs, state=state) as loader:
        rest = [next(loader) for _ in range(14)]
        assert loader.step == 25
    for a, b in zip(whole[11:], rest):
        for key in a:
            assert np.array_equal(a[key], b[key]), key
    with pytest.raises(ValueError, match="packs with"):
        PackedLoader(table, **{**kwargs, "window": 51}, state=state)


def test_shards_pack_their_own_part(table):
    with PackedLoader(table, 32, batch_size=8, streams=["tokens"], shard=(1, 2),
                      mode=2) as loader:
        assert next(loader)["tokens"].shape == (4, 32)


def test_what_cannot_be_packed_is_refused(table, tmp_path):
    with pytest.raises(ValueError, match="'label' is not a 1-D ragged stream"):
        PackedLoader(table, 32)
    with pytest.raises(ValueError, match="no stream 'text'"):
        PackedLoader(table, 32, streams=["text"])
    with pytest.raises(ValueError, match="method"):
        PackedLoader(table, 32, streams=["tokens"], method="next-fit")
    with pytest.raises(ValueError, match="divisible"):
        PackedLoader(table, 32, batch_size=5, streams=["tokens"], shard=(0, 2))
    short = RaggedDataset.write(tmp_path / "short", [np.zeros(3, np.int8)] * 300,
                                durable=False)
    with PackedLoader({"tokens": table["tokens"], "short": short}, 32, mode=0) as loader:
        with pytest.raises(ValueError, match="equal lengths"):
            next(loader)
    empty = RaggedDataset.write(tmp_path / "empty", [np.zeros(0, np.int32)] * 10,
                                durable=False)
    with PackedLoader(empty, 8, window=4) as loader:
        with pytest.raises(ValueError, match="no tokens to pack"):
            next(loader)
    short.close()
    empty.close()
