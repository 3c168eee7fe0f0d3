"""The app boundaries the groundwork set, checked on the source so a change that breaks them fails.

- askuser reaches promptmgr only through its models and the one writer of run state;
  promptmgr reaches askuser only through ``askuser.facade`` (and its models, for admin and
  the run's relations).
- ``Run.status`` is written in ``promptmgr/services/run_state.py`` and nowhere else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.unit

ASKUSER_MAY_IMPORT = {"promptmgr.models", "promptmgr.services.run_state", "promptmgr.services"}
# askuser.api: the project's one NinjaAPI (promptmgr/api.py) mounts each app's router;
# askuser.clicks: the ASGI app (promptmgr/asgi.py) serves the page's click channel, as the
# API mounts the endpoints it stands in for.
PROMPTMGR_MAY_IMPORT = {"askuser", "askuser.facade", "askuser.models", "askuser.api", "askuser.clicks"}
# An update of a Run queryset that sets status, e.g. Run.objects.filter(...).update(status=...).
RUN_STATUS_WRITE = re.compile(r"Run\.objects[^\n]*\.update\([^)]*\bstatus=", re.DOTALL)


def sources(package: str) -> list[Path]:
    return [p for p in (REPO / package).rglob("*.py") if "migrations" not in p.parts]


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "askuser")
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_askuser_uses_only_promptmgrs_models_and_its_run_state_writer() -> None:
    offending = {
        f"{path.relative_to(REPO)}: {module}"
        for path in sources("askuser")
        for module in imported_modules(path)
        if module.startswith("promptmgr") and module not in ASKUSER_MAY_IMPORT
    }
    assert offending == set()


def test_promptmgr_reaches_askuser_only_through_its_facade() -> None:
    offending = {
        f"{path.relative_to(REPO)}: {module}"
        for path in sources("promptmgr")
        for module in imported_modules(path)
        if module.startswith("askuser") and module not in PROMPTMGR_MAY_IMPORT
    }
    assert offending == set()


def test_run_status_is_written_by_run_state_alone() -> None:
    writers = {
        str(path.relative_to(REPO))
        for package in ("promptmgr", "askuser", "core")
        for path in sources(package)
        if RUN_STATUS_WRITE.search(path.read_text()) or re.search(r"\brun\.status\s*=[^=]", path.read_text())
    }
    assert writers == {"promptmgr/services/run_state.py"}
