"""Running git (and a worktree's setup command) as a bounded subprocess with a fixed environment.

Every command starts from an empty environment: no system or global git config, no
terminal prompts, a private ``HOME``, git's protocol allow-list from
``WORKSPACE_GIT_SCHEMES``, and config that could start a program (hooks, fsmonitor,
credential helpers, signing) forced off on the command line, because a repository's own
config is not ours to trust. Each child runs in a session of its own; at its time limit,
or when ``stop_when`` says so, the whole group is killed and reaped. Output goes to
temporary files, so a chatty child never blocks on a full pipe.

These are blocking calls: callers run them in a thread (clones, setup) or accept a short
wait (worktree commands). The asynchronous machinery of ``promptmgr.processes`` is for
the CLI's streams.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.procfs import readable

logger = logging.getLogger(__name__)

GIT_TIMEOUT = 120.0  # seconds for a local git command (worktree add on a large repository)
POLL_SECONDS = 0.2
OUTPUT_TAIL = 4000
IDENTITY_NAME = "PromptManager"
IDENTITY_EMAIL = "promptmanager@localhost"
# Config that could run a program or ask for input, off for every command.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.askPass=",
    "credential.helper=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "submodule.recurse=false",
    # No housekeeping left running in the background after a command returns.
    "gc.auto=0",
    "maintenance.auto=false",
)
# ssh without a deploy key: never prompts, never reads the server user's ssh config.
DEFAULT_SSH_COMMAND = "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes"
# How git names each allowed scheme in GIT_ALLOW_PROTOCOL (a local path is "file").
PROTOCOL_OF_SCHEME = {"https": "https", "http": "http", "ssh": "ssh", "git": "git", "file": "file"}

MSG_TIMED_OUT = "git {what} took longer than {seconds} s and was stopped."
MSG_GIT_FAILED = "git {what} failed: {detail}"


class GitError(Exception):
    """A git command failed; ``str()`` is a sentence fit for a user (no secrets)."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes
    stopped: str | None = None  # why it was stopped early (time limit, stop_when), else None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stopped is None

    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def error_tail(self, limit: int = OUTPUT_TAIL) -> str:
        return self.stderr.decode("utf-8", "replace").strip()[-limit:]


def private_home() -> Path:
    """An empty ``HOME`` for git and ssh, so nothing of the server user's config is read."""
    home = Path(settings.STORAGE_ROOT) / "git-home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a git command: nothing of the server's but ``PATH``."""
    home = str(private_home())
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": ":".join(PROTOCOL_OF_SCHEME[s] for s in settings.WORKSPACE_GIT_SCHEMES),
        "GIT_SSH_COMMAND": DEFAULT_SSH_COMMAND,
        "GIT_AUTHOR_NAME": IDENTITY_NAME,
        "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
        "GIT_COMMITTER_NAME": IDENTITY_NAME,
        "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
    }
    env.update(extra or {})
    return env


def run_bounded(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    stop_when: Callable[[], str | None] | None = None,
) -> Completed:
    """Run ``argv`` to its end, its time limit, or until ``stop_when`` returns a reason.

    The child leads a session of its own, so stopping it stops what it started (git's
    remote helpers, ssh, a setup command's children) too.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, contextlib.ExitStack() as stack:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        stopped: str | None = None
        exits = stack.enter_context(contextlib.closing(_ExitWatch(proc)))
        try:
            while True:
                if exits.wait(POLL_SECONDS):
                    break
                if time.monotonic() > deadline:
                    stopped = f"time limit of {timeout:g} s"
                elif stop_when is not None:
                    stopped = stop_when()
                if stopped is not None:
                    _kill_group(proc)
                    break
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            # The group is killed (above) before the leader is reaped, never after: a
            # reaped leader's id may be handed to someone else's new group.
            proc.wait()
        out.seek(0)
        err.seek(0)
        return Completed(proc.returncode, out.read(), err.read(), stopped)


class _ExitWatch:
    """Waits for a child's end, woken by its pidfd the moment it comes.

    ``Popen.wait`` with a timeout polls instead, sleeping 1, 2, 4 … up to 50 ms between
    looks: a 17 ms ``git worktree add`` was seen ending at 31 ms. Without a pidfd (not
    Linux, or before 5.3) it is what is left.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self._fd = os.pidfd_open(proc.pid)

    def wait(self, seconds: float) -> bool:
        """Whether the child ended within ``seconds`` (it is not reaped here)."""
        if self._fd is not None:
            return readable(self._fd, seconds)
        try:
            self._proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    what: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    check: bool = True,
    config: Sequence[str] = (),
    stop_when: Callable[[], str | None] | None = None,
    redact: Sequence[str] = (),
) -> Completed:
    """``git <safe config> <config> <args>`` in ``cwd``; raises ``GitError`` unless ``check`` is off.

    ``env`` adds to the fixed environment (credentials); ``redact`` lists strings that
    must never reach an error message.
    """
    argv = ["git"]
    for item in (*SAFE_CONFIG, *config):
        argv += ["-c", item]
    argv += list(args)
    label = what or (args[0] if args else "")
    logger.debug("git %s in %s", " ".join(args), cwd)
    # A directory that is not a repository (yet) must never be taken for one above it
    # (STORAGE_ROOT may lie inside a checkout).
    ceiling = {"GIT_CEILING_DIRECTORIES": str(Path(cwd).resolve().parent)}
    result = run_bounded(
        argv, cwd=cwd, env=git_env({**ceiling, **(env or {})}), timeout=timeout, stop_when=stop_when
    )
    if check and not result.ok:
        if result.stopped and result.stopped.startswith("time limit"):
            raise GitError(MSG_TIMED_OUT.format(what=label, seconds=f"{timeout:g}"))
        detail = result.stopped or _scrub(result.error_tail(), redact) or f"exit code {result.returncode}"
        raise GitError(MSG_GIT_FAILED.format(what=label, detail=detail))
    return result


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text
