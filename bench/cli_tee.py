"""Stand between the runner and the real Claude CLI; stamp each stdout line as it leaves the CLI.

``python cli_tee.py OUT REAL_CLI [ARG...]`` runs ``REAL_CLI ARG...`` with this process's
stdin and stderr, forwards its stdout byte for byte, and when the CLI's stdout ends writes
``OUT``: one ``<token> <ns>`` line per text delta carrying a ``<NNNNN>`` token, where ``ns``
is CLOCK_MONOTONIC when that line became readable from the CLI's pipe.

A reader thread stamps and queues each chunk the moment it is read, so a consumer that
falls behind (pipe back-pressure) does not delay the stamps: they stay the CLI's own
emission times. The cost is one extra process hop and a thread hand-off (tens of
microseconds per chunk), which lands inside the measured latency, never outside it.
OUT is written before stdout closes, so it is complete once the consumer sees end of output.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time

TOKEN = re.compile(rb'"text_delta","text":"<(\d+)>"')
CHUNK = 256 * 1024


def _pump(fd: int, chunks: queue.Queue[tuple[int, bytes]]) -> None:
    while data := os.read(fd, CHUNK):
        chunks.put((time.clock_gettime_ns(time.CLOCK_MONOTONIC), data))
    chunks.put((0, b""))


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
    # Short switch interval: the forwarding thread wakes promptly after each stamp.
    sys.setswitchinterval(0.0002)
    child = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert child.stdout is not None
    chunks: queue.Queue[tuple[int, bytes]] = queue.Queue()
    threading.Thread(target=_pump, args=(child.stdout.fileno(), chunks), daemon=True).start()
    received: list[tuple[int, bytes]] = []
    while True:
        ts, data = chunks.get()
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]
        received.append((ts, data))
    code = child.wait()
    with open(out_path, "w", encoding="ascii") as handle:
        handle.write("\n".join(_stamps(received)) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
