"""CLI start-up: what one trivial ``claude -p`` run of the bundled CLI costs in time and memory.

Run: ``.venv/bin/python bench/cli_startup.py`` (about half a minute on 2 cores).

Every run is the runner's own: ``build_command`` / ``child_env`` / ``workspace_path`` for a
project of a private stack (``bench/harness.py``), the prompt on stdin, a new session; the
scripted model replies with one short text. Two projects, their runs interleaved:

* ask-user off: the CLI alone;
* ask-user on: the CLI also spawns the ask-user MCP server and connects to it before its
  first model call (no question is asked; only start-up is measured), a whole
  ``python -m mcp_server`` as the app started it before the warm server;
* ask-user on, warm: as the app starts it now, the MCP server the CLI spawns is a stub served
  by a fork of the warm server (``askuser.warm_server``), which the benchmark starts once.

Per run, from just before the spawn: the ``system`` init line read, the ``result`` line read,
and the exit reaped (wall). Peak resident memory is ``ru_maxrss`` from ``wait4`` on the CLI:
the high-water mark of the CLI, or of a child it reaped if one grew larger (the MCP server is
a small Python process, so it is the CLI's). One run of each is a warm-up and not counted
(the first run writes the CLI's HOME). The CLI is not niced here, unlike in the app
(``CLAUDE_CLI_NICE``): this measures its own cost, and other load on the machine shows up in
the tails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.report import fmt, percentile, table  # noqa: E402

PROMPT = 'SCRIPT: [{"text": "Started."}]'
HEADERS = ["what", "n", "p50", "p90", "max"]


@dataclass(frozen=True)
class Config:
    label: str
    command: list[str]
    env: dict[str, str]
    cwd: Path


@dataclass(frozen=True)
class Sample:
    init_ms: float
    result_ms: float
    exit_ms: float
    peak_rss_mib: float


def run_once(config: Config) -> Sample:
    """Spawn the CLI as the runner does, read its stdout to the end, reap it with ``wait4``."""
    init_ns = result_ns = 0
    with tempfile.TemporaryFile() as stderr:
        start = time.monotonic_ns()
        proc = subprocess.Popen(
            config.command,
            cwd=config.cwd,
            env=config.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(PROMPT.encode())
            proc.stdin.close()
            for raw in proc.stdout:
                if not raw.strip():
                    continue
                line = json.loads(raw)
                if line.get("type") == "system" and line.get("subtype") == "init":
                    init_ns = time.monotonic_ns()
                elif line.get("type") == "result":
                    result_ns = time.monotonic_ns()
                    if line.get("is_error") or line.get("result") != "Started.":
                        raise RuntimeError(f"{config.label}: unexpected result {line}")
            # wait4, not Popen.wait: its rusage carries the peak resident memory.
            _pid, status, usage = os.wait4(proc.pid, 0)
            exit_ns = time.monotonic_ns()
            proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            # The CLI runs in a session of its own: stop its whole group, and reap it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            proc.stdout.close()
        if proc.returncode != 0 or not init_ns or not result_ns:
            stderr.seek(0)
            errors = stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{config.label}: exit {proc.returncode}, no init/result line\n{errors}")
    return Sample(
        init_ms=(init_ns - start) / 1e6,
        result_ms=(result_ns - start) / 1e6,
        exit_ms=(exit_ns - start) / 1e6,
        # Linux reports ru_maxrss in KiB.
        peak_rss_mib=usage.ru_maxrss / 1024,
    )


def configs(stack: harness.Stack, warm_socket: str) -> list[Config]:
    from django.conf import settings
    from django.contrib.auth.models import User

    from promptmgr.cli import build_command, child_env, find_claude_cli
    from promptmgr.services.projects import project_create
    from promptmgr.workspaces import workspace_path

    cli = find_claude_cli()
    plain = stack.project()
    asking = project_create(owner=User.objects.get(username=harness.USERNAME), name="With ask-user")
    # The MCP server reads its config only when a question is asked; start-up needs none.
    # The warm server serves only configs under the run secrets directory.
    ask_config = Path(settings.RUN_SECRETS_DIR) / "cli-startup" / "ask-user.json"
    return [
        Config(
            "ask-user off",
            build_command(cli=cli, project=plain),
            child_env(ask_user_config=None, ask_user_timeout=None),
            workspace_path(plain),
        ),
        Config(
            "ask-user on",
            build_command(cli=cli, project=asking),
            child_env(ask_user_config=ask_config, ask_user_timeout=asking.ask_user_timeout),
            workspace_path(asking),
        ),
        Config(
            "ask-user on, warm",
            build_command(cli=cli, project=asking),
            child_env(
                ask_user_config=ask_config,
                ask_user_timeout=asking.ask_user_timeout,
                ask_user_warm=warm_socket,
            ),
            workspace_path(asking),
        ),
    ]


@contextlib.contextmanager
def warm_server_socket() -> Iterator[str]:
    """A warm ask-user server of this process's own (as a worker has), held throughout."""
    from askuser.warm_server import WarmServer

    warm = WarmServer()
    try:
        hold = warm.acquire()
        if hold is None:
            raise SystemExit("the warm ask-user server could not start (ASK_USER_WARM_SERVER off?)")
        yield hold.socket_path
    finally:
        warm.stop()


def row(label: str, values: list[float], digits: int = 0) -> list[str]:
    return [
        label,
        str(len(values)),
        fmt(percentile(values, 50), digits),
        fmt(percentile(values, 90), digits),
        fmt(max(values), digits),
    ]


def report(results: dict[str, list[Sample]]) -> None:
    timing: list[list[str]] = []
    memory: list[list[str]] = []
    for label, samples in results.items():
        timing.append(row(f"{label}: spawn -> init line", [s.init_ms for s in samples]))
        timing.append(row(f"{label}: spawn -> result line", [s.result_ms for s in samples]))
        timing.append(row(f"{label}: spawn -> exit (wall)", [s.exit_ms for s in samples]))
        memory.append(row(f"{label}: peak RSS", [s.peak_rss_mib for s in samples]))
    print()
    print(table(["what (milliseconds)", *HEADERS[1:]], timing, title="Wall time of one trivial run"))
    print()
    print(table(["what (MiB)", *HEADERS[1:]], memory, title="Peak resident memory of the CLI"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="counted runs per configuration (default 10)")
    args = parser.parse_args()

    started = time.monotonic()
    print(f"CLI start-up benchmark on {harness.machine()}; setting up a private stack …", flush=True)
    with (
        harness.Stack.create(name="cli-startup", ask_user=False) as stack,
        warm_server_socket() as warm_socket,
    ):
        measured = configs(stack, warm_socket)
        version = subprocess.run(
            [measured[0].command[0], "--version"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        print(f"  CLI: {measured[0].command[0]} ({version})")
        print(f"  argv: {' '.join(measured[0].command[1:])}")
        print(f"  model {stack.model_url}")
        for config in measured:
            run_once(config)
        results: dict[str, list[Sample]] = {config.label: [] for config in measured}
        for _ in range(args.runs):
            for config in measured:
                results[config.label].append(run_once(config))
    report(results)
    print(f"\nFinished in {time.monotonic() - started:.0f} s on {harness.machine()}.")
    print("Every process the benchmark started has been stopped.")


if __name__ == "__main__":
    main()
