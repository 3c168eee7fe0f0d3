"""Reading a child's stdout line by line: the CPU one line costs the reading process.

Run: ``.venv/bin/python bench/line_reader.py`` (about a minute).

A child prints one stream-json text delta per write, as the Claude CLI does, at a model's
pace (50 lines a second), at a pace where reads are paced (200 a second, lines 5 ms apart:
``processes.READ_INTERVAL``), and in a burst. This process reads them under uvloop, as the
worker does: through ``ManagedProcess.next_line`` with the runner's read timeout, and
through a bare protocol that only splits lines and wakes its reader, with no timeout (the
floor of a reader on this machine). Reported: this process's CPU time per line, from the
first line to the last; each figure is the median of ``--repeat`` runs, with their range.
Nothing else runs in this process, so the figures are the reading alone. A benchmark
reports; it does not assert.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402

from bench.machinery import stream_line  # noqa: E402
from bench.report import fmt, median, table  # noqa: E402
from promptmgr.processes import TIMEOUT, ManagedProcess  # noqa: E402

LINE = stream_line(300) + b"\n"  # a text delta as the CLI prints it, with its ids
READ_TIMEOUT = 2.0  # as the runner's (RUN_READ_TIMEOUT)


def child_code(rate: float, lines: int) -> str:
    """A child printing ``lines`` lines, one write each, ``rate`` a second (0: at once)."""
    return (
        "import os, time\n"
        f"line = {LINE!r}\n"
        f"period = {0 if rate == 0 else 1 / rate!r}\n"
        "due = time.monotonic()\n"
        f"for _ in range({lines}):\n"
        "    os.write(1, line)\n"
        "    due += period\n"
        "    wait = due - time.monotonic()\n"
        "    if wait > 0:\n"
        "        time.sleep(wait)\n"
    )


async def through_managed_process(rate: float, lines: int) -> float:
    """µs of CPU per line read through ``ManagedProcess.next_line``."""
    proc = await ManagedProcess.spawn(
        [sys.executable, "-c", child_code(rate, lines)],
        cwd=Path("/tmp"),
        env=dict(os.environ),
        stdin_data=b"",
    )
    read = 0
    started = 0.0
    while (item := await proc.next_line(READ_TIMEOUT)) is not None:
        if item is TIMEOUT:
            continue
        read += 1
        if read == 1:
            started = time.process_time()
    spent = time.process_time() - started
    await proc.stop()
    return spent * 1e6 / max(1, read - 1)


class _BareLines(asyncio.Protocol):
    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.rest = b""
        self.ended = False
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        *whole, self.rest = (self.rest + data).split(b"\n")
        self.lines.extend(whole)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def through_bare_protocol(rate: float, lines: int) -> float:
    """µs of CPU per line read through a protocol that only splits lines and wakes."""
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", child_code(rate, lines)], stdout=write_fd)
    os.close(write_fd)
    _transport, protocol = await loop.connect_read_pipe(_BareLines, os.fdopen(read_fd, "rb", buffering=0))
    read = 0
    started = 0.0
    while True:
        if protocol.lines:
            del protocol.lines[0]
            read += 1
            if read == 1:
                started = time.process_time()
            continue
        if protocol.ended:
            break
        protocol.waiter = loop.create_future()
        await protocol.waiter
    spent = time.process_time() - started
    await asyncio.to_thread(child.wait)
    return spent * 1e6 / max(1, read - 1)


async def measure(args: argparse.Namespace) -> list[list[str]]:
    cases = [
        ("50 lines/s (a model's pace)", 50.0, int(50 * args.seconds)),
        ("200 lines/s (reads paced)", 200.0, int(200 * args.seconds)),
        ("a burst, 20,000 lines", 0.0, 20_000),
    ]
    rows = []
    for label, rate, lines in cases:
        for name, reader in (
            ("ManagedProcess", through_managed_process),
            ("bare protocol", through_bare_protocol),
        ):
            runs = [await reader(rate, lines) for _ in range(args.repeat)]
            rows.append(
                [f"{label}, {name}", fmt(median(runs), 1), f"{fmt(min(runs), 1)}-{fmt(max(runs), 1)}"]
            )
            print(f"  {rows[-1][0]}: {rows[-1][1]} µs a line", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each paced run (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case (default 3)")
    args = parser.parse_args()
    print(f"Line reader benchmark on {os.cpu_count()} CPUs …", flush=True)
    rows = uvloop.run(measure(args))
    print()
    print(
        table(
            ["case (CPU of the reading process)", "µs a line", "range"],
            rows,
            title="Reading a child's stdout",
        )
    )


if __name__ == "__main__":
    main()
