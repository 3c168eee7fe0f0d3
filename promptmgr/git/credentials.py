"""A project's access token or deploy key: encrypted at rest, handed to git only through
its environment, for one command at a time.

Stored with Fernet (``cryptography``) under ``WORKSPACE_SECRET_KEY``. For a command that
needs it, ``git_credentials`` makes a 0700 directory under ``RUN_SECRETS_DIR`` holding
either an askpass script (which prints the token git asks for; the token itself travels
in the git process's environment, never in the script or on a command line) or the
deploy key as a 0600 file named by ``GIT_SSH_COMMAND``. The directory is removed when the
command ends. The Claude CLI never gets any of it: its environment is an allowlist.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from promptmgr.models import GitSecretKind

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

SECRET_UNREADABLE = (
    "The project's stored access token or deploy key cannot be decrypted with this server's "
    "WORKSPACE_SECRET_KEY; set it again."
)
SECRET_ENV = "PM_GIT_SECRET"  # the token, in git's own environment only
USERNAME_ENV = "PM_GIT_USERNAME"
# Hosts take any user name with a token as the password; GitHub documents this one.
TOKEN_USERNAME = "x-access-token"
ASKPASS_SCRIPT = f"""#!/bin/sh
# git runs this to ask for a user name or password; it prints what the environment holds.
case "$1" in
  Username*) printf '%s\\n' "${{{USERNAME_ENV}:-{TOKEN_USERNAME}}}" ;;
  *) printf '%s\\n' "${SECRET_ENV}" ;;
esac
"""


class SecretUnreadable(Exception):
    pass


def _fernet() -> Fernet:
    # Imported on first use: cryptography is 7 MiB of every web worker's idle memory
    # (bench/scale.py), and only a project with a git secret needs it.
    from cryptography.fernet import Fernet

    return Fernet(str(settings.WORKSPACE_SECRET_KEY).encode())


def secret_encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode()


def secret_decrypt(ciphertext: str) -> str:
    from cryptography.fernet import InvalidToken

    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(SECRET_UNREADABLE) from None


def normalize_ssh_key(key: str) -> str:
    """ssh refuses a private key without its final newline; pasted keys often lack it."""
    return key.strip().replace("\r\n", "\n") + "\n"


@contextmanager
def git_credentials(kind: str, secret: str) -> Iterator[dict[str, str]]:
    """The environment that gives one git command the secret (nothing for no secret)."""
    if not secret or kind not in (GitSecretKind.TOKEN, GitSecretKind.SSH_KEY):
        yield {}
        return
    parent = Path(settings.RUN_SECRETS_DIR)
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="git-", dir=parent))  # mkdtemp: 0700
    try:
        if kind == GitSecretKind.TOKEN:
            script = directory / "askpass"
            _write_private(script, ASKPASS_SCRIPT, mode=0o700)
            yield {"GIT_ASKPASS": str(script), SECRET_ENV: secret}
        else:
            key = directory / "deploy_key"
            _write_private(key, normalize_ssh_key(secret), mode=0o600)
            known_hosts = directory / "known_hosts"
            command = [
                "ssh",
                "-F",
                os.devnull,
                "-i",
                str(key),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                # The first connection learns the host key; nothing is kept between commands.
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                f"UserKnownHostsFile={known_hosts}",
            ]
            yield {"GIT_SSH_COMMAND": shlex.join(command)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_private(path: Path, content: str, *, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
