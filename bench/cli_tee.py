"""Stand between the runner and the real Claude CLI; stamp each stdout line as it leaves the CLI.

``python cli_tee.py OUT REAL_CLI [ARG...]`` runs ``REAL_CLI ARG...`` with this process's
stdin and stderr, forwards its stdout byte for byte, and when the CLI's stdout ends writes
``OUT``: one ``<token> <ns>`` line per text delta carrying a ``<NNNNN>`` token, where ``ns``
is CLOCK_MONOTONIC when that line became readable from the CLI's pipe. Tool calls are stamped
the same way: ``tool_use:<id>`` for each tool_use in an ``assistant`` line (Claude's finished
call), ``can_use_tool:<tool_use_id>`` for each permission request the CLI sends its SDK host
(``control_request`` with subtype ``can_use_tool``). All lines are looked at only after
stdout ended, so none of this is on the forwarding path.

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
import json
import os
import re
import subprocess
import sys
import time

TOKEN = re.compile(rb'"text_delta","text":"<(\d+)>"')
CHUNK = 256 * 1024
PIPE_BYTES = 1024 * 1024  # the runner's own stdout pipe (promptmgr.processes.PIPE_BYTES)


def _tool_tokens(line: bytes) -> list[str]:
    """``tool_use:<id>`` per tool call an assistant line makes; ``can_use_tool:<tool_use_id>``
    for a permission request to the SDK host."""
    try:
        message = json.loads(line)
    except ValueError:
        return []
    if message.get("type") == "assistant":
        content = (message.get("message") or {}).get("content") or []
        return [f"tool_use:{block['id']}" for block in content if block.get("type") == "tool_use"]
    request = message.get("request") or {}
    if message.get("type") == "control_request" and request.get("subtype") == "can_use_tool":
        return [f"can_use_tool:{request.get('tool_use_id')}"]
    return []


def _stamps(received: list[tuple[int, bytes]]) -> list[str]:
    """``token ns`` per text-delta line and per tool call; a line is stamped by the chunk
    that completed it."""
    out: list[str] = []
    partial = b""
    for ts, data in received:
        *lines, partial = (partial + data).split(b"\n")
        for line in lines:
            if b'"text_delta"' in line and (match := TOKEN.search(line)):
                out.append(f"{match.group(1).decode()} {ts}")
            elif b'"tool_use"' in line or b'"can_use_tool"' in line:
                out.extend(f"{token} {ts}" for token in _tool_tokens(line))
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
