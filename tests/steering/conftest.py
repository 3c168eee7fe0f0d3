"""The chat page's fixtures for this folder's browser tests (shared with tests/pages)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.pages.conftest import open_chat  # noqa: F401 (a fixture, used by name)


@pytest.fixture
def no_page_errors(page: Any) -> Iterator[None]:
    """Any uncaught JavaScript error on the page fails the test (browser tests ask for it)."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield
    assert errors == []
