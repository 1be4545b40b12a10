"""Damaged datasets written with the defaults: every case gives a clear error,
never a sample with wrong values.

Each damage is done to the files of a dataset that `Dataset.write` made with
its default arguments (so with checksums, docs/reliability.md "Checksums"),
then every sample is read one by one and all at once. A read may fail, and at
least one must, with a loaderx error (a `ZrecordError`, or the `ValueError`
of a schema that does not fit the records) naming the dataset; no read may
return values other than the ones written. 19 kinds of damage, each to a raw
and a flate dataset: 38 cases.
"""

import json
import os
import struct

import numpy as np
import pytest

from loaderx import Dataset, ZrecordError

N = 40
# Entry fields (docs/FORMAT.md, "Record table"): offset, phys_length,
# logic_length, chunk_id, codec, reserved.
ENTRY = struct.Struct("<IIIHBB")
HEADER_LEN = 16


def entry_at(i):
    return HEADER_LEN + ENTRY.size * i


def read_entry(path, i):
    with open(os.path.join(path, "meta.zr"), "rb") as f:
        f.seek(entry_at(i))
        return list(ENTRY.unpack(f.read(ENTRY.size)))


def write_entry(path, i, fields):
    with open(os.path.join(path, "meta.zr"), "r+b") as f:
        f.seek(entry_at(i))
        f.write(ENTRY.pack(*fields))


def patch(path, name, offset, data):
    with open(os.path.join(path, name), "r+b") as f:
        f.seek(offset)
        f.write(data)


def change_entry(i, **changes):
    names = ["offset", "phys", "logic", "chunk", "codec", "reserved"]

    def damage(path):
        fields = read_entry(path, i)
        for name, change in changes.items():
            k = names.index(name)
            fields[k] = change(fields[k]) if callable(change) else change
        write_entry(path, i, fields)

    return damage


def stored_bytes(path, i, change):
    """Replaces record `i`'s stored bytes with `change(bytes)`."""
    offset, phys, _, chunk, _, _ = read_entry(path, i)
    name = f"{chunk}.zr"
    with open(os.path.join(path, name), "rb") as f:
        f.seek(offset)
        old = f.read(phys)
    patch(path, name, offset, change(old))


def flip_middle(path, i=7):
    def flip(b):
        k = len(b) // 2
        return b[:k] + bytes([b[k] ^ 0x10]) + b[k + 1 :]

    stored_bytes(path, i, flip)


def zero_payload(path, i=7):
    stored_bytes(path, i, lambda b: bytes(len(b)))


def swap_entries(path, a=3, b=4):
    ea, eb = read_entry(path, a), read_entry(path, b)
    write_entry(path, a, eb)
    write_entry(path, b, ea)


def duplicate_entry(path):
    write_entry(path, 5, read_entry(path, 6))


def point_at_neighbour(path):
    fields = read_entry(path, 9)
    fields[0] = read_entry(path, 10)[0]
    write_entry(path, 9, fields)


def grow_length(path):
    with open(os.path.join(path, "meta.zr"), "r+b") as f:
        f.seek(12)
        length = int.from_bytes(f.read(4), "little")
        f.seek(12)
        f.write((length + 3).to_bytes(4, "little"))


def truncate(name, size):
    def damage(path):
        os.truncate(os.path.join(path, name), size(os.path.getsize(os.path.join(path, name))))

    return damage


def remove(name):
    return lambda path: os.remove(os.path.join(path, name))


def schema(**changes):
    def damage(path):
        with open(os.path.join(path, "schema.json")) as f:
            s = json.load(f)
        s.update(changes)
        with open(os.path.join(path, "schema.json"), "w") as f:
            json.dump(s, f)

    return damage


def checksum_slot(path):
    # Slot 7's data CRC (docs/FORMAT.md, "Checksums"): the record is fine,
    # the check is not; a clear error all the same.
    patch(path, "checksums.zr", 16 + 8 * 7, b"\xde\xad")


CASES = {
    "payload byte flipped": flip_middle,
    "payload zeroed": zero_payload,
    "entry offset shifted": change_entry(9, offset=lambda o: o + 4),
    "entry points at the next record": point_at_neighbour,
    "entry phys_length shortened": change_entry(9, phys=lambda p: p - 1),
    "entry logic_length grown": change_entry(9, logic=lambda n: n + 1),
    "entry chunk missing": change_entry(9, chunk=7),
    "entry codec unknown": change_entry(9, codec=9),
    "entry codec raw/flate swapped": change_entry(9, codec=lambda c: 1 - c),
    "entries swapped": swap_entries,
    "entry duplicated": duplicate_entry,
    "length grown": grow_length,
    "magic damaged": lambda path: patch(path, "meta.zr", 0, b"ZREX"),
    "version from the future": lambda path: patch(path, "meta.zr", 4, (99).to_bytes(2, "little")),
    "meta.zr truncated": truncate("meta.zr", lambda n: 1000),
    "chunk truncated": truncate("0.zr", lambda n: n // 2),
    "chunk removed": remove("0.zr"),
    "checksum slot damaged": checksum_slot,
    "schema shape changed": schema(shape=[128]),
}
assert len(CASES) == 19


def data_for(codec):
    rng = np.random.default_rng(3)
    if codec == "flate":
        # Few distinct values: every record compresses, so none is stored raw.
        return rng.integers(0, 4, size=(N, 256), dtype=np.uint8)
    return rng.integers(0, 256, size=(N, 256), dtype=np.uint8)


@pytest.mark.parametrize("codec", ["raw", "flate"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_damage_to_a_default_dataset_is_an_error_never_wrong_values(tmp_path, codec, case):
    data = data_for(codec)
    path = str(tmp_path / "d.zr")
    Dataset.write(path, data, codec=codec).close()
    if codec == "flate":
        assert all(read_entry(path, i)[4] == 1 for i in range(N)), "every record flate"
    CASES[case](path)

    errors = []
    try:
        ds = Dataset(path)
    except (ZrecordError, ValueError) as e:
        errors.append(e)
    else:
        with ds:
            for i in range(len(ds)):
                try:
                    sample = ds[i]
                except (ZrecordError, ValueError) as e:
                    errors.append(e)
                    continue
                assert i < N, f"sample {i} read past the {N} written"
                np.testing.assert_array_equal(sample, data[i], err_msg=f"sample {i} wrong")
            try:
                batch = ds[np.arange(len(ds))]
            except (ZrecordError, ValueError) as e:
                errors.append(e)
            else:
                np.testing.assert_array_equal(batch, data[: len(batch)])
    assert errors, "the damage went unnoticed"
    for e in errors:
        assert "d.zr" in str(e), f"the error does not name the dataset: {e}"
