"""The app as a real server process (uvicorn), which a fault test can kill -9, SIGTERM and
start again, on the test's database, Redis prefix, storage and scripted model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.db import connection

from tests.conftest import REPO
from tests.helpers import free_port, wait_until

PASSWORD = "crash-password"


class _Process:
    """What the tests do to an app process of theirs: its pid, kill -9, SIGTERM, stop."""

    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> float:
        """SIGTERM; the seconds until the process exited."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class ServerProcess(_Process):
    """``uvicorn promptmgr.asgi:application`` in a process of its own."""

    def __init__(self, port: int, env: dict[str, str], log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it; the seconds until it answered (its start-up sweep is done by then)."""
        started = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "promptmgr.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--timeout-graceful-shutdown",
                    "5",
                ],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._answers, timeout=60, what=f"the server on port {self.port}")
        return time.monotonic() - started

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            )
        try:
            return httpx.get(f"{self.url}/accounts/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def said(self, lines: int = 40) -> str:
        """The last ``lines`` of its log but the access lines: what a failure report needs."""
        kept = [line for line in self.log.read_text().splitlines() if 'HTTP/1.1"' not in line]
        return "\n".join(kept[-lines:])

    def login(self, username: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30, follow_redirects=False)
        page = client.get("/accounts/login/")
        token = page.cookies.get("csrftoken") or client.cookies.get("csrftoken")
        response = client.post(
            "/accounts/login/",
            data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{self.url}/accounts/login/"},
        )
        assert response.status_code == 302, response.text
        client.headers["X-CSRFToken"] = client.cookies.get("csrftoken") or ""
        client.headers["Referer"] = f"{self.url}/"
        return client


class WorkerProcess(_Process):
    """``python manage.py runworker`` (a queue worker) in a process of its own."""

    READY = "run queue worker"  # its log line once it takes runs

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    def start(self) -> None:
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "runworker"],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._ready, timeout=60, what="the queue worker")

    def output(self) -> str:
        """What this start of the worker printed."""
        return self.log.read_text()[self._log_start :]

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the worker exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
        return self.READY in self.output()


@pytest.fixture
def server_env(transactional_db: Any, model_settings: Any, claude_cli: str) -> dict[str, str]:
    """The environment of a server process that shares this test's state."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "PYTEST_"))}
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
            "REDIS_URL": str(settings.REDIS_URL),
            "REDIS_KEY_PREFIX": str(settings.REDIS_KEY_PREFIX),
            "STORAGE_ROOT": str(settings.STORAGE_ROOT),
            "RUN_SECRETS_DIR": str(settings.RUN_SECRETS_DIR),
            "ANTHROPIC_BASE_URL": str(settings.ANTHROPIC_BASE_URL),
            "ANTHROPIC_API_KEY": str(settings.ANTHROPIC_API_KEY),
            "CLAUDE_CLI_PATH": claude_cli,
            "LOG_LEVEL": "INFO",
        }
    )
    return env


@pytest.fixture
def start_server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start app servers (each ``ServerProcess`` started and answering); all stopped at the end."""
    servers: list[ServerProcess] = []

    def start(port: int | None = None, **extra_env: str) -> ServerProcess:
        port = port or free_port()
        env = {**server_env, "INTERNAL_BASE_URL": f"http://127.0.0.1:{port}", **extra_env}
        server = ServerProcess(port, env, tmp_path / f"server-{port}.log")
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_worker(server_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start queue workers whose runs reach the app at ``internal_url``; all stopped at the end."""
    workers: list[WorkerProcess] = []

    def start(internal_url: str, **extra_env: str) -> WorkerProcess:
        env = {**server_env, "INTERNAL_BASE_URL": internal_url, **extra_env}
        worker = WorkerProcess(env, tmp_path / f"worker-{len(workers)}.log")
        workers.append(worker)
        worker.start()
        return worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def dora(transactional_db: Any) -> Any:
    """A user whose password the server process can check (its hashers are the real ones)."""
    hasher = PBKDF2PasswordHasher()
    password = hasher.encode(PASSWORD, hasher.salt(), iterations=1000)
    return User.objects.create(username="dora", password=password)
