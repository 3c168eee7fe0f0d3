"""Credentials for one git command: encrypted at rest, a private file or an environment
variable while the command runs, nothing afterwards."""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from promptmgr.git import credentials
from promptmgr.models import GitSecretKind

pytestmark = pytest.mark.unit

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----"


def test_a_deploy_key_is_a_0600_file_named_by_git_ssh_command_and_gone_afterwards(settings: Any) -> None:
    with credentials.git_credentials(GitSecretKind.SSH_KEY, KEY) as env:
        argv = shlex.split(env["GIT_SSH_COMMAND"])
        key_file = Path(argv[argv.index("-i") + 1])
        assert key_file.read_text() == KEY + "\n"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert key_file.parent.parent == Path(settings.RUN_SECRETS_DIR)
        assert KEY not in env["GIT_SSH_COMMAND"] and set(env) == {"GIT_SSH_COMMAND"}
        assert {"-F", "BatchMode=yes", "IdentitiesOnly=yes"} <= set(argv)

    assert not key_file.exists() and not key_file.parent.exists()


def test_a_token_stays_in_the_environment_and_the_askpass_script_holds_none(tmp_path: Path) -> None:
    with credentials.git_credentials(GitSecretKind.TOKEN, "tok-123") as env:
        script = Path(env["GIT_ASKPASS"])
        assert "tok-123" not in script.read_text()
        run = {"PATH": "/usr/bin:/bin", **env}
        user = subprocess.run(
            [str(script), "Username for 'https://h': "], env=run, capture_output=True, text=True
        )
        password = subprocess.run(
            [str(script), "Password for 'https://x-access-token@h': "],
            env=run,
            capture_output=True,
            text=True,
        )
        assert (user.stdout, password.stdout) == ("x-access-token\n", "tok-123\n")

    assert not script.exists()


def test_no_secret_no_environment() -> None:
    with credentials.git_credentials(GitSecretKind.NONE, "") as env:
        assert env == {}


def test_secrets_are_encrypted_and_a_wrong_key_says_so_in_a_sentence(settings: Any) -> None:
    ciphertext = credentials.secret_encrypt("tok-123")
    assert "tok-123" not in ciphertext
    assert credentials.secret_decrypt(ciphertext) == "tok-123"

    settings.WORKSPACE_SECRET_KEY = "A" * 43 + "="
    with pytest.raises(credentials.SecretUnreadable, match="WORKSPACE_SECRET_KEY"):
        credentials.secret_decrypt(ciphertext)


def test_a_bad_workspace_secret_key_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from promptmgr.settings import envfernetkey, envschemes

    monkeypatch.setenv("WORKSPACE_SECRET_KEY", "not-a-key")
    with pytest.raises(ImproperlyConfigured, match="must be a Fernet key"):
        envfernetkey("WORKSPACE_SECRET_KEY", derived_from="x")
    monkeypatch.setenv("WORKSPACE_GIT_SCHEMES", "https,ext")
    with pytest.raises(ImproperlyConfigured, match="WORKSPACE_GIT_SCHEMES must list some of"):
        envschemes(
            "WORKSPACE_GIT_SCHEMES", "https,ssh", known={"https", "ssh", "file"}, refused={"ext", "fd"}
        )
    monkeypatch.delenv("WORKSPACE_GIT_SCHEMES")
    assert envschemes("WORKSPACE_GIT_SCHEMES", "https,ssh", known={"https", "ssh"}, refused=set()) == (
        "https",
        "ssh",
    )
