"""Image pipelines: images per second of JPEG decode + random-resized crop
+ flip into batches, ours against what users would otherwise run. Run by
`bash bench/run.sh images`; writes docs/benchmarks-images.{md,json,png}
(--quick: one short round, into bench/out/benchmarks-images-quick.*).

The data: the 1,248 JPEG crops of 500 x 375 (quality 90) that
scripts/wallpaper_crops.py cuts from Debian's plasma-workspace-wallpapers,
an image folder in bench/out/wallpaper-crops, and two tables converted from
it with `loaderx.convert` (raw codec, in bench/out/image-tables): `encoded`
keeps each file's bytes, `decoded` holds its 375 x 500 x 3 pixels.

Every pipeline decodes, cuts a random box as torchvision's
RandomResizedCrop draws it (scale (0.08, 1), ratio (3/4, 4/3)), resizes
it to 224 x 224 (bilinear), flips it on a coin, and delivers shuffled
batches of 256 as uint8 [256, 224, 224, 3] with their int64 labels to a
trivial consumer, on both cores:

* ours: DataLoader over `encoded`, 2 workers, an image stream
  (`loaderx.Images((224, 224), crop='random', flip=True)`), and the same
  with `antialias=False`, the resize tf.data does (bilinear interpolation,
  no averaging when shrinking);
* Pillow in a thread pool (2 threads, and 4): the per-sample path of a
  torch Dataset (open the file with Pillow, convert to RGB, crop box as
  torchvision's RandomResizedCrop.get_params picks it, resize with box=,
  flip, np.asarray), a ThreadPoolExecutor mapping it over a batch, the next
  batch submitted before this one is stacked;
* Grain: the same per-sample function in MapDataset.random_map, batched,
  on 2 worker processes (mp_prefetch);
* tf.data: read_file, sample_distorted_bounding_box, decode_and_crop_jpeg,
  resize, random_flip_left_right, parallel map and prefetch on AUTOTUNE;
* the limit: libjpeg-turbo (simplejpeg) decoding the files' bytes, held in
  memory, to full RGB and nothing else, on 2 threads and on 2 processes.

Each system runs in a process of its own (`--system NAME`), which first
reads its files once (page cache), then takes its first batch and a
warm-up untimed; rounds run every system once in turn, and a figure is the
median over the rounds. Each process also reports its peak RSS, and the
sum of its worker processes' peaks; `ours-decoded` (a plain DataLoader over
the decoded table: full 375 x 500 images, no crop) is there for those and
for the bytes on disk.
"""

import math
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "scripts"))
import common  # noqa: E402
import wallpaper_crops  # noqa: E402
from harness import machine  # noqa: E402

CROPS = common.OUT / "wallpaper-crops"
TABLES = common.OUT / "image-tables"
WIDTH, HEIGHT = wallpaper_crops.SIZE
SIZE = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)

#: name -> (row label, packages of bench/out/install.json it needs), in report order.
SYSTEMS = {
    "ours": ("ours: DataLoader, image stream, 2 workers", ["loaderx (ours)"]),
    "ours-interpolate": ("ours, antialias=False (tf.data's resize)", ["loaderx (ours)"]),
    "pillow-2": ("Pillow, thread pool of 2", ["Pillow"]),
    "pillow-4": ("Pillow, thread pool of 4", ["Pillow"]),
    "grain": ("Grain, 2 worker processes (Pillow per sample)", ["grain", "Pillow"]),
    "tf.data": ("tf.data (tensorflow-cpu), AUTOTUNE", ["tensorflow-cpu"]),
    "limit-threads": ("limit: libjpeg-turbo full decode, 2 threads", ["simplejpeg"]),
    "limit-processes": ("limit: libjpeg-turbo full decode, 2 processes", ["simplejpeg"]),
    "ours-decoded": ("ours: plain DataLoader over the decoded table, 2 workers",
                     ["loaderx (ours)"]),
}
PILLOW = ("pillow-2", "pillow-4")
LIMIT = ("limit-threads", "limit-processes")
#: What a system reads, when not the image folder.
READS = {"ours": TABLES / "encoded", "ours-interpolate": TABLES / "encoded",
         "ours-decoded": TABLES / "decoded"}
#: A system's figures, each the median over the rounds.
FIGURES = ("images_s", "peak_rss_mib", "peak_file_rss_mib", "children_rss_mib")


# -- the data -----------------------------------------------------------------

def image_folder():
    """The crops' paths and labels, classes in sorted order (as ImageFolder
    and the `images` converter number them)."""
    classes = sorted(d for d in CROPS.iterdir() if d.is_dir())
    files = [(str(f), label) for label, d in enumerate(classes) for f in sorted(d.glob("*.jpg"))]
    return files, len(classes)


def make_tables():
    """The encoded and decoded tables, converted once (a conversion into a
    complete table of the same source returns at once)."""
    import loaderx

    for name, image_size in (("encoded", None), ("decoded", (HEIGHT, WIDTH))):
        loaderx.convert(CROPS, TABLES / name, source="images", codec="raw",
                        image_size=image_size, durable=False, progress=False).close()


def shuffled_batches(n, seed=0):
    """Endless batches of indices into 0..n: one permutation after another."""
    rng = np.random.default_rng(seed)
    pending = np.empty(0, np.int64)
    while True:
        while len(pending) < common.BATCH:
            pending = np.concatenate([pending, rng.permutation(n)])
        yield pending[:common.BATCH]
        pending = pending[common.BATCH:]


# -- the per-sample Pillow path (Pillow threads and Grain) ---------------------

def crop_box(width, height, rng):
    """(x, y, w, h) as torchvision's RandomResizedCrop.get_params draws it:
    ten tries at an area of SCALE and an aspect of RATIO (log-uniform), then
    the central box of the nearest allowed aspect."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    if width / height < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif width / height > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def pillow_sample(item, rng):
    """One sample as a torch Dataset's __getitem__ makes it, without torch:
    `item` is (path, label)."""
    from PIL import Image

    path, label = item
    with open(path, "rb") as f:
        image = Image.open(f).convert("RGB")
    x, y, w, h = crop_box(image.width, image.height, rng)
    image = image.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + w, y + h))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return {"image": np.asarray(image), "label": np.int64(label)}


# -- the systems: each a generator of batch dicts {image, label} -----------------

def ours(table, **images):
    import loaderx

    with loaderx.DataLoader(loaderx.Table(TABLES / table, read_only=True), batch_size=common.BATCH,
                            num_workers=2, mode=loaderx.Sampler.Mode.SHUFFLE,
                            images=images) as loader:
        yield from loader


def pillow_threads(threads):
    files, _ = image_folder()

    def submit(step, indices):
        # map submits every sample now: the pool works on this batch while
        # the one before is stacked and consumed. Each sample's generator is
        # seeded by its position in the run.
        seeds = range(step * common.BATCH, (step + 1) * common.BATCH)
        return pool.map(lambda i, seed: pillow_sample(files[i], np.random.default_rng(seed)),
                        indices, seeds)

    with ThreadPoolExecutor(threads) as pool:
        batches = enumerate(shuffled_batches(len(files)))
        ahead = submit(*next(batches))
        while True:
            samples, ahead = list(ahead), submit(*next(batches))
            yield {"image": np.stack([s["image"] for s in samples]),
                   "label": np.array([s["label"] for s in samples])}


def grain_pipeline():
    import grain

    files, _ = image_folder()
    # Batched after to_iter_dataset, as Grain's guide does: a MapDataset's
    # batch would be built whole by each of the (default 16) read threads of
    # a worker, 32 batches in flight at once on 2 cores, so that the first
    # came after 22 s here and the rest in bursts.
    ds = (grain.MapDataset.source(files).shuffle(seed=0).repeat()
          .random_map(pillow_sample, seed=0).to_iter_dataset().batch(common.BATCH))
    yield from ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))


def tf_data():
    import tensorflow as tf

    files, _ = image_folder()
    paths, labels = [f for f, _ in files], np.array([label for _, label in files], np.int64)

    def sample(path, label):
        data = tf.io.read_file(path)
        # min_object_covered=0: the whole image is the box, so its default
        # (0.1) would raise the smallest crop above SCALE's 0.08.
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(data), bounding_boxes=tf.zeros([1, 0, 4]),
            min_object_covered=0.0, aspect_ratio_range=RATIO, area_range=SCALE,
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.image.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, (SIZE, SIZE), method="bilinear")
        image = tf.image.random_flip_left_right(image)
        return {"image": tf.cast(tf.round(image), tf.uint8), "label": label}

    ds = (tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths), seed=0)
          .repeat().map(sample, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(common.BATCH).prefetch(tf.data.AUTOTUNE))
    yield from ds.as_numpy_iterator()


def ours_images(**options):
    import loaderx

    return ours("encoded", image=loaderx.Images((SIZE, SIZE), crop="random", scale=SCALE,
                                                ratio=RATIO, flip=True, **options))


BATCHES = {
    "ours": ours_images,
    "ours-interpolate": lambda: ours_images(antialias=False),
    "pillow-2": lambda: pillow_threads(2),
    "pillow-4": lambda: pillow_threads(4),
    "grain": grain_pipeline,
    "tf.data": tf_data,
    "ours-decoded": lambda: ours("decoded"),
}


def decode_for(files, seconds, warmup, start):
    """Full RGB decodes per second of `files` (bytes), from `start` on."""
    import simplejpeg

    def decode_until(t_end, k):
        while time.perf_counter() < t_end:
            simplejpeg.decode_jpeg(files[k % len(files)], colorspace="RGB")
            k += 1
        return k

    k = decode_until(time.perf_counter() + warmup, start)
    t0 = time.perf_counter()
    n = decode_until(t0 + seconds, k) - k
    return n / (time.perf_counter() - t0)


def limit(pool_class, seconds, warmup):
    """libjpeg-turbo alone on a pool of 2 threads or of 2 processes, each
    starting at its own half of the files: the sum of their rates. Threads
    keep up with processes only if simplejpeg releases the GIL."""
    files = [Path(f).read_bytes() for f, _ in image_folder()[0]]
    with pool_class(2) as pool:
        rates = list(pool.map(decode_for, [files] * 2, [seconds] * 2, [warmup] * 2,
                              [0, len(files) // 2]))
        return sum(rates), common.children_peak_rss_mib()


# -- measurement in the system's own process ----------------------------------

def worker(name, seconds, warmup):
    """Times one system in this process and prints its RESULT line."""
    try:
        common.prewarm(READS.get(name, CROPS))
        sampler = common.RssSampler()
        if name in LIMIT:
            pool = ThreadPoolExecutor if name == "limit-threads" else ProcessPoolExecutor
            rate, children = limit(pool, seconds, warmup)
        else:
            batches = BATCHES[name]()
            try:
                # Every system must deliver the same thing, or its rate means little.
                image = next(batches)["image"]
                want = (common.BATCH, *((HEIGHT, WIDTH) if name == "ours-decoded"
                                        else (SIZE, SIZE)), 3)
                if image.shape != want or image.dtype != np.uint8:
                    raise ValueError(f"batches of {image.dtype} {image.shape}, not uint8 {want}")
                rate = common.timed(batches, seconds, warmup)
                children = common.children_peak_rss_mib()  # while the workers live
            finally:
                batches.close()
        peak = sampler.stop()
        common.emit({"status": "ok", "images_s": rate, "peak_rss_mib": common.peak_rss_mib(),
                     "peak_file_rss_mib": peak.get("RssFile"), "children_rss_mib": children})
    except Exception as e:
        common.emit({"status": f"ERROR: {type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()})


# -- the orchestrator -------------------------------------------------------------

def run_system(name, args):
    # Keeps tensorflow's C++ log off stderr, whose end a failed run shows.
    return common.run_job(__file__, ["--system", name], args, f"{name:16s}",
                          lambda res: f"{res['images_s']:8,.0f} images/s",
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def main():
    args = common.bench_args(__doc__, "--system", job_timeout=600, report="images")
    if args.system:
        return worker(args.system, args.seconds, args.warmup)

    started = machine()
    wallpaper_crops.make(CROPS)
    common.log("converting the tables (once)")
    make_tables()
    runs = common.run_rounds({name: needs for name, (_, needs) in SYSTEMS.items()}, args,
                             lambda name: run_system(name, args))
    files, classes = image_folder()
    results = {
        "machine": started, "command": "bash bench/run.sh images" + (" --quick" * args.quick),
        "settings": {k: getattr(args, k) for k in ("quick", "rounds", "seconds", "warmup")},
        "data": {"files": len(files), "classes": classes, "size": [WIDTH, HEIGHT],
                 "folder_bytes": common.disk_bytes(CROPS),
                 "file_bytes": sum(os.path.getsize(f) for f, _ in files),
                 "encoded_bytes": common.disk_bytes(TABLES / "encoded"),
                 "decoded_bytes": common.disk_bytes(TABLES / "decoded")},
        "versions": common.versions("loaderx", "Pillow", "grain", "tensorflow-cpu", "simplejpeg"),
        "systems": {name: common.medians(r, FIGURES) for name, r in runs.items()},
        "runs": runs,
    }
    report(results, args.out)


# -- the report ---------------------------------------------------------------------

def best(systems, names):
    """The fastest of `names` that ran, or None."""
    ok = [n for n in names if systems[n]["status"] == "ok"]
    return max(ok, key=lambda n: systems[n]["images_s"]) if ok else None


def report(r, stem):
    s, d, st = r["systems"], r["data"], r["settings"]
    pillow, lim = best(s, PILLOW), best(s, LIMIT)
    bases = {"Pillow threads": pillow, "tf.data": "tf.data" if s["tf.data"]["status"] == "ok"
             else None, "limit": lim}

    def ratio(name, base):
        if s[name]["status"] != "ok" or base is None:
            return "–"
        return f"{s[name]['images_s'] / s[base]['images_s']:.2f}×"

    mb = lambda b: f"{b / 1e6:,.1f} MB"  # noqa: E731
    lines = [
        "# Image pipelines: decode, random-resized crop 224, flip",
        "",
        "Generated by `bash bench/run.sh images` (bench/image_bench.py); rerun it rather than "
        "edit.",
        "",
        f"**The data.** {d['files']:,} JPEG photographs of {d['size'][0]} × {d['size'][1]} at "
        f"quality 90 ({mb(d['file_bytes'])}, {d['file_bytes'] / d['files'] / 1e3:.0f} kB "
        "each on average), made by `scripts/wallpaper_crops.py`: each JPEG photograph of "
        "Debian's `plasma-workspace-wallpapers` (every resolution the package ships) is scaled "
        "so that its shorter side is 2 to 3 crops high (drawn at random) and 8 crops are cut "
        "from it at random places and saved by Pillow, as an image folder in "
        f"`bench/out/wallpaper-crops` whose {d['classes']} classes are the pictures. "
        "Ours reads the table `loaderx.convert` makes of that folder with the raw codec (each "
        "file's bytes as they are); the others read the files. Every process reads its files "
        "once before it is timed, so they come from the page cache.",
        "",
        "**What is timed.** Images per second of decode + a random-resized crop to 224 × 224 "
        "(torchvision's `RandomResizedCrop`: scale (0.08, 1), ratio (3/4, 4/3)) + a random "
        "horizontal flip, delivered as shuffled batches of 256, uint8 [256, 224, 224, 3] and "
        f"int64 labels, to a trivial consumer, on this machine's {r['machine']['nproc']} cores "
        f"({r['machine']['cpu']}), every system using both. Each system runs in a process of "
        "its own; its first batch and a warm-up "
        f"of {st['warmup']:g} s go untimed, then {st['seconds']:g} s are timed; rounds run "
        f"every system once in turn, and each figure is the median of {st['rounds']} "
        f"round{'s' * (st['rounds'] > 1)}.",
        "",
        "- **ours**: `DataLoader(table, batch_size=256, num_workers=2, mode=SHUFFLE, "
        "images={'image': Images((224, 224), crop='random', flip=True)})`: libjpeg-turbo "
        "decodes the region the crop reads, which is cut and resized, all on the native "
        "workers. Its resize averages every source pixel under an output pixel when "
        "shrinking (Pillow's `BILINEAR`, as the Pillow and Grain rows do); with "
        "`antialias=False` it interpolates the nearest pixels, as tf.data's `resize` does.",
        "- **Pillow, thread pool**: a torch `Dataset.__getitem__` without torch: open the file "
        "with Pillow, `convert('RGB')`, the box of torchvision's `RandomResizedCrop.get_params`, "
        "`resize((224, 224), BILINEAR, box=...)`, a flip on a coin, `np.asarray`; a "
        "`ThreadPoolExecutor` maps it over a batch's indices (the next batch submitted before "
        "this one is stacked with `np.stack`).",
        "- **Grain** (`grain.MapDataset.source(files).shuffle().repeat().random_map(f)"
        ".to_iter_dataset().batch(256).mp_prefetch(MultiprocessingOptions(num_workers=2))`, "
        "default read options): the same per-sample function on 2 worker processes. Batched "
        "after `to_iter_dataset`: a `MapDataset.batch` is built whole by each of a worker's 16 "
        "read threads, 32 batches in flight on 2 cores, so that the first came after 22 s and "
        "the rest in bursts.",
        "- **tf.data**: `read_file`, `extract_jpeg_shape`, `sample_distorted_bounding_box` "
        "(area (0.08, 1), aspect (3/4, 4/3), `min_object_covered=0` so that the smallest crop "
        "is 0.08 as in torchvision, not the default 0.1), `decode_and_crop_jpeg` (which decodes "
        "only the crop's rows), bilinear `resize`, `random_flip_left_right`, a cast to uint8; "
        "`map` and `prefetch` on AUTOTUNE.",
        "- **the limit**: libjpeg-turbo (`simplejpeg.decode_jpeg`, RGB) decoding the same "
        "files' bytes, held in memory, in full and doing nothing else, on a pool of 2 threads "
        "and of 2 processes (the faster is the limit).",
        "",
        "| system | images/s | / Pillow threads | / tf.data | / limit |",
        "|---|---|---|---|---|",
    ]
    for name, (label, _) in SYSTEMS.items():
        if name == "ours-decoded":
            continue
        v = s[name]
        rate = f"{v['images_s']:,.0f}" if v["status"] == "ok" else v["status"]
        lines.append(f"| {label} | {rate} | " + " | ".join(
            ratio(name, base) for base in bases.values()) + " |")
    lines.append("")
    if pillow:
        lines.append(f"\"Pillow threads\" is the faster pool: {SYSTEMS[pillow][0]}.")
    if s["limit-threads"]["status"] == s["limit-processes"]["status"] == "ok":
        x = s["limit-threads"]["images_s"] / s["limit-processes"]["images_s"]
        # Holding the GIL, 2 threads could not pass one core's rate, about
        # half of 2 processes'.
        lines.append(f"2 threads of simplejpeg decode at {x:.2f}× the rate of 2 processes: it "
                     f"{'releases' if x > 0.75 else 'seems to hold'} the GIL.")
    lines += ["", "## Targets", ""]
    for base, want in (("Pillow threads", 3.0), ("tf.data", 1.5), ("limit", 0.9)):
        b = bases[base]
        if s["ours"]["status"] != "ok" or b is None:
            lines.append(f"- ours ≥ {want:g}× {base}: not measured")
            continue
        got = s["ours"]["images_s"] / s[b]["images_s"]
        lines.append(f"- ours ≥ {want:g}× {base}: {got:.2f}×, "
                     f"{'met' if got >= want else 'not met'}")
        if base == "tf.data" and s["ours-interpolate"]["status"] == "ok":
            got = s["ours-interpolate"]["images_s"] / s[b]["images_s"]
            lines.append(f"- ours with tf.data's resize (`antialias=False`) ≥ {want:g}× {base}: "
                         f"{got:.2f}×, {'met' if got >= want else 'not met'}")

    stored = {"ours": ("encoded table (raw)", d["encoded_bytes"]),
              "ours-interpolate": ("encoded table (raw)", d["encoded_bytes"]),
              "ours-decoded": ("decoded table (raw, 375 × 500 × 3 pixels)", d["decoded_bytes"])}
    lines += [
        "",
        "## Bytes on disk and memory",
        "",
        "Bytes on disk are allocated blocks. Peak RSS is the process's own high-water mark "
        "(VmHWM, not `ru_maxrss`, which a process started by `subprocess` inherits from its "
        "parent's; it includes the mapped pages of a store it reads, shown apart as their peak, "
        "sampled every 20 ms); worker processes (Grain's, the limit's pool) are the sum of "
        "their own peaks, read before they are stopped. The decoded-table row is our plain "
        "DataLoader delivering whole 375 × 500 images (no decode, no crop): 144 MB batches.",
        "",
        "| system | reads | on disk | peak RSS | of it mapped files | worker processes | "
        "images/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (label, _) in SYSTEMS.items():
        v = s[name]
        what, size = stored.get(name, ("the JPEG files" if name not in LIMIT else
                                       "the JPEG files, in memory", d["folder_bytes"]))
        if v["status"] != "ok":
            lines.append(f"| {label} | {what} | {mb(size)} | {v['status']} | | | |")
            continue
        lines.append(f"| {label} | {what} | {mb(size)} | {v['peak_rss_mib']:,.0f} MiB | "
                     f"{v['peak_file_rss_mib']:,.0f} MiB | "
                     + (f"{v['children_rss_mib']:,.0f} MiB" if v["children_rss_mib"] else "–")
                     + f" | {v['images_s']:,.0f} |")
    lines += ["", f"The decoded table takes {d['decoded_bytes'] / d['encoded_bytes']:.1f}× the "
              "encoded one's bytes on disk.", "", common.machine_line(r)]
    common.write_report(stem, "\n".join(lines) + "\n", r, chart)


def chart(r):
    import matplotlib.pyplot as plt

    s = r["systems"]
    names = [n for n in SYSTEMS if n != "ours-decoded" and s[n]["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 1.5))
    y = range(len(names))[::-1]
    ax.barh(list(y), [s[n]["images_s"] for n in names],
            color=["tab:orange" if n.startswith("ours") else "tab:gray" if n in LIMIT
                   else "tab:blue" for n in names])
    ax.set_yticks(list(y), [SYSTEMS[n][0] for n in names])
    for yi, n in zip(y, names):
        ax.text(s[n]["images_s"], yi, f" {s[n]['images_s']:,.0f}", va="center")
    ax.set_xlabel("images/s: decode + random-resized crop 224 + flip, batches of 256 "
                  "(grey: full decode alone)")
    rounds = r["settings"]["rounds"]
    ax.set_title(f"Image pipelines, {r['machine']['nproc']} cores, median of {rounds} "
                 f"round{'s' * (rounds > 1)}")
    ax.margins(x=0.15)
    return fig


if __name__ == "__main__":
    sys.exit(main())
