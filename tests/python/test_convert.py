"""``loaderx convert`` and ``loaderx.convert`` on real data, read back
bit-exact against an independent reading of the source; restart after a
kill; bad input as one line on stderr; the info, verify, compact and bench
commands. Fashion-MNIST comes from the Debian package dataset-fashion-mnist
and the solar-cell images from the elpv-dataset package; scripts/test.sh
installs both."""

import gzip
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


@pytest.mark.parametrize("args, says", [
    (["convert", "missing.npy", "out"], "missing.npy: no such file or directory"),
    (["convert", "bad.npz", "out"], "bad.npz: the arrays have different lengths"),
    (["convert", "junk.npy", "out"], "junk.npy: not a readable .npy file"),
    (["convert", "folder", "out", "--from", "images", "--image-size", "8x8"],
     "broken.png: not a readable image"),
    (["convert", "a.npy", "taken"], "taken exists and is not a loaderx table"),
    (["info", "nothing"], "nothing holds neither table.json nor schema.json"),
])
def test_bad_input_is_one_line_on_stderr_and_status_1(tmp_path, args, says):
    np.savez(tmp_path / "bad.npz", x=np.zeros(3), y=np.zeros(4))
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
    # Another source into the same table is refused.
    np.save(tmp_path / "b.npy", a)
    p = cli("convert", tmp_path / "b.npy", tmp_path / "t", check=False)
    assert p.returncode == 1 and "holds a table converted from" in p.stderr


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
