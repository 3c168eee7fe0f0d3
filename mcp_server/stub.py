"""The stub side of the warm ask-user server (``mcp_server.warm``): what ``python -m
mcp_server`` does when ``ASK_USER_WARM`` names a warm server's socket.

It is on the way to every ask-user run's first word, so it imports only what the standard
library starts with: it hands its stdio, environment and working directory over, then
stands for the served child in the CLI's process tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct

from core.procfs import session_nice

WARM_ENV_VAR = "ASK_USER_WARM"
# A stub waits this long for the warm server to take it (a warm server starting on a
# loaded machine imports for a second or two); then it serves in place.
STUB_WAIT_SECONDS = 20.0
STDIO_FDS = (0, 1, 2)
HEADER = struct.Struct("!I")
# The signals a stub passes on to the server it stands for.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def serve_through(path: str) -> int | None:
    """Have the warm server at ``path`` serve this process's stdio; the served server's exit
    code, or None when this process must serve in place (no warm server, or refused)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with sock:
        try:
            sock.settimeout(STUB_WAIT_SECONDS)
            sock.connect(path)
            _send_request(sock)
            reply = _read_line(sock)
        except OSError as exc:
            _note(f"the warm server at {path} did not answer ({exc}); serving here")
            return None
        kind, _, value = reply.partition(" ")
        if kind != "pid" or not value.isdigit():
            _note(f"the warm server did not serve this run ({reply or 'no reply'}); serving here")
            return None
        return _stand_for(sock, int(value))


def _send_request(sock: socket.socket) -> None:
    request = {
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        # The served child runs at the CPU priority the CLI gave this process and its session.
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "session_nice": session_nice(),
    }
    payload = json.dumps(request).encode()
    data = HEADER.pack(len(payload)) + payload
    sent = socket.send_fds(sock, [data], list(STDIO_FDS))
    if sent < len(data):
        sock.sendall(data[sent:])


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", errors="replace").strip()


def _stand_for(sock: socket.socket, pid: int) -> int:
    """Stay in the CLI's process tree as the served server: pass its signals on and end with
    its exit code."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:  # it has ended already; the warm server still reports how
        pidfd = None

    def forward(signum: int, _frame: object) -> None:
        if pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    # The served child holds the pipes now: a CLI that waits for their end waits for it.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    sock.settimeout(None)
    try:
        reply = _read_line(sock)
    except OSError:
        reply = ""
    kind, _, value = reply.partition(" ")
    if kind == "exit" and value.lstrip("-").isdigit():
        code = int(value)
        return 128 - code if code < 0 else code
    # The warm server went (killed with its worker): the child it served goes too.
    _note("the warm server ended while serving this run")
    if pidfd is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return 1


def _note(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"ask-user: {message}\n".encode())
