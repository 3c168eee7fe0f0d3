"""Subprocess handling, all in one place.

A child is spawned with vfork (``SpawnedChild``) in its own process group (session), its
input is fed (or kept open for messages) without blocking the event loop, its stdout and
stderr are drained concurrently, stdout is split into lines of any length (a line over
``max_line_bytes`` is cut and flagged, never a crash), stdout is read in paced gulps
while the child prints in a burst (see ``READ_INTERVAL``), and on every ending the whole
tree — the CLI and everything it started, such as MCP servers and Bash commands, which
the CLI runs in sessions of their own — is terminated, killed after a grace period, and
the child reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from core.procfs import session_nice

READ_CHUNK = 256 * 1024
# While the child keeps printing (reads less than twice this apart), stdout is left
# alone for this long (seconds) after each read, so one read takes a gulp of lines, not
# one line per wake-up. The Claude CLI writes every stream-json line on its own: at full
# speed that is thousands of wake-ups a second, each paying for the read, the hand-over
# and a flush to Redis and to every browser. A line after a quiet moment is read at once.
# bench/machinery.py, 5,000 lines at the CLI's rate: 82-134 reads, not 1,426-2,082; 1.8-2.6x less CPU.
READ_INTERVAL = 0.003
# The child's stdout pipe holds this much (Linux defaults to 64 KiB), so the child does
# not stall on a full pipe during a paced pause or while this worker is briefly busy.
# bench/machinery.py: a 4 MB burst waits 27-34 ms on a full pipe, 194-247 ms at 64 KiB.
PIPE_BYTES = 1024 * 1024
MAX_NICE = 19  # the lowest CPU priority
SELF_AUTOGROUP = Path("/proc/self/autogroup")  # this server's session (see lower_priority)
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
EXIT_GRACE = 2.0  # seconds a child whose output ended gets to exit by itself
DEFAULT_MAX_LINE = 16 * 1024 * 1024
STAT_BYTES = 4096  # /proc/PID/stat is one short line (its command name is at most 64 bytes)
STDERR_TAIL_BYTES = 16 * 1024
# The quiet runs of one worker note their commands' groups from one scan of /proc at most
# this often (seconds). With 60 live runs and their sandboxes /proc holds some 400
# processes, several ms a scan on the event loop, and each quiet run timed out every
# RUN_READ_TIMEOUT (bench/scale.py: 4% of a loaded worker's samples). Signalling a tree
# always scans afresh.
QUIET_SCAN_MAX_AGE = 1.0
GUARDIAN = Path(__file__).with_name("guardian.py")


@dataclass(frozen=True)
class Line:
    data: bytes
    truncated: bool = False


class LineTimeout:
    """Returned by ``next_line`` when nothing arrived within the timeout."""


TIMEOUT = LineTimeout()


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int


def live_processes() -> list[ProcInfo]:
    """Every live (non-zombie) process with its parent and process group, from /proc.

    It runs on the event loop, at every ending of a run and at idle read timeouts (one scan
    shared by a worker's quiet runs, ``QUIET_SCAN_MAX_AGE``),
    so it reads with bare ``os`` calls: with ``pathlib`` the same scan took 3.9 ms for 80
    processes here, blocking every stream of the worker; now 1.1 ms.
    """
    found: list[ProcInfo] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, STAT_BYTES)
            finally:
                os.close(fd)
        except OSError:  # the process is gone
            continue
        # The command name may hold spaces or parentheses: parse after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split(None, 3)
        if len(fields) > 2 and fields[0] != b"Z":
            found.append(ProcInfo(pid=int(name), ppid=int(fields[1]), pgid=int(fields[2])))
    return found


def group_exists(pgid: int) -> bool:
    """Whether the process group has any member, a zombie included, without a /proc scan.

    Signal 0 is never delivered: it only checks that the group exists. Groups 0 and 1
    are never asked (0 would mean this server's own group) and count as existing.
    """
    if pgid <= 1:
        return True
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds the id: it exists
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group."""
    return [p.pid for p in live_processes() if p.pgid == pgid]


_quiet_scan: tuple[float, list[ProcInfo]] | None = None


def recent_processes(max_age: float) -> list[ProcInfo]:
    """``live_processes()`` from a scan at most ``max_age`` seconds old, shared by the
    callers of this process (the quiet moments of its runs)."""
    global _quiet_scan
    now = time.monotonic()
    if _quiet_scan is None or now - _quiet_scan[0] > max_age:
        _quiet_scan = (now, live_processes())
    return _quiet_scan[1]


def process_tree(root: int, processes: list[ProcInfo] | None = None) -> dict[int, int]:
    """``root`` and its live descendants, each with its process group (from ``processes``,
    by default a fresh scan)."""
    if processes is None:
        processes = live_processes()
    group_of = {p.pid: p.pgid for p in processes}
    tree = {root: group_of[root]} if root in group_of else {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for process in processes:
            if process.ppid == parent and process.pid not in tree:
                tree[process.pid] = process.pgid
                frontier.append(process.pid)
    return tree


def signal_groups(groups: Iterable[int], sig: signal.Signals) -> None:
    own = os.getpgrp()
    for pgid in groups:
        # Never our own group: that would be the web server.
        if pgid > 1 and pgid != own:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)


def live_groups(groups: Iterable[int]) -> set[int]:
    live = {p.pgid for p in live_processes()}
    return {pgid for pgid in groups if pgid in live}


class ProcessTree:
    """The process groups of a child and of everything below it.

    The CLI starts each Bash command in a session of its own, so signalling the CLI's
    group alone would leave them running. Groups are collected while the child lives
    (once its parent is gone, an orphan's ancestry is lost), and only groups that still
    have members are signalled: a dead group's id may since belong to another one.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.groups = {root}  # the child leads its own session
        self._kill_timer: asyncio.TimerHandle | None = None

    def collect(self) -> None:
        self.groups |= set(process_tree(self.root).values())

    def collect_recent(self) -> None:
        """``collect`` from the worker's shared recent scan (``QUIET_SCAN_MAX_AGE``): a
        group missed by it is noted at the next quiet moment, and ``send`` scans afresh."""
        self.groups |= set(process_tree(self.root, recent_processes(QUIET_SCAN_MAX_AGE)).values())

    def send(self, sig: signal.Signals) -> None:
        self.collect()
        signal_groups(live_groups(self.groups), sig)

    def alive(self) -> bool:
        # Signal 0 rules out groups with no member at all, so a normal ending (every
        # group gone) costs no /proc scan; a group with members left is scanned, since a
        # zombie member (its parent has not collected it yet) does not count as alive.
        present = {pgid for pgid in self.groups if group_exists(pgid)}
        return bool(present) and bool(live_groups(present))

    def terminate(self, *, kill_after: float) -> None:
        """SIGTERM the tree now and SIGKILL whatever is left ``kill_after`` seconds later,
        so a child that ignores SIGTERM cannot keep its run (and its read loop) alive."""
        self.send(signal.SIGTERM)
        if self._kill_timer is None:
            self._kill_timer = asyncio.get_running_loop().call_later(kill_after, self.send, signal.SIGKILL)

    async def wait_gone(self, grace: float, *, also: Callable[[], bool] = lambda: True) -> bool:
        """Wait up to ``grace`` seconds for every group to empty (and ``also`` to hold)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            if also() and not self.alive():
                return True
            await asyncio.sleep(0.05)
        return also() and not self.alive()

    async def reap(self, grace: float, *, also: Callable[[], bool] = lambda: True) -> None:
        """Terminate the tree, then kill what is left after ``grace``."""
        if also() and not self.alive():
            self.cancel_timer()
            return
        self.send(signal.SIGTERM)
        if not await self.wait_gone(grace, also=also):
            self.send(signal.SIGKILL)
        self.cancel_timer()

    def cancel_timer(self) -> None:
        if self._kill_timer is not None:
            self._kill_timer.cancel()
            self._kill_timer = None


def lower_priority(pid: int, nice: int) -> None:
    """Give a child that leads its own session a lower CPU priority than this server.

    Streaming is bulk work for the CLI and latency-bound work for the server, whose share
    per line is small: when the CPUs are busy, the server should go first. Linux weighs
    CPU time at two levels, so both are set, best effort:
    - the nice value of every thread in the child's process group (what the child starts
      inherits it);
    - where the kernel shares CPU time between sessions first (autogroup, on by default in
      many distributions), the nice value of the child's session, which would otherwise
      weigh as much as the whole server. A busy CLI then held the server off a CPU for up
      to 170 ms at a time (measured with bench/stream_overhead.py).
    """
    if nice <= 0:
        return
    # Relative to the server's own values: never above the server, whatever it runs at.
    with contextlib.suppress(OSError):  # the child is already gone
        os.setpriority(os.PRIO_PGRP, pid, min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + nice))
    own = session_nice(SELF_AUTOGROUP)
    if own is None:  # no autogroup in this kernel
        return
    # Without CAP_SYS_ADMIN, at most one change per 100 ms machine-wide.
    with contextlib.suppress(OSError):  # the child is already gone
        Path(f"/proc/{pid}/autogroup").write_text(str(min(MAX_NICE, own + nice)))


def _widen_pipe(fd: int) -> None:
    """Best effort: past the user's pipe-memory limit the pipe keeps its default size."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not Linux
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


async def _pipe_from_child(protocol: asyncio.Protocol, *, widen: bool) -> tuple[int, asyncio.ReadTransport]:
    """A pipe for the child's output: the end to hand to the child, and our transport
    reading it into ``protocol``."""
    read_fd, child_fd = os.pipe()
    if widen:
        _widen_pipe(read_fd)
    try:
        transport, _protocol = await asyncio.get_running_loop().connect_read_pipe(
            lambda: protocol, os.fdopen(read_fd, "rb", buffering=0)
        )
    except BaseException:
        os.close(child_fd)
        raise
    return child_fd, transport


class StdoutLines(asyncio.Protocol):
    """A child's stdout, split into lines as it arrives, for the one reader that takes them
    (``ManagedProcess.next_line``).

    The transport hands each read straight to ``data_received``; a waiting reader is
    woken by a future, and its timeout is one timer that stays armed while lines keep
    coming. This replaced a ``StreamReader``, a task that split its reads into an
    ``asyncio.Queue``, and an ``asyncio.timeout`` per wait: at a model's pace every line
    paid a wake-up of that task, the queue's hand-over and the timeout's set-up and
    removal (see the design notes, "Reading the CLI's output").

    Reads are paced while the child prints in a burst (``READ_INTERVAL``), and reading
    stops while ``max_lines`` lines wait unread, so a child that outruns its reader waits
    on a full pipe instead of filling this worker's memory.
    """

    def __init__(self, *, max_line_bytes: int, max_lines: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.max_line_bytes = max_line_bytes
        self.max_lines = max_lines
        self.lines: deque[Line | None] = deque()  # None: the end of the output
        self.reads = 0  # reads so far: a burst of lines takes few (see READ_INTERVAL)
        self.eof = False  # the child closed its stdout: it is on its way out
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.transport: asyncio.ReadTransport | None = None
        self._buffer = bytearray()  # the start of a line whose end has not come yet
        self._skipping = False  # inside an over-long line whose head was already taken
        self._last_read = -READ_INTERVAL
        self._paced = False  # reading paused for READ_INTERVAL
        self._full = False  # reading paused: max_lines lines wait
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = math.inf  # the waiting reader's
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A read pipe's transport (uvloop's is not registered as asyncio's class).
        self.transport = cast(asyncio.ReadTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        now = self.loop.time()
        # Still a burst when the previous read was a paced one, just over READ_INTERVAL
        # ago. A pause never delays a line that comes READ_INTERVAL or more after the read
        # before it.
        if now - self._last_read < 2 * READ_INTERVAL and not self._paced and not self._full:
            self._paced = True
            self._pause()
            self.loop.call_later(READ_INTERVAL, self._pace_over)
        self._last_read = now
        self._split(data)
        if len(self.lines) >= self.max_lines and not self._full:
            self._full = True
            if not self._paced:
                self._pause()
        if self.lines:  # not for the middle of a long line
            self._wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._buffer and not self._skipping:
            self.lines.append(Line(bytes(self._buffer)))
        self._buffer.clear()
        self.lines.append(None)
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake()

    def _split(self, data: bytes) -> None:
        limit = self.max_line_bytes
        buffer = self._buffer
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline >= 0 and not buffer and not self._skipping and newline - start <= limit:
                self.lines.append(Line(data[start:newline]))  # a whole line in this read
                start = newline + 1
                continue
            end = len(data) if newline < 0 else newline
            if not self._skipping:
                buffer += data[start:end]
                if len(buffer) > limit:
                    self.lines.append(Line(bytes(buffer[:limit]), truncated=True))
                    buffer.clear()
                    self._skipping = True
            if newline < 0:
                return
            if self._skipping:
                self._skipping = False
            else:
                self.lines.append(Line(bytes(buffer)))
            buffer.clear()
            start = newline + 1

    def take(self) -> Line | None | LineTimeout:
        """The next line if one waits (None at the end of output), else TIMEOUT."""
        if not self.lines:
            return TIMEOUT
        line = self.lines.popleft()
        if self._full and len(self.lines) < self.max_lines:
            self._full = False
            if not self._paced:
                self._resume()
        return line

    async def get(self, timeout: float | None) -> Line | None | LineTimeout:
        """The next line, waiting at most ``timeout`` seconds (None: as long as it takes);
        TIMEOUT when none came."""
        line = self.take()
        if line is not TIMEOUT:
            return line
        deadline = math.inf if timeout is None else self.loop.time() + timeout
        self._arm(deadline)
        while True:
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
            line = self.take()
            if line is not TIMEOUT or self.loop.time() >= deadline:
                return line

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self, deadline: float) -> None:
        # A timer already armed to fire no later is kept: it re-arms itself for the
        # deadline of whoever waits then (a paced stream would otherwise set one up and
        # take it down for every line).
        self._deadline = deadline
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
            self._timer = None
        if deadline != math.inf:
            self._timer = self.loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._deadline == math.inf:
            return
        if self.loop.time() >= self._deadline:
            waiter.set_result(None)
        else:
            self._timer = self.loop.call_at(self._deadline, self._expire)

    def _pace_over(self) -> None:
        self._paced = False
        if not self._full:
            self._resume()

    def close(self) -> None:
        """Stop reading (``connection_lost`` then ends the lines)."""
        if self.transport is not None:
            self.transport.close()

    def _pause(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class SpawnedChild:
    """A child started by ``subprocess.Popen``, its exit heard by the event loop.

    Not the event loop's own subprocess support: Popen starts the child with vfork,
    0.5-3 ms here, where uvloop forks the whole worker, 8-18 ms at 125-225 MB resident
    (bench/machinery.py, the event loop's longest step), with
    the event loop (every stream of the worker) blocked throughout and the worker's
    memory then copied on write. The exit arrives through a pidfd on the event loop, or
    where the kernel or a seccomp profile refuses pidfds, through a thread that waits.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._exited = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(popen.pid)
        except (OSError, AttributeError):  # before Linux 5.3, or a seccomp profile says no
            threading.Thread(target=self._wait_in_thread, name=f"wait-{self.pid}", daemon=True).start()
        else:
            self._loop.add_reader(pidfd, self._collect, pidfd)

    @property
    def returncode(self) -> int | None:
        """The exit code once the child is reaped (minus the signal that killed it), else None."""
        return self.popen.returncode if self._exited.is_set() else None

    async def wait(self) -> int:
        await self._exited.wait()
        code = self.popen.returncode
        assert code is not None
        return code

    def _collect(self, pidfd: int) -> None:
        """The pidfd became readable: the child has exited; reap it."""
        self._loop.remove_reader(pidfd)
        os.close(pidfd)
        self.popen.wait()  # a zombie already: returns at once
        self._exited.set()

    def _wait_in_thread(self) -> None:
        self.popen.wait()
        with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._exited.set)


async def write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to a non-blocking pipe the child reads, waiting while the pipe is full.

    BrokenPipeError when the child is gone."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # the pipe is full: wait until the child reads some
            writable = loop.create_future()
            loop.add_writer(fd, writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(fd)


async def _feed(fd: int, data: bytes) -> None:
    """Write ``data`` to the child's input, then close it; a child that is gone misses it."""
    try:
        await write_all(fd, data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # a child that exits before reading its input is reported by its exit
    finally:
        os.close(fd)


class ChildInput:
    """A child's stdin kept open for messages written while it runs (the SDK engine's
    control protocol), until ``end`` or ``close``.

    Whole messages, one at a time: a message written in pieces (the pipe was full) is
    never interleaved with another. The descriptor is closed only while no write is
    under way on it, so the event loop never watches a closed (or reused) descriptor.
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._lock = asyncio.Lock()
        self._closing = False

    @property
    def closed(self) -> bool:
        return self._closing

    async def write(self, data: bytes) -> None:
        """BrokenPipeError once the input is closed or the child is gone."""
        async with self._lock:
            fd = self._fd
            if fd is None or self._closing:
                raise BrokenPipeError(errno.EPIPE, "the child's input is closed")
            try:
                await write_all(fd, data)
            finally:
                if self.closed:  # close() came while this write waited on a full pipe
                    self._close_fd()

    async def end(self) -> None:
        """Close the input after the writes already waiting: the child sees end of input."""
        async with self._lock:
            self._closing = True
            self._close_fd()

    def close(self) -> None:
        """Close the input now, or as soon as the write under way ends; later writes fail."""
        self._closing = True
        if not self._lock.locked():
            self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:  # once: the descriptor's number may be reused after
            os.close(fd)


@dataclass
class PipedChild:
    """A child just started by ``spawn_piped``, with this worker's ends of its pipes."""

    child: SpawnedChild
    stdin: int  # the write end, non-blocking; whoever feeds the child closes it
    stdout: StdoutLines  # holds its transport
    stderr: asyncio.StreamReader
    stderr_transport: asyncio.ReadTransport


def guarded(argv: list[str]) -> list[str]:
    """``argv`` under the guardian (``guardian.py``): it and everything it starts die with
    this worker, even one killed with SIGKILL, which a process group alone cannot promise.

    The guardian is a separate program rather than a ``preexec_fn``: with one, ``Popen``
    would fork the whole worker instead of using vfork (see ``SpawnedChild``)."""
    return [sys.executable, "-I", "-S", str(GUARDIAN), str(os.getpid()), "--", *argv]


async def spawn_piped(
    argv: list[str], *, cwd: Path | str | None, env: dict[str, str], nice: int, stdout: StdoutLines
) -> PipedChild:
    """Start ``argv`` under the guardian (``guarded``) with vfork, in a session of its own,
    ``nice`` lower in priority (see ``lower_priority``), its stdin, stdout and stderr on
    pipes of ours, stdout read into ``stdout``."""
    # Output pipes of our own: stdout can then be widened and its reading paced, and
    # both are closed by us even when a stray process holds the other end.
    stdout_child, stdout_transport = await _pipe_from_child(stdout, widen=True)
    stderr = asyncio.StreamReader(limit=READ_CHUNK)
    stderr_child, stderr_transport = await _pipe_from_child(asyncio.StreamReaderProtocol(stderr), widen=False)
    stdin_child, stdin = os.pipe()
    try:
        popen = subprocess.Popen(
            guarded(argv),
            cwd=cwd,
            env=env,
            stdin=stdin_child,
            stdout=stdout_child,
            stderr=stderr_child,
            start_new_session=True,
        )
    except BaseException:
        stdout_transport.close()
        stderr_transport.close()
        os.close(stdin)
        raise
    finally:
        # The child holds its copies; the output ends only once ours are closed too.
        for fd in (stdin_child, stdout_child, stderr_child):
            os.close(fd)
    os.set_blocking(stdin, False)
    lower_priority(popen.pid, nice)
    return PipedChild(SpawnedChild(popen), stdin, stdout, stderr, stderr_transport)


class ManagedProcess:
    def __init__(self, proc: SpawnedChild, stdout: StdoutLines) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.tree = ProcessTree(proc.pid)
        self._stdout = stdout
        self._stderr_tail: deque[bytes] = deque()
        self._stderr_size = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._exit_code: int | None = None  # set once stop() has reaped the tree
        self.input: ChildInput | None = None  # the open stdin of a child spawned without stdin_data

    @classmethod
    async def spawn(
        cls,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        stdin_data: bytes | None,
        max_line_bytes: int = DEFAULT_MAX_LINE,
        queue_size: int = 1024,
        nice: int = 0,
    ) -> ManagedProcess:
        """Start ``argv`` in a session of its own, ``nice`` lower in priority (see ``lower_priority``).

        ``stdin_data`` is fed to the child and its input closed; with None the input
        stays open as ``input`` instead."""
        stdout = StdoutLines(max_line_bytes=max_line_bytes, max_lines=queue_size)
        piped = await spawn_piped(argv, cwd=cwd, env=env, nice=nice, stdout=stdout)
        managed = cls(piped.child, stdout)
        feed: list[asyncio.Task[None]] = []
        if stdin_data is None:
            managed.input = ChildInput(piped.stdin)
        else:
            feed.append(asyncio.create_task(_feed(piped.stdin, stdin_data)))
        managed._tasks = [
            *feed,
            asyncio.create_task(managed._drain_stderr(piped.stderr, piped.stderr_transport)),
        ]
        return managed

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout_reads(self) -> int:
        """Reads of stdout so far: a burst of lines takes few (see ``READ_INTERVAL``)."""
        return self._stdout.reads

    @property
    def output_ended(self) -> bool:
        """The child closed its stdout: it is on its way out."""
        return self._stdout.eof

    async def _drain_stderr(self, stderr: asyncio.StreamReader, transport: asyncio.ReadTransport) -> None:
        try:
            while chunk := await stderr.read(READ_CHUNK):
                self._stderr_tail.append(chunk)
                self._stderr_size += len(chunk)
                while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr_tail) > 1:
                    self._stderr_size -= len(self._stderr_tail.popleft())
        finally:
            transport.close()

    def stderr_tail(self, limit: int = 4000) -> str:
        return b"".join(self._stderr_tail)[-limit:].decode("utf-8", "replace")

    async def next_line(self, timeout: float) -> Line | None | LineTimeout:
        """The next stdout line, None at end of output, or TIMEOUT."""
        line = await self._stdout.get(timeout)
        if line is TIMEOUT:
            # A quiet moment: note the groups of Bash commands started meanwhile.
            self.tree.collect_recent()
        return line

    async def line(self) -> Line | None:
        """The next stdout line, or None at end of output, however long it takes."""
        while True:
            line = await self._stdout.get(None)
            if not isinstance(line, LineTimeout):
                return line

    def terminate(self) -> None:
        """Ask the whole tree to exit, killing it after a grace period (the read loop then
        sees end of output)."""
        self.tree.terminate(kill_after=KILL_GRACE)

    def ready_line(self) -> Line | None | LineTimeout:
        """A line that is already waiting, without waiting; TIMEOUT when there is none."""
        return self._stdout.take()

    async def stop(self, *, grace: float = KILL_GRACE) -> int:
        """Terminate the whole tree, kill what is left after ``grace``, reap the child.

        A child whose output has ended is finishing on its own, so it first gets
        ``EXIT_GRACE`` to exit unsignalled; its exit is awaited, not polled, so a normal
        ending costs no extra time (signalling at once and polling cost ~60 ms a run).

        The supervisor calls it when the output ends and again when the run finishes; the
        second call returns the exit code without looking at the tree again."""
        if self._exit_code is not None:
            return self._exit_code
        if self.output_ended and self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), EXIT_GRACE)
        await self.tree.reap(grace, also=lambda: self.proc.returncode is not None)
        code = await self.proc.wait()
        # The output ends once the pipes close; give them a moment, then stop waiting. A
        # process outside the tree (a daemon a tool started) may hold the pipes open
        # forever: our ends are then closed (stdout's, and the cancelled stderr drain's),
        # before stop() returns.
        _done, pending = await asyncio.wait([*self._tasks, self._stdout.closed], timeout=2)
        self._stdout.close()  # a no-op once closed; else the lines end here
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1)
        if self.input is not None:
            self.input.close()
        self._exit_code = code
        return code

    async def wait(self) -> int:
        return await self.proc.wait()
