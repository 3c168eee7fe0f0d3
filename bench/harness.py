"""A private PromptManager stack for one benchmark, on loopback only, torn down at the end.

``Stack.create()`` starts (or reuses) Redis, starts the scripted model as a subprocess,
configures Django in this process against a fresh SQLite file in a temporary directory,
migrates it, and creates a user and a project; ``stack.start_app()`` then serves the app
with uvicorn as a subprocess. Leaving the ``with`` block stops every process it started,
deletes the Redis keys under its private prefix and removes the temporary directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MCP_TEE = Path(__file__).resolve().parent / "mcp_tee.py"
MCP_TEE_FLAG = "mcp-tee-stamps-path"
USERNAME = "bench"
PASSWORD = "bench-password-not-secret"


def now_ns() -> int:
    """CLOCK_MONOTONIC is system-wide on Linux, so the tee processes' stamps compare with ours."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def machine() -> str:
    """CPUs and load: other work on the machine shows up in the tails of every figure."""
    one, five, _fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.2f} (1 min) / {five:.2f} (5 min)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def _is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def stop_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM the process's group, SIGKILL it after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@dataclass
class Children:
    """Processes this benchmark started, each in its own process group."""

    logs: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self, name: str, argv: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop_all(self, grace: float = 30.0) -> None:
        """Newest first: uvicorn's own shutdown reaps the CLI runs it still supervises."""
        for _name, proc in reversed(self.procs):
            stop_group(proc, grace)
        self.procs.clear()


@dataclass
class Stack:
    tmp: Path
    children: Children
    redis_url: str
    key_prefix: str
    model_url: str
    app_port: int
    env: dict[str, str]
    project_id: int
    app_url: str = ""

    @classmethod
    @contextlib.contextmanager
    def create(cls, *, name: str, ask_user: bool, tee_mcp: bool = False) -> Iterator[Stack]:
        """The stack; with ``tee_mcp`` the app starts the ask-user MCP server under
        ``mcp_tee.py`` (``ASK_USER_MCP_COMMAND``, the command the run sandbox lets out),
        stamping into the file ``tee_mcp_to`` names."""
        # A plain `kill` must still stop what we started: SIGTERM unwinds like Ctrl-C.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        tmp = Path(tempfile.mkdtemp(prefix=f"pm-bench-{name}-"))
        children = Children(logs=tmp)
        key_prefix = f"pmbench-{name}-{os.getpid()}-{secrets.token_hex(3)}"
        redis_url = ""
        try:
            redis_url = _ensure_redis(children, tmp)
            model_url = _start_model(children)
            app_port = free_port()
            env = {
                "DJANGO_SETTINGS_MODULE": "promptmgr.settings",
                "DEBUG": "false",
                "SECRET_KEY": secrets.token_urlsafe(40),
                "ALLOWED_HOSTS": "127.0.0.1",
                "LOG_LEVEL": "WARNING",
                "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
                "REDIS_URL": redis_url,
                "REDIS_KEY_PREFIX": key_prefix,
                "VAR_DIR": str(tmp / "var"),
                "STORAGE_ROOT": str(tmp / "storage"),
                "RUN_SECRETS_DIR": str(tmp / "secrets"),
                "INTERNAL_BASE_URL": f"http://127.0.0.1:{app_port}",
                "ANTHROPIC_BASE_URL": model_url,
                "ANTHROPIC_API_KEY": "sk-bench",
            }
            if tee_mcp:
                tee = [PYTHON, "-P", str(MCP_TEE), f"@{tmp / MCP_TEE_FLAG}"]
                env["ASK_USER_MCP_COMMAND"] = json.dumps([*tee, PYTHON, "-P", "-m", "mcp_server"])
            project_id = _configure_django(env, ask_user=ask_user)
            yield cls(tmp, children, redis_url, key_prefix, model_url, app_port, env, project_id)
        except BaseException:
            for name in ("uvicorn", "model"):
                if tail := children.log_tail(name).strip():
                    print(f"--- last lines of the {name} log:\n{tail}", file=sys.stderr)
            raise
        finally:
            children.stop_all()
            _kill_strays(tmp)
            if redis_url:
                _delete_keys(redis_url, key_prefix)
            shutil.rmtree(tmp, ignore_errors=True)

    def tee_mcp_to(self, stamps: Path) -> None:
        """Where the ask-user MCP servers started from now on write their stamps
        (``create(tee_mcp=True)``)."""
        (self.tmp / MCP_TEE_FLAG).write_text(str(stamps))

    def start_app(self, extra_env: dict[str, str] | None = None, *, workers: int = 1) -> None:
        """uvicorn serving ``promptmgr.asgi:application``, as ``make run`` does; with
        ``workers`` above 1, that many worker processes behind uvicorn's supervisor (they
        share Redis and the database, as the README's several workers do)."""
        # PYTHONMALLOC as make run serves (README): streams' memory goes back to the OS.
        env = {**os.environ, **self.env, "PYTHONMALLOC": "malloc", **(extra_env or {})}
        argv = [PYTHON, "-m", "uvicorn", "promptmgr.asgi:application", "--host", "127.0.0.1"]
        # A bounded graceful shutdown: held long-polls must not delay reaping the CLI runs.
        argv += ["--port", str(self.app_port), "--log-level", "warning", "--timeout-graceful-shutdown", "5"]
        # The click channel as make run serves it (Makefile's UVICORN_WS).
        argv += ["--ws-max-size", "4194304", "--ws-per-message-deflate", "false"]
        if workers > 1:
            argv += ["--workers", str(workers)]
        proc = self.children.start("uvicorn", argv, env=env)
        self.app_url = f"http://127.0.0.1:{self.app_port}"

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("uvicorn exited:\n" + self.children.log_tail("uvicorn"))
            try:
                return (
                    httpx.get(f"{self.app_url}/accounts/login/", timeout=1, trust_env=False).status_code
                    == 200
                )
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=60, what="the app under uvicorn")

    @property
    def app_pid(self) -> int:
        """The uvicorn worker's process id (``start_app`` first); with several workers,
        their supervisor's."""
        return next(proc.pid for name, proc in self.children.procs if name == "uvicorn")

    def stop_app(self, grace: float = 30.0) -> None:
        """Stop uvicorn (and so the runs it still supervises), keeping the rest of the stack."""
        for name, proc in [(n, p) for n, p in self.children.procs if n == "uvicorn"]:
            stop_group(proc, grace)
            self.children.procs.remove((name, proc))

    def project(self) -> Any:
        from promptmgr.models import Project

        return Project.objects.get(pk=self.project_id)


def _kill_strays(tmp: Path) -> None:
    """Safety net: anything still running inside our temporary directory (a CLI run or its
    MCP server, if the app could not reap them) was started by this benchmark."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = (entry / "cwd").resolve()
        except OSError:
            continue
        if cwd.is_relative_to(tmp.resolve()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _ensure_redis(children: Children, tmp: Path) -> str:
    """``REDIS_URL`` when it is on loopback and answers, else a private redis-server."""
    configured = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _is_loopback(configured) and _redis_answers(configured):
        return configured
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("No Redis answers at REDIS_URL and redis-server is not installed.")
    port = free_port()
    (tmp / "redis").mkdir()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(tmp / "redis")]
    children.start("redis", argv)
    url = f"redis://127.0.0.1:{port}/0"
    wait_until(lambda: _redis_answers(url), timeout=15, what="a private redis-server")
    return url


def _start_model(children: Children) -> str:
    port = free_port()
    children.start("model", [PYTHON, "-m", "promptmgr.scripted_model", "--port", str(port)])
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/_scripted/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=30, what="the scripted model")
    return url


def _configure_django(env: dict[str, str], *, ask_user: bool) -> int:
    """Set Django up in this process (same settings as the app), migrate, add a user and a project."""
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from promptmgr.services.projects import project_create

    call_command("migrate", verbosity=0, interactive=False)
    # This process reads and writes the app's Redis keys too (the benchmarks' own stores).
    from core.redis import load_instance_uid

    load_instance_uid()
    user = User.objects.create_user(USERNAME, "bench@example.com", PASSWORD)
    project = project_create(owner=user, name="Benchmark", ask_user_enabled=ask_user)
    return int(project.pk)


def _delete_keys(url: str, prefix: str) -> None:
    import redis

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
