"""Which Claude Code CLI runs: CLAUDE_CLI_PATH, else ``claude`` on PATH, else the bundled one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from promptmgr.cli import bundled_cli, find_claude_cli

pytestmark = pytest.mark.unit


def make_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_configured_cli_path_wins_over_claude_on_path(
    settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_path = make_executable(tmp_path / "bin" / "claude")
    configured = make_executable(tmp_path / "configured" / "my-claude")
    monkeypatch.setenv("PATH", str(on_path.parent))
    settings.CLAUDE_CLI_PATH = str(configured)

    assert find_claude_cli() == str(configured)


def test_claude_on_path_wins_over_the_bundled_cli(
    settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_path = make_executable(tmp_path / "bin" / "claude")
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}:{on_path.parent}")
    settings.CLAUDE_CLI_PATH = ""

    assert find_claude_cli() == str(on_path)


def test_with_nothing_configured_or_on_path_the_bundled_cli_is_used(
    settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A file named claude that is not executable does not count as on PATH.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    settings.CLAUDE_CLI_PATH = ""

    assert find_claude_cli() == str(bundled_cli())
