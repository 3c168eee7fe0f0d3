"""A bad setting stops start-up with a clear message, before any request is served."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.unit

START = "import django; django.setup(); print('started')"


def start_with(**env: str) -> subprocess.CompletedProcess[str]:
    """Load the settings in a fresh interpreter, as uvicorn and manage.py do."""
    return subprocess.run(
        [sys.executable, "-c", START],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "promptmgr.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_defaults_start() -> None:
    result = start_with()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "started"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"CLAUDE_CLI_PATH": "/nonexistent/claude"},
            "CLAUDE_CLI_PATH='/nonexistent/claude' is not an executable file",
        ),
        ({"CLAUDE_CLI_PATH": "/tmp"}, "CLAUDE_CLI_PATH='/tmp' is not an executable file"),
        ({"ASK_USER_DEFAULT_TIMEOUT": "10"}, "ASK_USER_DEFAULT_TIMEOUT must be between 30 and 900, not 10"),
        ({"RUNS_PER_USER": "many"}, "RUNS_PER_USER must be a whole number, not 'many'"),
        ({"CLAUDE_CLI_NICE": "-5"}, "CLAUDE_CLI_NICE must be between 0 and 19, not -5"),
        ({"DEBUG": "maybe"}, "DEBUG must be true or false, not 'maybe'"),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL must be a URL with scheme"),
        ({"DEBUG": "false", "SECRET_KEY": ""}, "SECRET_KEY must be set when DEBUG is off"),
        ({"RUN_WORKER": "remote"}, "RUN_WORKER must be one of embedded, off, not 'remote'"),
        ({"RUN_WORKER_CONCURRENCY": "0"}, "RUN_WORKER_CONCURRENCY must be between 1 and 1000, not 0"),
    ],
)
def test_a_bad_value_stops_start_up_with_a_clear_message(env: dict[str, str], message: str) -> None:
    result = start_with(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr
    assert "started" not in result.stdout


def test_a_cli_path_to_a_file_that_cannot_be_executed_stops_start_up(tmp_path: Path) -> None:
    plain = tmp_path / "claude"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    result = start_with(CLAUDE_CLI_PATH=str(plain))
    assert result.returncode != 0
    assert f"CLAUDE_CLI_PATH={str(plain)!r} is not an executable file" in result.stderr
