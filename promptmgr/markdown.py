"""Model output is untrusted: it is rendered as Markdown and then sanitized with nh3.

A whole reply is rendered when its ``assistant`` line arrives. markdown-it-py is pure
Python and takes up to about 3 ms per KB of dense Markdown on our 2-vCPU machines (75 ms
for 35 KB), so on the event loop one long reply would stall every stream and request of
the worker, and the GIL means a thread would only spread the stall out.
``render_markdown_async`` therefore hands long texts to a render process of this event
loop's own (``python -m promptmgr.markdown``: one JSON line in, one out, in order);
short ones cost less to render than the round trip and are rendered in place.

The render process starts with the first long reply and exits after
``RENDER_IDLE_SECONDS`` without one, so an idle worker has none (it was 27 MiB, and
multiprocessing's resource tracker, which a process pool brings and keeps, 13 MiB more:
bench/scale.py, idle RSS). It gets none of the worker's secrets (only ``CHILD_ENV``) and
dies with the worker, even by SIGKILL. A reply whose render process died is rendered in
place; the next long one starts a new process.

Fenced code with a language (```py) is highlighted by Pygments here, on the server, so
the page needs no highlighting script and the result is sanitized like the rest: tokens
become ``<span class="hl-…">`` (coloured by static/css/chat.css, light and dark).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from core.loops import PerLoop
from core.procfs import die_with

logger = logging.getLogger(__name__)

# Spans with classes only (no inline styles: the CSP forbids them), prefixed to stay apart.
_formatter = HtmlFormatter(nowrap=True, classprefix="hl-")
# A block past this is shown plain: highlighting costs far more than rendering.
HIGHLIGHT_MAX_CHARS = 50_000


def _highlight(code: str, lang: str, attrs: str) -> str:
    """Pygments' spans for a fenced block with a known language; "" lets markdown-it escape it."""
    if not lang or len(code) > HIGHLIGHT_MAX_CHARS:
        return ""
    try:
        lexer = get_lexer_by_name(lang.split()[0], stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    return highlight(code, lexer, _formatter)


_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "highlight": _highlight})
_md.enable("table").enable("strikethrough")

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td", "span",
}  # fmt: skip

# 0.8 ms of rendering in place; through the render process it costs 1.3 ms (bench/machinery.py).
INLINE_MAX_CHARS = 300
# A render process this long without a long reply exits; the next one starts another
# (about 0.2 s to import its renderer, once per quiet spell).
RENDER_IDLE_SECONDS = 10.0
# One reply's HTML is one line of JSON (asyncio's default limit is 64 KiB a line).
LINE_LIMIT = 64 * 1024 * 1024
# All the render process gets of the worker's environment: no secrets.
CHILD_ENV = ("PATH", "PYTHONPATH", "PYTHONMALLOC", "LANG", "LC_ALL")
REPO = Path(__file__).resolve().parent.parent


def render_markdown(text: str) -> str:
    html = _md.render(text)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes={
            "a": {"href", "title"},
            "code": {"class"},
            "span": {"class"},
            "th": {"align"},
            "td": {"align"},
        },
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def _serve(parent: int) -> None:
    """The render process: a text per line of JSON in, its HTML (or the error) per line out."""
    die_with(parent)  # runs first: it goes when the worker goes, even by SIGKILL
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            reply = {"html": render_markdown(json.loads(line)["text"])}
        except Exception as exc:  # the worker renders it in place, where it raises again
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


class RenderUnavailable(Exception):
    """The render process died, or could not render the text: render it in place."""


class _Child:
    """One started render process and the renders it owes, in the order they went out."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.waiting: collections.deque[asyncio.Future[str]] = collections.deque()


class RenderProcess:
    """One event loop's render process, started on demand and stopped when idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.child: _Child | None = None
        self._starting = asyncio.Lock()
        self._readers: set[asyncio.Task[None]] = set()
        self._idle: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int | None:
        return self.child.process.pid if self.child is not None else None

    async def render(self, text: str) -> str:
        child = await self._running()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        future: asyncio.Future[str] = self.loop.create_future()
        child.waiting.append(future)
        stdin = child.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({"text": text}).encode() + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died: its reader fails every render it owes
        return await future

    async def _running(self) -> _Child:
        async with self._starting:
            if self.child is None:
                env = {name: os.environ[name] for name in CHILD_ENV if name in os.environ}
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "promptmgr.markdown",
                    str(os.getpid()),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    cwd=REPO,
                    env=env,
                    limit=LINE_LIMIT,
                )
                self.child = _Child(process)
                reader = self.loop.create_task(self._read(self.child), name="markdown-render-reader")
                self._readers.add(reader)
                reader.add_done_callback(self._readers.discard)
            return self.child

    async def _read(self, child: _Child) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                reply = json.loads(line)
                future = child.waiting.popleft()
                if future.done():  # its run was cancelled meanwhile
                    pass
                elif "html" in reply:
                    future.set_result(reply["html"])
                else:
                    future.set_exception(RenderUnavailable(reply.get("error", "no reply")))
                if not child.waiting and self.child is child:
                    self._idle = self.loop.call_later(RENDER_IDLE_SECONDS, self.stop)
        finally:
            # The process ended (stopped when idle, killed, out of memory), or its loop is
            # closing, and the process goes with it.
            if self.child is child:
                self.child = None
            while child.waiting:
                future = child.waiting.popleft()
                if not future.done():
                    future.set_exception(RenderUnavailable("the render process ended"))
            _kill(child.process)
            await child.process.wait()

    def stop(self) -> None:
        """End the render process (its reader reaps it); the next render starts a new one."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        child, self.child = self.child, None
        if child is not None:
            _kill(child.process)


def _kill(process: asyncio.subprocess.Process) -> None:
    # By pid, not through the process's transport, which is gone once its loop closed.
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)


_renderers: PerLoop[RenderProcess] = PerLoop(RenderProcess)


def renderer() -> RenderProcess:
    """The running event loop's render process (started by its first render)."""
    return _renderers.get()


def stop_renderer() -> None:
    """Stop every render process of this worker (shutdown); the next long render starts one."""
    for found in _renderers.values():
        found.stop()
    _renderers.clear()


async def render_markdown_async(text: str) -> str:
    """``render_markdown`` without holding up the event loop for a long text."""
    if len(text) <= INLINE_MAX_CHARS:
        return render_markdown(text)
    try:
        # bench/machinery.py: a 35 KB reply stalls the loop 4-7 ms (load noise) this way, 99-139 ms in place.
        return await renderer().render(text)
    except (RenderUnavailable, OSError):
        # The render process died (killed, out of memory) or could not start. The reply
        # must still be shown, so this one renders in place; the next long one gets a
        # new process.
        logger.warning("the Markdown render process failed; rendering in the worker", exc_info=True)
        return render_markdown(text)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
