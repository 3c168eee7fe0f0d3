"""Record what the real Claude Code CLI prints for one short reply, for ``bench/fake_cli.py``.

Run: ``.venv/bin/python bench/fake_cli_record.py`` (a few seconds). It drives the bundled
CLI with the scripted model exactly as the runner does (``build_command`` with the
stream-json input, ``child_env``, the project's workspace as working directory; the
sandbox is not needed for a reply without tools), sends one prompt, reads stdout until
the ``result``, closes the input and writes every line the CLI printed, unchanged, to
``bench/fixtures/stream_json.jsonl``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import app_client, harness  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "stream_json.jsonl"
# A short Markdown reply in model-sized pieces (the CLI prints one line per piece).
REPLY = "Here is the **plan**: read the code, then change it.\n\n- first\n- second\n"


def main() -> None:
    with harness.Stack.create(name="record", ask_user=False) as stack:
        from promptmgr.cli import build_command, child_env, find_claude_cli
        from promptmgr.engines.cli import STREAM_JSON_INPUT
        from promptmgr.engines.inbox import user_message_line
        from promptmgr.workspaces import workspace_path

        project = stack.project()
        command = build_command(cli=find_claude_cli(), project=project) + STREAM_JSON_INPUT
        prompt = app_client.script_prompt([{"text": REPLY, "chunk_chars": 12, "pace_ms": 0}])
        proc = subprocess.Popen(
            command,
            cwd=workspace_path(project),
            env=child_env(ask_user_config=None, ask_user_timeout=None),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(user_message_line(prompt, str(uuid.uuid4())))
        proc.stdin.flush()
        lines: list[bytes] = []
        for line in proc.stdout:
            lines.append(line)
            if json.loads(line).get("type") == "result":
                break
        proc.stdin.close()
        lines += proc.stdout.readlines()
        code = proc.wait(timeout=60)
        if code != 0:
            raise SystemExit(f"the CLI exited with {code}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_bytes(b"".join(lines))
    print(f"{len(lines)} lines written to {FIXTURE}")


if __name__ == "__main__":
    main()
