"""The native batch message of transform processes (batch_message.rs):
what `pack_batch` writes, `unpack_batch` gives back bit for bit, placing
arrays that lie in memory both sides map instead of copying them; what it
cannot carry it leaves to the pickle; a damaged message is an error, never
a crash or an array past its memory."""

import numpy as np
import pytest

from loaderx._native import (
    BATCH_ALIGN,
    PLACE_CAME_IN,
    PLACE_SHARED,
    PLACE_WRITTEN,
    array_address,
    message_places,
    pack_batch,
    unpack_batch,
)

NUMERIC = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
           np.uint64, np.longlong, np.ulonglong, np.float16, np.float32, np.float64,
           np.longdouble, np.complex64, np.complex128, np.clongdouble]


def every_numeric(rng):
    batch = {}
    for i, t in enumerate(NUMERIC):
        shape = [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4)][i % 6]
        a = (rng.standard_normal(shape) * 1000).astype(t) if shape else np.asarray(rng.random() * 99, t)
        batch[f"{np.dtype(t).name}-{i} é"] = a
    # Not contiguous: copied into the arena in C order.
    batch["strided"] = np.arange(60, dtype=np.int32).reshape(6, 10)[::2, 1::3]
    batch["fortran"] = np.asfortranarray(rng.random((4, 3)))
    return batch


def arena(size=1 << 20):
    return np.zeros(size, np.uint8)


def same(want, got):
    assert list(want) == list(got)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == np.ascontiguousarray(want[k]).tobytes(), k


def test_a_batch_of_every_numeric_dtype_comes_back_bit_exact():
    rng = np.random.default_rng(0)
    batch, seeds = every_numeric(rng), rng.integers(0, 2**63, 33, dtype=np.uint64)
    memory = arena()
    at, length, shared = pack_batch(memory, batch, seeds, [5, 2**64 - 1], [])
    assert shared is None and at % BATCH_ALIGN == 0
    got, got_seeds, ints = unpack_batch(memory, at, length, {PLACE_WRITTEN: memory}, False)
    same(batch, got)
    assert np.array_equal(got_seeds, seeds) and got_seeds.dtype == np.uint64
    assert ints == [5, 2**64 - 1]
    # Views of the arena (writable, as the arrays it was written from), or
    # with `copy`, arrays of their own.
    for a in got.values():
        assert a.size == 0 or np.shares_memory(a, memory)
    copies, _, _ = unpack_batch(memory, at, length, {PLACE_WRITTEN: memory}, True)
    same(batch, copies)
    assert not any(np.shares_memory(a, memory) for a in copies.values())
    assert all(a.flags.writeable for a in got.values())


def test_arrays_in_memory_both_sides_map_go_as_their_place():
    inp, shared_buffer = arena(1 << 16), arena(1 << 16)
    x = inp[128:128 + 64].view(np.float32).reshape(4, 4)
    y = shared_buffer[4096:4096 + 80].view(np.int64)
    z = np.arange(10, dtype=np.int16)  # lies in neither: copied
    spans = [(PLACE_CAME_IN, array_address(inp), array_address(inp) + len(inp)),
             (PLACE_SHARED + 7, array_address(shared_buffer),
              array_address(shared_buffer) + len(shared_buffer))]
    out = arena(4096)
    at, length, _ = pack_batch(out, {"x": x, "y": y, "z": z}, None, [], spans)
    assert message_places(out, at, length) == [PLACE_SHARED + 7]
    memories = {PLACE_WRITTEN: out, PLACE_CAME_IN: inp, PLACE_SHARED + 7: shared_buffer}
    got, seeds, _ = unpack_batch(out, at, length, memories, False)
    assert seeds is None
    assert array_address(got["x"]) == array_address(x)
    assert array_address(got["y"]) == array_address(y)
    assert np.shares_memory(got["z"], out) and np.array_equal(got["z"], z)
    # With `copy`, only what lies in the arenas is copied: a shared buffer
    # is delivered as it is.
    got, _, _ = unpack_batch(out, at, length, memories, True)
    assert not np.shares_memory(got["x"], inp) and np.array_equal(got["x"], x)
    assert array_address(got["y"]) == array_address(y)


def test_a_small_arena_gets_the_size_needed_and_nothing_written():
    batch = {"a": np.arange(1000, dtype=np.float64)}
    small = arena(100)
    needed = pack_batch(small, batch, None, [], [])
    assert isinstance(needed, int) and needed > 8000 and not small.any()
    assert pack_batch(None, batch, None, [], []) == needed
    memory = arena(needed)
    at, length, _ = pack_batch(memory, batch, None, [], [])
    assert at + length == needed


@pytest.mark.parametrize("batch", [
    [np.zeros(3)],
    {1: np.zeros(3)},
    {"a": np.zeros(3), "b": [1, 2]},
    {"a": np.zeros(3, ">f8")},
    {"a": np.zeros(3, "U2")},
    {"a": np.zeros(3, "S2")},
    {"a": np.zeros(3, "datetime64[s]")},
    {"a": np.zeros(3, [("x", "<i4")])},
    {"a": np.zeros(3, object)},
    {"a": np.zeros(3, np.dtype("<i8", metadata={"unit": "s"}))},
    {"a": {"b": np.zeros(3)}},
    {"a": np.ma.masked_array(np.zeros(3), mask=[True, False, True])},
])
def test_what_it_cannot_carry_is_left_to_the_pickle(batch):
    assert pack_batch(arena(), batch, None, [], []) is None


def test_the_seeds_must_be_numeric_too():
    assert pack_batch(arena(), {"a": np.zeros(3)}, np.zeros(3, "U1"), [], []) is None


def test_a_damaged_message_is_an_error_never_a_crash():
    rng = np.random.default_rng(1)
    memory = arena(1 << 16)
    batch = {"x": np.arange(24, dtype=np.int32).reshape(2, 3, 4), "label": np.arange(5.0)}
    at, length, _ = pack_batch(memory, batch, np.arange(5, dtype=np.uint64), [9], [])
    message = memory[at:at + length].copy()
    memories = {PLACE_WRITTEN: memory}

    def read():
        return unpack_batch(memory, at, length, memories, False)

    # Cut short, and placed past the arena.
    for n in range(length):
        with pytest.raises(ValueError):
            unpack_batch(memory, at, n, memories, False)
    with pytest.raises(ValueError, match="past its arena"):
        unpack_batch(memory, len(memory) - 8, 16, memories, False)
    # In a memory that is not there.
    with pytest.raises(ValueError, match="not mapped"):
        unpack_batch(memory, at, length, {}, False)
    # Every byte changed in turn, to random values: an error, or arrays
    # that lie inside their memory.
    end = array_address(memory) + len(memory)
    for i in range(length):
        for value in rng.integers(0, 256, 4):
            memory[at:at + length] = message
            memory[at + i] = value
            try:
                got, seeds, _ = read()
            except (ValueError, MemoryError, UnicodeDecodeError):
                continue
            for a in [*got.values(), *([] if seeds is None else [seeds])]:
                if a.nbytes:
                    assert array_address(memory) <= array_address(a)
                    assert array_address(a) + a.nbytes <= end
    memory[at:at + length] = message
    same(batch, read()[0])
