"""Pages in every look a user meets: desktop and a 390 px phone, light and dark.

Each test here gets ``look`` (one of ``LOOKS``) and a ``page`` opened in it; a test that
only needs some looks parametrizes ``look`` itself. Any Content-Security-Policy violation
on the page fails the test, as an uncaught script error does (``tests/pages/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import new_context

VIEWPORTS: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1280, "height": 800}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}
LOOKS = ["desktop-light", "desktop-dark", "phone-light", "phone-dark"]
# For the tests that wait on the real CLI for long: both widths and both schemes, twice.
CROSSED = ["desktop-light", "phone-dark"]


@pytest.fixture(params=LOOKS)
def look(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def page(browser: Any, look: str) -> Iterator[Any]:
    width, scheme = look.split("-")
    context = new_context(browser, color_scheme=scheme, **VIEWPORTS[width])
    page = context.new_page()
    # Chromium reports every blocked script, style or handler on the console, on any page loaded.
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    context.close()
    assert violations == []


def is_phone(look: str) -> bool:
    return look.startswith("phone")


def is_dark(look: str) -> bool:
    return look.endswith("dark")
