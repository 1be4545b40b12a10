"""Internal: the progress bar of long work (conversions).

``progress=None`` (the default) shows a bar when stderr is a terminal and
nothing in a pipe or a log; True and False force it. The bar is tqdm's
(the ``convert`` extra); without tqdm a bar asked for explicitly is a
single line rewritten in place.
"""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """Counts rows and bytes done out of `total` rows."""

    def __init__(self, total: int, desc: str, enabled: bool | None, initial: int = 0) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.enabled = enabled
        self.done = initial
        self.bytes = 0
        self.total = total
        self.started = time.perf_counter()
        self._bar: Any = None
        self._desc = desc
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, initial=initial, desc=desc, unit="rows",
                                 unit_scale=True, file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, rows: int, nbytes: int) -> None:
        self.done += rows
        self.bytes += nbytes
        if not self.enabled:
            return
        rate = self.bytes / 1e6 / max(time.perf_counter() - self.started, 1e-9)
        if self._bar is not None:
            self._bar.set_postfix_str(f"{rate:,.0f} MB/s", refresh=False)
            self._bar.update(rows)
        else:
            sys.stderr.write(f"\r{self._desc}: {self.done}/{self.total} rows, {rate:,.0f} MB/s")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\n")
