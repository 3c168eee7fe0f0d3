"""Run a command so that it, and everything it starts, dies with the worker that owns it.

``python -I -S guardian.py OWNER_PID -- COMMAND...`` (see ``processes.guarded``). A process
group is not enough: the Claude CLI starts MCP servers and Bash commands in sessions of
their own, and a worker killed with SIGKILL signals nobody. So the guardian:

- asks the kernel for SIGTERM when its parent (the worker) dies (``PR_SET_PDEATHSIG``),
  and exits at once if the worker died before it could ask;
- becomes a subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the command starts and leaves
  behind is re-parented to the guardian, not to init, so it can always find it;
- on SIGTERM (the worker died, or it stops the run), passes SIGTERM on to every process
  below it and SIGKILLs what is left ``KILL_GRACE`` seconds later;
- when the command exits, ends what it left behind the same way, then exits with the
  command's status (a command killed by a signal is reported as killed by that signal).

Standard library only, no Django: it starts in a few milliseconds, once per run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL (as processes.KILL_GRACE)
LEFTOVER_GRACE = 2.0  # seconds what the command left behind gets after its SIGTERM
KILL_REPEAT = 0.5
EXIT_OWNER_GONE = 125
EXIT_CANNOT_RUN = 127
STAT_BYTES = 4096


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (read from /proc)."""
    parent_of: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read(STAT_BYTES)
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split(None, 2)
        if len(fields) > 1 and fields[0] != b"Z":
            parent_of[int(name)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parent_of.items():
            if ppid == parent and pid not in found:
                found.append(pid)
                frontier.append(pid)
    return found


def signal_all(sig: int) -> None:
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Guardian:
    def __init__(self) -> None:
        self.kill_at: float | None = None

    def stop(self, grace: float) -> None:
        """SIGTERM everything below now; SIGKILL what is left after ``grace`` (once)."""
        signal_all(signal.SIGTERM)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + grace
            signal.setitimer(signal.ITIMER_REAL, grace)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop(KILL_GRACE)

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        signal_all(signal.SIGKILL)
        # Again while anything is left: a process may have forked between scan and kill.
        signal.setitimer(signal.ITIMER_REAL, KILL_REPEAT)

    def run(self, owner: int, command: list[str]) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        signal.signal(signal.SIGALRM, self.on_alarm)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != owner:  # the worker died before the kernel could be told
            return EXIT_OWNER_GONE
        guardian = os.getpid()
        child = os.fork()
        if child == 0:
            try:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
                    signal.signal(sig, signal.SIG_DFL)
                # Should the guardian itself be killed, the command goes with it.
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != guardian:
                    os._exit(EXIT_OWNER_GONE)
                os.execvp(command[0], command)
            except OSError as exc:
                os.write(2, f"guardian: cannot run {command[0]}: {exc.strerror}\n".encode())
            os._exit(EXIT_CANNOT_RUN)
        # The output pipes stay open only as long as the command and its processes hold them.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        status: int | None = None
        while True:
            try:
                pid, wait_status = os.wait()
            except ChildProcessError:
                break  # nothing is left below
            if pid == child:
                status = wait_status
                # What the command left behind (an MCP server, a background job) goes too.
                self.stop(LEFTOVER_GRACE)
        assert status is not None
        if os.WIFSIGNALED(status):
            killed_by = os.WTERMSIG(status)
            signal.setitimer(signal.ITIMER_REAL, 0)
            with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
                signal.signal(killed_by, signal.SIG_DFL)
            os.kill(os.getpid(), killed_by)
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        os.write(2, b"usage: guardian.py OWNER_PID -- COMMAND...\n")
        return 2
    return Guardian().run(int(argv[1]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
