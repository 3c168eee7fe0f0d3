"""The warm ask-user server: one process that imports the MCP server once and forks a ready
server for each run (``python -P -m mcp_server.warm``, started by ``askuser.warm_server``).

Why: Claude Code connects its MCP servers before a turn starts, and a fresh
``python -m mcp_server`` spends some 650 ms importing the ``mcp`` SDK (its package imports
the client, uvicorn and starlette, and the pydantic models of two protocol versions) on the
way to every ask-user run's first word. A fork of a process that has done that is ready in
milliseconds.

How:

- The app binds a Unix socket in a private (0700) directory under the temporary directory,
  which every sandbox hides, and starts this process with it as an inherited descriptor. The
  socket listens before this process has imported anything, so a run that starts meanwhile
  waits in the backlog; nothing is refused.
- The CLI still starts ``python -P -m mcp_server``, the sandbox's one trusted command line.
  With ``ASK_USER_WARM`` naming the socket, that process (the *stub*) imports nothing of the
  SDK: it sends its stdin, stdout and stderr (``SCM_RIGHTS``), its environment and its
  working directory (``mcp_server.stub``), and this process forks a child that serves the
  tools on them with that environment, in a session of its own.
- The stub stays the CLI's child: it passes SIGTERM, SIGINT and SIGHUP on to the served
  child and exits with its exit code, which this process reports on the connection. A stub
  killed outright (SIGKILL, with its run's process tree) closes the connection, and this
  process kills its child.
- Only the app's own user is served, and only a run's config under the app's run secrets
  directory (``--allowed``): another request is refused, and a refused or unanswered stub
  serves in place, as it did before.
- This process gets no secrets: its environment is the app's ``CHILD_ENV`` allowlist, and a
  child replaces it with the stub's (what the CLI gave its MCP server). It goes with the
  app's worker (``PR_SET_PDEATHSIG``) and, told to stop (SIGTERM), stops accepting and exits
  once its children are gone.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from core.procfs import die_with

from .config import CONFIG_ENV_VAR
from .stub import HEADER, STDIO_FDS

# How long a connected stub may take to send its request.
REQUEST_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 1024 * 1024
# What a served child answers as any process would (a stub passes these on).
CHILD_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Refused(Exception):
    """The warm server will not serve this request; the reason is safe to log."""


# ---------------------------------------------------------------------------------------
# The warm server itself.


@dataclass
class _Served:
    conn: socket.socket
    pid: int
    pidfd: int
    stub_gone: bool = False


@dataclass
class _Zygote:
    listener: socket.socket | None
    allowed: Path
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    served: dict[int, _Served] = field(default_factory=dict)  # by pid
    wake_r: socket.socket | None = None
    wake_w: socket.socket | None = None
    stopping: bool = False

    def close_for_child(self) -> None:
        """In a forked child: let go of everything the warm server holds."""
        signal.set_wakeup_fd(-1)
        for sock in (self.listener, self.wake_r, self.wake_w):
            if sock is not None:
                sock.close()
        for served in self.served.values():
            served.conn.close()
            os.close(served.pidfd)
        self.selector.close()


def serve(listener: socket.socket, allowed: Path, parent: int) -> None:
    """Accept stubs on ``listener`` and fork a server for each until told to stop."""
    die_with(parent)
    # A terminal's Ctrl-C is the worker's to handle; it stops this process when it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The imports this process exists to pay once, and the tools' schemas, which the first
    # build compiles; anyio's asyncio backend and uvloop are what a served child loads next.
    import anyio._backends._asyncio  # noqa: F401
    import uvloop  # noqa: F401

    from .server import build_server

    build_server()
    # What is imported now lives as long as every child: out of the collector's sight, a
    # child's collections neither walk it nor write to its pages (which would copy them).
    gc.collect()
    gc.freeze()
    zygote = _Zygote(listener=listener, allowed=allowed)
    zygote.wake_r, zygote.wake_w = socket.socketpair()
    zygote.wake_r.setblocking(False)
    zygote.wake_w.setblocking(False)
    signal.set_wakeup_fd(zygote.wake_w.fileno())

    def stop(_signum: int, _frame: object) -> None:
        zygote.stopping = True

    signal.signal(signal.SIGTERM, stop)
    zygote.selector.register(listener, selectors.EVENT_READ, "accept")
    zygote.selector.register(zygote.wake_r, selectors.EVENT_READ, "wake")
    while True:
        if zygote.stopping and zygote.listener is not None:
            zygote.selector.unregister(zygote.listener)
            zygote.listener.close()
            zygote.listener = None
        if zygote.stopping and not zygote.served:
            return
        for key, _events in zygote.selector.select():
            if key.data == "accept" and zygote.listener is not None:
                _accept(zygote)
            elif key.data == "wake":
                with contextlib.suppress(OSError):
                    zygote.wake_r.recv(4096)
            elif isinstance(key.data, tuple):
                kind, pid = key.data
                served = zygote.served.get(pid)
                if served is None:
                    continue
                if kind == "ended":
                    _reap(zygote, served)
                else:
                    _stub_spoke(zygote, served)


def _accept(zygote: _Zygote) -> None:
    assert zygote.listener is not None
    try:
        conn, _ = zygote.listener.accept()
    except OSError:
        return
    try:
        request, fds = _read_request(conn, zygote.allowed)
    except (Refused, OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            conn.sendall(f"refused {exc}\n".encode())
        conn.close()
        return
    # A stub passes its SIGTERM on as soon as it has the pid: blocked across the fork, it
    # waits in the child until the child has its default handling back, instead of
    # running this process's handler there and being lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, CHILD_SIGNALS)
    try:
        pid = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_SIGNALS)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(f"refused fork failed: {exc}\n".encode())
        conn.close()
        return
    if pid == 0:
        _become_server(zygote, fds, request)  # never returns
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_SIGNALS)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    served = _Served(conn=conn, pid=pid, pidfd=pidfd)
    zygote.served[pid] = served
    conn.setblocking(False)
    zygote.selector.register(pidfd, selectors.EVENT_READ, ("ended", pid))
    zygote.selector.register(conn, selectors.EVENT_READ, ("stub", pid))
    with contextlib.suppress(OSError):
        conn.sendall(f"pid {pid}\n".encode())


class _Request(BaseModel):
    """What a stub sends (``mcp_server.stub._send_request``)."""

    model_config = ConfigDict(frozen=True)

    env: dict[str, str]
    cwd: str = "/"
    nice: int | None = None
    session_nice: int | None = None


def _read_request(conn: socket.socket, allowed: Path) -> tuple[_Request, list[int]]:
    """The stub's environment, working directory, priority and stdio, checked."""
    conn.settimeout(REQUEST_TIMEOUT)
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, len(STDIO_FDS))
    try:
        if uid != os.getuid():
            raise Refused("not the app's own user")
        if len(fds) != len(STDIO_FDS):
            raise Refused("expected stdin, stdout and stderr")
        data = _read_rest(conn, data)
        try:
            request = _Request.model_validate_json(data[HEADER.size :])
        except ValidationError:
            raise Refused("not a stub's request") from None
        config = request.env.get(CONFIG_ENV_VAR, "")
        if not config or not Path(os.path.realpath(config)).is_relative_to(allowed):
            raise Refused("no run config of this app")
        return request, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _read_rest(conn: socket.socket, data: bytes) -> bytes:
    """The whole request: its length header, then that many bytes."""
    while len(data) < HEADER.size:
        data += _more(conn)
    size = HEADER.size + HEADER.unpack_from(data)[0]
    if size > HEADER.size + MAX_REQUEST_BYTES:
        raise Refused("request too large")
    while len(data) < size:
        data += _more(conn)
    return data


def _more(conn: socket.socket) -> bytes:
    chunk = conn.recv(65536)
    if not chunk:
        raise Refused("incomplete request")
    return chunk


def _become_server(zygote: _Zygote, fds: list[int], request: _Request) -> None:
    """In the forked child: the stub's stdio, environment, directory and CPU priority, then
    the server."""
    code = 1
    try:
        zygote.close_for_child()
        os.setsid()  # apart from the warm server's group and its signals
        for signum in CHILD_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD_SIGNALS)
        for target, fd in zip(STDIO_FDS, fds, strict=True):
            os.dup2(fd, target)
        for fd in fds:
            if fd not in STDIO_FDS:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request.env)
        with contextlib.suppress(OSError):
            os.chdir(request.cwd)
        _take_priority(request)
        from .__main__ import serve_here

        serve_here()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _take_priority(request: _Request) -> None:
    """The stub's nice value, and its session's (a session of its own weighs as much as the
    whole server where the kernel shares CPU time by session first); best effort, as
    ``promptmgr.processes.lower_priority``."""
    if request.nice is not None and request.nice > os.getpriority(os.PRIO_PROCESS, 0):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, request.nice)
    if request.session_nice is not None:
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w", encoding="ascii") as autogroup:
            autogroup.write(str(request.session_nice))


def _reap(zygote: _Zygote, served: _Served) -> None:
    """A served child ended: tell its stub how, and forget it."""
    try:
        _, status = os.waitpid(served.pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        code = 1
    zygote.selector.unregister(served.pidfd)
    if not served.stub_gone:
        zygote.selector.unregister(served.conn)
    os.close(served.pidfd)
    with contextlib.suppress(OSError):
        served.conn.setblocking(True)
        served.conn.settimeout(1.0)
        served.conn.sendall(f"exit {code}\n".encode())
    served.conn.close()
    del zygote.served[served.pid]


def _stub_spoke(zygote: _Zygote, served: _Served) -> None:
    """A stub says nothing after its request: this is its end (killed with its run's
    process tree), and the child it stood for goes too."""
    try:
        data = served.conn.recv(256)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if not data:
        served.stub_gone = True
        zygote.selector.unregister(served.conn)
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(served.pidfd, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket's descriptor")
    parser.add_argument("--allowed", required=True, help="the run secrets directory")
    parser.add_argument("--parent", type=int, required=True, help="the worker's pid")
    args = parser.parse_args()
    listener = socket.socket(fileno=args.fd)
    listener.setblocking(False)
    serve(listener, Path(os.path.realpath(args.allowed)), args.parent)


if __name__ == "__main__":
    main()
