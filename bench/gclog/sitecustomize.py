"""Imported at start-up by any Python whose path holds this directory (``bench/scale.py
--gc-log`` puts it on the app's PYTHONPATH): times each garbage collection of the
process, and writes ``generation milliseconds collected`` lines to
``$PM_GC_LOG_DIR/gc-<pid>.txt`` (every 200 collections, after each full one, and at exit).
The times are wall clock: on a busy machine they include waiting for a CPU."""

from __future__ import annotations

import atexit
import gc
import os
import time
from typing import Any

_started: list[float] = []
_times: list[tuple[int, float, int]] = []
_DIR = os.environ.get("PM_GC_LOG_DIR", "")


def _write() -> None:
    try:
        with open(os.path.join(_DIR, f"gc-{os.getpid()}.txt"), "w") as handle:
            handle.writelines(f"{g} {ms:.2f} {n}\n" for g, ms, n in _times)
    except OSError:
        pass


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[:] = [time.perf_counter()]
        return
    took = (time.perf_counter() - _started[0]) * 1e3 if _started else 0.0
    _times.append((int(info["generation"]), took, int(info.get("collected", 0))))
    if info["generation"] == 2 or len(_times) % 200 == 0:
        _write()


if _DIR:
    gc.callbacks.append(_timed)
    atexit.register(_write)
