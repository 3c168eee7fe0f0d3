"""The screenshot set in docs/screenshots/: ``make screenshots``.

Not a test module (pytest collects it only when named on the command line): it drives the
real app, CLI and scripted model through the pages in every look (``conftest.LOOKS``) and
saves what a user sees. Each step still waits for its page to be what the file is named
after, so a broken page fails the run instead of saving a blank picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import PermissionRule
from tests.conftest import REPO
from tests.helpers import browser_login, make_project, script
from tests.pages.chat import send_prompt

pytestmark = pytest.mark.browser

OUT = REPO / "docs" / "screenshots"

REPLY = """Here is the plan, as a table and a snippet:

| Step | What | Why |
|---|---|---|
| 1 | Add `retry()` | Flaky network |
| 2 | Test it | Keep it working |

```python
def retry(call, attempts=3):
    for attempt in range(attempts):
        try:
            return call()
        except OSError:
            if attempt == attempts - 1:
                raise
```
"""

QUESTION = {
    "tool_use": {
        "name": "mcp__ask-user__ask_user",
        "input": {
            "question": "Which database should the service use?",
            "header": "Database",
            "options": [
                {"label": "SQLite", "description": "One file, nothing to run."},
                {"label": "PostgreSQL", "description": "A server; scales further."},
            ],
        },
    }
}
BASH = {
    "tool_use": {"name": "Bash", "input": {"command": "mkdir -p build && make all", "description": "Build"}}
}


def shoot(page: Any, name: str, look: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}-{look}.png"
    page.screenshot(path=str(path), full_page=False)
    return path


def test_screenshots(app_server: Any, page: Any, look: str, alice: Any, bob: Any) -> None:
    project = make_project(
        owner=alice, members=(bob,), name="Payments service", context="Python 3.12, pytest."
    )
    PermissionRule.objects.create(project=project, rule="Bash(npm test:*)", added_by=alice)
    make_project(owner=alice, name="Website")

    page.goto(f"{app_server.url}/accounts/login/")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    shoot(page, "login", look)

    browser_login(page, app_server, "alice", "alice-password")
    expect(page.locator(".project-list li")).to_have_count(2)
    shoot(page, "projects", look)

    page.goto(f"{app_server.url}/projects/{project.pk}/settings/")
    expect(page.get_by_role("heading", name="Settings of Payments service")).to_be_visible()
    shoot(page, "settings", look)

    page.goto(f"{app_server.url}/projects/{project.pk}/")
    expect(page.locator(".chat-welcome")).to_be_visible()
    shoot(page, "chat-welcome", look)

    send_prompt(page, script({"text": REPLY}))
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)
    shoot(page, "chat-markdown", look)

    send_prompt(page, script(QUESTION, {"text": "Thanks."}))
    expect(page.locator(".qcard.is-pending")).to_be_visible(timeout=30_000)
    page.locator(".qcard").scroll_into_view_if_needed()
    shoot(page, "chat-question", look)
    page.keyboard.press("2")
    page.keyboard.press("Enter")
    expect(page.locator(".run-footer .status-chip").last).to_have_text("Completed", timeout=30_000)

    project.permission_mode = "default"
    project.save()
    send_prompt(page, script(BASH, {"text": "Built."}))
    expect(page.locator(".pcard.is-pending")).to_be_visible(timeout=30_000)
    page.locator(".pcard").scroll_into_view_if_needed()
    shoot(page, "chat-approval", look)
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(".run-footer .status-chip").last).to_have_text("Completed", timeout=30_000)
