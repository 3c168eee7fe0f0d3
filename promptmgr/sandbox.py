"""Claude's tools in a sandbox, confined to the run's working directory.

Two scopes (``CLAUDE_SANDBOX_SCOPE``) share one policy:

- ``run`` (the default): one bubblewrap sandbox per run, started by the app, which every
  shell command of the run enters (``promptmgr.run_sandbox``, about 7 ms a command), with
  the network through the run's own proxy (``promptmgr.egress``);
- ``command``: Claude Code's own sandbox, a new one for each command (about 65 ms), with
  the network through the CLI's proxy.

Every run's CLI gets settings with ``--settings`` (the "flag" layer, above the
workspace's own settings files, which cannot widen them). In the ``command`` scope:

- ``sandbox``: Bash, and everything it starts, runs under bubblewrap. It reads what is
  not denied, so whole regions are denied (``/tmp``, the server's home, the app's code,
  ``VAR_DIR``, ``STORAGE_ROOT`` with every project and every session transcript, the run
  secrets, the database) and the run's working directory is allowed back, with the git
  directory a worktree needs. It writes only there (and in the run's own temporary
  directory, ``CLAUDE_CODE_TMPDIR``), sees only its own processes in ``/proc``, has a
  network of its own (the server's loopback, so Redis and the app, is out of reach), and
  gets neither the API key nor ``ASK_USER_CONFIG``. ``failIfUnavailable``: a CLI whose
  sandbox cannot start refuses to run rather than run the tools unconfined.
- ``permissions``: the file tools (Read, Grep, Glob; Edit, Write, NotebookEdit) run in
  the CLI itself, outside bubblewrap. ``blockReadsOutsideWorkingDirectories`` and
  ``blockWritesOutsideWorkingDirectories`` refuse every path outside the working
  directory, in every permission mode, bypass included; deny rules name the private
  places once more (the run secrets, the database, the CLI's home with every transcript,
  ``/proc``), so they stay refused even if that setting were lifted.

In the ``run`` scope the CLI's own sandbox is off and ``env`` sets the shell prefix that
puts each command into the run's sandbox; the ``permissions`` are the same.

Bash still asks (``autoAllowBashIfSandboxed`` is off): an approval keeps its meaning, and
the sandbox bounds what an approved command can reach. ``CLAUDE_SANDBOX=off`` is the
operator's explicit way to run tools unconfined; otherwise a run on a host where the
sandbox cannot start is refused with ``MSG_UNAVAILABLE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from . import run_sandbox
from .run_sandbox import RunSandbox, RunSandboxError

MSG_UNAVAILABLE = (
    "Claude's tools run in a sandbox (bubblewrap), which cannot start on this server: {reason}. "
    "Install bubblewrap, socat and util-linux (scripts/ensure-bubblewrap.sh does), or set CLAUDE_SANDBOX=off "
    "to let Claude's tools run unconfined."
)
SCRATCH_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
READ_TOOLS = ("Read", "Grep", "Glob")
WRITE_TOOLS = ("Edit", "Write", "NotebookEdit")
# Variables of the CLI's environment that its sandboxed commands do not get.
HIDDEN_ENV = ("ANTHROPIC_API_KEY", "ASK_USER_CONFIG", "ASK_USER_WARM")
# The server's own loopback (Redis, the app's relay endpoints) is never a sandboxed command's
# to reach, whatever domains a project's rules allow.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
REQUIRED_TOOLS = ("bwrap", "socat")
PROBE_TIMEOUT = 10.0


class SandboxUnavailable(Exception):
    """The sandbox cannot start here; the message says why and what to do (``MSG_UNAVAILABLE``)."""


def sandbox_enabled() -> bool:
    return bool(settings.CLAUDE_SANDBOX)


def sandbox_scope() -> str | None:
    """``run`` or ``command`` (see the module's docstring); None with the sandbox off."""
    return str(settings.CLAUDE_SANDBOX_SCOPE) if sandbox_enabled() else None


_probe_lock = threading.Lock()
_probed_ok = False


def check_available(path: str) -> None:
    """Raise ``SandboxUnavailable`` unless bubblewrap can start a sandbox here.

    ``path`` is the CLI's ``PATH``, where the CLI itself looks for ``bwrap`` and ``socat``.
    bubblewrap is tried once per process; a success is remembered, a failure is tried
    again at the next run.
    """
    global _probed_ok
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=f"{' and '.join(missing)} not installed"))
    with _probe_lock:
        if not _probed_ok:
            _probe_bubblewrap(path)
            _probed_ok = True


def _probe_bubblewrap(path: str) -> None:
    """Start one empty sandbox, as the CLI will (user namespaces may be off, or refused by AppArmor)."""
    bwrap = shutil.which("bwrap", path=path)
    assert bwrap is not None
    try:
        probe = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "/bin/true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=f"bwrap could not run ({exc})")) from None
    if probe.returncode != 0:
        detail = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = detail[-1] if detail else f"bwrap exited with code {probe.returncode}"
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=reason))


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _inside(path: Path, region: Path) -> bool:
    return path == region or region in path.parents


def database_files() -> list[Path]:
    """The SQLite database and its journals (none for PostgreSQL)."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        return []
    name = _real(database["NAME"])
    return [name, *(name.with_name(name.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]


def claude_home_dir() -> Path:
    return _real(Path(settings.STORAGE_ROOT) / "claude-home")


def private_places() -> list[tuple[Path, bool]]:
    """What no run may ever read, each with whether it is a directory: the run secrets,
    the CLI's home (every project's session transcripts), the database."""
    return [
        (_real(settings.RUN_SECRETS_DIR), True),
        (claude_home_dir(), True),
        *((path, False) for path in database_files()),
    ]


def denied_regions() -> list[Path]:
    """The regions of this server sandboxed commands may not read (the run's own
    directories are allowed back inside them)."""
    regions = [
        *SCRATCH_DIRS,
        # The server's home (where its tools keep credentials), not the CLI's.
        _real(Path.home()),
        _real(settings.BASE_DIR),
        _real(settings.VAR_DIR),
        _real(settings.STORAGE_ROOT),
        *(path for path, _is_dir in private_places()),
    ]
    if sys.prefix != sys.base_prefix:  # the app's virtualenv, wherever it lives
        regions.append(_real(sys.prefix))
    unique: list[Path] = []
    for region in regions:
        if region != Path("/") and region not in unique:
            unique.append(region)
    return unique


def git_dirs(workdir: Path) -> list[Path]:
    """The git directories a worktree's commands need to read (its own and the shared one).

    A worktree's ``.git`` is a file, ``gitdir: <path>``, naming its directory inside the
    main repository, whose ``commondir`` leads to the shared objects and refs.
    """
    marker = workdir / ".git"
    try:
        if not marker.is_file():
            return []
        text = marker.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    gitdir = _real(workdir / text.removeprefix("gitdir:").strip())
    found = [gitdir]
    with contextlib.suppress(OSError):
        common = (gitdir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
        if common:
            found.append(_real(gitdir / common))
    return found


def file_tool_denials(workdir: Path) -> list[str]:
    """Deny rules of the file tools for the private places, each spelled as an absolute
    rule path (``//abs``), a directory with all below it. The CLI holds Bash commands that
    name such a path to them too. (``/proc`` needs none: the Read tool refuses process
    files by itself, and a sandboxed command sees only its own processes.)"""
    rules: list[str] = []
    for place, is_dir in private_places():
        if _inside(workdir, place):
            continue  # never the case in a sane layout; the sandbox still denies it
        spelled = f"/{place}/**" if is_dir else f"/{place}"
        rules += [f"{tool}({spelled})" for tool in (*READ_TOOLS, *WRITE_TOOLS)]
    return rules


def file_tool_permissions(workdir: Path) -> dict[str, Any]:
    """The file tools' confinement (they run in the CLI, outside any sandbox)."""
    return {
        "blockReadsOutsideWorkingDirectories": True,
        "blockWritesOutsideWorkingDirectories": True,
        "deny": file_tool_denials(_real(workdir)),
    }


def run_scope_settings(*, workdir: Path, shell_prefix: str) -> dict[str, Any]:
    """The CLI settings of a run whose commands enter the run's own sandbox through
    ``shell_prefix``: the CLI's own sandbox off, the prefix pinned in the flag layer."""
    return {
        "sandbox": {"enabled": False},
        "env": {"CLAUDE_CODE_SHELL_PREFIX": shell_prefix},
        "permissions": file_tool_permissions(workdir),
    }


def run_settings(*, workdir: Path) -> dict[str, Any]:
    """The CLI settings that confine one run's tools to ``workdir`` in the CLI's own
    sandbox (the ``command`` scope)."""
    root = _real(workdir)
    return {
        "sandbox": {
            "enabled": True,
            "failIfUnavailable": True,
            "autoAllowBashIfSandboxed": False,
            "allowUnsandboxedCommands": False,
            "filesystem": {
                "denyRead": [str(region) for region in denied_regions()],
                "allowRead": [str(root), *(str(path) for path in git_dirs(root))],
                "allowWrite": [str(root)],
            },
            "network": {"deniedDomains": list(LOOPBACK_HOSTS)},
            "credentials": {"envVars": [{"name": name, "mode": "deny"} for name in HIDDEN_ENV]},
        },
        "permissions": file_tool_permissions(root),
    }


def settings_argument(*, workdir: Path) -> str | None:
    """The ``--settings`` value for a run in ``workdir`` in the ``command`` scope; None
    with the sandbox switched off."""
    if not sandbox_enabled():
        return None
    return json.dumps(run_settings(workdir=workdir), separators=(",", ":"))


def trusted_command() -> str:
    """The ask-user MCP server's command line as the CLI hands it to a shell prefix: the
    one program the run sandbox starts outside (it must reach the app and its secrets)."""
    from .workspaces import mcp_server_entry

    entry = mcp_server_entry()
    return shlex.join([entry["command"], *entry["args"]])


def service_hosts() -> tuple[str, ...]:
    """The hosts of the app's own services (the database, Redis, the app itself), which the
    run scope's egress never opens, wherever they are (a managed database on a public
    address that trusts this server's address, too)."""
    hosts = [
        str(settings.DATABASES["default"].get("HOST") or ""),
        urlsplit(settings.REDIS_URL).hostname or "",
        urlsplit(settings.INTERNAL_BASE_URL).hostname or "",
    ]
    # A database HOST that is a directory is a unix socket's, not a host.
    return tuple(dict.fromkeys(host for host in hosts if host and not host.startswith("/")))


def _shown_part(path: str, hidden: Sequence[Path]) -> str:
    """The entries of ``path`` that a sandbox hiding ``hidden`` still shows."""
    shown = []
    for entry in path.split(os.pathsep):
        if not entry:
            continue
        # Resolved once per entry, not once per hidden region (2.4 -> 1.2 ms a run here).
        real = _real(entry)
        if not any(real.is_relative_to(region) for region in hidden):
            shown.append(entry)
    return os.pathsep.join(shown)


def _run_sandbox_tools(path: str) -> dict[str, str]:
    """The programs the run scope needs, found on the CLI's ``path``; ``SandboxUnavailable``
    naming those missing."""
    found = {tool: shutil.which(tool, path=path) for tool in (*run_sandbox.REQUIRED_TOOLS, "sleep")}
    missing = [tool for tool, program in found.items() if program is None]
    if missing:
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=f"{' and '.join(missing)} not installed"))
    return {tool: program for tool, program in found.items() if program is not None}


def start_run_sandbox(*, workdir: Path, tmpdir: Path, path: str, prefix_path: Path) -> RunSandbox:
    """Start the run's own sandbox (the ``run`` scope) with this module's policy:
    ``denied_regions`` hidden (the scratch ones private to the run), the private files
    under /dev/null, the working directory and ``tmpdir`` writable, a worktree's git
    directories readable, ``HIDDEN_ENV`` out of every command's environment. Commands enter
    it through the prefix at ``prefix_path`` once ``RunSandbox.open`` has put it there."""
    found = _run_sandbox_tools(path)
    bwrap, nsenter = found["bwrap"], found["nsenter"]
    root = _real(workdir)
    policy = run_sandbox.Policy(
        workdir=root,
        tmpdir=tmpdir,
        hidden=denied_regions(),
        scratch=SCRATCH_DIRS,
        files=[place for place, is_dir in private_places() if not is_dir],
        readable=git_dirs(root),
        hidden_env=HIDDEN_ENV,
        trusted_command=trusted_command(),
        egress_allow=tuple(settings.CLAUDE_SANDBOX_EGRESS_ALLOW),
        egress_deny=service_hosts(),
    )
    # setpriv runs inside the sandbox, after nsenter: the first one on PATH the sandbox shows
    # (a directory it hides, the working directory's among them, never supplies it).
    setpriv = shutil.which("setpriv", path=_shown_part(path, policy.hidden))
    if setpriv is None:
        raise SandboxUnavailable(
            MSG_UNAVAILABLE.format(reason="setpriv is installed only where the sandbox hides it")
        )
    # realpath: a relative PATH entry would otherwise name a program by the server's cwd.
    entry = run_sandbox.Entry(nsenter=os.path.realpath(nsenter), setpriv=os.path.realpath(setpriv))
    try:
        return RunSandbox.start(policy, bwrap=bwrap, entry=entry, path=path, prefix_path=prefix_path)
    except (OSError, RunSandboxError) as exc:
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=str(exc))) from None


# --- The run's own temporary directory ---------------------------------------------------


def _run_tmp_prefix() -> str:
    """Names of this deployment's run directories start with this (a tag of its storage),
    so a sweep never touches another deployment's (or test's) runs."""
    tag = hashlib.sha256(str(_real(settings.STORAGE_ROOT)).encode()).hexdigest()[:8]
    return f"pm{tag}-run"


def run_tmp_open(run_id: int) -> Path:
    """A private (0700) temporary directory for one run, its ``CLAUDE_CODE_TMPDIR``.

    The CLI keeps its scratch files and background commands' output under it and binds it
    into the sandbox writable: with the CLI's default (``/tmp/claude-<uid>``, shared by
    every run of this OS user) one project's commands would see another's. It sits in the
    system's temporary directory because its path must stay short: the CLI puts sockets
    in it and, past the AF_UNIX limit, silently falls back to the shared default.
    """
    return Path(tempfile.mkdtemp(prefix=f"{_run_tmp_prefix()}{run_id}-"))


def run_tmp_close(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale_run_tmp(active: set[int]) -> int:
    """Remove the temporary directories of runs that no longer run (a crashed worker's)."""
    prefix = _run_tmp_prefix()
    removed = 0
    for entry in Path(tempfile.gettempdir()).iterdir():
        if not entry.name.startswith(prefix):
            continue
        run_id, _, _rest = entry.name.removeprefix(prefix).partition("-")
        if run_id.isdigit() and int(run_id) not in active:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


@dataclass
class Confinement:
    """What confines one run: its ``--settings`` (None with the sandbox off), what its CLI's
    environment adds (``env``), its own temporary directory and, in the ``run`` scope, its
    sandbox; ``close`` ends them when the run's CLI is gone.

    A ``run`` scope confinement from ``confine`` may still be starting its sandbox:
    commands wait in the run's pending prefix until ``open``."""

    run_id: int
    settings: str | None
    tmpdir: Path
    env: dict[str, str] = field(default_factory=dict)
    sandbox: RunSandbox | None = None
    # The run scope's sandbox while it starts beside the CLI, and the prefix it will open.
    starting: asyncio.Future[RunSandbox] | None = None
    prefix_path: Path | None = None

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.stop()
        if self.prefix_path is not None:
            run_sandbox.remove_prefix(self.prefix_path)
        run_tmp_close(self.tmpdir)

    @property
    def cli_env(self) -> dict[str, str]:
        """What the confinement adds to its run's CLI environment: the run's temporary
        directory and, in the ``run`` scope, the shell prefix."""
        return {"CLAUDE_CODE_TMPDIR": str(self.tmpdir), **self.env}

    async def before_spawn(self, after: asyncio.Future[None] | None) -> None:
        """Await ``after`` (the run's start snapshot) before the CLI spawns, unless the run's
        pending prefix holds back whatever the CLI starts meanwhile (a hook): then ``open``
        awaits it, and the CLI's start covers it."""
        if after is not None and not self.holds_commands:
            await after

    @property
    def holds_commands(self) -> bool:
        """Whether the run's commands still wait in its pending prefix (until ``open``)."""
        return self.starting is not None or (self.sandbox is not None and not self.sandbox.opened)

    async def open(self, after: asyncio.Future[None] | None = None) -> None:
        """Let the run's commands in once its sandbox has started (``SandboxUnavailable``
        with the reason if it cannot) and ``after`` (the run's start snapshot) is done:
        until then a command the CLI starts (a hook, a workspace's MCP server) waits."""
        if self.starting is not None:
            # Shielded: a run stopped meanwhile still gets its sandbox back, to close it.
            self.sandbox = await asyncio.shield(self.starting)
            self.starting = None
        if after is not None:
            await after
        if self.sandbox is not None and not self.sandbox.opened:
            await asyncio.to_thread(_open_prefix, self.sandbox)

    async def serving(self) -> None:
        """Return once the run's sandbox serves in full: its egress (which ``confine`` does
        not wait for, so its start overlaps the CLI's) says it serves. Off the event loop;
        ``SandboxUnavailable`` with the reason if it never will."""
        if self.sandbox is None:
            return
        try:
            await asyncio.to_thread(self.sandbox.wait_egress)
        except RunSandboxError as exc:
            raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=str(exc))) from None

    async def aclose(self) -> None:
        """``close`` off the event loop: removing what a run left in its temporary directory,
        and waiting for its sandbox to end, would otherwise hold every stream of the worker.
        A sandbox still starting is waited for, and closed too."""
        if self.starting is not None:
            starting, self.starting = self.starting, None
            await asyncio.wait([starting])
            if not starting.cancelled() and starting.exception() is None:
                self.sandbox = starting.result()
        await asyncio.to_thread(self.close)


def run_scope_confinement(*, run_id: int, workdir: Path, path: str) -> Confinement:
    """A run's confinement in the ``run`` scope: its temporary directory, its sandbox, and
    the shell prefix that enters it, in the CLI's environment and pinned in the flag layer."""
    confinement = _run_scope_reserved(run_id=run_id, workdir=workdir, path=path, pending=False)
    try:
        assert confinement.prefix_path is not None
        confinement.sandbox = start_run_sandbox(
            workdir=workdir, tmpdir=confinement.tmpdir, path=path, prefix_path=confinement.prefix_path
        )
        _open_prefix(confinement.sandbox)
        return confinement
    except BaseException:
        confinement.close()
        raise


def _open_prefix(held: RunSandbox) -> None:
    """``held.open``; a failure to write its prefix (a full disk) as ``SandboxUnavailable``."""
    try:
        held.open()
    except OSError as exc:
        raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=str(exc))) from None


def _run_scope_reserved(*, run_id: int, workdir: Path, path: str, pending: bool) -> Confinement:
    """A ``run`` scope confinement whose sandbox is yet to start: its temporary directory,
    and its prefix's path in the CLI's environment and pinned in the flag layer; with
    ``pending``, the pending prefix there (``run_sandbox.write_pending_prefix``)."""
    found = _run_sandbox_tools(path)
    tmpdir = run_tmp_open(run_id)
    try:
        try:
            prefix = run_sandbox.prefix_path(run_id)
            if pending:
                run_sandbox.write_pending_prefix(
                    prefix, trusted_command=trusted_command(), sleep=os.path.realpath(found["sleep"])
                )
        except (OSError, RunSandboxError) as exc:
            raise SandboxUnavailable(MSG_UNAVAILABLE.format(reason=str(exc))) from None
        run_settings = run_scope_settings(workdir=workdir, shell_prefix=str(prefix))
        return Confinement(
            run_id=run_id,
            settings=json.dumps(run_settings, separators=(",", ":")),
            tmpdir=tmpdir,
            env={"CLAUDE_CODE_SHELL_PREFIX": str(prefix)},
            prefix_path=prefix,
        )
    except BaseException:
        run_tmp_close(tmpdir)
        raise


def _confine(run_id: int, workdir: Path, path: str) -> Confinement:
    scope = sandbox_scope()
    if scope == "run":
        return run_scope_confinement(run_id=run_id, workdir=workdir, path=path)
    if scope is not None:
        check_available(path)
    return Confinement(
        run_id=run_id, settings=settings_argument(workdir=workdir), tmpdir=run_tmp_open(run_id)
    )


async def confine(*, run_id: int, workdir: Path, path: str) -> Confinement:
    """Check that the sandbox can start (``SandboxUnavailable`` if not) and prepare the run's
    confinement; off the event loop, since the first check starts bubblewrap once. The
    engine starts the CLI and then awaits ``Confinement.serving``, so the egress's start
    is not on the way to Claude's first word.

    In the ``run`` scope it returns before the sandbox has started, which goes on beside
    the CLI's own start; the engine awaits ``Confinement.open`` before Claude gets the
    prompt.

    A run cancelled meanwhile (stopped as it starts) does not get it, but the thread goes on
    preparing it: what it prepares (a sandbox, its egress, a temporary directory) is closed
    once ready instead of being left to the worker's end."""
    if sandbox_scope() == "run":
        return await _confine_beside_cli(run_id, workdir, path)
    preparing = asyncio.ensure_future(asyncio.to_thread(_confine, run_id, workdir, path))
    try:
        return await asyncio.shield(preparing)
    except asyncio.CancelledError:
        preparing.add_done_callback(_close_unclaimed)
        raise


async def _confine_beside_cli(run_id: int, workdir: Path, path: str) -> Confinement:
    reserving = asyncio.ensure_future(
        asyncio.to_thread(_run_scope_reserved, run_id=run_id, workdir=workdir, path=path, pending=True)
    )
    try:
        confinement = await asyncio.shield(reserving)
    except asyncio.CancelledError:
        reserving.add_done_callback(_close_unclaimed)
        raise
    assert confinement.prefix_path is not None
    confinement.starting = asyncio.ensure_future(
        asyncio.to_thread(
            start_run_sandbox,
            workdir=workdir,
            tmpdir=confinement.tmpdir,
            path=path,
            prefix_path=confinement.prefix_path,
        )
    )
    return confinement


def _close_unclaimed(preparing: asyncio.Future[Confinement]) -> None:
    if preparing.cancelled() or preparing.exception() is not None:
        return
    close = preparing.result().close
    try:
        asyncio.get_running_loop().run_in_executor(None, close)
    except RuntimeError:  # the loop's executor is shutting down with the worker
        threading.Thread(target=close, name="close-unclaimed-confinement", daemon=True).start()
