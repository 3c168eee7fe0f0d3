"""The changes card and the file browser in a real browser (Chromium), on real runs of the
real CLI: the card opens to a highlighted diff and reverts; the browser opens a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from core.events import append_event_sync
from promptmgr.models import Run, RunEvent
from tests.changes.support import READ, edit, git_project
from tests.conftest import LiveServer
from tests.helpers import browser_login, script
from tests.pages.chat import send_prompt

pytestmark = pytest.mark.browser

# Claude streams this slowly: the run stays going while the test appends events to it.
SLOW_REPLY = {"text": "Working on it. " * 40, "pace_ms": 500, "chunk_chars": 1}


@pytest.fixture(autouse=True)
def no_script_errors(page: Any) -> Iterator[None]:
    """Any uncaught JavaScript error on the page fails the test (as in tests/pages)."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield
    assert errors == []


def open_chat(page: Any, server: LiveServer, project: Any) -> None:
    browser_login(page, server, "alice", "alice-password")
    page.goto(f"{server.url}/projects/{project.pk}/")


def test_the_changes_card_opens_to_a_highlighted_diff_and_reverts(
    app_server: LiveServer, page: Any, alice: Any
) -> None:
    project, _root = git_project(alice)
    open_chat(page, app_server, project)

    send_prompt(page, script(READ, edit("status: draft", "status: final"), {"text": "Done."}))

    card = page.locator(".changes-card")
    expect(card).to_be_visible(timeout=60_000)
    expect(card.locator(".changes-title")).to_have_text("Changed 1 file")
    expect(card.locator(".changes-count.is-add")).to_have_text("+1")
    expect(card.locator(".changes-count.is-del")).to_have_text("−1")
    row = card.locator(".changes-file", has_text="README.md")
    expect(row.locator(".changes-status")).to_have_text("M")

    row.locator("summary").click()

    added = row.locator(".code-view .d-add")
    expect(added).to_have_text("+status: final")
    expect(row.locator(".code-view .d-del")).to_have_text("-status: draft")
    expect(row.locator(".code-view .d-hunk")).to_contain_text("@@")
    # Highlighted on the server: the added line's background is not the deleted line's.
    assert added.evaluate("e => getComputedStyle(e).backgroundColor") != row.locator(
        ".code-view .d-del"
    ).evaluate("e => getComputedStyle(e).backgroundColor")

    workdir = Path(Run.objects.get(conversation__project=project).workdir)
    assert (workdir / "README.md").read_text() == "# Demo\nstatus: final\n"
    revert = card.locator(".changes-revert")
    revert.click()
    expect(revert).to_have_text("Revert 1 file?")
    revert.click()
    expect(card.locator(".changes-note")).to_have_text(
        "Reverted: these files are back to how they were before this run."
    )
    expect(card).to_have_class("changes-card is-reverted")
    assert (workdir / "README.md").read_text() == "# Demo\nstatus: draft\n"

    # After a reload the card is shown again from the stored history, still reverted.
    page.reload()
    again = page.locator(".changes-card")
    expect(again.locator(".changes-title")).to_have_text("Changed 1 file")
    expect(again).to_have_class("changes-card is-reverted")
    expect(again.locator(".changes-revert")).to_be_hidden()


def test_the_file_browser_opens_a_file_from_the_chat(app_server: LiveServer, page: Any, alice: Any) -> None:
    project, _root = git_project(alice)
    open_chat(page, app_server, project)
    send_prompt(page, script(READ, edit("status: draft", "status: final"), {"text": "Done."}))
    expect(page.locator(".changes-card")).to_be_visible(timeout=60_000)

    page.locator(".changes-card a", has_text="Browse files").click()

    page.wait_for_url("**/files/?conversation=*")
    tree = page.locator("[data-role=tree]")
    tree.locator(".tree-item", has_text="README.md").click()
    expect(page.locator("[data-role=path]")).to_have_text("README.md")
    expect(page.locator("[data-role=meta]")).to_contain_text("Markdown")
    code = page.locator("[data-role=code]")
    expect(code.locator(".ln")).to_have_count(2)
    expect(code.locator(".ln").nth(1)).to_have_text("status: final")  # the worktree, as Claude left it
    expect(code.locator(".ln").first.locator(".hl-gh")).to_have_text("# Demo")
    # Line numbers come from CSS, not from the text: copying the code copies only the code.
    assert (
        code.locator(".ln").first.evaluate("e => getComputedStyle(e, '::before').content") == "counter(line)"
    )
    assert "path=README.md" in page.url

    # A deep link opens the same file, its folders unfolded.
    page.goto(page.url)
    expect(page.locator("[data-role=path]")).to_have_text("README.md")
    expect(code.locator(".ln").nth(1)).to_have_text("status: final")


def test_a_run_with_a_thousand_files_lists_a_hundred_then_the_rest_on_demand(
    app_server: LiveServer, page: Any, alice: Any
) -> None:
    project, _root = git_project(alice)
    open_chat(page, app_server, project)
    send_prompt(page, script(SLOW_REPLY))
    expect(page.locator("[data-role=status]")).to_have_text("Running", timeout=30_000)
    run = Run.objects.get(conversation__project=project)
    files = [
        {"path": f"gen/file{i:04}.txt", "status": "added", "additions": 1, "deletions": 0, "collapsed": None}
        for i in range(1000)
    ]
    files[0] = {**files[0], "path": "package-lock.json", "status": "modified", "collapsed": "lockfile"}
    event = {"run_id": run.pk, "files": files, "total_files": 1000, "additions": 1000, "deletions": 0}

    append_event_sync(run.pk, "changes", event)

    card = page.locator(".changes-card")
    expect(card.locator(".changes-title")).to_have_text("Changed 1000 files")
    expect(card.locator(".changes-file")).to_have_count(100)
    more = card.locator(".changes-more")
    expect(more).to_have_text("Show 900 more files")
    more.click()
    expect(card.locator(".changes-file")).to_have_count(1000)
    expect(more).to_be_hidden()
    # A lockfile opens folded: no diff is fetched until asked for.
    lock = card.locator(".changes-file", has_text="package-lock.json")
    expect(lock.locator(".changes-folded")).to_have_text("lockfile")
    lock.locator("summary").click()
    expect(lock.locator(".changes-diff-note")).to_contain_text("Lockfile: its diff is folded away.")
    expect(lock.locator("button", has_text="Show the diff")).to_be_visible()
    page.locator("[data-role=cancel]").click()


def test_files_past_the_events_list_are_fetched_from_the_server_on_demand(
    app_server: LiveServer, page: Any, alice: Any
) -> None:
    project, _root = git_project(alice)
    open_chat(page, app_server, project)
    send_prompt(page, script(READ, edit("status: draft", "status: final"), {"text": "Done."}))
    expect(page.locator(".changes-card")).to_be_visible(timeout=60_000)
    # As a run of 150 files would have left it, with an event that lists only 120 of them.
    run = Run.objects.get(conversation__project=project)
    files = [
        {"path": f"gen/f{i:03}.txt", "status": "added", "additions": 1, "deletions": 0, "collapsed": None}
        for i in range(150)
    ]
    Run.objects.filter(pk=run.pk).update(changed_files=files)
    RunEvent.objects.filter(run=run, event="changes").update(
        data={"run_id": run.pk, "files": files[:120], "total_files": 150, "additions": 150, "deletions": 0}
    )

    page.reload()

    card = page.locator(".changes-card")
    expect(card.locator(".changes-file")).to_have_count(100)
    card.locator(".changes-more").click()
    expect(card.locator(".changes-file")).to_have_count(120)
    expect(card.locator(".changes-more")).to_have_text("Show 30 more files")
    card.locator(".changes-more").click()
    expect(card.locator(".changes-file")).to_have_count(150)
    expect(card.locator(".changes-file").last).to_contain_text("gen/f149.txt")
    expect(card.locator(".changes-more")).to_be_hidden()
