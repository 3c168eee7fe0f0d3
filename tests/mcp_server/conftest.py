"""Fixtures for the ask-user MCP server tests; the helpers live in ``fake_relay``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_server.fake_relay import FakeRelay, config_data


@pytest.fixture(autouse=True)
def _app_settings() -> None:
    """Opt out of the project-wide Django and Redis setup: the MCP server uses neither."""


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    fake = FakeRelay()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a config file the way PromptManager does (0600) and return its path."""

    def write(api_url: str = "http://127.0.0.1:8000", **overrides: Any) -> Path:
        path = tmp_path / "ask-user.json"
        path.write_text(json.dumps(config_data(api_url, **overrides)), encoding="utf-8")
        path.chmod(0o600)
        return path

    return write
