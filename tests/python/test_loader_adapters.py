"""Hand-off to frameworks: DLPack export of batches (always tested, through
NumPy), the JAX device-put iterator (when jax is installed) and the PyTorch
IterableDataset adapter (without torch always; with torch when installed)."""

import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import array_of, same_bytes
from loaderx import DataLoader, Dataset, RaggedDataset, Sampler

N = 256


@pytest.fixture
def streams(tmp_path):
    x = Dataset.write(tmp_path / "x", array_of(np.float32, (N, 6), seed=4), durable=False)
    y = Dataset.write(tmp_path / "y", np.arange(N, dtype=np.int32), durable=False)
    r = RaggedDataset.write(tmp_path / "r", [np.arange(i % 5, dtype=np.int64)
                                             for i in range(N)], durable=False)
    yield tmp_path, x, y, r
    for s in (x, y, r):
        s.close()


def imports_in_a_fresh_process(statement):
    code = f"import sys; {statement}; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                         text=True, check=True)
    return set(json.loads(out.stdout))


# -- DLPack ---------------------------------------------------------------------


def test_batches_export_through_dlpack_without_a_copy(streams):
    _, x, y, r = streams
    with DataLoader({"x": x, "y": y, "r": r}, batch_size=16, transform_workers=1) as loader:
        batch = next(loader)
    for arr in (batch["x"], batch["y"], batch["r"]["values"], batch["r"]["offsets"]):
        assert hasattr(arr, "__dlpack__")
        view = np.from_dlpack(arr)
        assert np.shares_memory(view, arr) and view.ctypes.data == arr.ctypes.data
        assert same_bytes(view, arr)
    # Writes through the view are seen by the batch: it is the same memory.
    np.from_dlpack(batch["x"])[0, 0] = 123.0
    assert batch["x"][0, 0] == 123.0


# -- PyTorch, without torch -------------------------------------------------------


def test_importing_the_adapters_imports_no_framework():
    mods = imports_in_a_fresh_process("import loaderx, loaderx.torch, loaderx.jax")
    assert "torch" not in mods and "jax" not in mods


def test_the_torch_adapter_iterates_pickles_and_resumes_without_torch(streams):
    from loaderx import torch as lt

    _, x, y, _ = streams
    data = lt.IterableLoader({"x": x, "y": y}, batch_size=8, mode=2, seed=3, tensors=False)
    assert data.state_dict() is None
    it = iter(data)
    first = [next(it) for _ in range(5)]
    state = data.state_dict()
    assert state["step"] == 5
    sampler = Sampler(N, 8, 2, 3)
    for step, b in enumerate(first):
        assert np.array_equal(b["y"], sampler.batch(step).astype(np.int32))
    # A new iter() continues where the previous one stopped.
    it = iter(data)
    assert np.array_equal(next(it)["y"], sampler.batch(5).astype(np.int32))
    # It pickles (by the datasets' paths) and the copy resumes from a state.
    copy = pickle.loads(pickle.dumps(data))
    copy.load_state_dict(state)
    assert np.array_equal(next(iter(copy))["y"], sampler.batch(5).astype(np.int32))
    copy.close()
    data.close()
    assert data.state_dict()["step"] == 6
    with pytest.raises(TypeError, match="load_state_dict"):
        lt.IterableLoader(x, state=state)


# -- PyTorch, with torch ----------------------------------------------------------


def test_torch_takes_batches_without_a_copy(streams):
    torch = pytest.importorskip("torch")
    from loaderx.torch import IterableLoader, as_tensors

    _, x, y, r = streams
    with DataLoader({"x": x, "y": y, "r": r}, batch_size=16) as loader:
        batch = next(loader)
    t = torch.from_dlpack(batch["x"])
    assert t.data_ptr() == batch["x"].ctypes.data and t.dtype == torch.float32
    tensors = as_tensors(batch)
    assert tensors["r"]["values"].data_ptr() == batch["r"]["values"].ctypes.data
    assert isinstance(IterableLoader(x), torch.utils.data.IterableDataset)
    data = IterableLoader({"x": x, "y": y}, batch_size=8, mode=0)
    got = []
    for i, b in enumerate(torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)):
        got.append(b)
        if i == 2:
            break
    assert isinstance(got[0]["y"], torch.Tensor) and got[0]["y"].shape == (8,)
    assert torch.equal(got[2]["y"], torch.arange(16, 24, dtype=torch.int32))
    assert data.state_dict()["step"] == 3
    data.close()


# -- JAX ----------------------------------------------------------------------------


def test_the_jax_iterator_puts_batches_on_device_ahead(streams):
    jax = pytest.importorskip("jax")
    from loaderx.jax import device_put_iterator

    _, x, y, r = streams
    kwargs = dict(batch_size=16, mode=2, seed=5, pad=True)
    with DataLoader({"x": x, "y": y, "r": r}, **kwargs) as loader:
        reference = [next(loader) for _ in range(10)]
    loader = DataLoader({"x": x, "y": y, "r": r}, **kwargs)
    with device_put_iterator(loader, size=3) as it:
        first = next(it)
        assert isinstance(first["x"], jax.Array)
        assert loader.step == 1 + 3  # three more already on their way
        assert it.state_dict()["step"] == 1  # but the consumer is at step 1
        got = [first] + [next(it) for _ in range(4)]
        state = it.state_dict()
    assert loader.closed and state["step"] == 5
    for a, b in zip(got, reference):
        assert same_bytes(np.asarray(a["x"]), b["x"])
        # (JAX stores int64 as int32 unless jax_enable_x64 is set.)
        assert np.array_equal(np.asarray(a["r"]["values"]), b["r"]["values"])
    # Resuming from the iterator's state continues exactly.
    with device_put_iterator(DataLoader({"x": x, "y": y, "r": r}, state=state, **kwargs)) as it:
        for want in reference[5:]:
            assert np.array_equal(np.asarray(next(it)["y"]), want["y"])
    with pytest.raises(ValueError, match="size"):
        device_put_iterator(loader, size=0)


def test_the_jax_iterator_raises_a_transform_error_at_its_step(streams):
    pytest.importorskip("jax")
    from loaderx.jax import device_put_iterator

    _, x, y, _ = streams

    def transform(pair):
        if pair[1][0] == 32:
            raise ArithmeticError("step 2")
        return pair

    loader = DataLoader(x, y, batch_size=16, mode=0, transform=transform)
    with device_put_iterator(loader, size=4) as it:
        next(it)
        next(it)  # step 2 already failed while being put ahead, but raises only now
        with pytest.raises(ArithmeticError):
            next(it)
        assert int(next(it)["label"][0]) == 48


def test_the_jax_iterator_shards_a_batch_over_devices(streams):
    pytest.importorskip("jax")
    tmp, *_ = streams
    script = textwrap.dedent(f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from loaderx import DataLoader, Dataset
        from loaderx.jax import device_put_iterator
        devices = jax.devices()
        assert len(devices) == 2, devices
        sharding = NamedSharding(Mesh(np.array(devices), ("batch",)), P("batch"))
        x, y = Dataset({str(tmp / 'x')!r}), Dataset({str(tmp / 'y')!r})
        loader = DataLoader(x, y, batch_size=16, mode=0)
        it = device_put_iterator(loader, size=2, sharding=sharding)
        batch = next(it)
        shards = batch["label"].addressable_shards
        assert len(shards) == 2, shards
        assert {{s.device for s in shards}} == set(devices)
        assert np.array_equal(np.asarray(shards[1].data), np.arange(8, 16))
        assert batch["data"].sharding == sharding
        it.close()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
