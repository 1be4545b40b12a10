"""Hand-off to JAX: batches put on device a few steps ahead of the consumer.

``jax.device_put`` is asynchronous: it returns at once and copies in the
background. :func:`device_put_iterator` keeps `size` batches in flight, so
the copy of step ``s + size`` overlaps the computation of step ``s``.

    from loaderx import DataLoader
    from loaderx.jax import device_put_iterator

    loader = DataLoader({'image': images, 'label': labels}, batch_size=256,
                        shard=(jax.process_index(), jax.process_count()))
    for batch in device_put_iterator(loader, size=2, sharding=sharding):
        state, loss = train_step(state, batch)

JAX is imported when an iterator is created, not when this module is: the
rest of loaderx never needs it.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["DeviceIterator", "device_put_iterator"]


class DeviceIterator:
    """Iterates `loader`'s batches as JAX arrays, `size` steps ahead.

    Each batch (any pytree of NumPy arrays: the batch dict, or what the
    loader's transform returns) goes through ``jax.device_put`` (onto
    `sharding` when given, else JAX's default device). With a sharding in a
    multi-process job (``jax.process_count() > 1``) every process contributes
    its loader's shard, and the arrays are global ones built with
    ``jax.make_array_from_process_local_data``: give each process's loader
    ``shard=(jax.process_index(), jax.process_count())``.

    :meth:`state_dict` is the state of the *consumer* of this iterator: the
    batches already put on device but not yet yielded are not counted.
    """

    def __init__(self, loader: Any, size: int = 2, sharding: Any = None) -> None:
        import jax

        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an int of at least 1, not {size!r}")
        self.loader = loader
        self.size = size
        self.sharding = sharding
        self._jax = jax
        # (step, batch on device or None, the error its loading raised)
        self._queue: collections.deque[tuple[Any, Any, Any]] = collections.deque()
        self._multiprocess = sharding is not None and jax.process_count() > 1

    def _put(self, batch: Any) -> Any:
        jax = self._jax
        if self._multiprocess:
            return jax.tree_util.tree_map(
                lambda x: jax.make_array_from_process_local_data(self.sharding, x), batch
            )
        if self.sharding is None:
            return jax.device_put(batch)
        return jax.device_put(batch, self.sharding)

    def _fill(self) -> None:
        while len(self._queue) < self.size:
            step = getattr(self.loader, "step", None)
            try:
                batch = next(self.loader)
            except StopIteration:
                return
            except Exception as e:
                # Raised when its step's turn comes, not before.
                self._queue.append((step, None, e))
                return
            self._queue.append((step, self._put(batch), None))

    def __iter__(self) -> "DeviceIterator":
        return self

    def __next__(self) -> Any:
        """The next batch, on device; puts the following ones in flight."""
        if not self._queue:
            self._fill()
            if not self._queue:
                raise StopIteration
        _, batch, error = self._queue.popleft()
        if error is not None:
            raise error
        self._fill()
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The loader's state at the next batch this iterator yields (see
        ``DataLoader.state_dict``)."""
        if self._queue and self._queue[0][0] is not None:
            return self.loader._state_at(self._queue[0][0])
        return self.loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """Drops the batches in flight and continues from `state`."""
        self._queue.clear()
        self.loader.load_state_dict(state)

    def close(self) -> None:
        """Drops the batches in flight and closes the loader."""
        self._queue.clear()
        self.loader.close()

    def __enter__(self) -> "DeviceIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def device_put_iterator(loader: Any, size: int = 2, sharding: Any = None) -> DeviceIterator:
    """`loader`'s batches as JAX arrays, put on device `size` steps ahead of
    the consumer, onto `sharding` (a ``jax.sharding.Sharding``) when given.
    See :class:`DeviceIterator`."""
    return DeviceIterator(loader, size=size, sharding=sharding)
