"""``loaderx convert`` and ``loaderx.convert`` on real data, read back
bit-exact against an independent reading of the source; restart after a
kill; bad input as one line on stderr; the info, verify, compact and bench
commands. Fashion-MNIST comes from the Debian package dataset-fashion-mnist
and the solar-cell images from the elpv-dataset package; scripts/test.sh
installs both."""

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import loaderx
from loaderx import Table

FASHION = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def cli(*args, check=True, cwd=None):
    """Runs ``python -m loaderx`` with `args`; its CompletedProcess."""
    p = subprocess.run([sys.executable, "-m", "loaderx", *map(str, args)],
                       capture_output=True, text=True, timeout=600, cwd=cwd)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def idx_array(path):
    """An IDX file read without loaderx: big-endian header, then the data."""
    data = gzip.open(path).read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def test_fashion_mnist_idx_converts_bit_exact_through_the_command(tmp_path):
    images = idx_array(FASHION / "t10k-images-idx3-ubyte.gz")
    labels = idx_array(FASHION / "t10k-labels-idx1-ubyte.gz")
    out = cli("convert", FASHION / "t10k-images-idx3-ubyte.gz", tmp_path / "fm", "--codec", "zstd")
    assert "10000 rows" in out.stdout and out.stderr == ""  # no bar in a pipe
    with loaderx.open(tmp_path / "fm") as t:
        assert t.kinds == {"image": "fixed", "label": "fixed"}
        np.testing.assert_array_equal(t["image"][:], images)
        np.testing.assert_array_equal(t["label"][:], labels.astype(np.int64))
        assert t.source["from"] == "idx" and t["image"].codec == "zstd"
    info = json.loads(cli("info", tmp_path / "fm", "--json").stdout)
    assert info["rows"] == 10000 and [s["stream"] for s in info["streams"]] == ["image", "label"]
    image = info["streams"][0]
    assert image["shape"] == [28, 28] and image["logical_bytes"] == images.nbytes
    assert image["checksums"] and 0 < image["ratio"] < 1
    assert "0 bad" in cli("verify", tmp_path / "fm").stdout


@pytest.fixture(scope="module")
def solar_cells(tmp_path_factory):
    """An image folder of elpv-dataset's PNGs, one class per cell type,
    a few hundred of them."""
    import elpv_dataset

    data = Path(elpv_dataset.__file__).parent / "data"
    root = tmp_path_factory.mktemp("elpv") / "cells"
    for line in (data / "labels.csv").read_text().splitlines()[::9]:
        name, _, kind = line.split()
        (root / kind).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data / name, root / kind / Path(name).name)
    return root


def folder_files(root):
    classes = sorted(p.name for p in root.iterdir())
    return classes, [(c, f) for c in classes for f in sorted((root / c).iterdir())]


def test_an_image_folder_keeps_each_files_bytes(solar_cells, tmp_path):
    classes, files = folder_files(solar_cells)
    assert classes == ["mono", "poly"]
    with loaderx.convert(solar_cells, tmp_path / "cells", progress=False) as t:
        assert t.rows == len(files) and t.classes == {"label": classes}
        got = t["image"][:]
        for k, (c, f) in enumerate(files):
            assert got[k] == f.read_bytes(), f
        assert t["label"][:].tolist() == [classes.index(c) for c, _ in files]


def test_an_image_folder_decoded_to_a_size(solar_cells, tmp_path):
    _, files = folder_files(solar_cells)
    cli("convert", solar_cells, tmp_path / "small", "--image-size", "32x48", "--quiet")
    with loaderx.open(tmp_path / "small") as t:
        assert t["image"].shape == (32, 48, 3)
        for k in (0, len(files) // 2, len(files) - 1):
            with Image.open(files[k][1]) as im:
                want = np.asarray(im.convert("RGB").resize((48, 32), Image.BILINEAR))
            np.testing.assert_array_equal(t["image"][k], want)


def test_an_image_folder_reencoded_smaller(solar_cells, tmp_path):
    _, files = folder_files(solar_cells)
    cli("convert", solar_cells, tmp_path / "jpeg", "--max-side", "128", "--quality", "80",
        "--quiet")
    with loaderx.open(tmp_path / "jpeg") as t:
        assert t.source["max_side"] == 128 and t.source["quality"] == 80
        got = t["image"][:]
    assert sum(map(len, got)) < sum(f.stat().st_size for _, f in files) / 3
    for k in (0, len(files) // 2, len(files) - 1):
        with Image.open(io.BytesIO(got[k])) as im:
            assert (im.format, im.mode, im.size) == ("JPEG", "L", (128, 128))
            small = np.asarray(im, dtype=np.float64)
        with Image.open(files[k][1]) as im:
            want = np.asarray(im.resize((128, 128), Image.LANCZOS), dtype=np.float64)
        psnr = 10 * np.log10(255**2 / np.mean((small - want) ** 2))
        assert psnr > 30, (k, psnr)
    with pytest.raises(ValueError, match="choose one"):
        loaderx.convert(solar_cells, tmp_path / "both", image_size=(8, 8), max_side=8)
    with pytest.raises(ValueError, match="quality"):
        loaderx.convert(solar_cells, tmp_path / "q", quality=0)


def test_npy_and_npz_files(tmp_path):
    a = np.arange(600, dtype=np.float32).reshape(50, 3, 4)
    np.save(tmp_path / "a.npy", a)
    b = np.arange(50, dtype=np.int16)
    np.savez(tmp_path / "ab.npz", x=a, y=b)
    cli("convert", tmp_path / "a.npy", tmp_path / "a")
    cli("convert", tmp_path / "ab.npz", tmp_path / "ab", "--codec", "lz4")
    with loaderx.open(tmp_path / "a") as t:
        np.testing.assert_array_equal(t["data"][:], a)
    with loaderx.open(tmp_path / "ab") as t:
        assert list(t) == ["x", "y"]
        np.testing.assert_array_equal(t["x"][:], a)
        np.testing.assert_array_equal(t["y"][:], b)
    # Compressed members and big-endian items, read a few rows at a time.
    np.savez_compressed(tmp_path / "c.npz", x=a, y=b.astype(">i4"))
    with loaderx.convert(tmp_path / "c.npz", tmp_path / "c", group_bytes=100,
                         progress=False) as t:
        np.testing.assert_array_equal(t["x"][:], a)
        np.testing.assert_array_equal(t["y"][:], b)
        assert t["y"].dtype == np.dtype("=i4")


@pytest.mark.parametrize("args, says", [
    (["convert", "missing.npy", "out"], "missing.npy: no such file or directory"),
    (["convert", "bad.npz", "out"], "bad.npz: the arrays have different lengths"),
    (["convert", "junk.npy", "out"], "junk.npy: not a readable .npy file"),
    (["convert", "f.npz", "out"], "f.npz: array 'x' is stored in Fortran order"),
    (["convert", "cut-idx1-ubyte", "out"], "cut-idx1-ubyte: IDX header says (5,)"),
    (["convert", "folder", "out", "--from", "images", "--image-size", "8x8"],
     "broken.png: not a readable image"),
    (["convert", "a.npy", "taken"], "taken exists and is not a loaderx table"),
    (["info", "nothing"], "nothing holds neither table.json nor schema.json"),
])
def test_bad_input_is_one_line_on_stderr_and_status_1(tmp_path, args, says):
    np.savez(tmp_path / "bad.npz", x=np.zeros(3), y=np.zeros(4))
    np.savez(tmp_path / "f.npz", x=np.asfortranarray(np.zeros((3, 2))))
    (tmp_path / "cut-idx1-ubyte").write_bytes(b"\0\0\x08\x01\0\0\0\x05abc")
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "folder" / "cat").mkdir(parents=True)
    (tmp_path / "folder" / "cat" / "broken.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("mine")
    p = cli(*args, check=False, cwd=tmp_path)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("loaderx: error: ") and says in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_a_killed_conversion_resumes_where_its_committed_rows_end(tmp_path):
    """Groups of 100 rows, killed after some committed: the rerun adds the
    rest, no row twice."""
    a = np.arange(20000 * 16, dtype=np.int32).reshape(20000, 16)
    np.save(tmp_path / "a.npy", a)
    script = (
        "import sys, loaderx; loaderx.convert(sys.argv[1], sys.argv[2], progress=False, "
        "group_bytes=6400)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, tmp_path / "a.npy", tmp_path / "t"])
    manifest = tmp_path / "t" / "table.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if manifest.is_file() and json.loads(manifest.read_text())["length"] >= 300:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with Table(tmp_path / "t") as t:
        done = t.rows
    assert 300 <= done < 20000, done
    cli("convert", tmp_path / "a.npy", tmp_path / "t", "--quiet")
    with Table(tmp_path / "t") as t:
        np.testing.assert_array_equal(t["data"][:], a)
    # Another source into the same table is refused, and so is the same
    # file rewritten since: its rows would not be the ones committed.
    np.save(tmp_path / "b.npy", a)
    p = cli("convert", tmp_path / "b.npy", tmp_path / "t", check=False)
    assert p.returncode == 1 and "holds a table converted from" in p.stderr
    np.save(tmp_path / "a.npy", a[::-1].copy())
    p = cli("convert", tmp_path / "a.npy", tmp_path / "t", check=False)
    assert p.returncode == 1 and "holds a table converted from" in p.stderr


def test_an_image_folder_that_changed_is_not_continued(solar_cells, tmp_path):
    import shutil as sh

    folder = tmp_path / "cells"
    sh.copytree(solar_cells, folder)
    loaderx.convert(folder, tmp_path / "t", progress=False).close()
    loaderx.convert(folder, tmp_path / "t", progress=False).close()  # unchanged: a no-op
    extra = next((folder / "mono").iterdir())
    sh.copyfile(extra, folder / "mono" / ("zz-" + extra.name))
    with pytest.raises(ValueError, match="holds a table converted from"):
        loaderx.convert(folder, tmp_path / "t", progress=False)


def test_compact_and_bench_commands(tmp_path):
    t = Table.write(tmp_path / "t", {"x": np.arange(1000, dtype=np.int64),
                                     "s": [str(i) * 50 for i in range(1000)]})
    t.delete(np.arange(0, 1000, 2))
    t.close()
    before = json.loads(cli("info", tmp_path / "t", "--json").stdout)["streams"]
    assert before[1]["reclaimable_bytes"] > 0
    cli("compact", tmp_path / "t")
    after = json.loads(cli("info", tmp_path / "t", "--json").stdout)["streams"]
    assert after[1]["reclaimable_bytes"] == 0 and after[1]["disk_bytes"] < before[1]["disk_bytes"]
    out = cli("bench", tmp_path / "t", "--seconds", "0.2").stdout
    assert "x: gather" in out and "s: gather" in out and "DataLoader (all streams)" in out


def on_a_terminal(*args):
    """Runs ``python -m loaderx`` with its stderr on a pseudo-terminal;
    returns what it wrote there."""
    import fcntl
    import pty
    import struct
    import termios

    primary, secondary = pty.openpty()
    # 24 rows of 100 columns, as a terminal window has (a new pty has none).
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "loaderx", *map(str, args)],
                         stdout=subprocess.DEVNULL, stderr=secondary)
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert p.wait(timeout=120) == 0
    return out.decode(errors="replace")


def test_a_terminal_gets_a_progress_bar_and_quiet_silences_it(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((5000, 64), dtype=np.uint8))
    shown = on_a_terminal("convert", tmp_path / "a.npy", tmp_path / "t")
    assert "5.00k/5.00k" in shown and "MB/s" in shown, shown
    assert on_a_terminal("convert", tmp_path / "a.npy", tmp_path / "u", "--quiet") == ""


# -- Arrow, Parquet, Hugging Face, WebDataset: inputs built with each
#    package's own writer.


def hf_dataset(solar_cells):
    """A Hugging Face dataset built locally (no hub): ints, floats, strings,
    fixed and variable sequences, a struct, a ClassLabel and an Image."""
    import datasets

    _, files = folder_files(solar_cells)
    files = files[:40]
    n = len(files)
    features = datasets.Features({
        "id": datasets.Value("int32"),
        "score": datasets.Value("float64"),
        "caption": datasets.Value("string"),
        "box": datasets.Sequence(datasets.Value("float32"), length=4),
        "tokens": datasets.Sequence(datasets.Value("int64")),
        "meta": {"width": datasets.Value("int16"), "source": datasets.Value("string")},
        "label": datasets.ClassLabel(names=["mono", "poly"]),
        "image": datasets.Image(),
    })
    data = {
        "id": list(range(n)),
        "score": [i / 7 for i in range(n)],
        "caption": [f"cell {i} é" for i in range(n)],
        "box": [[i, i + 1, i + 2, i + 3] for i in range(n)],
        "tokens": [list(range(i % 6)) for i in range(n)],
        "meta": [{"width": 300 + i, "source": f"s{i}"} for i in range(n)],
        "label": [0 if c == "mono" else 1 for c, _ in files],
        "image": [{"bytes": f.read_bytes(), "path": None} for _, f in files],
    }
    return datasets.Dataset.from_dict(data, features=features), data


def check_hf_table(t, data):
    assert t.kinds == {"id": "fixed", "score": "fixed", "caption": "bytes", "box": "fixed",
                       "tokens": "ragged", "meta.width": "fixed", "meta.source": "bytes",
                       "label": "fixed", "image": "bytes"}
    assert t.classes == {"label": ["mono", "poly"]}
    np.testing.assert_array_equal(t["id"][:], np.array(data["id"], dtype=np.int32))
    np.testing.assert_array_equal(t["score"][:], np.array(data["score"]))
    assert t["caption"][:] == data["caption"]
    np.testing.assert_array_equal(t["box"][:], np.array(data["box"], dtype=np.float32))
    for got, want in zip(t["tokens"][:], data["tokens"]):
        np.testing.assert_array_equal(got, np.array(want, dtype=np.int64))
    assert t["meta.width"][:].tolist() == [m["width"] for m in data["meta"]]
    assert t["meta.source"][:] == [m["source"] for m in data["meta"]]
    assert t["label"][:].tolist() == data["label"]
    assert t["image"][:] == [im["bytes"] for im in data["image"]]


def test_hugging_face_datasets_in_memory_saved_and_as_parquet(solar_cells, tmp_path):
    ds, data = hf_dataset(solar_cells)
    with loaderx.convert(ds, tmp_path / "mem", progress=False) as t:
        check_hf_table(t, data)
    ds.save_to_disk(str(tmp_path / "saved"))
    cli("convert", tmp_path / "saved", tmp_path / "disk")
    with loaderx.open(tmp_path / "disk") as t:
        assert t.source["from"] == "hf"
        check_hf_table(t, data)
    ds.to_parquet(str(tmp_path / "cells.parquet"))
    cli("convert", tmp_path / "cells.parquet", tmp_path / "pq", "--codec", "zstd")
    with loaderx.open(tmp_path / "pq") as t:
        check_hf_table(t, data)


def test_arrow_ipc_files_and_refused_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.feather

    table = pa.table({"x": pa.array(np.arange(100, dtype=np.uint16)),
                      "v": pa.array([[float(i)] * (i % 3) for i in range(100)]),
                      "b": pa.array([bytes([i]) * i for i in range(100)])})
    pa.feather.write_feather(table, tmp_path / "t.arrow")
    cli("convert", tmp_path / "t.arrow", tmp_path / "out")
    with loaderx.open(tmp_path / "out") as t:
        assert t["x"][:].dtype == np.uint16 and t["x"][:].tolist() == list(range(100))
        assert [len(v) for v in t["v"][:]] == [i % 3 for i in range(100)]
        assert t["b"][:] == [bytes([i]) * i for i in range(100)]
    bad = pa.table({"m": pa.array([{"a": 1}], type=pa.map_(pa.string(), pa.int64()))})
    pa.feather.write_feather(bad, tmp_path / "bad.arrow")
    p = cli("convert", tmp_path / "bad.arrow", tmp_path / "bad", check=False)
    assert p.returncode == 1 and "column 'm' has type map<string, int64>" in p.stderr
    nulls = pa.table({"n": pa.array([1, None, 3])})
    pa.feather.write_feather(nulls, tmp_path / "nulls.arrow")
    p = cli("convert", tmp_path / "nulls.arrow", tmp_path / "nulls", check=False)
    assert p.returncode == 1 and "column 'n' is null at row 1" in p.stderr


def test_webdataset_shards_written_by_its_own_tarwriter(solar_cells, tmp_path):
    import webdataset as wds

    _, files = folder_files(solar_cells)
    files = files[:30]
    (tmp_path / "shards").mkdir()
    want = []
    for shard in range(3):
        with wds.TarWriter(str(tmp_path / "shards" / f"cells-{shard:03d}.tar")) as sink:
            for k in range(10):
                i = shard * 10 + k
                c, f = files[i]
                sample = {"__key__": f"sample{i:04d}", "png": f.read_bytes(),
                          "cls": str(int(c == "poly")), "json": json.dumps({"i": i})}
                sink.write(sample)
                want.append(sample)
    cli("convert", tmp_path / "shards", tmp_path / "out")
    with loaderx.open(tmp_path / "out") as t:
        assert t.kinds == {"cls": "fixed", "json": "bytes", "png": "bytes"}
        assert t["png"][:] == [s["png"] for s in want]
        assert t["cls"][:].tolist() == [int(s["cls"]) for s in want]
        assert t["json"][:] == [s["json"] for s in want]


@pytest.mark.parametrize("kind", ["npz", "images", "arrow", "hf", "webdataset", "idx"])
def test_every_source_resumes_after_the_committed_rows(solar_cells, tmp_path, kind):
    """A table cut back to a prefix (its last rows deleted: nothing moves),
    converted again, equals a conversion that ran through: each source skips
    exactly the committed rows."""
    import pyarrow as pa
    import pyarrow.feather

    if kind == "npz":
        src = tmp_path / "a.npz"
        np.savez(src, x=np.arange(3000).reshape(1000, 3), y=np.arange(1000))
    elif kind == "images":
        src = solar_cells
    elif kind == "arrow":
        src = tmp_path / "t.arrow"
        pa.feather.write_feather(pa.table({"s": [str(i) for i in range(700)]}), src,
                                 chunksize=128)
    elif kind == "hf":
        src = tmp_path / "saved"
        hf_dataset(solar_cells)[0].save_to_disk(str(src))
    elif kind == "webdataset":
        import webdataset as wds

        src = tmp_path / "shards"
        src.mkdir()
        for shard in range(2):
            with wds.TarWriter(str(src / f"{shard}.tar")) as sink:
                for i in range(shard * 50, shard * 50 + 50):
                    sink.write({"__key__": f"k{i:03d}", "txt": f"text {i}", "cls": str(i % 3)})
    else:
        src = FASHION / "t10k-images-idx3-ubyte.gz"
    group = 200_000 if kind == "idx" else 2000
    loaderx.convert(src, tmp_path / "full", progress=False, group_bytes=group).close()
    with loaderx.convert(src, tmp_path / "cut", progress=False, group_bytes=group) as t:
        rows = t.rows
        t.delete(np.arange(rows // 3, rows))
    loaderx.convert(src, tmp_path / "cut", progress=False, group_bytes=group).close()
    with Table(tmp_path / "full") as full, Table(tmp_path / "cut") as cut:
        assert cut.rows == full.rows == rows
        for name in full:
            a, b = full[name][:], cut[name][:]
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
            else:
                assert len(a) == len(b) and all(
                    np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
                    for x, y in zip(a, b)), name


def test_zstd_dict_makes_fashion_mnist_smaller_than_flate(tmp_path):
    """The zstd-dict codec trains a dictionary on the first records: at
    level 9 the images take less room than DEFLATE-6's (bench/README.md,
    "zstd levels"), and read back bit-exact."""
    images = idx_array(FASHION / "t10k-images-idx3-ubyte.gz")
    src = FASHION / "t10k-images-idx3-ubyte.gz"
    cli("convert", src, tmp_path / "dict", "--codec", "zstd-dict", "--level", "9", "--quiet")
    cli("convert", src, tmp_path / "flate", "--quiet")
    stored = {}
    for name in ("dict", "flate"):
        info = json.loads(cli("info", tmp_path / name, "--json").stdout)
        stored[name] = info["streams"][0]["stored_bytes"]
        with loaderx.open(tmp_path / name) as t:
            np.testing.assert_array_equal(t["image"][:], images)
    assert (tmp_path / "dict" / "image" / "zstd.dict").is_file()
    assert stored["dict"] < stored["flate"], stored


def test_a_conversion_writes_a_sharded_table_that_info_and_verify_read(tmp_path):
    images = idx_array(FASHION / "t10k-images-idx3-ubyte.gz")
    labels = idx_array(FASHION / "t10k-labels-idx1-ubyte.gz")
    cli("convert", FASHION / "t10k-images-idx3-ubyte.gz", tmp_path / "fm", "--codec", "zstd",
        "--shard-rows", "3000")
    with loaderx.open(tmp_path / "fm") as t:
        assert len(t.shards) == 4 and t["image"].sharded
        np.testing.assert_array_equal(t["image"][:], images)
        np.testing.assert_array_equal(t["label"][:], labels.astype(np.int64))
        assert t.source["shard_rows"] == 3000
    info = json.loads(cli("info", tmp_path / "fm", "--json").stdout)
    assert info["rows"] == 10000
    assert info["streams"][0]["logical_bytes"] == images.nbytes
    assert "0 bad" in cli("verify", tmp_path / "fm").stdout
