"""Model output is untrusted: it is rendered as Markdown and then sanitized with nh3.

A whole reply is rendered when its ``assistant`` line arrives. markdown-it-py is pure
Python and takes up to about 3 ms per KB of dense Markdown on our 2-vCPU machines (75 ms
for 35 KB), so on the event loop one long reply would stall every stream and request of
the worker, and the GIL means a thread would only spread the stall out.
``render_markdown_async`` therefore hands long texts to a one-process pool of this
worker's own; short ones cost less to render than the round trip and are rendered in
place.

Fenced code with a language (```py) is highlighted by Pygments here, on the server, so
the page needs no highlighting script and the result is sanitized like the rest: tokens
become ``<span class="hl-…">`` (coloured by static/css/chat.css, light and dark).

The pool's process is spawned, so it imports the main module again: every entry point
that serves the app (the uvicorn and pytest scripts, ``manage.py``, ``bench/``) keeps its
work under ``if __name__ == "__main__"``, as multiprocessing requires.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

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

# 0.8 ms of rendering in place; through the pool it costs 1.3 ms (bench/machinery.py).
INLINE_MAX_CHARS = 300

_pool: ProcessPoolExecutor | None = None


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


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with(parent: int) -> None:
    """Runs first in the render process: it goes when the worker goes, even by SIGKILL.

    The pool's process holds both ends of its own task queue, so it never sees the
    worker's end close, and would otherwise wait forever as an orphan. The signal follows
    the thread that started the process: the event loop's, which lives as long as the
    worker (and a process that dies with a shorter-lived thread only means a new one)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the worker died before the line above took effect
        os._exit(0)


def _renderer() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        # One process: renders are short and rare next to the CLI's work on the same
        # CPUs. Spawned, not forked: the worker has threads, and a fork copies their locks.
        _pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_die_with,
            initargs=(os.getpid(),),
        )
    return _pool


def start_renderer() -> None:
    """Start the render process now, so the first long reply does not wait for its imports."""
    try:
        _renderer().submit(render_markdown, "")
    except BrokenProcessPool:
        # Left broken by an earlier serving in this process that never stopped it (its
        # render process died meanwhile): a start-up must not fail on it.
        stop_renderer()
        _renderer().submit(render_markdown, "")


def stop_renderer() -> None:
    """Stop the render process (worker shutdown); the next long render starts a new one."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


async def render_markdown_async(text: str) -> str:
    """``render_markdown`` without holding up the event loop for a long text."""
    if len(text) <= INLINE_MAX_CHARS:
        return render_markdown(text)
    try:
        # bench/machinery.py: a 35 KB reply stalls the loop 4-7 ms (load noise) this way, 99-139 ms in place.
        return await asyncio.get_running_loop().run_in_executor(_renderer(), render_markdown, text)
    except BrokenProcessPool:
        # The render process died (killed, out of memory). The reply must still be
        # shown, so this one renders in place; the next long one gets a new process.
        logger.warning("the Markdown render process died; rendering in the worker", exc_info=True)
        stop_renderer()
        return render_markdown(text)
