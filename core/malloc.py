"""glibc's allocator in a server whose Python objects all come from it.

The web server runs with ``PYTHONMALLOC=malloc`` (``make run``, the README's deployment;
docs/design-notes.md, "Open streams cost no thread"), so every object is glibc's, and
``trim`` hands what streams freed back to the OS. glibc gives each thread that allocates
an arena of its own (up to eight per core) so that threads need not wait for each other's
allocations; but Python threads allocate under the GIL, one at a time, so those arenas buy
nothing and each keeps pages of its own. ``cap_arenas`` (called once, as Django is set
up: ``core.apps``) lets all of them share two, the main thread's and one more. Elsewhere
than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
from typing import Any

_M_ARENA_MAX = -8  # mallopt's parameter, from glibc's malloc.h
ARENAS = 2

_mallopt: Any
_malloc_trim: Any
try:
    _libc = ctypes.CDLL("libc.so.6")
    _mallopt, _malloc_trim = _libc.mallopt, _libc.malloc_trim
except (OSError, AttributeError):  # not glibc
    _mallopt = _malloc_trim = None


def cap_arenas() -> bool:
    """At most ``ARENAS`` arenas from now on; call it before the process starts threads
    (an arena a thread already has stays its own). Whether glibc took it."""
    return _mallopt is not None and bool(_mallopt(_M_ARENA_MAX, ARENAS))


def trim() -> None:
    """Give the heap's free pages back to the OS."""
    if _malloc_trim is not None:
        _malloc_trim(0)
