"""The server's stdin and stdout as event-loop pipes, for the mcp SDK's ``stdio_server``.

The SDK's default wraps both in ``anyio.wrap_file``: every line read, every write and every
flush is a trip to a worker thread and back. A tool's result written that way took two
such trips, about 0.2 ms here, on the way of every decision and answer back to the CLI
(``bench/mcp_hop.py``). These are the same pipes read and written by the event loop
(``connect_read_pipe``/``connect_write_pipe``).

As the SDK's default does, fd 0 and fd 1 point at the null device and at stderr while the
server runs, so a stray read sees EOF and a stray print misses the wire; the wire is kept on
private duplicates and put back on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator

# One MCP message is one line; a Write's whole file comes in one. The reader's buffer grows
# to this before it refuses a line, as the SDK's unbounded text reader never would.
LINE_LIMIT = 256 * 1024 * 1024


class PipeLines:
    """stdin's lines as text, for ``async for`` (what ``stdio_server`` reads)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class PipeWriter:
    """stdout as ``write`` and ``flush`` (what ``stdio_server`` writes with)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def pipes_apart() -> bool:
    """Whether stdin and stdout are pipes or sockets the loop can watch, and stdout is not
    stderr's: the loop makes stdout non-blocking, which a shared stderr would be too, and a
    log line into a full pipe would then fail instead of waiting."""
    try:
        wire = [os.fstat(fd) for fd in (0, 1, 2)]
    except OSError:
        return False
    watchable = all(stat.S_ISFIFO(s.st_mode) or stat.S_ISSOCK(s.st_mode) for s in wire[:2])
    return watchable and (wire[1].st_dev, wire[1].st_ino) != (wire[2].st_dev, wire[2].st_ino)


@contextlib.asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[PipeLines, PipeWriter]]:
    """stdin and stdout as loop pipes while the block runs; fd 0 and 1 diverted meanwhile."""
    loop = asyncio.get_running_loop()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    reader = asyncio.StreamReader(limit=LINE_LIMIT, loop=loop)
    in_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(wire_in, "rb", buffering=0)
    )
    out_transport, out_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(out_transport, out_protocol, None, loop)
    # Diverted only once the wire is safely held by the duplicates.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield PipeLines(reader), PipeWriter(writer)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        in_transport.close()
        out_transport.close()
