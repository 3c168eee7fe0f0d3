"""A stand-in for the Claude Code CLI that replays recorded stream-json at a model's pace.

``python -I -S fake_cli.py [CLI ARGS...]`` (the app starts it as the CLI; the arguments are
ignored). The real CLI costs some 280 MB and a busy CPU per run, which would hide the app's
own costs on a small machine: this costs a few MB and next to no CPU.

It plays what the bundled CLI printed for a short reply (``fixtures/stream_json.jsonl``,
recorded by ``fake_cli_record.py``) in the real CLI's order, with its stdin protocol
(``--input-format stream-json``): it reads the prompt's line, reports it ``queued`` and
``started``, prints ``system/init`` and the message's opening stream events, then one
``content_block_delta`` line per text delta, then the ``assistant`` message with the whole
text, the closing stream events, the ``result`` and ``completed``; then it waits for its
input to end, as the real CLI does, and exits 0. Session ids and uuids are fresh.

The prompt says what to play, as JSON after ``FAKE:``, e.g.
``FAKE: {"deltas": 500, "rate": 50, "chars": 24}``:

- ``deltas``: how many text deltas; ``rate``: deltas per second (0: as fast as it can);
- ``chars``: length of each delta's text (at least the stamp's);
- ``stamp``: each delta's text starts with ``[<ns>]``, CLOCK_MONOTONIC (system-wide, so
  the benchmark's client compares it with its own clock) read just before the line is
  written (default true);
- ``quiet``: print the opening lines, then nothing until stopped (a run waiting on its
  user), for streams that watch a live but silent run;
- ``gate``: a path; after the opening lines, wait until it exists before the first delta
  (so that many runs, started one after another, stream together).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "stream_json.jsonl"
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def dumps(data: object) -> str:
    """As the CLI prints JSON: compact, UTF-8."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def write(line: str) -> None:
    data = (line + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


class Recording:
    """The recorded lines, split around the text deltas."""

    def __init__(self, path: Path) -> None:
        lines = [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]
        deltas = [i for i, line in enumerate(lines) if _is_text_delta(line)]
        self.head = lines[: deltas[0]]
        self.delta = lines[deltas[0]]
        self.tail = lines[deltas[-1] + 1 :]
        self.session_id = str(self.delta["session_id"])
        prompt_line = next(line for line in lines if line.get("type") == "command_lifecycle")
        self.prompt_uuid = str(prompt_line["command_uuid"])


def _is_text_delta(line: dict[str, object]) -> bool:
    event = line.get("event")
    return (
        line.get("type") == "stream_event"
        and isinstance(event, dict)
        and event.get("type") == "content_block_delta"
        and event.get("delta", {}).get("type") == "text_delta"
    )


def fresh(line: dict[str, object], rec: Recording, session_id: str, prompt_uuid: str) -> str:
    """The recorded line as this run prints it: its session, its prompt, new uuids."""
    text = dumps({**line, "uuid": str(uuid.uuid4())} if "uuid" in line else line)
    text = text.replace(rec.session_id, session_id).replace(rec.prompt_uuid, prompt_uuid)
    return text


def delta_text(index: int, chars: int, stamp: bool) -> str:
    head = f"[{now_ns()}] " if stamp else ""
    need = max(0, chars - len(head))
    start = (index * 7) % len(FILLER)
    body = (FILLER[start:] + FILLER)[:need]
    return head + body


def main() -> int:
    rec = Recording(FIXTURE)
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if not first:
        return 1
    message = json.loads(first)
    prompt_uuid = str(message.get("uuid") or uuid.uuid4())
    content = message.get("message", {}).get("content", "")
    prompt = content if isinstance(content, str) else json.dumps(content)
    spec = json.loads(prompt.split("FAKE:", 1)[1]) if "FAKE:" in prompt else {}
    deltas = int(spec.get("deltas", 20))
    rate = float(spec.get("rate", 50))
    chars = int(spec.get("chars", 24))
    stamp = bool(spec.get("stamp", True))
    session_id = str(uuid.uuid4())

    for line in rec.head:
        if line.get("type") == "system" and line.get("subtype") == "init":
            line = {**line, "cwd": os.getcwd()}
        write(fresh(line, rec, session_id, prompt_uuid))
    if spec.get("quiet"):
        while True:  # a run waiting on its user: silent until it is stopped
            time.sleep(3600)

    gate = spec.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.005)

    template = dict(rec.delta)
    event = dict(template["event"])
    texts: list[str] = []
    started = time.monotonic()
    for index in range(deltas):
        if rate > 0:
            pause = started + index / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        text = delta_text(index, chars, stamp)
        texts.append(text)
        event["delta"] = {"type": "text_delta", "text": text}
        line = {**template, "event": event, "session_id": session_id, "uuid": str(uuid.uuid4())}
        write(dumps(line))

    whole = "".join(texts)
    elapsed_ms = int((time.monotonic() - started) * 1000)
    for line in rec.tail:
        if line.get("type") == "assistant":
            inner = dict(line["message"])
            inner["content"] = [{"type": "text", "text": whole}]
            line = {**line, "message": inner}
        elif line.get("type") == "result":
            line = {**line, "result": whole, "duration_ms": elapsed_ms, "duration_api_ms": elapsed_ms}
        write(fresh(line, rec, session_id, prompt_uuid))
    # Like the real CLI with --input-format stream-json: done once the input ends.
    while stdin.readline():
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
