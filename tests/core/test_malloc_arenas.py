"""The served app's threads share two glibc arenas (``core.malloc.cap_arenas``, called as
Django is set up, ``core.apps``, which ``promptmgr.asgi``'s import does before any thread
starts): each arena keeps pages of its own, and Python threads, allocating under the GIL,
gain nothing from one each.

Counted in a real interpreter started as uvicorn starts the app (``PYTHONMALLOC=malloc``),
by glibc's own report (``malloc_stats``, one "Arena N:" per arena), after threads have
each allocated a few thousand objects; the same threads without the app's import get an
arena each, which shows the count can tell them apart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from core import malloc

pytestmark = pytest.mark.unit

THREADS = 8
PROGRAM = textwrap.dedent(
    f"""
    import ctypes, os, sys, threading
    if sys.argv[1] == "app":
        import promptmgr.asgi  # noqa: F401
    barrier = threading.Barrier({THREADS})

    def allocate():
        barrier.wait()  # all at once, as a busy worker's threads are
        keep = [{{"n": i, "s": str(i) * 3}} for i in range(5000)]
        barrier.wait()
        del keep

    threads = [threading.Thread(target=allocate) for _ in range({THREADS})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL("libc.so.6").malloc_stats()
    """
)


def arenas_after_threads(mode: str) -> int:
    env = {**os.environ, "PYTHONMALLOC": "malloc", "DJANGO_SETTINGS_MODULE": "promptmgr.settings"}
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return len(re.findall(r"^Arena \d+:$", result.stderr, flags=re.MULTILINE))


def test_the_apps_threads_share_two_arenas_where_plain_threads_get_one_each() -> None:
    plain = arenas_after_threads("plain")
    served = arenas_after_threads("app")
    assert plain > malloc.ARENAS, plain  # the count sees the threads' own arenas
    assert served == malloc.ARENAS, served
