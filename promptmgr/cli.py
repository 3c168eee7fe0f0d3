"""How the Claude Code CLI is found, invoked and what environment it gets."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.tool_names import ASK_USER_QUESTION, MCP_APPROVE

from .models import Project

# The only variables of the server's environment a CLI run may see. Secrets such as
# SECRET_KEY or DATABASE_URL never reach Claude or the tools it runs.
INHERITED_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def bundled_cli() -> Path:
    """The CLI claude-agent-sdk bundles, found without importing the SDK (30 MiB a worker
    that runs only the CLI engine need not hold)."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        raise ImproperlyConfigured("claude-agent-sdk is not installed, and it bundles the CLI")
    return Path(spec.origin).parent / "_bundled" / "claude"


def find_claude_cli() -> str:
    """``CLAUDE_CLI_PATH``, else ``claude`` on PATH, else the CLI bundled in claude-agent-sdk."""
    configured = settings.CLAUDE_CLI_PATH
    if configured:
        if not os.access(configured, os.X_OK):
            raise ImproperlyConfigured(f"CLAUDE_CLI_PATH={configured!r} is not an executable file")
        return configured
    on_path = shutil.which("claude")
    if on_path:
        return on_path
    bundled = bundled_cli()
    if not os.access(bundled, os.X_OK):
        raise ImproperlyConfigured(
            "No Claude Code CLI found: set CLAUDE_CLI_PATH, put `claude` on PATH, "
            "or reinstall claude-agent-sdk (it bundles the CLI)"
        )
    return str(bundled)


def claude_home() -> Path:
    """The CLI's HOME: its sessions (for --resume) live here, apart from the server user's."""
    home = Path(settings.STORAGE_ROOT) / "claude-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def build_command(
    *,
    cli: str,
    project: Project,
    resume_session_id: str = "",
    partial_messages: bool = True,
    ask_user: bool = False,
    run_settings: str | None = None,
) -> list[str]:
    """The CLI's command line; with ``ask_user`` every permission and AskUserQuestion go to
    the ask-user MCP server's ``approve`` tool, so people decide them in the browser.
    ``run_settings`` (the sandbox's, ``promptmgr.sandbox``) go in the flag layer, above the
    workspace's own settings files, which cannot widen them."""
    command = [cli, "-p", "--output-format", "stream-json", "--verbose"]
    if run_settings is not None:
        command += ["--settings", run_settings]
    if partial_messages:
        # Text deltas as they are generated, so the browser sees text appear live.
        command.append("--include-partial-messages")
    if resume_session_id:
        command += ["--resume", resume_session_id]
    if project.model:
        command += ["--model", project.model]
    if project.permission_mode:
        command += ["--permission-mode", project.permission_mode]
    if ask_user:
        command += ["--permission-prompt-tool", MCP_APPROVE]
    else:
        # Without a prompt tool -p mode only answers "not available" to the built-in question tool.
        command += ["--disallowedTools", ASK_USER_QUESTION]
    return command


def child_path() -> str:
    """The ``PATH`` a CLI run gets (where it also looks for the sandbox's tools)."""
    return os.environ.get("PATH") or DEFAULT_PATH


def child_env(
    *, ask_user_config: Path | None, ask_user_timeout: int | None, ask_user_warm: str | None = None
) -> dict[str, str]:
    """The allowlisted environment of a CLI run (and of the MCP server it spawns); a confined
    run adds its confinement's (``sandbox.Confinement.cli_env``)."""
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    env["PATH"] = child_path()
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(claude_home())
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    env["DISABLE_AUTOUPDATER"] = "1"
    if settings.ANTHROPIC_API_KEY:
        env["ANTHROPIC_API_KEY"] = settings.ANTHROPIC_API_KEY
    elif settings.DEMO_MODEL:
        # The demo model accepts any key; the CLI refuses to start without one.
        env["ANTHROPIC_API_KEY"] = "offline-demo-model"
    env["ANTHROPIC_BASE_URL"] = settings.ANTHROPIC_BASE_URL
    if ask_user_config is not None:
        env["ASK_USER_CONFIG"] = str(ask_user_config)
        if ask_user_warm is not None:
            # The MCP server the CLI starts is then served by the worker's warm server
            # (askuser/warm_server.py, mcp_server/warm.py).
            env["ASK_USER_WARM"] = ask_user_warm
        # By default the CLI defers MCP tools behind ToolSearch, so the model would not see
        # ask_user in its prompt at all; load its schema up front instead.
        env["ENABLE_TOOL_SEARCH"] = "false"
        # By default the turn starts while MCP servers still connect; under load ask-user was
        # then "pending" and Claude could neither ask nor get approvals (tests/harness/test_mcp_startup.py).
        env["MCP_CONNECTION_NONBLOCKING"] = "false"
        if ask_user_timeout is not None:
            # The CLI must never give up on the tool before our own timeout does.
            env["MCP_TOOL_TIMEOUT"] = str((ask_user_timeout + 120) * 1000)
    return env
