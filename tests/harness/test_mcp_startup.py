"""The CLI waits for the ask-user server before the turn when told to (bundled CLI contract).

Under CPU load the Python MCP server can take seconds to start; by default the CLI starts
the turn without it (``pending``), and Claude then cannot ask. ``MCP_CONNECTION_NONBLOCKING=false``
makes the CLI connect its MCP servers first; ``promptmgr.cli.child_env`` sets it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from promptmgr.cli import child_env
from tests.conftest import REPO
from tests.helpers import script

pytestmark = pytest.mark.e2e

STARTUP_DELAY = 3

SLOW_SERVER = f"""
import runpy, sys, time
time.sleep({STARTUP_DELAY})
sys.argv = ["mcp_server"]
runpy.run_module("mcp_server", run_name="__main__")
"""


def init_line(claude_cli: str, workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    completed = subprocess.run(
        [claude_cli, "-p", "--output-format", "stream-json", "--verbose"],
        input=script({"text": "hello"}),
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    first: dict[str, Any] = json.loads(completed.stdout.splitlines()[0])
    assert first["type"] == "system" and first["subtype"] == "init"
    return first


@pytest.fixture
def slow_server_workdir(tmp_path: Path) -> Path:
    (tmp_path / "slow.py").write_text(SLOW_SERVER)
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(tmp_path / "slow.py")],
        "env": {"PYTHONPATH": str(REPO)},
    }
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"slow": server}}))
    return tmp_path


def test_by_default_the_turn_starts_before_a_slow_mcp_server_is_connected(
    model_settings: Any, claude_cli: str, slow_server_workdir: Path
) -> None:
    env = child_env(ask_user_config=None, ask_user_timeout=None)
    env.pop("MCP_CONNECTION_NONBLOCKING", None)

    init = init_line(claude_cli, slow_server_workdir, env)

    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("slow", "pending")]


def test_the_runs_environment_makes_the_cli_wait_for_a_slow_mcp_server(
    model_settings: Any, claude_cli: str, slow_server_workdir: Path
) -> None:
    env = child_env(ask_user_config=slow_server_workdir / "config.json", ask_user_timeout=300)

    init = init_line(claude_cli, slow_server_workdir, env)

    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("slow", "connected")]
