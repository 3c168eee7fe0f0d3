"""Stand between the runner and the real Claude CLI; stamp each stdout line as it leaves the CLI.

``python cli_tee.py OUT REAL_CLI [ARG...]`` runs ``REAL_CLI ARG...`` with this process's
stdin and stderr, forwards its stdout byte for byte, and when the CLI's stdout ends writes
``OUT``: one ``<token> <ns>`` line per text delta carrying a ``<NNNNN>`` token, where ``ns``
is CLOCK_MONOTONIC when that line became readable from the CLI's pipe.

One thread reads a chunk, stamps it and writes it on at once, so the stamp and the
forward fall in the same time slice and the hop adds only a pipe write to the measured
latency. (An earlier version forwarded from a second thread: its wake-up, at the CLI's
lowered CPU priority on a busy machine, put 4-10 ms of the tee's own scheduling into the
p99 of a burst; the product has no such hop.) The CLI's pipe is widened like the
runner's, so neither side ever waits on a full pipe and the stamps stay the CLI's own
emission times. OUT is written before stdout closes, so it is complete once the
consumer sees end of output.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
import time

TOKEN = re.compile(rb'"text_delta","text":"<(\d+)>"')
CHUNK = 256 * 1024
PIPE_BYTES = 1024 * 1024  # the runner's own stdout pipe (promptmgr.processes.PIPE_BYTES)


def _stamps(received: list[tuple[int, bytes]]) -> list[str]:
    """``token ns`` per text-delta line; a line is stamped by the chunk that completed it."""
    out: list[str] = []
    partial = b""
    for ts, data in received:
        *lines, partial = (partial + data).split(b"\n")
        for line in lines:
            if b'"text_delta"' in line and (match := TOKEN.search(line)):
                out.append(f"{match.group(1).decode()} {ts}")
    return out


def main() -> int:
    out_path, *argv = sys.argv[1:]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert child.stdout is not None
    source = child.stdout.fileno()
    with contextlib.suppress(OSError):  # best effort, as in the runner
        fcntl.fcntl(source, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    received: list[tuple[int, bytes]] = []
    while data := os.read(source, CHUNK):
        received.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC), data))
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]
    code = child.wait()
    with open(out_path, "w", encoding="ascii") as handle:
        handle.write("\n".join(_stamps(received)) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
