"""Shared fixtures: real Redis, the scripted model, the real Claude CLI, uvicorn, Chromium.

The only simulated part is the language model (``promptmgr.scripted_model``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn

from tests.helpers import PrivateRedis, free_port, new_context, wait_until

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


# --- Markers and order -----------------------------------------------------------------

KINDS = ("unit", "e2e", "browser")
# pytest-django's ways in to the database: a test that uses none of them cannot touch it.
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-tests",
        action="store_true",
        help="only the tests that use the database (make test-postgres runs the unit ones on PostgreSQL)",
    )


def uses_the_database(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & DATABASE_FIXTURES) or item.get_closest_marker("django_db") is not None


# First: pytest-xdist's own hook reads the xdist_group marks added here (into the node ids
# --dist loadgroup schedules by), and run after it, they were never seen.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test says what it needs (one of ``KINDS``); slow tests start first; browser
    tests share one worker.

    Under pytest-xdist the slow test (a question answered after 870 s) then runs on one
    worker while the others share everything else, instead of starting last. Browser tests
    run one at a time (``--dist loadgroup``): a Chromium, the app and a CLI each, several at
    once on 2 cores, pushed the pages past their 5-second waits.
    """
    unmarked = [
        item.nodeid for item in items if sum(item.get_closest_marker(k) is not None for k in KINDS) != 1
    ]
    if unmarked:
        raise pytest.UsageError(f"each test needs exactly one of the markers {KINDS}: {unmarked[:10]}")
    if config.getoption("database_tests"):
        others = [item for item in items if not uses_the_database(item)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if uses_the_database(item)]
    for item in items:
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.xdist_group("browser"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# --- The database -------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, which on PostgreSQL it can then drop at the end.

    asgiref's thread for ``sync_to_async`` keeps its own connection open after the last
    async test, and PostgreSQL refuses to drop a database with a session on it. End those
    sessions first, so no test database is left behind (SQLite: nothing to do).
    """
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# --- Redis --------------------------------------------------------------------------


def _reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis: ``REDIS_URL`` when reachable, else a private redis-server.

    A shared Redis is never flushed: each test uses its own key prefix and removes its keys.
    """
    configured = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _reachable(configured):
        yield configured
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("No Redis reachable at REDIS_URL and no redis-server installed (make test installs it)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until(lambda: _reachable(url), timeout=10, what="private redis-server")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


_test_counter = 0


@pytest.fixture(autouse=True)
def _app_settings(settings: Any, redis_url: str, claude_cli: str, tmp_path: Path) -> Iterator[None]:
    """Every test gets its own workspace root and secrets dir, and the real Redis."""
    from core import redis as core_redis

    settings.REDIS_URL = redis_url
    # Every run uses the bundled CLI (see ``claude_cli``); tests of the lookup order clear it.
    settings.CLAUDE_CLI_PATH = claude_cli
    # The real hasher is slow on purpose; tests create users and log in all the time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # A key prefix per test: nothing leaks between tests, or between parallel test runs.
    global _test_counter
    _test_counter += 1
    # The pid differs per pytest-xdist worker, so parallel workers never share a key.
    settings.REDIS_KEY_PREFIX = f"pmtest-{os.getpid()}-{_test_counter}"
    settings.STORAGE_ROOT = tmp_path / "storage"
    # Short path: unix sockets and config paths stay well under OS limits.
    secrets_dir = Path(tempfile.mkdtemp(prefix="pm-secrets-"))
    settings.RUN_SECRETS_DIR = secrets_dir
    core_redis.reset_clients()
    # Tests that call services without a served app get an instance id of their own; a
    # served app loads the database's at start-up, as production does.
    core_redis.set_instance_uid(f"test{_test_counter}")
    yield
    core_redis.reset_clients()
    core_redis.set_instance_uid(None)
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}:*", count=500):
        client.delete(key)
    shutil.rmtree(secrets_dir, ignore_errors=True)


@pytest.fixture
def redis_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture
def private_redis(settings: Any, tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis of the test's own, which the app uses: the test may take it down and bring
    it back, and its script cache and command counts are the test's alone. The shared
    Redis comes back with ``settings`` when the test ends (``_app_settings`` resets the
    clients)."""
    from core import redis as core_redis

    server = PrivateRedis(tmp_path)
    server.start()
    settings.REDIS_URL = server.url
    core_redis.reset_clients()
    yield server
    if server.proc is not None:
        server.stop()


# --- People and projects ------------------------------------------------------------


@pytest.fixture
def alice(db: Any) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user("alice", "alice@example.com", "alice-password")


@pytest.fixture
def bob(db: Any) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user("bob", "bob@example.com", "bob-password")


@pytest.fixture
def carol(db: Any) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user("carol", "carol@example.com", "carol-password")


# --- The scripted model and the real CLI ----------------------------------------------


@pytest.fixture(scope="session")
def scripted_model_url() -> Iterator[str]:
    """The scripted Anthropic Messages API server, as its own process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptmgr.scripted_model", "--port", str(port)],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/_scripted/health", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout=20, what="scripted model server")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def model_settings(settings: Any, scripted_model_url: str) -> Any:
    """Point the app's CLI runs at the scripted model."""
    settings.ANTHROPIC_BASE_URL = scripted_model_url
    settings.ANTHROPIC_API_KEY = "sk-scripted-test-key"
    settings.DEMO_MODEL = False
    return settings


@pytest.fixture(scope="session")
def claude_cli() -> str:
    """The CLI bundled in claude-agent-sdk: the suite proves the version pinned in
    pyproject.toml, not whatever ``claude`` a developer has on PATH."""
    from promptmgr.cli import bundled_cli

    return str(bundled_cli())


# --- The app over real HTTP -----------------------------------------------------------


class LiveServer:
    """uvicorn serving the real ASGI app in a thread of the test process."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from promptmgr.asgi import application

        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            # Open SSE streams never end by themselves; do not wait on them at shutdown.
            timeout_graceful_shutdown=5,
            # The click channel as make run serves it (Makefile's UVICORN_WS).
            ws_max_size=4_194_304,
            ws_per_message_deflate=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn-live", daemon=True)
        self._thread.start()
        wait_until(
            lambda: bool(self._server and self._server.started),
            timeout=20,
            what="uvicorn",
        )

    @property
    def settings_redis_url(self) -> str:
        from django.conf import settings

        return str(settings.REDIS_URL)

    def secrets_dir(self) -> str:
        from django.conf import settings

        return str(settings.RUN_SECRETS_DIR)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)


@pytest.fixture
def app_server(transactional_db: Any, model_settings: Any) -> Iterator[LiveServer]:
    """The app on a real port, wired to the scripted model; runs reach it on loopback."""
    server = LiveServer(free_port())
    model_settings.INTERNAL_BASE_URL = server.url
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- A real browser -------------------------------------------------------------------


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Chromium for one test. Playwright's sync API keeps an event loop running in the main
    thread while it is open; closing it after each test keeps that loop from leaking into
    the async and asyncio.run-based tests that pytest-django may order after it."""
    from playwright.sync_api import sync_playwright

    # Only while a browser is open may the test body use the ORM beside Playwright's loop;
    # everywhere else Django's check stays on, so an async view doing sync ORM work fails.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM} (make test installs Debian's chromium)")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = new_context(browser)
    page = context.new_page()
    yield page
    context.close()
