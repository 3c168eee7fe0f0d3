"""One bubblewrap sandbox per run, which every shell command of the run enters.

Claude Code's own sandbox (``sandbox`` in its settings, the ``command`` scope) builds a new
bubblewrap sandbox for every Bash command: it searches the working directory for files to
mask, assembles some 300 arguments, starts bubblewrap and two socat proxies, and waits for
them. That costs about 65 ms before each approved command starts (``bench/approval_latency.py``),
three times the time budget of the whole decision -> tool path.

In the ``run`` scope (``CLAUDE_SANDBOX_SCOPE=run``) the app starts one sandbox when the run
starts (``RunSandbox.start``, which returns once commands can enter it), a long-lived
``sleep`` under bubblewrap with the same policy, and the CLI runs each shell command
through ``CLAUDE_CODE_SHELL_PREFIX``: a small shell script of the run's own
(``write_prefix``) that joins the sandbox's namespaces with ``nsenter``, drops every
capability with ``setpriv`` and runs the command there, about 7 ms. The policy
(``Policy``, filled in by ``sandbox.start_run_sandbox``):

- the host's root read-only; ``/tmp``, ``/var/tmp``, ``/dev/shm`` private to the run (empty
  and writable, gone with the run); the server's home, the app's code, ``VAR_DIR``,
  ``STORAGE_ROOT``, the app's virtualenv, ``/run`` (where local servers keep their sockets)
  and the private places (``sandbox.private_places``) hidden under empty read-only
  directories (a file: under ``/dev/null``);
- the run's working directory and its own temporary directory bound back writable, a
  worktree's git directories read-only;
- its own ``/proc`` (the run's commands only), ``/dev``, network (a loopback of its own: no
  host, no Redis, no app), IPC, UTS and user namespace; no capabilities, ``no_new_privs``;
- the network through the run's egress proxy (``promptmgr.egress``, outside, one process
  per run), which never opens this server, the app's services or a private network
  unless the operator allows it: ``socat`` in the sandbox passes ``127.0.0.1:3128`` to
  the proxy's socket, and every command gets ``HTTP_PROXY`` and ``HTTPS_PROXY`` pointing
  there (``NO_PROXY`` keeps the sandbox's own loopback direct). ``start`` does not wait
  for the proxy to serve (its socket holds connections meanwhile); ``wait_egress`` does,
  once the CLI is spawned;
- the API key, ``ASK_USER_CONFIG`` and the CLI's messaging socket and token out of every
  command's environment, and the messaging socket's directory hidden.

The CLI also starts stdio MCP servers and hooks through the prefix. The ask-user server
must reach the app and its run's secrets, so the one exact command line of it
(``Policy.trusted_command``) runs outside; every other program goes in. A Bash
command never matches it: the CLI wraps each one in its own script.

Each run's prefix is a script of its own under ``VAR_DIR`` (the CLI spawns an MCP server
with the prefix as its program, so it can take no arguments). It names the sandbox by its
first process's PID and checks, before entering, for a marker directory only that sandbox
has, so a PID reused after the sandbox ended is never entered. Its path is chosen before
the sandbox starts (``prefix_path``), so the engines can spawn the CLI meanwhile: until
``RunSandbox.open`` puts the entering script there, the path holds a pending one
(``write_pending_prefix``) in which a command waits, the ask-user server's line apart.
The prefix is set in the CLI's environment and in the flag layer of its settings
(``env``), which a workspace's own settings cannot override
(``tests/harness/test_sandbox_contract.py`` pins what this module relies on).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from django.conf import settings

from core import files
from core.procfs import readable

from . import egress

# Where local servers keep their sockets (PostgreSQL's, a container runtime's): a unix
# socket on a read-only mount still accepts connections, so these are hidden.
SOCKET_DIRS = (Path("/run"), Path("/var/run"))
# The CLI's messaging socket and its token, which a command never gets (it could talk to
# the CLI); the socket's directory, inside the run's temporary directory, is hidden too.
MESSAGING_ENV = ("CLAUDE_CODE_MESSAGING_TOKEN", "CLAUDE_CODE_MESSAGING_SOCKET")
MESSAGING_DIR = "cc-socks"
REQUIRED_TOOLS = ("bwrap", "nsenter", "setpriv", "socat")
# The run's egress (promptmgr.egress): its socket's directory in the run's temporary
# directory (read-only inside), and what a command's environment says of it.
EGRESS_DIR = "egress"
EGRESS_SOCKET = "socket"
PROXY_URL = f"http://127.0.0.1:{egress.PORT}"
NO_PROXY = "localhost,127.0.0.1,::1"
# The sandbox's first process: socat passes the commands' proxy connections (its own
# loopback) to the egress socket, leaving it to the egress to end a connection once a
# command has sent all it will (-t, longer than egress.IDLE_TIMEOUT; socat's default 0.5 s
# cut late replies off); once it listens, the shell says so on the ready pipe ($3) and
# becomes the sleep that holds the sandbox (a socat that failed keeps the loop trying until
# RunSandbox.start gives up, START_TIMEOUT).
SANDBOX_INIT = """
socat -lf /dev/null -t 3600 "TCP-LISTEN:$1,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$2" &
until (exec 9<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do :; done
printf ready >&"$3"
eval "exec $3>&-"
exec sleep infinity
"""
READY = b"ready"
START_TIMEOUT = 10.0
# How long a command waits in a pending prefix at most. A safety net only: the run's end
# removes its prefix, which ends the wait (``remove_prefix``).
PENDING_LIMIT = 600.0
# A prefix staged for its move into place (``write_prefix``) and older than this was left
# by a worker killed in between: a write takes microseconds.
STAGED_LIMIT = 60.0
STOP_TIMEOUT = 5.0
MSG_ENDED = "This run's sandbox has ended; the command did not run."

# Every step here is paid by each command, so the script runs no program of its own before
# nsenter: builtins check the sandbox and clear the environment, and the last shell changes
# directory by name inside the sandbox (nsenter --wd would open it outside, in the host's
# mounts, where ".." leads out). nsenter and setpriv are named by their absolute paths,
# found on the server's PATH when the sandbox starts: the command's PATH is the CLI's, which
# a workspace's settings (``env``) can set, and a program found there would run before the
# sandbox's entry (nsenter) or inside it with every capability of its namespace (setpriv).
# It also spares each command the failed exec of every PATH entry before the right one.
# Both prefix scripts start alike: one command line, and the ask-user MCP server's runs
# outside, at once (the CLI connects it before the turn, even while the sandbox starts).
PREFIX_HEAD = """#!/bin/sh
# CLAUDE_CODE_SHELL_PREFIX of one run in its run sandbox; written by promptmgr/run_sandbox.py.
# The CLI calls it with one argument, the command line (a shell command, an MCP server's).
if [ "$#" -ne 1 ]; then
    echo "shell prefix: expected one command line, got $#" >&2
    exit 126
fi
# The ask-user MCP server needs the app and its run's secrets: its one command line runs outside.
if [ "$1" = {trusted} ]; then
    exec /bin/sh -c "$1"
fi
"""
PREFIX_SCRIPT = (
    PREFIX_HEAD
    + """# The marker exists only in this run's sandbox: a PID reused after it ended is never entered.
if [ ! -d /proc/{pid}/root{marker} ]; then
    echo {ended} >&2
    exit 126
fi
unset {unset}
export HTTP_PROXY={proxy} HTTPS_PROXY={proxy} http_proxy={proxy} https_proxy={proxy} NO_PROXY={no_proxy} no_proxy={no_proxy}
exec {nsenter} --target {pid} --user --mount --net --pid --ipc --uts --cgroup --preserve-credentials -- \\
    {setpriv} --bounding-set=-all --inh-caps=-all --ambient-caps=-all --no-new-privs -- \\
    /bin/bash -c 'cd -- "$1" || exit 126; eval "$2"' bash "$PWD" "$1"
"""
)
# The prefix while the run's sandbox starts beside its CLI (``write_pending_prefix``): a
# command (a hook, a workspace's MCP server) waits until the prefix that enters the sandbox
# has taken its place (``RunSandbox.open``), then goes through that one. The wait sleeps
# with the server's own ``sleep``, by absolute path, as the entry's programs are named.
PENDING_SCRIPT = (
    PREFIX_HEAD
    + """# The run's sandbox is still starting: wait until the prefix that enters it is in place.
waited=0
while [ -e {pending} ]; do
    if [ "$waited" -ge {limit} ]; then
        echo {not_started} >&2
        exit 126
    fi
    {sleep} 0.01
    waited=$((waited + 1))
done
if [ ! -x {path} ]; then
    echo {ended} >&2
    exit 126
fi
exec {path} "$1"
"""
)
MSG_NOT_STARTED = "This run's sandbox did not start; the command did not run."


class RunSandboxError(Exception):
    """The run's sandbox could not start; the message says why."""


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class Policy:
    """What one run's sandbox holds (``sandbox.start_run_sandbox`` fills it in).

    ``hidden`` directories are emptied (``scratch`` ones stay writable, the rest read-only),
    ``files`` lie under /dev/null, ``readable`` is bound back read-only, ``workdir`` and
    ``tmpdir`` writable; ``hidden_env`` never reaches a command; ``trusted_command`` is the
    one command line (the ask-user MCP server's) the prefix runs outside; the egress opens
    what ``egress.Rules`` opens with ``egress_allow`` and ``egress_deny``."""

    workdir: Path
    tmpdir: Path
    hidden: list[Path]
    scratch: tuple[Path, ...]
    files: list[Path]
    readable: list[Path]
    hidden_env: tuple[str, ...]
    trusted_command: str
    # Networks (CIDR) the egress opens besides the public addresses, and hosts it never opens.
    egress_allow: tuple[str, ...] = ()
    egress_deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """The absolute paths of the programs a command enters its sandbox through."""

    nsenter: str
    setpriv: str


def prefix_script(policy: Policy, *, pid: int, marker: str, entry: Entry) -> str:
    return PREFIX_SCRIPT.format(
        nsenter=shlex.quote(entry.nsenter),
        setpriv=shlex.quote(entry.setpriv),
        trusted=shlex.quote(policy.trusted_command),
        pid=pid,
        marker=marker,
        ended=shlex.quote(MSG_ENDED),
        unset=" ".join((*policy.hidden_env, *MESSAGING_ENV)),
        proxy=shlex.quote(PROXY_URL),
        no_proxy=shlex.quote(NO_PROXY),
    )


def prefix_dir() -> Path:
    """Where the runs' prefix scripts live: under ``VAR_DIR``, which no sandboxed command
    can read or write."""
    return _real(settings.VAR_DIR) / "sandbox"


def prefix_path(run_id: int) -> Path:
    """A new prefix script's path for run ``run_id``: chosen before its sandbox starts, so
    the CLI can be spawned meanwhile (the CLI runs a prefix as a program with no arguments
    of its own, so each run gets a script of its own)."""
    directory = prefix_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"run-{run_id}-{secrets.token_hex(8)}"
    if " -" in str(path):
        # The CLI splits a Bash command's prefix at its last " -" to tell program from flags.
        raise RunSandboxError(f"the sandbox's shell prefix cannot live at {path}: ' -' in its path")
    return path


def pending_flag(path: Path) -> Path:
    """Present while the prefix at ``path`` is the pending one (``write_pending_prefix``)."""
    return path.with_name(path.name + ".pending")


def write_pending_prefix(path: Path, *, trusted_command: str, sleep: str) -> None:
    """The prefix at ``path`` while the run's sandbox starts (``PENDING_SCRIPT``)."""
    pending_flag(path).touch(mode=0o600)
    limit = int(PENDING_LIMIT * 100)
    write_prefix(
        path,
        PENDING_SCRIPT.format(
            trusted=shlex.quote(trusted_command),
            pending=shlex.quote(str(pending_flag(path))),
            limit=limit,
            not_started=shlex.quote(MSG_NOT_STARTED),
            sleep=shlex.quote(sleep),
            path=shlex.quote(str(path)),
            ended=shlex.quote(MSG_ENDED),
        ),
    )


def write_prefix(path: Path, text: str) -> None:
    """Put the script ``text`` at ``path`` in one step: a command that starts meanwhile
    runs the old script or the new one, never half of one. Not synced to disk: a machine's
    crash ends the sandbox the script enters too."""
    files.replace_atomically(path, text, mode=0o700, durable=False)


def remove_prefix(path: Path) -> None:
    """The run's prefix is gone: a command waiting in the pending one stops waiting and
    finds the sandbox ended."""
    path.unlink(missing_ok=True)
    pending_flag(path).unlink(missing_ok=True)


def sweep_stale_prefixes() -> int:
    """Remove the prefix scripts of sandboxes that have ended (a crashed worker's runs),
    pending ones older than any wait in them (``PENDING_LIMIT``), and scripts a killed
    worker left half-way through ``write_prefix`` (``STAGED_LIMIT``). Judged by the
    sandbox itself, not by the run: workers of another deployment, or tests, may share
    this directory."""
    removed = 0
    directory = prefix_dir()
    if not directory.is_dir():
        return removed
    for staged in directory.glob(files.staged_glob("run-*")):
        with contextlib.suppress(OSError):  # moved into place or removed meanwhile
            if _older_than(staged, STAGED_LIMIT):
                staged.unlink()
                removed += 1
    for entry in directory.glob("run-*-*"):
        if entry.name.endswith(".pending"):
            continue  # swept with its prefix
        try:
            flag = pending_flag(entry)
            if flag.exists():
                stale = _older_than(flag, PENDING_LIMIT)
            else:
                stale = not _sandbox_alive(entry.read_text(errors="replace"))
        except OSError:
            continue  # removed meanwhile, by its run or another sweep
        if stale:
            remove_prefix(entry)
            removed += 1
    return removed


def _older_than(path: Path, seconds: float) -> bool:
    return time.time() - path.stat().st_mtime > seconds


def _sandbox_alive(script: str) -> bool:
    """Whether the sandbox a prefix script names still runs: the check the script makes
    before entering (``PREFIX_SCRIPT``)."""
    found = _SANDBOX_CHECK.search(script)
    return found is not None and os.path.isdir(f"/proc/{found['pid']}/root{found['marker']}")


_SANDBOX_CHECK = re.compile(
    r"^if \[ ! -d /proc/(?P<pid>\d+)/root(?P<marker>/tmp/\.pm-sandbox-[0-9a-f]+) \]; then$", re.M
)


def _inside_any(path: Path, regions: list[Path]) -> bool:
    return any(path == region or region in path.parents for region in regions)


def mount_arguments(policy: Policy) -> list[str]:
    """bubblewrap's mounts for ``policy`` (see ``Policy``)."""
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    covered: list[Path] = []
    # Parents first; a region inside one already hidden needs nothing of its own.
    hidden = {_real(path) for path in (*policy.hidden, *policy.scratch, *SOCKET_DIRS)}
    for region in sorted(hidden, key=lambda p: len(p.parts)):
        if region == Path("/") or _inside_any(region, covered) or not region.is_dir():
            continue
        covered.append(region)
        args += ["--tmpfs", str(region)]
    for file in policy.files:
        if file.exists() and not _inside_any(file, covered):
            args += ["--ro-bind", "/dev/null", str(file)]
    for path in policy.readable:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    workdir, tmpdir = _real(policy.workdir), _real(policy.tmpdir)
    args += ["--bind", str(workdir), str(workdir), "--bind", str(tmpdir), str(tmpdir)]
    messaging = str(tmpdir / MESSAGING_DIR)
    args += ["--tmpfs", messaging, "--remount-ro", messaging]
    # A unix socket on a read-only mount still accepts connections; no command can replace it.
    egress_dir = str(tmpdir / EGRESS_DIR)
    args += ["--ro-bind", egress_dir, egress_dir]
    scratch = {_real(path) for path in policy.scratch}
    for region in covered:
        if region not in scratch:
            args += ["--remount-ro", str(region)]
    return args


@dataclass
class RunSandbox:
    """A run's sandbox: bubblewrap holding a ``sleep`` whose namespaces commands enter,
    through the prefix script at ``prefix_path`` once ``open`` has put it there."""

    process: subprocess.Popen[bytes]
    pid: int
    prefix_path: Path
    # The prefix script that enters this sandbox (``prefix_script``), for ``open``.
    script: str
    # The run's egress proxy (``promptmgr.egress``), outside the sandbox.
    egress: subprocess.Popen[bytes] | None = None
    # A pidfd of the sandbox's first process (no PID reuse can redirect the kill).
    handle: int = -1
    # Whether the egress has said it serves (``wait_egress``).
    egress_serving: bool = False
    # Whether the prefix that enters the sandbox is in place (``open``).
    opened: bool = False
    _egress_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def prefix(self) -> str:
        """``CLAUDE_CODE_SHELL_PREFIX`` for the run's CLI."""
        return str(self.prefix_path)

    @classmethod
    def start(cls, policy: Policy, *, bwrap: str, entry: Entry, path: str, prefix_path: Path) -> RunSandbox:
        """Start the sandbox with ``bwrap``; commands enter it through ``entry`` (programs
        found on the CLI's ``path``, by their absolute paths) with the prefix script that
        ``open`` puts at ``prefix_path``."""
        (policy.tmpdir / MESSAGING_DIR).mkdir(mode=0o700, exist_ok=True)
        egress_socket = policy.tmpdir / EGRESS_DIR / EGRESS_SOCKET
        egress_socket.parent.mkdir(mode=0o700, exist_ok=True)
        # A directory only this sandbox has (a mount point: no command can remove it), in
        # its private /tmp.
        marker = f"/tmp/.pm-sandbox-{secrets.token_hex(8)}"
        mounts = mount_arguments(policy)
        # Every pipe end still open here, closed on the way out whatever happens.
        open_ends: list[int] = []
        proxy: subprocess.Popen[bytes] | None = None
        process: subprocess.Popen[bytes] | None = None
        handle = -1
        try:
            read_end, write_end = _pipe(open_ends)
            ready_read, ready_write = _pipe(open_ends)
            proxy = start_egress(egress_socket, allow=policy.egress_allow, deny=policy.egress_deny)
            try:
                process = subprocess.Popen(
                    [
                        bwrap,
                        *mounts,
                        "--tmpfs",
                        marker,
                        "--remount-ro",
                        marker,
                        "--unshare-all",
                        "--die-with-parent",
                        "--new-session",
                        "--cap-drop",
                        "ALL",
                        "--chdir",
                        "/",
                        "--info-fd",
                        str(write_end),
                        "--",
                        "/bin/bash",
                        "-c",
                        SANDBOX_INIT,
                        "bash",
                        str(egress.PORT),
                        str(egress_socket),
                        str(ready_write),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    pass_fds=(write_end, ready_write),
                    env={"PATH": path},
                    start_new_session=True,
                )
            finally:
                # Only bubblewrap writes these: EOF on them means it (or the sandbox) is gone.
                for end in (write_end, ready_write):
                    open_ends.remove(end)
                    os.close(end)
            info = _read_info(read_end, process)
            pid, namespace = int(info["child-pid"]), int(info["mnt-namespace"])
            handle = _open_first_process(pid, namespace)
            # bubblewrap reports the sandbox as it begins setting it up; commands may enter
            # once its first process has socat listening. The egress is not waited for here
            # (``wait_egress``): its socket already queues connections, and its start (a
            # Python process importing asyncio, ~50 ms) overlaps the CLI's.
            _wait_ready(ready_read, process)
            script = prefix_script(policy, pid=pid, marker=marker, entry=entry)
        except BaseException:
            try:
                # Gone on return, as after stop (bubblewrap's own death reaches the sandbox
                # only a moment later).
                _end_first_process(handle)
                if process is not None:
                    _kill(process)
            finally:
                if proxy is not None:
                    _end_egress(proxy)
            raise
        finally:
            for end in open_ends:
                os.close(end)
        return cls(
            process=process, pid=pid, prefix_path=prefix_path, script=script, egress=proxy, handle=handle
        )

    def open(self) -> None:
        """Commands may enter from now on: the prefix that enters the sandbox takes the
        place of the pending one (``write_pending_prefix``), and a command waiting there
        goes on through it."""
        write_prefix(self.prefix_path, self.script)
        pending_flag(self.prefix_path).unlink(missing_ok=True)
        self.opened = True

    def wait_egress(self) -> None:
        """Return once the run's egress serves; ``RunSandboxError`` (with its exit code) if it
        never will. Until then its socket, bound and listening from the start, holds the
        commands' connections, so a command that reaches out early only waits."""
        # A run stopped meanwhile (``stop``, another thread) kills the egress, which ends
        # this read; the lock keeps its pipe open until the read has let go of it.
        with self._egress_lock:
            if self.egress_serving or self.egress is None:
                return
            _wait_egress(self.egress)
            self.egress_serving = True

    def stop(self) -> None:
        """End the sandbox and every process in it (the PID namespace goes with its first
        process, which dies with bubblewrap), and the run's egress."""
        try:
            remove_prefix(self.prefix_path)
            handle, self.handle = self.handle, -1
            _end_first_process(handle)
        finally:
            try:
                _kill(self.process)
            finally:
                if self.egress is not None:
                    _end_egress(self.egress, lock=self._egress_lock)
                    self.egress = None


def _end_first_process(handle: int) -> None:
    """Kill the sandbox's first process through its pidfd ``handle`` (-1: none; no PID reuse
    can redirect the kill) and wait until it has exited: the PID namespace, with everything
    in it, is gone on return. The pidfd is closed."""
    if handle < 0:
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(handle, signal.SIGKILL)
        # A pidfd reads ready once its process has exited.
        readable(handle, STOP_TIMEOUT)
    finally:
        os.close(handle)


def _pipe(into: list[int]) -> tuple[int, int]:
    """A pipe whose ends are noted in ``into`` as soon as they exist."""
    ends = os.pipe()
    into.extend(ends)
    return ends


def start_egress(
    socket_path: Path, *, allow: tuple[str, ...], deny: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """The run's egress proxy (``promptmgr.egress``) serving a unix socket bound here, so
    it accepts connections from the start (``_wait_egress`` waits until it serves). It ends
    when its standard input closes, which this process holds open: a worker that dies
    takes its runs' proxies with it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(socket_path))
        listener.listen(128)
        return subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "promptmgr.egress",
                "--fd",
                str(listener.fileno()),
                *(f"--allow={network}" for network in allow),
                *(f"--deny={host}" for host in deny),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(listener.fileno(),),
            # Nothing of the worker's environment (its keys): the proxy needs none.
            env={},
            start_new_session=True,
        )
    finally:
        listener.close()


def _wait_egress(process: subprocess.Popen[bytes]) -> None:
    assert process.stdout is not None
    said = _read_until(process.stdout.fileno(), lambda data: egress.READY.encode() in data)
    if egress.READY.encode() not in said:
        try:
            # Its standard output closed: it is exiting, and says how in a moment.
            code: int | None = process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        state = f"it exited with code {code}" if code is not None else "it did not start in time"
        raise RunSandboxError(f"the sandbox's network proxy (promptmgr.egress) is not serving: {state}")


def _end_egress(process: subprocess.Popen[bytes], *, lock: threading.Lock | None = None) -> None:
    """Kill the egress and close its pipes once ``lock`` (held by a read of its standard
    output, which the kill ends) is free."""
    # The run is over: whatever it still had open through the proxy ends with it.
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()
    with lock if lock is not None else contextlib.nullcontext():
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _open_first_process(pid: int, mount_namespace: int) -> int:
    """A pidfd of the sandbox's first process, checked to be the one in its namespace."""
    handle = os.pidfd_open(pid)
    try:
        if os.stat(f"/proc/{pid}/ns/mnt").st_ino != mount_namespace:
            raise RunSandboxError("the sandbox's first process ended as it started")
    except BaseException:
        os.close(handle)
        raise
    return handle


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    if process.stderr is not None:
        process.stderr.close()


def _read_until(fd: int, done: Callable[[bytes], bool]) -> bytes:
    """What ``fd`` gives until ``done`` says it is enough, EOF, or ``START_TIMEOUT``."""
    deadline = time.monotonic() + START_TIMEOUT
    data = b""
    while not done(data) and (left := deadline - time.monotonic()) > 0:
        if not readable(fd, left):
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _wait_ready(fd: int, process: subprocess.Popen[bytes]) -> None:
    if READY not in _read_until(fd, lambda data: READY in data):
        _failed(process, "the sandbox did not become ready")


def _failed(process: subprocess.Popen[bytes], fallback: str) -> NoReturn:
    """Raise ``RunSandboxError`` with bubblewrap's last word (it is killed first)."""
    process.kill()
    process.wait()
    detail = (process.stderr.read() if process.stderr else b"").decode("utf-8", "replace").strip()
    raise RunSandboxError(detail.splitlines()[-1] if detail else fallback)


def _info(data: bytes) -> dict[str, int] | None:
    with contextlib.suppress(ValueError):
        info = json.loads(data)
        if isinstance(info, dict) and "child-pid" in info and "mnt-namespace" in info:
            return info
    return None


def _read_info(fd: int, process: subprocess.Popen[bytes]) -> dict[str, int]:
    """bubblewrap's ``--info-fd`` JSON, written as it starts setting the sandbox up (EOF
    without it: bubblewrap failed, and its stderr says why)."""
    info = _info(_read_until(fd, lambda data: _info(data) is not None))
    if info is None:
        _failed(process, "bubblewrap did not start the sandbox")
    return info
