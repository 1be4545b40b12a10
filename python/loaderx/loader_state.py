"""Internal: the DataLoader's state dict, its identity and its validation.

A state is ``{'version', 'step', 'sampler', 'streams', 'fingerprint'}``:
the step to deliver next, plus the identity of the loader configuration it
belongs to (the sampler's parameters and each stream's kind, length, dtype
and shape or ndim, from ``loader_streams.py``). The shard is recorded but
not checked: any shard count may resume a state. ``dataloader.py`` builds
the identity once and checks a given state against it before resuming.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._native import MixtureSampler, Sampler
    from .loader_streams import Stream

#: Version of the dict that `DataLoader.state_dict` returns.
STATE_VERSION = 1

#: Sampler fields a state may differ in: the global batch of a step does
#: not depend on the shard, so a state resumes on any shard count whose
#: share of the global batch is whole (elastic resume; the DataLoader
#: checks divisibility for its own shard).
ELASTIC = ("shard",)


def identity(
    sampler: Sampler | MixtureSampler, adapters: Mapping[str, Stream],
    lengths: Mapping[str, int],
) -> dict[str, Any]:
    """What a state of this configuration carries besides its version and
    step: the sampler's parameters, the streams and their fingerprint."""
    streams = {
        name: {**adapter.identity, "length": lengths[name]}
        for name, adapter in adapters.items()
    }
    blob = json.dumps(streams, sort_keys=True, separators=(",", ":")).encode()
    config: dict[str, Any] = {
        "seed": sampler.seed,
        "batch_size": sampler.batch_size,
        "shard": list(sampler.shard),
    }
    if hasattr(sampler, "weights"):  # a MixtureSampler
        config["mixture"] = {
            "lengths": list(sampler.lengths),
            "modes": list(sampler.modes),
            "weights": list(sampler.weights),
            "proportions": sampler.proportions,
        }
        if sampler.schedule:
            config["mixture"]["schedule"] = [[s, list(w)] for s, w in sampler.schedule]
    else:
        config.update(mode=int(sampler.mode), length=sampler.length)
        if sampler.epochs is not None:
            config.update(epochs=sampler.epochs, last_batch=sampler.last_batch)
    return {
        "sampler": config,
        "streams": streams,
        "fingerprint": hashlib.sha256(blob).hexdigest()[:16],
    }


def state_at(ident: Mapping[str, Any], step: int) -> dict[str, Any]:
    """The state of the configuration `ident` at `step`: a fresh dict that
    shares nothing with `ident`."""
    return {"version": STATE_VERSION, "step": step, **json.loads(json.dumps(ident))}


def check_state(state: Any, ident: Mapping[str, Any]) -> int:
    """The step of `state`, after checking that it belongs to the
    configuration `ident`; ValueError otherwise."""
    if not isinstance(state, Mapping):
        raise ValueError(f"a loader state must be a dict, not {type(state).__name__}")
    if state.get("version") != STATE_VERSION:
        raise ValueError(
            f"loader state version {state.get('version')!r} is not supported "
            f"(this loaderx reads version {STATE_VERSION})"
        )
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 1 << 64:
        raise ValueError(f"loader state step must be an int in [0, 2**64), not {step!r}")
    problems = []
    theirs = state.get("sampler")
    if not isinstance(theirs, Mapping):
        problems.append("it has no sampler")
    else:
        for key in sorted(set(ident["sampler"]) | {k for k in theirs if isinstance(k, str)}):
            if key in ELASTIC:
                continue
            value = ident["sampler"].get(key)
            got = theirs.get(key)
            if isinstance(got, tuple):
                got = list(got)
            if got != value:
                problems.append(f"sampler {key} is {got!r} in the state but {value!r} here")
    streams = state.get("streams")
    mine = ident["streams"]
    if not isinstance(streams, Mapping):
        problems.append("it has no streams")
    else:
        if set(streams) != set(mine):
            problems.append(
                f"the state has streams {sorted(streams)} but this loader {sorted(mine)}"
            )
        for name in set(streams) & set(mine):
            if streams[name] != mine[name]:
                problems.append(
                    f"stream {name!r} is {streams[name]} in the state but {mine[name]} here"
                )
    if not problems and state.get("fingerprint") != ident["fingerprint"]:
        problems.append("the stream fingerprint differs")
    if problems:
        raise ValueError(
            "the loader state belongs to another loader configuration: " + "; ".join(problems)
        )
    return step
