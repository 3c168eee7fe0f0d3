"""Files written in one step: whoever reads one sees the old content or the new, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# A file is staged beside its path as ``.<name>.<random><STAGED_SUFFIX>`` and moved into place.
STAGED_SUFFIX = ".tmp"


def replace_atomically(path: Path, text: str, *, mode: int, durable: bool = True) -> None:
    """Put ``text`` (UTF-8) at ``path`` with ``mode``, staged beside it and moved into place.

    A failed write (a full disk, text that cannot be encoded, a cancellation) leaves neither
    a changed file nor its staged copy; a process killed between the write and the move
    leaves the staged copy (``staged_glob`` finds those). ``durable`` syncs the content to
    disk before the move, for files that must outlive a crash of the machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=STAGED_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(staged, mode)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def staged_glob(names: str) -> str:
    """The glob of the staged copies ``replace_atomically`` makes of files named like ``names``
    (a glob itself)."""
    return f".{names}.*{STAGED_SUFFIX}"
