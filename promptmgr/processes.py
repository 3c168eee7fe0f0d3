"""Subprocess handling, all in one place.

A child is spawned in its own process group (session), its stdout and stderr are
drained concurrently, stdout is split into lines of any length (a line over
``max_line_bytes`` is cut and flagged, never a crash), and on every ending the whole
group — the CLI and everything it started, such as MCP servers — is terminated, killed
after a grace period, and the child reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from dataclasses import dataclass
from pathlib import Path

READ_CHUNK = 256 * 1024
DEFAULT_MAX_LINE = 16 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024


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
    """Every live (non-zombie) process with its parent and process group, from /proc."""
    found: list[ProcInfo] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces or parentheses: parse after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z":
            found.append(ProcInfo(pid=int(entry.name), ppid=int(fields[1]), pgid=int(fields[2])))
    return found


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group."""
    return [p.pid for p in live_processes() if p.pgid == pgid]


class ManagedProcess:
    def __init__(self, proc: asyncio.subprocess.Process, *, max_line_bytes: int, queue_size: int) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.max_line_bytes = max_line_bytes
        self.lines: asyncio.Queue[Line | None] = asyncio.Queue(maxsize=queue_size)
        self._stderr_tail: deque[bytes] = deque()
        self._stderr_size = 0
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def spawn(
        cls,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        stdin_data: bytes,
        max_line_bytes: int = DEFAULT_MAX_LINE,
        queue_size: int = 1024,
    ) -> ManagedProcess:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        managed = cls(proc, max_line_bytes=max_line_bytes, queue_size=queue_size)
        managed._tasks = [
            asyncio.create_task(managed._feed_stdin(stdin_data)),
            asyncio.create_task(managed._drain_stdout()),
            asyncio.create_task(managed._drain_stderr()),
        ]
        return managed

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _feed_stdin(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        # A child that exits before reading its input is reported by its exit, not here
        # (uvloop raises RuntimeError for a closed pipe).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
            stdin.write(data)
            await stdin.drain()
            stdin.close()

    async def _drain_stdout(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        limit = self.max_line_bytes
        buffer = bytearray()
        skipping = False  # inside an over-long line whose head was already emitted
        try:
            while chunk := await stdout.read(READ_CHUNK):
                start = 0
                while True:
                    newline = chunk.find(b"\n", start)
                    end = len(chunk) if newline < 0 else newline
                    if not skipping:
                        buffer += chunk[start:end]
                        if len(buffer) > limit:
                            await self.lines.put(Line(bytes(buffer[:limit]), truncated=True))
                            buffer.clear()
                            skipping = True
                    if newline < 0:
                        break
                    if skipping:
                        skipping = False
                    else:
                        await self.lines.put(Line(bytes(buffer)))
                    buffer.clear()
                    start = newline + 1
            if buffer and not skipping:
                await self.lines.put(Line(bytes(buffer)))
        finally:
            await self.lines.put(None)

    async def _drain_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        while chunk := await stderr.read(READ_CHUNK):
            self._stderr_tail.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr_tail) > 1:
                self._stderr_size -= len(self._stderr_tail.popleft())

    def stderr_tail(self, limit: int = 4000) -> str:
        return b"".join(self._stderr_tail)[-limit:].decode("utf-8", "replace")

    async def next_line(self, timeout: float) -> Line | None | LineTimeout:
        """The next stdout line, None at end of output, or TIMEOUT."""
        try:
            return await asyncio.wait_for(self.lines.get(), timeout)
        except TimeoutError:
            return TIMEOUT

    def terminate(self) -> None:
        """Ask the whole group to exit (the read loop then sees end of output)."""
        self._signal_group(signal.SIGTERM)

    def ready_line(self) -> Line | None | LineTimeout:
        """A line that is already waiting, without waiting; TIMEOUT when there is none."""
        try:
            return self.lines.get_nowait()
        except asyncio.QueueEmpty:
            return TIMEOUT

    def ack(self) -> None:
        """Nothing to do: lines need no acknowledgement here (see the SDK engine's)."""

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    async def stop(self, *, grace: float = 3.0) -> int:
        """Terminate the whole group, kill what is left after ``grace``, reap the child."""
        if self.proc.returncode is None or group_members(self.pgid):
            self._signal_group(signal.SIGTERM)
            deadline = asyncio.get_running_loop().time() + grace
            while asyncio.get_running_loop().time() < deadline:
                if self.proc.returncode is not None and not group_members(self.pgid):
                    break
                await asyncio.sleep(0.05)
            else:
                self._signal_group(signal.SIGKILL)
        code = await self.proc.wait()
        # The drains end once the pipes close; give them a moment, then stop waiting.
        _done, pending = await asyncio.wait(self._tasks, timeout=2)
        for task in pending:
            task.cancel()
        return code

    async def wait(self) -> int:
        return await self.proc.wait()
