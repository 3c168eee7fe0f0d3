"""Stand between the Claude CLI and the ask-user MCP server; stamp each tool call and its result.

``python mcp_tee.py OUT SERVER [ARG...]`` runs the MCP server ``SERVER ARG...`` and relays its
stdio (newline-delimited JSON-RPC) byte for byte in both directions (``OUT`` may be
``@FILE``: the path written in ``FILE`` when the server starts). For every
``tools/call`` of ``ask_user`` or ``approve`` it appends to ``OUT`` a JSON line
``{"kind": "call", "tool": …, "id": …, "question": …, "tool_use_id": …, "ns": …}`` stamped
(CLOCK_MONOTONIC) when the CLI's request was read (``question`` is ask_user's, ``tool_use_id``
the tool call ``approve`` is asked about; each is None for the other tool), and for the
matching response ``{"kind": "result", "tool": …, "id": …, "ns": …}`` stamped when the
server's reply was read, before it is passed on to the CLI.

Stamps are taken before forwarding and records are written after it, so the tee's own
cost (well under a millisecond) can only lengthen the question-path figure, never shorten
either figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

TOOLS = ("ask_user", "approve")
CHUNK = 64 * 1024


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _relay(source: int, target: IO[bytes], on_line: Callable[[int, bytes], None]) -> None:
    """Forward ``source`` to ``target`` as it comes; then look at the complete lines."""
    partial = b""
    while data := os.read(source, CHUNK):
        ts = _now()
        _write_all(target.fileno(), data)
        *lines, partial = (partial + data).split(b"\n")
        for line in lines:
            try:
                on_line(ts, line)
            except ValueError:  # not JSON: not ours to judge, it was forwarded anyway
                continue
    target.close()


class Recorder:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.calls: dict[Any, str] = {}  # request id -> tool name
        self.lock = threading.Lock()

    def _write(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    def request(self, ts: int, line: bytes) -> None:
        if b'"tools/call"' not in line:
            return
        message = json.loads(line)
        params = message.get("params") or {}
        tool = params.get("name")
        if message.get("method") == "tools/call" and tool in TOOLS:
            self.calls[message.get("id")] = tool
            arguments = params.get("arguments") or {}
            self._write(
                {
                    "kind": "call",
                    "tool": tool,
                    "id": message.get("id"),
                    "question": arguments.get("question"),
                    "tool_use_id": arguments.get("tool_use_id"),
                    "ns": ts,
                }
            )

    def response(self, ts: int, line: bytes) -> None:
        if not self.calls or b'"id"' not in line:
            return
        message = json.loads(line)
        if "method" not in message and message.get("id") in self.calls:
            tool = self.calls.pop(message.get("id"))
            self._write({"kind": "result", "tool": tool, "id": message.get("id"), "ns": ts})


def main() -> int:
    out_path, *argv = sys.argv[1:]
    if out_path.startswith("@"):
        # "@FILE": FILE names the stamps file as this server starts (a benchmark registers
        # one command line for its whole run and moves the stamps from phase to phase).
        with open(out_path[1:], encoding="utf-8") as flag:
            out_path = flag.read().strip()
    sys.setswitchinterval(0.0002)
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    with open(out_path, "a", encoding="utf-8") as out:
        recorder = Recorder(out)
        threading.Thread(target=_relay, args=(0, child.stdin, recorder.request), daemon=True).start()
        _relay(child.stdout.fileno(), sys.stdout.buffer, recorder.response)
        return child.wait()


if __name__ == "__main__":
    sys.exit(main())
