"""Drive the reference loaderx 0.5.0 for the compatibility tests.

Run ONLY with the reference venv's Python (``.ref050-venv/bin/python``), by
``test_compat_050.py``; it never runs inside the test process, so the two
implementations are never imported into the same interpreter.

    ref050_helper.py version
    ref050_helper.py apply WORKDIR PHASE CASE...   # run phase PHASE of each case
    ref050_helper.py read  WORKDIR CASE...         # read each store back

The store of case C lives at WORKDIR/C/store; ``read`` leaves what it read in
WORKDIR/C/read_ref.npz and .json. The last line of stdout is a JSON object
{case: null | "error text"}.
"""

import json
import os
import sys
import traceback

import loaderx

import compat_cases as cc


def _check_reference():
    version = getattr(loaderx, "__version__", None)
    if version != "0.5.0":
        raise SystemExit(f"expected loaderx 0.5.0, imported {version} from {loaderx.__file__}")


def main(argv):
    _check_reference()
    cmd = argv[1]
    if cmd == "version":
        print(json.dumps({"version": loaderx.__version__, "file": loaderx.__file__}))
        return 0
    workdir = argv[2]
    if cmd == "apply":
        phase, names = int(argv[3]), argv[4:]
    elif cmd == "read":
        names = argv[3:]
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    cases = {**cc.single_phase_cases(), **cc.two_phase_cases(), **cc.extension_cases()}
    result = {}
    for name in names:
        store = os.path.join(workdir, name, "store")
        try:
            if cmd == "apply":
                os.makedirs(os.path.dirname(store), exist_ok=True)
                cc.apply_phase(loaderx, store, cases[name], phase)
            else:
                cc.read_store(loaderx, store, cases[name], os.path.join(workdir, name, "read_ref"))
            result[name] = None
        except Exception:  # reported per case; the test shows the traceback
            result[name] = traceback.format_exc()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
