"""Kernel process controls and waits shared by the app's helper processes, standard library only.

The ask-user stub (``mcp_server.stub``) imports this on the way to every ask-user run's
first word, so nothing here is imported before it is used.
"""

from __future__ import annotations

import os
import select
import signal
import sys

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
SELF_AUTOGROUP = "/proc/self/autogroup"


def die_with(parent: int) -> None:
    """This process goes when ``parent`` goes, even by SIGKILL: call it first thing in a
    helper the worker started (the render process, the warm ask-user server).

    The signal follows the thread that started the process, so a helper should be started
    from a thread that lives as long as the worker (its event loop's)."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(0)


def session_nice(autogroup: str | os.PathLike[str] = SELF_AUTOGROUP) -> int | None:
    """The nice value of a session's autogroup, read from ``/proc/PID/autogroup``.

    None where the kernel has no autogroup. The file reads "/autogroup-7 nice 0", or is
    empty for a process in the root group (one that never started a session of its own,
    such as a service run directly by init): that group weighs as nice 0.
    """
    try:
        with open(autogroup, encoding="ascii") as file:
            fields = file.read().split()
    except OSError:
        return None
    try:
        return int(fields[-1]) if fields else 0
    except ValueError:  # a format this code does not know: leave the session alone
        return None


def readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` reads ready within ``timeout`` seconds: a pipe with data or at its
    end, or a pidfd whose process has exited (poll: no limit on descriptor numbers)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))
