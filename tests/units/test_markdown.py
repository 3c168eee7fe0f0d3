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
from promptmgr.processes import live_processes
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
    dead = markdown.renderer().pid
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    wait_until(lambda: not alive(dead), timeout=10, what="the render process to die")

    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    fresh = markdown.renderer().pid
    assert fresh is not None and fresh != dead and alive(fresh)


async def test_an_idle_render_process_exits_and_the_next_long_reply_starts_another(
    fresh_renderer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle worker keeps no render process (27 MiB); the next long reply still renders.
    monkeypatch.setattr(markdown, "RENDER_IDLE_SECONDS", 0.3)
    await render_markdown_async(LONG_REPLY)
    first = markdown.renderer().pid
    assert first is not None and alive(first)
    for _ in range(100):
        if markdown.renderer().pid is None and not alive(first):
            break
        await asyncio.sleep(0.05)
    assert markdown.renderer().pid is None and not alive(first)

    assert await render_markdown_async(LONG_REPLY) == render_markdown(LONG_REPLY)
    second = markdown.renderer().pid
    assert second is not None and second != first


async def test_renders_waiting_together_come_back_each_to_its_own_text(fresh_renderer: None) -> None:
    texts = [LONG_REPLY.replace("Step", f"Part {i}") for i in range(4)]
    assert await asyncio.gather(*(render_markdown_async(t) for t in texts)) == [
        render_markdown(t) for t in texts
    ]


async def test_the_render_process_gets_no_secret_of_the_worker(
    fresh_renderer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-for-test")
    monkeypatch.setenv("SECRET_KEY", "django-secret-for-test")
    await render_markdown_async(LONG_REPLY)
    pid = markdown.renderer().pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"secret-for-test" not in environ
    assert b"ANTHROPIC_API_KEY" not in environ and b"SECRET_KEY" not in environ


def alive(pid: int) -> bool:
    """Running, not gone and not a zombie (who reaps an orphan depends on the machine)."""
    return any(process.pid == pid for process in live_processes())


def test_a_worker_killed_outright_leaves_no_render_process_behind() -> None:
    worker_code = (
        "import asyncio\n"
        "from promptmgr import markdown\n"
        "async def main():\n"
        "    await markdown.render_markdown_async('x' * 1000)\n"
        "    print(markdown.renderer().pid, flush=True)\n"
        "    await asyncio.sleep(120)\n"
        "asyncio.run(main())\n"
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
