"""Phone layout and dark mode: no sideways scrolling at 390 px, a header that stays usable,
a prompt box that grows, the system's colour scheme followed and a toggle that pins the
other, and text and chips at a contrast of at least 4.5:1 in both."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers import browser_login, make_project, script
from tests.pages.chat import PROMPT, send_prompt
from tests.pages.looks.conftest import is_dark
from tests.pages.looks.helpers import contrast, inside_viewport, no_horizontal_scroll

pytestmark = pytest.mark.browser

LONG_NAME = "A-project-name-with-no-spaces-at-all-that-goes-on-and-on-" * 3
STATUSES = ["queued", "running", "waiting_for_user", "completed", "failed", "cancelled", "timed_out"]


def test_no_page_scrolls_sideways_and_a_long_title_wraps(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, name=LONG_NAME)
    browser_login(page, app_server, "alice", "alice-password")
    assert no_horizontal_scroll(page)

    page.goto(f"{app_server.url}/projects/{project.pk}/settings/")
    expect(page.get_by_role("heading", name=f"Settings of {LONG_NAME}")).to_be_visible()
    assert no_horizontal_scroll(page)

    page.goto(f"{app_server.url}/projects/{project.pk}/")
    send_prompt(page, script({"text": "Done."}) + " " + "long-title-" * 30)
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)
    title = page.locator(".chat-project")
    assert inside_viewport(page, title)
    # It wraps onto more lines instead of being cut off or pushing the page wider.
    assert title.evaluate("e => e.getBoundingClientRect().height") > 2 * title.evaluate(
        "e => parseFloat(getComputedStyle(e).lineHeight)"
    )
    assert no_horizontal_scroll(page)


def test_the_header_and_log_out_stay_reachable(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, name="Alpha")
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")

    for name in ["PromptManager", "Projects"]:
        link = page.get_by_role("link", name=name, exact=True)
        expect(link).to_be_in_viewport()
        assert inside_viewport(page, link)
    log_out = page.get_by_role("button", name="Log out")
    expect(log_out).to_be_in_viewport()
    assert inside_viewport(page, log_out)
    log_out.click()
    expect(page).to_have_url(f"{app_server.url}/accounts/login/")


def test_the_prompt_box_grows_with_its_text_up_to_a_limit(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")
    prompt = page.locator(PROMPT)
    empty = prompt.bounding_box()["height"]

    for _ in range(4):
        prompt.press_sequentially("line")
        prompt.press("Shift+Enter")
    grown = prompt.bounding_box()["height"]
    assert grown > empty + 40
    prompt.fill("many\n" * 200)
    prompt.dispatch_event("input")
    capped = prompt.bounding_box()["height"]
    assert grown < capped <= page.viewport_size["height"] * 0.4 + 1
    assert no_horizontal_scroll(page)


def test_an_approval_cards_header_and_buttons_are_on_screen(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, permission_mode="default")
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")
    bash = {
        "tool_use": {
            "name": "Bash",
            "input": {"command": "mkdir -p out && echo built", "description": "Build"},
        }
    }

    send_prompt(page, script(bash, {"text": "Done."}))

    card = page.locator(".pcard")
    expect(card).to_be_visible(timeout=30_000)
    for part in [
        card.locator(".pcard-badge"),
        card.locator(".qcard-countdown"),
        *card.get_by_role("button").all(),
    ]:
        expect(part).to_be_visible()
        assert inside_viewport(page, part)
    assert no_horizontal_scroll(page)
    card.get_by_role("button", name="Deny").click()
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)


def test_the_page_follows_the_system_scheme_and_the_toggle_pins_the_other(
    app_server: Any, page: Any, alice: Any, look: str
) -> None:
    browser_login(page, app_server, "alice", "alice-password")
    toggle = page.get_by_role("button", name="Dark mode")
    dark_now = is_dark(look)
    background = "getComputedStyle(document.body).backgroundColor"
    expect(toggle).to_have_attribute("aria-pressed", str(dark_now).lower())
    system_background = page.evaluate(background)

    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", str(not dark_now).lower())
    pinned_background = page.evaluate(background)
    assert pinned_background != system_background
    page.reload()
    expect(toggle).to_have_attribute("aria-pressed", str(not dark_now).lower())
    assert page.evaluate(background) == pinned_background

    # Back to what the system shows: the page follows the system again.
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", str(dark_now).lower())
    assert page.evaluate("localStorage.getItem('promptmanager.theme')") is None
    assert page.evaluate(background) == system_background


def test_status_chips_and_text_keep_a_contrast_of_at_least_4_5(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")
    # Every chip the page can show, as the page's own script would build it.
    page.evaluate(
        """(statuses) => {
          const box = document.querySelector(".chat-welcome");
          for (const status of statuses) {
            const chip = document.createElement("span");
            chip.className = `status-chip is-${status}`;
            chip.textContent = status;
            box.append(chip);
          }
        }""",
        STATUSES,
    )

    ratios = {
        status: contrast(page.locator(f".chat-welcome .status-chip.is-{status}")) for status in STATUSES
    }
    ratios["muted text"] = contrast(page.locator(".chat-hint"))
    ratios["body text"] = contrast(page.locator(".chat-welcome strong"))
    ratios["link"] = contrast(page.get_by_role("link", name="Settings"))
    assert {name: round(r, 2) for name, r in ratios.items() if r < 4.5} == {}
