"""Model output becomes sanitized HTML, and a long reply never holds up the event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptmgr import markdown
from promptmgr.markdown import INLINE_MAX_CHARS, render_markdown, render_markdown_async
from tests.helpers import wait_until

pytestmark = pytest.mark.unit

# Headings, lists, code, a table and raw HTML, well past the in-place limit.
LONG_REPLY = "\n\n".join(
    f"## Step {i}\n\n- **bold** and `code` <b>raw</b>\n\n```py\nprint({i})\n```\n\n| a | b |\n|---|---|\n| {i} | x |"
    for i in range(400)
)


@pytest.fixture
def fresh_renderer() -> Iterator[None]:
    markdown.stop_renderer()
    yield
    markdown.stop_renderer()


def test_markdown_is_sanitized_html() -> None:
    assert render_markdown("**hi** <script>x()</script>") == (
        "<p><strong>hi</strong> &lt;script&gt;x()&lt;/script&gt;</p>\n"
    )


def test_javascript_links_are_dropped() -> None:
    html = render_markdown("[x](javascript:alert(1))")
    assert "<a" not in html and "href" not in html


async def test_a_long_reply_renders_while_the_event_loop_keeps_serving(fresh_renderer: None) -> None:
    assert len(LONG_REPLY) > 20 * INLINE_MAX_CHARS
    render = asyncio.create_task(render_markdown_async(LONG_REPLY))
    turns = 0
    while not render.done():
        # Rendered on the loop, the render would run start to finish in one step and
        # this loop would see it done on its second turn.
        turns += 1
        await asyncio.sleep(0)
    assert turns > 2
    assert render.result() == render_markdown(LONG_REPLY)
    assert "&lt;b&gt;raw&lt;/b&gt;" in render.result()  # raw HTML is shown as text, not dropped


async def test_a_dead_render_process_loses_no_reply(fresh_renderer: None) -> None:
    await render_markdown_async(LONG_REPLY)
    pool = markdown._renderer()
    [dead] = list(pool._processes.values())
    dead.kill()
    dead.join()

    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    [fresh] = list(markdown._renderer()._processes.values())
    assert fresh.pid != dead.pid and fresh.is_alive()


async def test_starting_again_replaces_a_render_process_that_died_meanwhile(fresh_renderer: None) -> None:
    markdown.start_renderer()
    await render_markdown_async(LONG_REPLY)
    [dead] = list(markdown._renderer()._processes.values())
    dead.kill()
    dead.join()
    # The pool's own thread notices the death and marks the pool broken.
    wait_until(lambda: bool(markdown._renderer()._broken), timeout=10, what="the pool to break")

    markdown.start_renderer()

    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    [fresh] = list(markdown._renderer()._processes.values())
    assert fresh.pid != dead.pid and fresh.is_alive()


def alive(pid: int) -> bool:
    """Running, not gone and not a zombie (who reaps an orphan depends on the machine)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_worker_killed_outright_leaves_no_render_process_behind() -> None:
    worker_code = (
        "import time\n"
        "from promptmgr import markdown\n"
        "pool = markdown._renderer()\n"
        "pool.submit(markdown.render_markdown, 'x').result()\n"
        "print(*(p.pid for p in pool._processes.values()), flush=True)\n"
        "time.sleep(120)\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", worker_code], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2], text=True
    )
    try:
        assert worker.stdout is not None
        render_pid = int(worker.stdout.readline())
        assert alive(render_pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        wait_until(lambda: not alive(render_pid), timeout=10, what="the render process to go")
    finally:
        worker.kill()
        worker.wait()
