"""The worker's warm ask-user server (``mcp_server.warm``): started with the first run that
registers ask-user, stopped ``ASK_USER_WARM_IDLE_SECONDS`` after the last such run ends.

Each run's relay session holds it (``acquire`` / ``release``) and hands the CLI its socket
in ``ASK_USER_WARM``; the ``python -m mcp_server`` the CLI starts then gets a forked server
that has imported the SDK already, instead of importing it for some 650 ms on the way to
the run's first word (``bench/cli_startup.py``). At rest a worker has no warm server
(about 60 MiB), as it has no render process.

The socket is bound and listening here, before the process starts, so a run that starts
while its warm server still imports waits in the backlog. It lives in a 0700 directory of
its own under the temporary directory, which both sandbox scopes hide from Claude's
commands. The process gets none of the worker's secrets and goes with the worker, even by
SIGKILL (see ``mcp_server.warm``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

# All the warm server gets of the worker's environment: no secrets. A served child takes
# the environment the CLI gave its MCP server instead.
CHILD_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL")
REPO = Path(__file__).resolve().parent.parent
SOCKET_NAME = "warm.sock"
# A Unix socket's path must fit sun_path (108 bytes on Linux).
MAX_SOCKET_PATH = 100
STOP_TIMEOUT = 5.0


@dataclass(frozen=True)
class WarmHold:
    """A run's hold on the warm server: its socket, for ``ASK_USER_WARM``."""

    socket_path: str
    generation: int


class WarmServer:
    """One worker's warm server and the runs that hold it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        # A stop (the worker's shutdown) drops every hold; a run that lets go of a hold
        # from before it changes nothing, so a run whose clean-up outlived the shutdown
        # cannot keep a later warm server from its idle stop.
        self._generation = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._listener: socket.socket | None = None
        self._directory: Path | None = None
        self._allowed: Path | None = None  # the run secrets directory it serves configs from
        self._idle: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def acquire(self) -> WarmHold | None:
        """Hold the warm server for a run; None when the run's MCP server starts on its own
        (switched off, or the server could not start)."""
        if not settings.ASK_USER_WARM_SERVER:
            return None
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            try:
                path = self._running()
            except OSError:
                logger.warning("The warm ask-user server could not start", exc_info=True)
                return None
            self._holders += 1
            return WarmHold(path, self._generation)

    def release(self, hold: WarmHold) -> None:
        """A run let go; the last one arms the idle stop (on the running loop, if any)."""
        with self._lock:
            if hold.generation != self._generation:
                return
            self._holders = max(0, self._holders - 1)
            if self._holders or self._process is None:
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop to time it: the worker's shutdown stops it
            if self._idle is not None:
                self._idle.cancel()
            self._idle = loop.call_later(settings.ASK_USER_WARM_IDLE_SECONDS, self._stop_if_idle)

    def _stop_if_idle(self) -> None:
        with self._lock:
            self._idle = None
            if self._holders:
                return
        self.stop()

    def _running(self) -> str:
        """The socket's path, starting the process (and binding the socket) if need be."""
        allowed = Path(settings.RUN_SECRETS_DIR)
        process = self._process
        if process is not None and process.poll() is not None:
            # It died (killed, out of memory): a new one takes its socket.
            logger.warning(
                "The warm ask-user server ended with code %s; starting another", process.returncode
            )
            process = None
        elif process is not None and self._allowed != allowed:
            # Configs now live elsewhere (a changed setting): the old server would refuse them.
            self._terminate(process)
            process = None
        if self._directory is None:
            self._bind()
        assert self._listener is not None and self._directory is not None
        if process is None:
            process = self._process = self._start(self._listener, allowed)
        return str(self._directory / SOCKET_NAME)

    def _start(self, listener: socket.socket, allowed: Path) -> subprocess.Popen[bytes]:
        env = {name: os.environ[name] for name in CHILD_ENV if name in os.environ}
        fd = listener.fileno()
        allowed.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._allowed = allowed
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-P", "-m", "mcp_server.warm"]
            + ["--fd", str(fd), "--allowed", str(allowed), "--parent", str(os.getpid())],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=REPO,
            env=env,
        )

    def _bind(self) -> None:
        base = tempfile.gettempdir()
        if len(base) > MAX_SOCKET_PATH - 40:
            base = "/tmp"  # noqa: S108 - a private 0700 directory of our own inside it
        directory = Path(tempfile.mkdtemp(prefix="pm-ask-user-", dir=base))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(directory / SOCKET_NAME))
            listener.listen(64)
        except OSError:
            listener.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._listener, self._directory = listener, directory

    def stop(self) -> None:
        """End the warm server (it exits once its served runs are gone) and remove its socket;
        the next run starts another."""
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            self._generation += 1
            self._holders = 0
            process, self._process = self._process, None
            listener, self._listener = self._listener, None
            directory, self._directory = self._directory, None
        if listener is not None:
            listener.close()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        if process is not None:
            self._terminate(process)

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            _reap_later(process)


def _reap_later(process: subprocess.Popen[bytes]) -> None:
    """Wait for a stopped warm server off the caller's way; one that will not go is killed."""

    def reap() -> None:
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()

    threading.Thread(target=reap, name="warm-ask-user-reaper", daemon=True).start()


_server = WarmServer()


def warm_server() -> WarmServer:
    """This worker's warm ask-user server."""
    return _server
