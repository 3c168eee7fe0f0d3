"""Imported at start-up by any Python whose path holds this directory (``bench/scale.py
--gc-log`` puts it on the app's PYTHONPATH): times each garbage collection of the
process, and writes ``generation milliseconds collected started_ns`` lines to
``$PM_GC_LOG_DIR/gc-<pid>.txt`` (every 200 collections, after each full one, and at exit).
The times are wall clock: on a busy machine they include waiting for a CPU. ``started_ns``
is CLOCK_MONOTONIC, system-wide, so the benchmark can tell which fell in its window."""

from __future__ import annotations

import atexit
import gc
import os
import time
from typing import Any

_started: list[int] = []
_times: list[tuple[int, float, int, int]] = []
_DIR = os.environ.get("PM_GC_LOG_DIR", "")


def _write() -> None:
    try:
        with open(os.path.join(_DIR, f"gc-{os.getpid()}.txt"), "w") as handle:
            handle.writelines(f"{g} {ms:.2f} {n} {at}\n" for g, ms, n, at in _times)
    except OSError:
        pass


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[:] = [time.clock_gettime_ns(time.CLOCK_MONOTONIC)]
        return
    at = _started[0] if _started else time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    took = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - at) / 1e6
    _times.append((int(info["generation"]), took, int(info.get("collected", 0)), at))
    if info["generation"] == 2 or len(_times) % 200 == 0:
        _write()


if _DIR:
    gc.callbacks.append(_timed)
    atexit.register(_write)
