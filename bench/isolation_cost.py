"""What isolation and crash safety cost: the guardian every CLI runs under, and the sandbox.

Run: ``.venv/bin/python bench/isolation_cost.py`` (about a minute on 2 cores).

1. Spawn to exit of ``/bin/true``, plain (``start_new_session``, as before) and under the
   guardian (``processes.guarded``), interleaved: what the guardian adds to every run.
2. The owner killed with SIGKILL: how long until every process below the guardian is
   gone, for a tree that obeys SIGTERM and for one that ignores it (SIGKILL follows
   ``guardian.KILL_GRACE`` later).
3. One ``claude -p`` run of the bundled CLI against the scripted model that runs five
   read-only Bash commands, without the sandbox, in the run's own sandbox (the ``run``
   scope, the default) and in Claude Code's sandbox per command (``command``),
   interleaved: what each adds per command (and to the run). The run scope's figure
   includes starting its sandbox once per run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.report import fmt, percentile, table  # noqa: E402

HEADERS = ["what (milliseconds)", "n", "p50", "p90", "max"]
BASH_CALLS = 5
OWNER = """
import os, subprocess, sys, time
sys.path.insert(0, {repo!r})
from promptmgr.processes import guarded
proc = subprocess.Popen(guarded(["sh", "-c", {tree!r}]), start_new_session=True)
print(proc.pid, flush=True)
time.sleep(600)
"""
OBEYS = "sleep 600 & setsid sleep 600 & wait"
IGNORES = "trap '' TERM; setsid sh -c \"trap '' TERM; sleep 600\" & sleep 600"


def row(label: str, values: list[float]) -> list[str]:
    return [
        label,
        str(len(values)),
        fmt(percentile(values, 50), 1),
        fmt(percentile(values, 90), 1),
        fmt(max(values), 1),
    ]


def spawn_ms(argv: list[str]) -> float:
    start = time.monotonic_ns()
    subprocess.Popen(argv, start_new_session=True).wait()
    return (time.monotonic_ns() - start) / 1e6


def guardian_spawn(runs: int) -> list[list[str]]:
    from promptmgr.processes import guarded

    plain: list[float] = []
    guarded_ms: list[float] = []
    for _ in range(runs):
        plain.append(spawn_ms(["/bin/true"]))
        guarded_ms.append(spawn_ms(guarded(["/bin/true"])))
    return [row("/bin/true, plain", plain), row("/bin/true, under the guardian", guarded_ms)]


def descendants_of(root: int) -> list[int]:
    parent_of = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] != b"Z":
                parent_of[int(name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parent_of.items() if ppid == parent]
        found += children
        frontier += children
    return found


def kill_owner_ms(tree: str) -> float:
    """Kill -9 an owner whose guarded child runs ``tree``; ms until nothing of it is left."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(repo=str(harness.REPO), tree=tree)], stdout=subprocess.PIPE
    )
    assert owner.stdout is not None
    guardian = int(owner.stdout.readline())
    harness.wait_until(lambda: len(descendants_of(guardian)) >= 3, timeout=10, what="the tree")
    tree_pids = [guardian, *descendants_of(guardian)]
    start = time.monotonic_ns()
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    harness.wait_until(
        lambda: not [pid for pid in tree_pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)],
        timeout=20,
        what="the tree to end",
    )
    return (time.monotonic_ns() - start) / 1e6


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def owner_killed(runs: int) -> list[list[str]]:
    obeys = [kill_owner_ms(OBEYS) for _ in range(runs)]
    ignores = [kill_owner_ms(IGNORES) for _ in range(max(1, runs // 3))]
    return [
        row("kill -9 owner -> tree gone (obeys SIGTERM)", obeys),
        row("kill -9 owner -> tree gone (ignores SIGTERM)", ignores),
    ]


def cli_run_ms(command: list[str], env: dict[str, str], cwd: Path) -> float:
    steps = [
        {"tool_use": {"name": "Bash", "input": {"command": f"echo call {i}", "description": "e"}}}
        for i in range(BASH_CALLS)
    ]
    prompt = "SCRIPT: " + json.dumps([*steps, {"text": "done"}])
    start = time.monotonic_ns()
    done = subprocess.run(
        command, input=prompt, capture_output=True, text=True, cwd=cwd, env=env, timeout=180
    )
    elapsed = (time.monotonic_ns() - start) / 1e6
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    outputs = [
        block.get("content")
        for line in results
        if line.get("type") == "user"
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if done.returncode != 0 or outputs != [f"call {i}" for i in range(BASH_CALLS)]:
        raise RuntimeError(
            f"unexpected run: exit {done.returncode}, results {outputs}\n{done.stderr[-2000:]}"
        )
    return elapsed


def sandbox_cost(stack: harness.Stack, runs: int) -> list[list[str]]:
    from promptmgr import sandbox
    from promptmgr.cli import build_command, child_env, child_path, find_claude_cli
    from promptmgr.workspaces import workspace_path

    project = stack.project()
    workdir = workspace_path(project)
    sandbox.check_available(child_path())
    # The runs outside the run scope get a temporary directory of their own, as the app's do.
    confinement = sandbox.Confinement(run_id=0, settings=None, tmpdir=sandbox.run_tmp_open(0))
    try:
        env = child_env(ask_user_config=None, ask_user_timeout=None) | confinement.cli_env
        cli = find_claude_cli()
        plain = build_command(cli=cli, project=project)
        per_command = build_command(
            cli=cli, project=project, run_settings=sandbox.settings_argument(workdir=workdir)
        )
        cli_run_ms(plain, env, workdir)  # warm-up: the first run writes the CLI's home
        off: list[float] = []
        in_run: list[float] = []
        in_command: list[float] = []
        for _ in range(runs):
            off.append(cli_run_ms(plain, env, workdir))
            in_run.append(run_scope_ms(cli, project, workdir, env))
            in_command.append(cli_run_ms(per_command, env, workdir))
    finally:
        confinement.close()

    def per_call(values: list[float]) -> list[float]:
        return [(b - a) / BASH_CALLS for a, b in zip(off, values, strict=True)]

    return [
        row(f"run with {BASH_CALLS} Bash calls, no sandbox", off),
        row(f"run with {BASH_CALLS} Bash calls, run's own sandbox (default)", in_run),
        row(f"run with {BASH_CALLS} Bash calls, sandbox per command", in_command),
        row("run's own sandbox: cost per Bash call (paired)", per_call(in_run)),
        row("sandbox per command: cost per Bash call (paired)", per_call(in_command)),
    ]


def run_scope_ms(cli: str, project: Any, workdir: Path, env: dict[str, str]) -> float:
    """One run in the run scope, timed from starting its sandbox (as the app confines a
    run, ``sandbox.run_scope_confinement``) to the CLI's exit."""
    from promptmgr import sandbox
    from promptmgr.cli import build_command, child_path

    start = time.monotonic_ns()
    confinement = sandbox.run_scope_confinement(run_id=0, workdir=workdir, path=child_path())
    try:
        command = build_command(cli=cli, project=project, run_settings=confinement.settings)
        started = (time.monotonic_ns() - start) / 1e6
        return started + cli_run_ms(command, env | confinement.cli_env, workdir)
    finally:
        confinement.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=6, help="runs per measurement (default 6)")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"Isolation cost benchmark on {harness.machine()}; setting up a private stack …", flush=True)
    with harness.Stack.create(name="isolation-cost", ask_user=False) as stack:
        rows = guardian_spawn(args.runs * 5)
        rows += owner_killed(args.runs)
        rows += sandbox_cost(stack, args.runs)
    print()
    print(table(HEADERS, rows, title="The guardian and the sandbox"))
    print(f"\nFinished in {time.monotonic() - started:.0f} s on {harness.machine()}.")
    print("Every process the benchmark started has been stopped.")


if __name__ == "__main__":
    main()
